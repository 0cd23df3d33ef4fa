//! `MergingIter` over tables and in-memory iterators: the same answers as one sorted list, for
//! any sequence of seeks and steps in either direction.

mod common;

use cairn_sstable::{
    EntryMeta, InternalIterator, Kind, MergingIter, TableOptions, internal_key, seek_key,
};
use common::{
    ModelEntry, VecIter, current, floor, lower_bound, scan_backward, scan_forward, sort_model,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    First,
    Last,
    Seek(Vec<u8>, u64),
    SeekForPrev(Vec<u8>, u64),
    Next,
    Prev,
}

fn op() -> impl Strategy<Value = Op> {
    let key = proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b'c')], 0..4);
    prop_oneof![
        1 => Just(Op::First),
        1 => Just(Op::Last),
        2 => (key.clone(), 0..40u64).prop_map(|(k, s)| Op::Seek(k, s)),
        2 => (key, 0..40u64).prop_map(|(k, s)| Op::SeekForPrev(k, s)),
        5 => Just(Op::Next),
        5 => Just(Op::Prev),
    ]
}

/// Unique (user key, seqno) entries spread over `sources` sources by `assign`.
fn entries() -> impl Strategy<Value = Vec<(Vec<u8>, u64, usize)>> {
    proptest::collection::vec(
        (
            proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b'c')], 0..4),
            0..40u64,
            0..5usize,
        ),
        0..80,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn merge_matches_one_sorted_list(raw in entries(), ops in proptest::collection::vec(op(), 1..60)) {
        let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut all = Vec::new();
        let mut sources: Vec<Vec<ModelEntry>> = vec![Vec::new(); 5];
        let mut seen = std::collections::HashSet::new();
        for (key, seqno, source) in raw {
            if !seen.insert((key.clone(), seqno)) {
                continue;
            }
            let e = ModelEntry::new(&key, seqno, Kind::Put, EntryMeta::at(seqno), format!("{seqno}").as_bytes());
            all.push(e.clone());
            if let Some(s) = sources.get_mut(source) {
                s.push(e);
            }
        }
        sort_model(&mut all);
        let mut children: Vec<Box<dyn InternalIterator>> = Vec::new();
        for (i, mut source) in sources.into_iter().enumerate() {
            sort_model(&mut source);
            if i % 2 == 0 {
                let table = common::write_table(dir.path(), &format!("{i}.sst"), i as u64, &source, &[],
                    TableOptions::default().block_size(64))
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                children.push(Box::new(table.iter()));
            } else {
                children.push(Box::new(VecIter::new(source)));
            }
        }
        let mut merged = MergingIter::new(children);
        let fail = |e: cairn_sstable::Error| TestCaseError::fail(e.to_string());
        prop_assert_eq!(&scan_forward(&mut merged).map_err(fail)?, &all);
        prop_assert_eq!(&scan_backward(&mut merged).map_err(fail)?, &all);

        let mut pos: Option<usize> = None;
        for op in ops {
            match op {
                Op::First => { merged.seek_to_first().map_err(fail)?; pos = (!all.is_empty()).then_some(0); }
                Op::Last => { merged.seek_to_last().map_err(fail)?; pos = all.len().checked_sub(1); }
                Op::Seek(k, s) => {
                    let target = seek_key(&k, s);
                    merged.seek(&target).map_err(fail)?;
                    pos = Some(lower_bound(&all, &target)).filter(|&p| p < all.len());
                }
                Op::SeekForPrev(k, s) => {
                    let target = internal_key(&k, s, Kind::Delete);
                    merged.seek_for_prev(&target).map_err(fail)?;
                    pos = floor(&all, &target);
                }
                Op::Next => {
                    if pos.is_none() { continue; }
                    merged.next().map_err(fail)?;
                    pos = pos.map(|p| p + 1).filter(|&p| p < all.len());
                }
                Op::Prev => {
                    if pos.is_none() { continue; }
                    merged.prev().map_err(fail)?;
                    pos = pos.and_then(|p| p.checked_sub(1));
                }
            }
            prop_assert_eq!(current(&merged), pos.and_then(|p| all.get(p)).cloned());
        }
    }
}

#[test]
fn merging_nothing_is_never_valid() -> cairn_sstable::Result<()> {
    let mut merged: MergingIter<VecIter> = MergingIter::new(Vec::new());
    merged.seek_to_first()?;
    assert!(!merged.valid());
    merged.seek_to_last()?;
    assert!(!merged.valid());
    Ok(())
}
