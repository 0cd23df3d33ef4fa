//! `MergingIter`: one sorted stream out of any number of sorted internal iterators, in both
//! directions. Engine reads merge memtables and levels with it; compaction merges its inputs.
//!
//! Children sit in a binary heap keyed by their current key: a min-heap going forward, a
//! max-heap going backward. Changing direction re-seeks every child but the current one to the
//! current key, as `LevelDB`'s `MergingIterator` does. When two children hold the same internal
//! key, the one added first comes first going forward.

use std::cmp::Ordering;

use bytes::Bytes;

use crate::Result;
use crate::iter::InternalIterator;
use crate::key::compare_internal_keys;
use crate::meta::EntryMeta;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Forward,
    Backward,
}

/// Merges sorted internal iterators into one sorted iterator.
pub struct MergingIter<I> {
    children: Vec<I>,
    /// Indexes of valid children, heap-ordered for the current direction; the top is current.
    heap: Vec<usize>,
    direction: Direction,
}

impl<I> std::fmt::Debug for MergingIter<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MergingIter")
            .field("children", &self.children.len())
            .field("direction", &self.direction)
            .finish_non_exhaustive()
    }
}

impl<I: InternalIterator> MergingIter<I> {
    /// Merges `children`; earlier children win ties going forward.
    pub fn new(children: Vec<I>) -> Self {
        Self {
            heap: Vec::with_capacity(children.len()),
            children,
            direction: Direction::Forward,
        }
    }

    /// The merged iterators.
    pub fn children(&self) -> &[I] {
        &self.children
    }

    fn current(&self) -> Option<&I> {
        self.heap.first().and_then(|&i| self.children.get(i))
    }

    /// True if child `a` should come out before child `b` in the current direction.
    fn before(&self, a: usize, b: usize) -> bool {
        let (Some(x), Some(y)) = (self.children.get(a), self.children.get(b)) else {
            return false;
        };
        let order = compare_internal_keys(x.key(), y.key()).then(a.cmp(&b));
        match self.direction {
            Direction::Forward => order == Ordering::Less,
            Direction::Backward => order == Ordering::Greater,
        }
    }

    fn rebuild(&mut self, direction: Direction) {
        self.direction = direction;
        self.heap.clear();
        self.heap.extend(
            (0..self.children.len()).filter(|&i| self.children.get(i).is_some_and(I::valid)),
        );
        for pos in (0..self.heap.len() / 2).rev() {
            self.sift_down(pos);
        }
    }

    fn sift_down(&mut self, mut pos: usize) {
        loop {
            let mut best = pos;
            for child in [2 * pos + 1, 2 * pos + 2] {
                if let (Some(&c), Some(&b)) = (self.heap.get(child), self.heap.get(best))
                    && self.before(c, b)
                {
                    best = child;
                }
            }
            if best == pos {
                return;
            }
            self.heap.swap(pos, best);
            pos = best;
        }
    }

    /// The top child moved: put it back in order, or drop it if exhausted.
    fn fix_top(&mut self) {
        let Some(&top) = self.heap.first() else {
            return;
        };
        if !self.children.get(top).is_some_and(I::valid) {
            self.heap.swap_remove(0);
        }
        self.sift_down(0);
    }

    fn for_all(
        &mut self,
        mut op: impl FnMut(&mut I) -> Result<()>,
        direction: Direction,
    ) -> Result<()> {
        let result = self.children.iter_mut().try_for_each(&mut op);
        self.rebuild(direction);
        if result.is_err() {
            self.heap.clear();
        }
        result
    }

    /// Re-seeks every child but the current one so all of them sit on the `direction` side of
    /// the current key.
    fn switch_direction(&mut self, direction: Direction) -> Result<()> {
        let Some(&top) = self.heap.first() else {
            return Ok(());
        };
        let key = self
            .children
            .get(top)
            .map(|c| c.key().to_vec())
            .unwrap_or_default();
        for (i, child) in self.children.iter_mut().enumerate() {
            if i == top {
                continue;
            }
            let result = match direction {
                Direction::Forward => step_past_forward(child, &key),
                Direction::Backward => step_past_backward(child, &key),
            };
            if let Err(e) = result {
                self.heap.clear();
                return Err(e);
            }
        }
        // Every other child is now strictly on the far side of the current key, so the
        // current child stays on top.
        self.rebuild(direction);
        Ok(())
    }

    fn step(&mut self, direction: Direction) -> Result<()> {
        if self.direction != direction {
            self.switch_direction(direction)?;
        }
        let Some(&top) = self.heap.first() else {
            return Ok(());
        };
        #[cfg(debug_assertions)]
        let before = self.key().to_vec();
        let result = match self.children.get_mut(top) {
            Some(child) if direction == Direction::Forward => child.next(),
            Some(child) => child.prev(),
            None => Ok(()),
        };
        if let Err(e) = result {
            self.heap.clear();
            return Err(e);
        }
        self.fix_top();
        #[cfg(debug_assertions)]
        if self.valid() {
            let order = compare_internal_keys(&before, self.key());
            debug_assert!(
                (direction == Direction::Forward && order.is_le())
                    || (direction == Direction::Backward && order.is_ge()),
                "merging iterator went out of order"
            );
        }
        Ok(())
    }
}

/// Positions `child` at its first entry after `key`.
fn step_past_forward<I: InternalIterator>(child: &mut I, key: &[u8]) -> Result<()> {
    child.seek(key)?;
    if child.valid() && compare_internal_keys(child.key(), key) == Ordering::Equal {
        child.next()?;
    }
    Ok(())
}

/// Positions `child` at its last entry before `key`.
fn step_past_backward<I: InternalIterator>(child: &mut I, key: &[u8]) -> Result<()> {
    child.seek_for_prev(key)?;
    if child.valid() && compare_internal_keys(child.key(), key) == Ordering::Equal {
        child.prev()?;
    }
    Ok(())
}

impl<I: InternalIterator> InternalIterator for MergingIter<I> {
    fn valid(&self) -> bool {
        self.current().is_some_and(I::valid)
    }

    fn key(&self) -> &[u8] {
        self.current().map(I::key).unwrap_or_default()
    }

    fn corruption_here(&self, reason: &str) -> crate::Error {
        match self.current() {
            Some(child) => child.corruption_here(reason),
            None => crate::Error::unpositioned(reason),
        }
    }

    fn meta(&self) -> EntryMeta {
        self.current().map(I::meta).unwrap_or_default()
    }

    fn value(&self) -> &[u8] {
        self.current().map(I::value).unwrap_or_default()
    }

    fn value_bytes(&self) -> Bytes {
        self.current().map(I::value_bytes).unwrap_or_default()
    }

    fn seek_to_first(&mut self) -> Result<()> {
        self.for_all(I::seek_to_first, Direction::Forward)
    }

    fn seek_to_last(&mut self) -> Result<()> {
        self.for_all(I::seek_to_last, Direction::Backward)
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.for_all(|c| c.seek(target), Direction::Forward)
    }

    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        self.for_all(|c| c.seek_for_prev(target), Direction::Backward)
    }

    fn next(&mut self) -> Result<()> {
        self.step(Direction::Forward)
    }

    fn prev(&mut self) -> Result<()> {
        self.step(Direction::Backward)
    }
}
