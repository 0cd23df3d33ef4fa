//! Every garbage-collection rule of DESIGN.md §3, both sides: kept while the rule says keep,
//! dropped once it says drop. Tests are named after the rules.

use bytes::Bytes;
use cairn_compaction::{
    BelowOracle, CompactionFilter, CompactionIter, Decision, DropCounts, GcContext, NothingBelow,
};
use cairn_sstable::{
    EntryMeta, FragmentedRangeTombstones, InternalIterator, Kind, RangeTombstone, SeqNo,
    compare_internal_keys, internal_key, parse_internal_key,
};

/// A sorted in-memory input.
struct VecIter {
    entries: Vec<(Vec<u8>, EntryMeta, Bytes)>,
    pos: usize,
}

impl VecIter {
    fn new(mut entries: Vec<(Vec<u8>, EntryMeta, Bytes)>) -> Self {
        entries.sort_by(|a, b| compare_internal_keys(&a.0, &b.0));
        Self { entries, pos: 0 }
    }
}

impl InternalIterator for VecIter {
    fn valid(&self) -> bool {
        self.pos < self.entries.len()
    }
    fn key(&self) -> &[u8] {
        self.entries
            .get(self.pos)
            .map(|e| e.0.as_slice())
            .unwrap_or_default()
    }
    fn meta(&self) -> EntryMeta {
        self.entries.get(self.pos).map(|e| e.1).unwrap_or_default()
    }
    fn value(&self) -> &[u8] {
        self.entries
            .get(self.pos)
            .map(|e| e.2.as_ref())
            .unwrap_or_default()
    }
    fn seek_to_first(&mut self) -> cairn_sstable::Result<()> {
        self.pos = 0;
        Ok(())
    }
    fn seek_to_last(&mut self) -> cairn_sstable::Result<()> {
        self.pos = self.entries.len().saturating_sub(1);
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> cairn_sstable::Result<()> {
        self.pos = self
            .entries
            .partition_point(|e| compare_internal_keys(&e.0, target).is_lt());
        Ok(())
    }
    fn seek_for_prev(&mut self, _: &[u8]) -> cairn_sstable::Result<()> {
        unimplemented!("compaction reads forward only")
    }
    fn next(&mut self) -> cairn_sstable::Result<()> {
        self.pos += 1;
        Ok(())
    }
    fn prev(&mut self) -> cairn_sstable::Result<()> {
        unimplemented!("compaction reads forward only")
    }
}

fn put(key: &str, seqno: SeqNo, time: u64) -> (Vec<u8>, EntryMeta, Bytes) {
    (
        internal_key(key.as_bytes(), seqno, Kind::Put),
        EntryMeta::at(time),
        Bytes::from(format!("{key}@{seqno}")),
    )
}

fn put_ttl(key: &str, seqno: SeqNo, time: u64, ttl: u64) -> (Vec<u8>, EntryMeta, Bytes) {
    let (k, _, v) = put(key, seqno, time);
    (
        k,
        EntryMeta {
            write_time: time,
            ttl: Some(ttl),
        },
        v,
    )
}

fn del(key: &str, seqno: SeqNo, time: u64) -> (Vec<u8>, EntryMeta, Bytes) {
    (
        internal_key(key.as_bytes(), seqno, Kind::Delete),
        EntryMeta::at(time),
        Bytes::new(),
    )
}

fn single_del(key: &str, seqno: SeqNo, time: u64) -> (Vec<u8>, EntryMeta, Bytes) {
    (
        internal_key(key.as_bytes(), seqno, Kind::SingleDelete),
        EntryMeta::at(time),
        Bytes::new(),
    )
}

/// Something may lie below for every key.
struct EverythingBelow;

impl BelowOracle for EverythingBelow {
    fn key_may_exist_below(&self, _: &[u8]) -> bool {
        true
    }
    fn range_may_exist_below(&self, _: &[u8], _: &[u8]) -> bool {
        true
    }
}

struct Setup<'a> {
    snapshots: &'a [SeqNo],
    now: u64,
    grace: u64,
    max_versions: u32,
    ttl: Option<u64>,
    below: &'a dyn BelowOracle,
    filter: Option<&'a dyn CompactionFilter>,
}

impl Default for Setup<'_> {
    fn default() -> Self {
        Self {
            snapshots: &[],
            now: 1_000_000,
            grace: 0,
            max_versions: 1,
            ttl: None,
            below: &NothingBelow,
            filter: None,
        }
    }
}

type Survivor = (String, SeqNo, Kind);

/// A compaction iterator over `input` and `ranges` under `setup`.
fn compaction<'a>(
    setup: &Setup<'a>,
    input: Vec<(Vec<u8>, EntryMeta, Bytes)>,
    ranges: Vec<RangeTombstone>,
) -> CompactionIter<'a, VecIter> {
    CompactionIter::new(
        VecIter::new(input),
        FragmentedRangeTombstones::fragment(ranges),
        context(setup),
    )
    .expect("start")
}

/// The rules' context for `setup`.
fn context<'a>(setup: &Setup<'a>) -> GcContext<'a> {
    GcContext {
        snapshots: setup.snapshots,
        now: setup.now,
        grace_ms: setup.grace,
        max_versions: setup.max_versions,
        cf_ttl_ms: setup.ttl,
        below: setup.below,
        filter: setup.filter.map(|f| (f, "default")),
    }
}

fn run(
    setup: &Setup<'_>,
    input: Vec<(Vec<u8>, EntryMeta, Bytes)>,
    ranges: Vec<RangeTombstone>,
) -> (Vec<Survivor>, Vec<(String, SeqNo)>, DropCounts) {
    let (out, ranges, drops, _) = outcome(compaction(setup, input, ranges));
    let ranges = ranges
        .into_iter()
        .map(|(range, seqno, _)| (range, seqno))
        .collect();
    (out, ranges, drops)
}

fn rt(start: &str, end: &str, seqno: SeqNo, time: u64) -> RangeTombstone {
    RangeTombstone {
        start: Bytes::from(start.to_string()),
        end: Bytes::from(end.to_string()),
        seqno,
        write_time: time,
    }
}

fn s(key: &str, seqno: SeqNo, kind: Kind) -> Survivor {
    (key.to_string(), seqno, kind)
}

// --- shadowed ---

#[test]
fn shadowed_version_is_dropped_within_its_stripe() {
    let (out, _, drops) = run(
        &Setup::default(),
        vec![put("k", 3, 0), put("k", 2, 0), put("k", 1, 0)],
        vec![],
    );
    assert_eq!(out, vec![s("k", 3, Kind::Put)]);
    assert_eq!(drops.shadowed, 2);
}

#[test]
fn shadowed_version_is_kept_while_a_snapshot_between_reads_it() {
    let setup = Setup {
        snapshots: &[1, 2],
        ..Setup::default()
    };
    let (out, _, drops) = run(
        &setup,
        vec![put("k", 3, 0), put("k", 2, 0), put("k", 1, 0)],
        vec![],
    );
    assert_eq!(
        out,
        vec![
            s("k", 3, Kind::Put),
            s("k", 2, Kind::Put),
            s("k", 1, Kind::Put)
        ]
    );
    assert_eq!(drops.shadowed, 0);
}

#[test]
fn shadowed_keeps_max_versions_newest_per_stripe() {
    let setup = Setup {
        max_versions: 2,
        ..Setup::default()
    };
    let (out, _, drops) = run(
        &setup,
        vec![put("k", 4, 0), put("k", 3, 0), put("k", 2, 0)],
        vec![],
    );
    assert_eq!(out, vec![s("k", 4, Kind::Put), s("k", 3, Kind::Put)]);
    assert_eq!(drops.shadowed, 1);
}

// --- obsolete tombstone ---

#[test]
fn obsolete_tombstone_is_kept_while_an_older_snapshot_lives() {
    let setup = Setup {
        snapshots: &[5],
        ..Setup::default()
    };
    let (out, _, _) = run(&setup, vec![del("k", 10, 0), put("k", 3, 0)], vec![]);
    assert_eq!(out, vec![s("k", 10, Kind::Delete), s("k", 3, Kind::Put)]);
}

#[test]
fn obsolete_tombstone_is_dropped_once_no_snapshot_is_older() {
    for snapshots in [&[][..], &[10][..], &[15, 20][..]] {
        let setup = Setup {
            snapshots,
            ..Setup::default()
        };
        let (out, _, drops) = run(&setup, vec![del("k", 10, 0), put("k", 3, 0)], vec![]);
        assert_eq!(out, vec![], "snapshots {snapshots:?}");
        assert_eq!((drops.obsolete_tombstone, drops.shadowed), (1, 1));
    }
}

#[test]
fn obsolete_tombstone_is_kept_while_an_older_version_may_lie_below() {
    let setup = Setup {
        below: &EverythingBelow,
        ..Setup::default()
    };
    let (out, _, drops) = run(&setup, vec![del("k", 10, 0), put("k", 3, 0)], vec![]);
    assert_eq!(
        out,
        vec![s("k", 10, Kind::Delete)],
        "the put in this compaction is shadowed; the tombstone stays"
    );
    assert_eq!((drops.obsolete_tombstone, drops.shadowed), (0, 1));
}

#[test]
fn obsolete_tombstone_is_kept_one_millisecond_before_its_grace_ends_and_dropped_at_the_end() {
    let grace = 60_000;
    let kept = Setup {
        grace,
        now: 1_000 + grace - 1,
        ..Setup::default()
    };
    assert_eq!(
        run(&kept, vec![del("k", 10, 1_000)], vec![]).0,
        vec![s("k", 10, Kind::Delete)]
    );
    let dropped = Setup {
        grace,
        now: 1_000 + grace,
        ..Setup::default()
    };
    assert_eq!(run(&dropped, vec![del("k", 10, 1_000)], vec![]).0, vec![]);
}

// --- single delete ---

#[test]
fn single_delete_and_its_put_both_go_when_no_snapshot_lies_between() {
    let (out, _, drops) = run(
        &Setup::default(),
        vec![single_del("k", 9, 0), put("k", 4, 0)],
        vec![],
    );
    assert_eq!(out, vec![]);
    assert_eq!(drops.single_delete, 2);
}

#[test]
fn single_delete_and_its_put_both_stay_when_a_snapshot_lies_between() {
    let setup = Setup {
        snapshots: &[6],
        ..Setup::default()
    };
    let (out, _, drops) = run(&setup, vec![single_del("k", 9, 0), put("k", 4, 0)], vec![]);
    assert_eq!(
        out,
        vec![s("k", 9, Kind::SingleDelete), s("k", 4, Kind::Put)]
    );
    assert_eq!(drops.single_delete, 0);
}

#[test]
fn single_delete_cancels_its_put_but_stays_while_data_may_lie_below() {
    let setup = Setup {
        below: &EverythingBelow,
        ..Setup::default()
    };
    let (out, _, drops) = run(&setup, vec![single_del("k", 9, 0), put("k", 4, 0)], vec![]);
    assert_eq!(out, vec![s("k", 9, Kind::SingleDelete)]);
    assert_eq!(drops.single_delete, 1);
}

#[test]
fn single_delete_misuse_is_counted_and_resurrects_nothing() {
    let input = vec![single_del("k", 9, 0), put("k", 4, 0), put("k", 2, 0)];
    let mut iter_setup = Setup::default();
    let (out, _, _) = run(&iter_setup, input.clone(), vec![]);
    assert!(
        out.iter().all(|(_, _, kind)| *kind != Kind::Put),
        "an older put came back: {out:?}"
    );
    iter_setup.below = &EverythingBelow;
    let (out, _, _) = run(&iter_setup, input, vec![]);
    assert_eq!(
        out,
        vec![s("k", 9, Kind::SingleDelete)],
        "the marker stays as a tombstone"
    );
    let mut iter = compaction(
        &Setup::default(),
        vec![single_del("k", 9, 0), put("k", 4, 0), put("k", 2, 0)],
        vec![],
    );
    while iter.next_entry().expect("next").is_some() {}
    assert_eq!(iter.single_delete_misuse(), 1);
}

#[test]
fn single_delete_pair_keeps_an_older_tombstone_that_a_snapshot_needs() {
    // put@3 | snapshot 4 | delete@5 put@7 single_delete@8: the older put stays for the snapshot,
    // and new readers must still find the key deleted.
    let setup = Setup {
        snapshots: &[4],
        ..Setup::default()
    };
    let (out, _, _) = run(
        &setup,
        vec![
            single_del("k", 8, 0),
            put("k", 7, 0),
            del("k", 5, 0),
            put("k", 3, 0),
        ],
        vec![],
    );
    assert_eq!(
        out.first().map(|o| o.2 != Kind::Put),
        Some(true),
        "newest survivor must delete: {out:?}"
    );
    assert!(
        out.contains(&s("k", 3, Kind::Put)),
        "the snapshot's put was dropped: {out:?}"
    );
}

// --- range tombstones ---

#[test]
fn range_tombstone_drops_covered_versions_in_its_stripe() {
    let (out, ranges, drops) = run(
        &Setup::default(),
        vec![put("b", 2, 0), put("c", 7, 0), put("z", 1, 0)],
        vec![rt("a", "m", 5, 0)],
    );
    assert_eq!(
        out,
        vec![s("c", 7, Kind::Put), s("z", 1, Kind::Put)],
        "newer writes in the range survive"
    );
    assert_eq!(ranges, vec![], "an obsolete range tombstone goes too");
    assert_eq!(drops.range, 2);
}

#[test]
fn range_tombstone_keeps_versions_a_snapshot_between_reads() {
    let setup = Setup {
        snapshots: &[3],
        ..Setup::default()
    };
    let (out, ranges, _) = run(&setup, vec![put("b", 2, 0)], vec![rt("a", "m", 5, 0)]);
    assert_eq!(out, vec![s("b", 2, Kind::Put)]);
    assert_eq!(ranges, vec![("a..m".to_string(), 5)]);
}

#[test]
fn range_tombstone_is_kept_while_data_below_overlaps_or_grace_runs() {
    let below = Setup {
        below: &EverythingBelow,
        ..Setup::default()
    };
    assert_eq!(
        run(&below, vec![], vec![rt("a", "m", 5, 0)]).1,
        vec![("a..m".to_string(), 5)]
    );
    let grace = Setup {
        grace: 10,
        now: 9,
        ..Setup::default()
    };
    assert_eq!(
        run(&grace, vec![], vec![rt("a", "m", 5, 0)]).1,
        vec![("a..m".to_string(), 5)]
    );
    let over = Setup {
        grace: 10,
        now: 10,
        ..Setup::default()
    };
    assert_eq!(run(&over, vec![], vec![rt("a", "m", 5, 0)]).1, vec![]);
}

// --- expired ---

#[test]
fn expired_put_is_dropped_when_nothing_older_survives() {
    let setup = Setup {
        now: 100,
        ..Setup::default()
    };
    let (out, _, drops) = run(
        &setup,
        vec![put_ttl("k", 5, 0, 100), put("k", 2, 0)],
        vec![],
    );
    assert_eq!(out, vec![]);
    assert_eq!(drops.expired, 1);
}

#[test]
fn expired_put_is_kept_one_millisecond_before_expiry() {
    let setup = Setup {
        now: 99,
        ..Setup::default()
    };
    assert_eq!(
        run(&setup, vec![put_ttl("k", 5, 0, 100)], vec![]).0,
        vec![s("k", 5, Kind::Put)]
    );
}

#[test]
fn expired_put_becomes_a_tombstone_when_an_older_version_survives_or_lies_below() {
    let snapshot = Setup {
        now: 100,
        snapshots: &[3],
        ..Setup::default()
    };
    let (out, _, _) = run(
        &snapshot,
        vec![put_ttl("k", 5, 0, 100), put("k", 2, 0)],
        vec![],
    );
    assert_eq!(out, vec![s("k", 5, Kind::Delete), s("k", 2, Kind::Put)]);
    let below = Setup {
        now: 100,
        below: &EverythingBelow,
        ..Setup::default()
    };
    assert_eq!(
        run(&below, vec![put_ttl("k", 5, 0, 100)], vec![]).0,
        vec![s("k", 5, Kind::Delete)]
    );
}

#[test]
fn expired_versions_stay_as_candidates_with_several_versions_while_an_older_one_survives() {
    // v@5 expired (cell TTL), v@4 alive, v@3 beyond the two candidates. A reader that also
    // counts a newer version of another level (say @6) sees @6 alone: dropping @5 would let @4
    // in. So @5 stays, its value emptied, and still counts: @3 is shadowed.
    let setup = Setup {
        now: 100,
        max_versions: 2,
        ttl: Some(1_000),
        ..Setup::default()
    };
    let mut iter = compaction(
        &setup,
        vec![put_ttl("k", 5, 0, 50), put("k", 4, 50), put("k", 3, 50)],
        vec![],
    );
    let kept = iter.next_entry().expect("read").expect("@5");
    assert!(kept.value.is_empty(), "an expired candidate keeps no value");
    let (out, _, drops, _) = outcome(iter);
    assert_eq!(out, vec![s("k", 4, Kind::Put)]);
    assert_eq!((drops.expired, drops.shadowed), (0, 1));
}

#[test]
fn expired_versions_with_nothing_older_left_are_dropped_with_several_versions() {
    let bottom = Setup {
        now: 100,
        max_versions: 3,
        ..Setup::default()
    };
    let input = || {
        vec![
            put("k", 5, 0),
            put_ttl("k", 4, 0, 50),
            put_ttl("k", 3, 0, 0),
        ]
    };
    let (out, _, drops) = run(&bottom, input(), vec![]);
    assert_eq!(
        out,
        vec![s("k", 5, Kind::Put)],
        "both expired at the tail go"
    );
    assert_eq!(drops.expired, 2);
    let below = Setup {
        below: &EverythingBelow,
        ..bottom
    };
    let (out, _, drops) = run(&below, input(), vec![]);
    assert_eq!(
        out,
        vec![
            s("k", 5, Kind::Put),
            s("k", 4, Kind::Put),
            s("k", 3, Kind::Put)
        ],
        "an older version may lie below: they still count"
    );
    assert_eq!(drops.expired, 0);
    let snapshot = Setup {
        snapshots: &[2],
        ..bottom
    };
    let mut older = input();
    older.push(put("k", 2, 0));
    let (out, _, _) = run(&snapshot, older, vec![]);
    assert_eq!(
        out,
        vec![
            s("k", 5, Kind::Put),
            s("k", 4, Kind::Put),
            s("k", 3, Kind::Put),
            s("k", 2, Kind::Put)
        ],
        "the snapshot reads @2, which dropping @4 and @3 would let into the candidates now"
    );
}

// --- filter ---

#[derive(Debug)]
struct RemoveAll;
impl CompactionFilter for RemoveAll {
    fn filter(&self, _: &str, _: &[u8], _: &[u8]) -> Decision {
        Decision::Remove
    }
}

#[derive(Debug)]
struct Upper;
impl CompactionFilter for Upper {
    fn filter(&self, _: &str, _: &[u8], value: &[u8]) -> Decision {
        Decision::ChangeValue(Bytes::from(value.to_ascii_uppercase()))
    }
}

#[test]
fn filter_removes_the_newest_version_and_what_it_hides() {
    let setup = Setup {
        filter: Some(&RemoveAll),
        ..Setup::default()
    };
    let (out, _, drops) = run(&setup, vec![put("k", 5, 0), put("k", 2, 0)], vec![]);
    assert_eq!(out, vec![]);
    assert_eq!((drops.filter, drops.shadowed), (1, 1));
    let below = Setup {
        filter: Some(&RemoveAll),
        below: &EverythingBelow,
        ..Setup::default()
    };
    assert_eq!(
        run(&below, vec![put("k", 5, 0)], vec![]).0,
        vec![s("k", 5, Kind::Delete)],
        "remove becomes a tombstone"
    );
}

#[test]
fn filter_never_sees_a_version_a_snapshot_can_read() {
    let setup = Setup {
        filter: Some(&RemoveAll),
        snapshots: &[5],
        ..Setup::default()
    };
    assert_eq!(
        run(&setup, vec![put("k", 5, 0)], vec![]).0,
        vec![s("k", 5, Kind::Put)],
        "snapshot 5 reads put@5"
    );
    // Newer than every snapshot: the filter decides, but the snapshot's older version stays and
    // new readers must not see it again.
    let newer = Setup {
        filter: Some(&RemoveAll),
        snapshots: &[4],
        ..Setup::default()
    };
    assert_eq!(
        run(&newer, vec![put("k", 5, 0), put("k", 3, 0)], vec![]).0,
        vec![s("k", 5, Kind::Delete), s("k", 3, Kind::Put)]
    );
}

#[test]
fn filter_can_change_a_value() {
    let setup = Setup {
        filter: Some(&Upper),
        ..Setup::default()
    };
    let mut iter = compaction(&setup, vec![put("k", 5, 0)], vec![]);
    let entry = iter.next_entry().expect("next").expect("one entry");
    assert_eq!(&entry.value[..], b"K@5");
}

#[test]
fn single_delete_over_a_range_deleted_put_is_no_misuse() {
    let mut iter = compaction(
        &Setup::default(),
        vec![single_del("k", 9, 0), put("k", 7, 0), put("k", 3, 0)],
        vec![rt("a", "z", 5, 0)],
    );
    while iter.next_entry().expect("next").is_some() {}
    assert_eq!(
        iter.single_delete_misuse(),
        0,
        "put@3 was deleted by the range tombstone at 5"
    );
}

// --- range tombstones thinned to what each stripe can still choose ---

/// One compaction's outputs: entries, surviving range-tombstone pieces (with write times), drop
/// counts and the next time a rewrite is worth it.
type Outcome = (
    Vec<Survivor>,
    Vec<(String, SeqNo, u64)>,
    DropCounts,
    Option<u64>,
);

fn outcome(mut iter: CompactionIter<'_, VecIter>) -> Outcome {
    let mut out = Vec::new();
    while let Some(e) = iter.next_entry().expect("next") {
        let k = parse_internal_key(&e.key).expect("valid output key");
        out.push((
            String::from_utf8_lossy(k.user_key).into_owned(),
            k.seqno,
            k.kind,
        ));
    }
    let ranges = iter
        .surviving_range_tombstones()
        .iter_tombstones()
        .map(|t| {
            let range = format!(
                "{}..{}",
                String::from_utf8_lossy(&t.start),
                String::from_utf8_lossy(&t.end)
            );
            (range, t.seqno, t.write_time)
        })
        .collect();
    (out, ranges, *iter.drops(), iter.next_change())
}

/// One compaction's outcome with its range tombstones fragmented whole, and thinned by stripe.
fn whole_and_thinned(
    setup: &Setup<'_>,
    input: Vec<(Vec<u8>, EntryMeta, Bytes)>,
    ranges: Vec<RangeTombstone>,
) -> (Outcome, Outcome) {
    let whole = outcome(compaction(setup, input.clone(), ranges.clone()));
    let thinned = CompactionIter::from_raw_tombstones(VecIter::new(input), ranges, context(setup))
        .expect("start");
    (whole, outcome(thinned))
}

/// Two range tombstones in one stripe over the same keys, the newer deleted earlier (a clock
/// that stepped back): once the newer's grace is over and the older's is not, the older is the
/// one kept, thinned or not.
#[test]
fn an_older_tombstone_deleted_later_outlasts_a_newer_one_thinned_or_not() {
    let setup = Setup {
        now: 150,
        grace: 100,
        ..Setup::default()
    };
    let ranges = vec![rt("a", "c", 5, 90), rt("a", "c", 7, 10)];
    let input = vec![put("b", 3, 0)];
    let expected = vec![("a..c".to_string(), 5, 90)];
    let (whole, thinned) = whole_and_thinned(&setup, input, ranges);
    assert_eq!(whole.1, expected);
    assert_eq!(thinned, whole);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

    /// Fragmenting a compaction's range tombstones with only the versions each snapshot stripe
    /// can still choose between changes nothing it outputs, drops, counts or schedules, also
    /// with deletion times that step back.
    #[test]
    fn thinning_range_tombstones_by_stripe_changes_no_outcome(
        ops in proptest::collection::vec((0u8..2, 0u8..6, 1u8..6, 0u64..100), 0..40),
        snapshot_picks in proptest::collection::vec(1u64..45, 0..4),
        now in 0u64..200,
        grace in 0u64..100,
        max_versions in 1u32..3,
        everything_below in proptest::bool::ANY,
    ) {
        let key = |i: u8| char::from(b'a' + i).to_string();
        let mut input = Vec::new();
        let mut ranges = Vec::new();
        for (i, &(kind, at, len, time)) in ops.iter().enumerate() {
            let seqno = i as SeqNo + 1;
            if kind == 0 {
                input.push(put(&key(at), seqno, time));
            } else {
                ranges.push(rt(&key(at), &key(at.saturating_add(len)), seqno, time));
            }
        }
        let mut snapshots = snapshot_picks;
        snapshots.sort_unstable();
        snapshots.dedup();
        let below: &dyn BelowOracle = if everything_below { &EverythingBelow } else { &NothingBelow };
        let setup = Setup { snapshots: &snapshots, now, grace, max_versions, below, ..Setup::default() };
        let (whole, thinned) = whole_and_thinned(&setup, input, ranges);
        proptest::prop_assert_eq!(whole, thinned);
    }
}
