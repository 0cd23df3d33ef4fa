//! Versions: the immutable set of tables each column family reads, swapped atomically.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::Result;
use crate::options::NUM_LEVELS;
use crate::version_edit::EditAt;
use crate::version_edit::{FileMeta, VersionEdit};

/// One column family's tables by level. Level 0 is ordered newest first; deeper levels are
/// sorted by smallest key and do not overlap.
#[derive(Debug, Clone)]
pub(crate) struct CfVersion {
    pub(crate) levels: Vec<Vec<Arc<FileMeta>>>,
}

impl Default for CfVersion {
    fn default() -> Self {
        Self {
            levels: vec![Vec::new(); NUM_LEVELS],
        }
    }
}

impl CfVersion {
    /// Every table, level by level, newest first within level 0.
    pub(crate) fn all_files(&self) -> impl Iterator<Item = (usize, &Arc<FileMeta>)> {
        self.levels
            .iter()
            .enumerate()
            .flat_map(|(level, files)| files.iter().map(move |f| (level, f)))
    }

    /// The first two neighbouring tables of a level below 0 that overlap: `(level, table,
    /// table)`. A level's tables are sorted by smallest key and must not overlap (reads and
    /// compaction picks rely on it). Neighbours may touch: a table's largest bound can be the
    /// exclusive end of a range tombstone, which the next table starts at.
    fn overlap_below_l0(&self) -> Option<(usize, u64, u64)> {
        self.levels
            .iter()
            .enumerate()
            .skip(1)
            .find_map(|(level, files)| {
                files.windows(2).find_map(|pair| match pair {
                    [a, b] if a.largest > b.smallest => Some((level, a.number, b.number)),
                    _ => None,
                })
            })
    }

    fn sort(&mut self) {
        if let Some(l0) = self.levels.first_mut() {
            l0.sort_by(|a, b| {
                b.largest_seqno
                    .cmp(&a.largest_seqno)
                    .then(b.number.cmp(&a.number))
            });
        }
        for level in self.levels.iter_mut().skip(1) {
            level.sort_by(|a, b| a.smallest.cmp(&b.smallest));
        }
    }
}

/// The tables of every column family at one moment.
#[derive(Debug, Clone, Default)]
pub(crate) struct Version {
    pub(crate) cfs: BTreeMap<u32, CfVersion>,
}

impl Version {
    /// The most level-0 tables any column family has.
    pub(crate) fn most_level0_files(&self) -> usize {
        self.cfs
            .values()
            .map(|v| v.levels.first().map_or(0, Vec::len))
            .max()
            .unwrap_or(0)
    }

    /// The column family's tables (empty if it has none).
    pub(crate) fn cf(&self, cf: u32) -> Option<&CfVersion> {
        self.cfs.get(&cf)
    }

    /// The version after `edit`.
    ///
    /// # Errors
    /// `Corruption` (naming the edit's place in the MANIFEST) if the edit removes a table that
    /// is not there or puts one on a level that does not exist.
    pub(crate) fn apply(&self, edit: &VersionEdit, at: EditAt<'_>) -> Result<Self> {
        let mut next = self.clone();
        let bad = |why: String| at.corruption(why);
        for (id, _, _) in &edit.added_cfs {
            next.cfs.entry(*id).or_default();
        }
        for (cf, level, number) in &edit.deleted_files {
            let files = next
                .cfs
                .get_mut(cf)
                .and_then(|v| v.levels.get_mut(*level))
                .ok_or_else(|| {
                    bad(format!(
                        "edit deletes from missing level {level} of cf {cf}"
                    ))
                })?;
            let before = files.len();
            files.retain(|f| f.number != *number);
            if files.len() == before {
                return Err(bad(format!(
                    "edit deletes table {number} not in level {level}"
                )));
            }
        }
        for (cf, level, file) in &edit.new_files {
            let files = next
                .cfs
                .get_mut(cf)
                .and_then(|v| v.levels.get_mut(*level))
                .ok_or_else(|| bad(format!("edit adds to missing level {level} of cf {cf}")))?;
            files.push(Arc::new(file.clone()));
        }
        for id in &edit.dropped_cfs {
            next.cfs.remove(id);
        }
        for (id, cf) in &mut next.cfs {
            cf.sort();
            // Table numbers only: the bounds are user keys, possibly deleted ones.
            if let Some((level, a, b)) = cf.overlap_below_l0() {
                return Err(bad(format!(
                    "tables {a} and {b} overlap on level {level} of cf {id}"
                )));
            }
        }
        Ok(next)
    }

    /// Every table number in the version.
    pub(crate) fn live_files(&self) -> std::collections::HashSet<u64> {
        self.cfs
            .values()
            .flat_map(|cf| cf.all_files().map(|(_, f)| f.number))
            .collect()
    }
}

/// Sorted levels of up to this many tables are searched one table after another: a binary
/// search costs more than it saves there (readmissing at 1M keys, A/B: 5.1-5.5M lookups/s with
/// it on every level against 6.0-6.5M without).
const LINEAR_SEARCH_MAX: usize = 8;

/// The tables of `level` that may hold `user_key`, a superset the caller filters by bounds, in
/// the order a point read consults them: all of level 0 (newest first) or of a small level,
/// else, by binary search, the run of tables from the first whose largest key is not below it
/// to the last starting at or before it (neighbours may touch, so a key on the boundary gets
/// both).
pub(crate) fn level_candidates<'a>(
    level: usize,
    files: &'a [Arc<FileMeta>],
    user_key: &[u8],
) -> &'a [Arc<FileMeta>] {
    if level == 0 || files.len() <= LINEAR_SEARCH_MAX {
        return files;
    }
    let from = files.partition_point(|f| f.largest.as_ref() < user_key);
    let rest = files.get(from..).unwrap_or_default();
    let holding = rest
        .iter()
        .take_while(|f| f.smallest.as_ref() <= user_key)
        .count();
    rest.get(..holding).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use bytes::Bytes;

    use super::*;
    use crate::error::Error;

    fn table(number: u64, smallest: &'static str, largest: &'static str) -> FileMeta {
        FileMeta {
            number,
            smallest: Bytes::from_static(smallest.as_bytes()),
            largest: Bytes::from_static(largest.as_bytes()),
            ..FileMeta::default()
        }
    }

    fn add(files: Vec<(usize, FileMeta)>) -> VersionEdit {
        VersionEdit {
            new_files: files.into_iter().map(|(level, f)| (0, level, f)).collect(),
            ..VersionEdit::default()
        }
    }

    /// A version with one empty column family (id 0), and where its edits are said to lie.
    fn one_family(manifest: &'static str, offset: u64) -> (Version, EditAt<'static>) {
        let mut base = Version::default();
        base.cfs.insert(0, CfVersion::default());
        let at = EditAt {
            file: Path::new(manifest),
            offset,
        };
        (base, at)
    }

    #[test]
    fn a_point_read_finds_the_same_tables_as_a_walk_over_every_table() {
        let (base, at) = one_family("MANIFEST-000001", 0);
        let mut files = vec![
            (0, table(1, "b", "m")),
            (0, table(2, "a", "c")),
            (0, table(3, "k", "k")),
            // Level 1 with touching neighbours (a range tombstone's exclusive end).
            (1, table(4, "b", "d")),
            (1, table(5, "d", "f")),
            (1, table(6, "h", "j")),
            (1, table(7, "l", "l")),
        ];
        // Level 2, past the linear search: two tables a letter, "a".."a0" and "a0".."a5"
        // touching, then a gap to the next letter.
        let bounds: Vec<(String, String)> = ('a'..='k')
            .flat_map(|c| {
                [
                    (format!("{c}"), format!("{c}0")),
                    (format!("{c}0"), format!("{c}5")),
                ]
            })
            .collect();
        assert!(bounds.len() > LINEAR_SEARCH_MAX);
        for (n, (smallest, largest)) in (10..).zip(bounds) {
            let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
            files.push((2, table(n, leak(smallest), leak(largest))));
        }
        let version = base.apply(&add(files), at).expect("version");
        let cf = version.cf(0).expect("cf");
        let keys = [
            "", "a", "a0", "a3", "a5", "a6", "b", "c", "c0", "d", "e", "f", "g", "h",
        ];
        for key in keys
            .into_iter()
            .chain(["i", "k", "k5", "k6", "l", "m", "z", "zz"])
        {
            let walked: Vec<u64> = cf
                .all_files()
                .filter(|(_, f)| f.may_contain_key(key.as_bytes()))
                .map(|(_, f)| f.number)
                .collect();
            let found: Vec<u64> = (cf.levels.iter().enumerate())
                .flat_map(|(level, files)| level_candidates(level, files, key.as_bytes()))
                .filter(|f| f.may_contain_key(key.as_bytes()))
                .map(|f| f.number)
                .collect();
            assert_eq!(found, walked, "key {key:?}");
        }
    }

    #[test]
    fn an_edit_that_overlaps_tables_below_level_0_is_refused_as_corruption() {
        let (base, at) = one_family("MANIFEST-000009", 77);
        let one = base
            .apply(&add(vec![(1, table(1, "a", "c"))]), at)
            .expect("one table");
        // Touching bounds are fine (a range tombstone's end is exclusive), and level 0 may overlap.
        let touching = add(vec![(1, table(2, "c", "e")), (0, table(3, "a", "z"))]);
        let two = one.apply(&touching, at).expect("touching tables");
        match two.apply(&add(vec![(1, table(4, "d", "f"))]), at) {
            Err(Error::Corruption { offset, reason, .. }) => {
                assert_eq!(offset, 77);
                assert!(
                    reason.contains("tables 2 and 4 overlap on level 1"),
                    "{reason}"
                );
            }
            other => panic!("an overlap on level 1 was accepted: {other:?}"),
        }
    }
}
