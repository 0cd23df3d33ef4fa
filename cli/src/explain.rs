//! `cairn explain` and `cairn audit`: why deleted data is still on disk, and where a key still
//! lies. Both open the database read-only and print what the engine's own rule code says
//! (`explain_tombstones`, `audit_key`), so they cannot disagree with what compaction does.
//!
//! A service's snapshots live in its process, out of sight of a read-only open: `explain
//! --snapshot SEQNO` judges as though a snapshot at that sequence number were held, to show
//! what a long-lived snapshot keeps.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::time::Duration;

use cairn::{KeyTrace, Location, Options, TombstoneExplanation, TombstoneReason};
use clap::Args;
use serde::Serialize;

use crate::db_arg::{DbArg, DbPos};
use crate::output::{self, NO, age_text, bytes_text, key_range, kind_name, print_json, time_text};

#[derive(Debug, Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    db: DbArg,
    /// The column family.
    #[arg(long, default_value = "default")]
    cf: String,
    /// Only tombstones from this key on.
    #[arg(long)]
    from: Option<String>,
    /// Only tombstones before this key.
    #[arg(long)]
    to: Option<String>,
    /// `--from` and `--to` are hex.
    #[arg(long)]
    hex: bool,
    /// Judge as though a snapshot at this sequence number were held (repeatable).
    #[arg(long = "snapshot", value_name = "SEQNO")]
    snapshots: Vec<u64>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(flatten)]
    db: DbPos,
    /// The key.
    key: String,
    /// The column family.
    #[arg(long, default_value = "default")]
    cf: String,
    /// KEY is hex.
    #[arg(long)]
    hex: bool,
    /// The service's delete persistence deadline (`1h`): each deleted trace then says when
    /// it is promised gone. The deadline is an option of the opener, not stored on disk.
    #[arg(long, value_parser = output::parse_duration)]
    deadline: Option<Duration>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// What `explain` prints.
#[derive(Debug, Serialize)]
struct Explained {
    column_family: String,
    from: Option<String>,
    to: Option<String>,
    assumed_snapshots: Vec<u64>,
    tombstones: usize,
    groups: Vec<Group>,
    /// Always false: explain reads the tombstones, not every block (`cairn verify` does).
    verified: bool,
}

/// The tombstones kept for one reason.
#[derive(Debug, Serialize)]
struct Group {
    /// `pinned_by_snapshot`, `grace_period`, `older_data_below` or `awaiting_compaction`.
    reason: &'static str,
    /// The snapshot's sequence number, for `pinned_by_snapshot`.
    #[serde(skip_serializing_if = "Option::is_none")]
    snapshot: Option<u64>,
    /// The deeper level, for `older_data_below`.
    #[serde(skip_serializing_if = "Option::is_none")]
    level: Option<usize>,
    /// When the last of the group's grace periods ends, for `grace_period`.
    #[serde(skip_serializing_if = "Option::is_none")]
    grace_ends_by: Option<String>,
    count: usize,
    point: usize,
    range: usize,
    /// The group's oldest tombstone.
    oldest: Example,
}

#[derive(Debug, Serialize)]
struct Example {
    key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    end: Option<String>,
    seqno: u64,
    kind: &'static str,
    deleted_at_ms: u64,
    deleted_at: String,
    /// None on the stress harness's manual clock.
    age_ms: Option<u64>,
    age: String,
    location: String,
}

pub fn explain(args: &ExplainArgs) -> i32 {
    crate::init_logging(false);
    let range = match key_range(args.from.as_deref(), args.to.as_deref(), args.hex) {
        Ok(range) => range,
        Err(e) => return crate::bad_args(&e),
    };
    let db = match output::open_read_only(args.db.path()) {
        Ok(db) => db,
        Err(code) => return code,
    };
    let cf = match db.column_family(&args.cf) {
        Ok(cf) => cf,
        Err(e) => return output::engine_failed("explain", &e),
    };
    let found =
        match cf.explain_tombstones_with_snapshots::<Vec<u8>>(range.clone(), &args.snapshots) {
            Ok(found) => found,
            Err(e) => return output::engine_failed("explain", &e),
        };
    let explained = Explained {
        column_family: args.cf.clone(),
        from: bound_text(&range.0),
        to: bound_text(&range.1),
        assumed_snapshots: args.snapshots.clone(),
        tombstones: found.len(),
        groups: groups(&found, output::age_clock(args.db.path(), db.now_ms())),
        verified: false,
    };
    output::not_verified("explain", args.db.path());
    if args.json {
        print_json(&explained);
    } else {
        print_explained(&explained);
    }
    0
}

/// A range's end as printed; `None` when open.
fn bound_text(bound: &Bound<Vec<u8>>) -> Option<String> {
    match bound {
        Bound::Included(k) | Bound::Excluded(k) => Some(output::short_key(k)),
        Bound::Unbounded => None,
    }
}

/// What separates one group from another: the reason, with its snapshot or level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum GroupKey {
    Snapshot(u64),
    Grace,
    Below(usize),
    Awaiting,
}

fn key_of(reason: TombstoneReason) -> GroupKey {
    match reason {
        TombstoneReason::PinnedBySnapshot { seqno } => GroupKey::Snapshot(seqno),
        TombstoneReason::GraceUntil { .. } => GroupKey::Grace,
        TombstoneReason::OlderDataBelow { level } => GroupKey::Below(level),
        _ => GroupKey::Awaiting,
    }
}

fn groups(found: &[TombstoneExplanation], now: Option<u64>) -> Vec<Group> {
    let mut by_key: BTreeMap<GroupKey, Vec<&TombstoneExplanation>> = BTreeMap::new();
    for t in found {
        by_key.entry(key_of(t.reason)).or_default().push(t);
    }
    by_key
        .into_iter()
        .filter_map(|(key, members)| {
            let oldest = members.iter().min_by_key(|t| (t.deleted_at, t.seqno))?;
            let grace_ends = members
                .iter()
                .filter_map(|t| match t.reason {
                    TombstoneReason::GraceUntil { time } => Some(time),
                    _ => None,
                })
                .max();
            let range = members.iter().filter(|t| t.end.is_some()).count();
            Some(Group {
                reason: match key {
                    GroupKey::Snapshot(_) => "pinned_by_snapshot",
                    GroupKey::Grace => "grace_period",
                    GroupKey::Below(_) => "older_data_below",
                    GroupKey::Awaiting => "awaiting_compaction",
                },
                snapshot: match key {
                    GroupKey::Snapshot(s) => Some(s),
                    _ => None,
                },
                level: match key {
                    GroupKey::Below(l) => Some(l),
                    _ => None,
                },
                grace_ends_by: grace_ends.map(time_text),
                count: members.len(),
                point: members.len() - range,
                range,
                oldest: Example {
                    key: bytes_text(&oldest.key),
                    end: oldest.end.as_deref().map(bytes_text),
                    seqno: oldest.seqno,
                    kind: kind_name(oldest.kind),
                    deleted_at_ms: oldest.deleted_at,
                    deleted_at: time_text(oldest.deleted_at),
                    age_ms: output::age_ms(now, oldest.deleted_at),
                    age: age_text(now, oldest.deleted_at),
                    location: location_text(oldest.location),
                },
            })
        })
        .collect()
}

fn print_explained(e: &Explained) {
    let range = match (&e.from, &e.to) {
        (None, None) => "all keys".to_owned(),
        (from, to) => format!(
            "[{}, {})",
            from.as_deref().unwrap_or(""),
            to.as_deref().unwrap_or("end")
        ),
    };
    println!(
        "{}, {range}: {} tombstones kept",
        e.column_family, e.tombstones
    );
    for g in &e.groups {
        let why = match g.reason {
            "pinned_by_snapshot" => format!("pinned by snapshot {}", g.snapshot.unwrap_or(0)),
            "grace_period" => format!(
                "in their grace period (the last ends {})",
                g.grace_ends_by.as_deref().unwrap_or("-")
            ),
            "older_data_below" => format!("older data below, at L{}", g.level.unwrap_or(0)),
            _ => "nothing keeps them: the next compaction that reaches them drops them".to_owned(),
        };
        let o = &g.oldest;
        let key = o
            .end
            .as_ref()
            .map_or_else(|| o.key.clone(), |end| format!("[{}, {end})", o.key));
        println!(
            "  {:>8} {why} ({} point, {} range)\n           oldest: {key} seqno {} {} {} ago, in {}",
            g.count, g.point, g.range, o.seqno, o.kind, o.age, o.location
        );
    }
}

/// Where a trace lies, for people.
fn location_text(l: Location) -> String {
    match l {
        Location::Memtable => "the memtable".to_owned(),
        Location::Log { number } => format!("{number:06}.log"),
        Location::Table { level, number } => format!("L{level} {number:06}.sst"),
        Location::UnreadTable { number } => {
            format!("{number:06}.sst (no longer read, not yet deleted)")
        }
        Location::UnlinkedTable { number } => {
            format!("{number:06}.sst (deleted, still held open by a reader)")
        }
        Location::Manifest { number, table } => {
            format!("MANIFEST-{number:06} (as a bound of {table:06}.sst)")
        }
        _ => format!("{l:?}"),
    }
}

#[derive(Debug, Serialize)]
struct Audited {
    column_family: String,
    key: String,
    traces: Vec<TraceRow>,
}

#[derive(Debug, Serialize)]
struct TraceRow {
    location: String,
    seqno: u64,
    /// `None` for a MANIFEST trace (the key's bytes as a table's bound, not a version).
    kind: Option<&'static str>,
    write_time: String,
    /// When the delete persistence deadline promises it gone.
    gone_by: Option<String>,
    /// The promise's time has passed.
    overdue: bool,
}

/// Exit 0 only when no trace of the key remains.
pub fn audit(args: &AuditArgs) -> i32 {
    crate::init_logging(false);
    let key = match output::key_arg(&args.key, args.hex) {
        Ok(key) => key,
        Err(e) => return crate::bad_args(&e),
    };
    let mut options = Options::default();
    if let Some(deadline) = args.deadline {
        options = options.delete_persistence_deadline(deadline);
    }
    let db = match output::open_read_only_with(args.db.path(), options) {
        Ok(db) => db,
        Err(code) => return code,
    };
    let traces = match db.column_family(&args.cf).and_then(|cf| cf.audit_key(&key)) {
        Ok(traces) => traces,
        Err(e) => return output::engine_failed("audit", &e),
    };
    let now = db.now_ms();
    let audited = Audited {
        column_family: args.cf.clone(),
        key: bytes_text(&key),
        traces: traces.iter().map(|t| trace_row(t, now)).collect(),
    };
    if args.json {
        print_json(&audited);
    } else if audited.traces.is_empty() {
        println!(
            "{}: no trace of {} anywhere",
            audited.column_family,
            output::short_key(&key)
        );
    } else {
        print_traces(&audited, &key);
    }
    if traces.is_empty() { 0 } else { NO }
}

fn trace_row(t: &KeyTrace, now: u64) -> TraceRow {
    TraceRow {
        location: location_text(t.location),
        seqno: t.seqno,
        kind: t.kind.map(kind_name),
        write_time: time_text(t.write_time),
        gone_by: t.gone_by.map(time_text),
        overdue: t.gone_by.is_some_and(|g| g < now),
    }
}

fn print_traces(a: &Audited, key: &[u8]) {
    println!(
        "{}: {} of {}",
        a.column_family,
        output::count(a.traces.len(), "trace"),
        output::short_key(key)
    );
    let rows: Vec<Vec<String>> = a
        .traces
        .iter()
        .map(|t| {
            vec![
                t.location.clone(),
                t.seqno.to_string(),
                t.kind.unwrap_or("key bytes").to_owned(),
                t.write_time.clone(),
                match (&t.gone_by, t.overdue) {
                    (Some(g), true) => format!("{g} (overdue)"),
                    (Some(g), false) => g.clone(),
                    (None, _) => "-".to_owned(),
                },
            ]
        })
        .collect();
    output::print_table(&["WHERE", "SEQNO", "KIND", "WRITTEN", "GONE BY"], &rows);
}
