//! One purge pass, and the loop that runs them, on every backend: what is eligible (the
//! cutoff at its edge), the caps, dry runs, failing tables, the table list asked anew each
//! pass, the full-scan fallback, and the loop's interval, single instance and panic recovery.
//! Each test runs as `embedded::…`, `mysql::…` and `postgres::…` (the servers' from
//! `CAIRN_MYSQL_URL` / `CAIRN_PG_URL`; see `common/env.rs`).

#![allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_purger::{
    ColumnType, Error, PassReport, PurgeConfig, Purger, Schema, cube_master_purge_tables,
};
use common::env::{Env, Kind};
use common::{Fixture, HOUR, enabled, fill, ms};

const SPEC: &str = "t_cube_sandbox_spec";
const REPLICA: &str = "t_cube_template_replica";

on_every_backend!(
    a_disabled_purger_runs_no_pass_and_deletes_nothing,
    the_cutoff_is_strict_and_live_rows_never_go,
    the_clamps_hold_on_every_backend,
    twelve_thousand_rows_drain_over_capped_passes,
    each_pass_selects_in_batches_and_stops_at_a_short_one,
    a_dry_run_counts_the_whole_backlog_and_deletes_nothing,
    a_failing_table_does_not_stop_the_next,
    disable_hard_delete_toggled_between_passes_changes_the_list,
    without_the_index_the_purge_scans_the_table_and_warns_once,
    the_loop_waits_a_full_interval_after_each_pass,
    starting_twice_with_one_lock_runs_one_loop,
    a_panic_in_a_pass_is_caught_and_the_loop_goes_on,
    the_table_list_is_asked_for_at_every_pass,
    stopping_the_loop_from_its_own_callback_returns,
);

fn env(kind: Kind) -> Option<Env> {
    Env::new(kind, true)
}

fn purger(env: &Env, tables: &[&str], config: PurgeConfig) -> Purger {
    let list = tables.iter().map(|&t| t.to_owned()).collect();
    env.purger(&env.lock("test_lock"), list, config)
}

/// `n` rows of `table` soft-deleted two hours ago (eligible under a 1h retention).
fn fill_eligible(env: &Env, table: &str, n: u64) -> Vec<u64> {
    let at = env.now() - ms(2 * HOUR);
    env.fill(table, "old", n, |_| Some(at))
}

fn only_table(report: &PassReport) -> &cairn_purger::TableReport {
    assert_eq!(report.tables.len(), 1, "{report:?}");
    &report.tables[0]
}

fn a_disabled_purger_runs_no_pass_and_deletes_nothing(kind: Kind) {
    let Some(env) = env(kind) else { return };
    fill_eligible(&env, SPEC, 10);
    let p = purger(&env, &[SPEC], PurgeConfig::default());
    let report = p.run_pass().expect("pass");
    assert!(report.skipped && report.tables.is_empty(), "{report:?}");
    let running = p.start().expect("start");
    assert!(!running.is_running(), "nothing runs unless enabled");
    env.clock.advance(10 * HOUR);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(running.passes(), 0);
    running.stop().expect("stop");
    assert_eq!(env.count(SPEC), 10);
}

fn the_cutoff_is_strict_and_live_rows_never_go(kind: Kind) {
    for indexed in [true, false] {
        let Some(env) = Env::new(kind, indexed) else {
            return;
        };
        let cutoff = env.now() - ms(HOUR);
        let at_cutoff = env.insert(SPEC, "at", Some(cutoff));
        let before = env.insert(SPEC, "before", Some(cutoff - 1));
        let after = env.insert(SPEC, "after", Some(cutoff + 1));
        let live = env.insert(SPEC, "live", None);
        let ancient = env.insert(SPEC, "zero", Some(0));
        let report = purger(&env, &[SPEC], enabled()).run_pass().expect("pass");
        assert_eq!(report.cutoff_ms, cutoff);
        let table = only_table(&report);
        assert_eq!(table.full_scan, !indexed);
        let gone = |id| !env.exists(SPEC, id);
        assert!(
            !gone(at_cutoff),
            "deleted_at == cutoff survives (indexed: {indexed})"
        );
        assert!(
            gone(before),
            "one millisecond before the cutoff goes (indexed: {indexed})"
        );
        assert!(!gone(after));
        assert!(!gone(live), "a live row never goes");
        assert!(gone(ancient));
        assert_eq!(table.purged, 2);
    }
}

/// A retention under an hour is raised to an hour, and a zero one becomes the 7-day default,
/// whatever backend the purger runs over.
fn the_clamps_hold_on_every_backend(kind: Kind) {
    let Some(env) = env(kind) else { return };
    let minute = Duration::from_secs(60);
    let young = env.insert(SPEC, "young", Some(env.now() - ms(59 * minute)));
    let old = env.insert(SPEC, "old", Some(env.now() - ms(61 * minute)));
    let config = PurgeConfig {
        retention: minute,
        ..enabled()
    };
    let report = purger(&env, &[SPEC], config).run_pass().expect("pass");
    assert_eq!(report.cutoff_ms, env.now() - ms(HOUR), "1m is raised to 1h");
    assert!(env.exists(SPEC, young) && !env.exists(SPEC, old));
    let week = env.insert(SPEC, "week", Some(env.now() - ms(6 * 24 * HOUR)));
    let config = PurgeConfig {
        retention: Duration::ZERO,
        ..enabled()
    };
    let report = purger(&env, &[SPEC], config).run_pass().expect("pass");
    assert_eq!(
        report.cutoff_ms,
        env.now() - ms(7 * 24 * HOUR),
        "0 is the default"
    );
    assert_eq!(report.purged(), 0);
    assert!(env.exists(SPEC, week) && env.exists(SPEC, young));
}

fn twelve_thousand_rows_drain_over_capped_passes(kind: Kind) {
    let Some(env) = env(kind) else { return };
    fill_eligible(&env, SPEC, 12_000);
    let p = purger(&env, &[SPEC], enabled());
    let purged: Vec<u64> = (0..4)
        .map(|_| only_table(&p.run_pass().expect("pass")).purged)
        .collect();
    assert_eq!(purged, [5_000, 5_000, 2_000, 0]);
    assert_eq!(env.count(SPEC), 0);
}

fn each_pass_selects_in_batches_and_stops_at_a_short_one(kind: Kind) {
    let Some(env) = env(kind) else { return };
    fill_eligible(&env, SPEC, 1_234);
    let report = purger(&env, &[SPEC], enabled()).run_pass().expect("pass");
    let table = only_table(&report);
    assert_eq!(
        table.batches,
        [500, 500, 234],
        "no further select after a short batch"
    );
    assert_eq!((table.selected, table.purged), (1_234, 1_234));

    fill_eligible(&env, REPLICA, 5_500);
    let report = purger(&env, &[REPLICA], enabled())
        .run_pass()
        .expect("pass");
    assert_eq!(
        only_table(&report).batches,
        [500; 10],
        "the budget ends the pass at 5,000"
    );
    let report = purger(&env, &[REPLICA], enabled())
        .run_pass()
        .expect("pass");
    assert_eq!(
        only_table(&report).batches,
        [500, 0],
        "a full last batch is followed by one more select"
    );
}

fn a_dry_run_counts_the_whole_backlog_and_deletes_nothing(kind: Kind) {
    let Some(env) = env(kind) else { return };
    fill_eligible(&env, SPEC, 12_000);
    let config = PurgeConfig {
        dry_run: true,
        ..enabled()
    };
    let report = purger(&env, &[SPEC, REPLICA], config)
        .run_pass()
        .expect("pass");
    assert!(report.dry_run);
    assert_eq!(
        (report.tables[0].selected, report.tables[0].purged),
        (12_000, 0)
    );
    assert_eq!(
        report.tables[1].selected, 0,
        "a zero backlog is reported too"
    );
    assert_eq!(env.count(SPEC), 12_000);
}

fn a_failing_table_does_not_stop_the_next(kind: Kind) {
    let Some(env) = env(kind) else { return };
    env.create_plain_table("plain");
    fill_eligible(&env, SPEC, 7);
    let calls = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&calls);
    let p = purger(&env, &["missing", SPEC, "plain"], enabled()).on_purge(
        move |table, purged, error| {
            seen.lock()
                .expect("calls")
                .push((table.to_owned(), purged, error.is_some()));
        },
    );
    let Err(Error::PassFailed {
        table,
        source,
        report,
    }) = p.run_pass()
    else {
        panic!("the pass returns the first error");
    };
    assert_eq!(table, "missing");
    assert!(matches!(*source, Error::NoSuchTable(_)), "{source}");
    assert_eq!(
        report.tables[1].purged, 7,
        "the table after a failing one still ran"
    );
    let plain = report.tables[2].error.as_deref().unwrap_or_default();
    assert!(plain.contains("does not soft-delete"), "{plain}");
    assert_eq!(
        *calls.lock().expect("calls"),
        [
            ("missing".to_owned(), 0, true),
            (SPEC.to_owned(), 7, false),
            ("plain".to_owned(), 0, true)
        ]
    );
}

fn disable_hard_delete_toggled_between_passes_changes_the_list(kind: Kind) {
    let Some(env) = env(kind) else { return };
    for table in cube_master_purge_tables(false) {
        fill_eligible(&env, &table, 3);
    }
    let disable = Arc::new(AtomicBool::new(true));
    let flag = Arc::clone(&disable);
    let p = env.purger_with(
        &env.lock(cairn_purger::CUBEMASTER_LOCK),
        move || cube_master_purge_tables(flag.load(Ordering::SeqCst)),
        enabled(),
    );
    let names = |r: &PassReport| r.tables.iter().map(|t| t.table.clone()).collect::<Vec<_>>();
    let report = p.run_pass().expect("pass");
    assert_eq!(names(&report), cube_master_purge_tables(true));
    assert_eq!(
        env.count("t_cube_instance_info"),
        3,
        "instance records are kept"
    );
    disable.store(false, Ordering::SeqCst);
    let report = p.run_pass().expect("pass");
    assert_eq!(names(&report), cube_master_purge_tables(false));
    assert_eq!(env.count("t_cube_instance_info"), 0);
    assert_eq!(
        report.purged(),
        6,
        "the instance tables' rows, nothing else left"
    );
}

fn without_the_index_the_purge_scans_the_table_and_warns_once(kind: Kind) {
    let Some(env) = Env::new(kind, false) else {
        return;
    };
    fill_eligible(&env, SPEC, 1_234);
    env.fill(SPEC, "live", 100, |_| None);
    let p = purger(&env, &[SPEC], enabled());
    let (logs, report) = capture_logs(|| p.run_pass().expect("pass"));
    let table = only_table(&report);
    assert!(table.full_scan);
    assert_eq!(table.batches, [500, 500, 234]);
    assert_eq!(table.purged, 1_234);
    assert_eq!(env.count(SPEC), 100);
    let (more_logs, _) = capture_logs(|| p.run_pass().expect("pass"));
    let warnings = |logs: &str| logs.matches("scans the whole table").count();
    assert_eq!(warnings(&logs), 1, "{logs}");
    assert_eq!(
        warnings(&more_logs),
        0,
        "warned once per table: {more_logs}"
    );
}

/// Runs `body` with a subscriber that collects every log line of this thread.
fn capture_logs<T>(body: impl FnOnce() -> T) -> (String, T) {
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("sink").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let out = tracing::subscriber::with_default(subscriber, body);
    let text = String::from_utf8_lossy(&sink.0.lock().expect("sink")).into_owned();
    (text, out)
}

fn wait_for(what: &str, done: impl FnMut() -> bool) {
    common::wait_for(what, Duration::from_secs(30), done);
}

fn the_loop_waits_a_full_interval_after_each_pass(kind: Kind) {
    let Some(env) = env(kind) else { return };
    fill_eligible(&env, SPEC, 3);
    let config = PurgeConfig {
        interval: Duration::from_secs(600),
        ..enabled()
    };
    let running = purger(&env, &[SPEC], config).start().expect("start");
    wait_for("the first pass", || running.passes() == 1);
    assert_eq!(env.count(SPEC), 0, "the first pass runs at start");
    env.fill(SPEC, "new", 2, |_| Some(env.now() - ms(2 * HOUR)));
    env.clock
        .advance(Duration::from_secs(600) - Duration::from_millis(1));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(running.passes(), 1, "not before a full interval");
    env.clock.advance(Duration::from_millis(1));
    wait_for("the second pass", || running.passes() == 2);
    assert_eq!(env.count(SPEC), 0);
    running.stop().expect("stop");
}

fn starting_twice_with_one_lock_runs_one_loop(kind: Kind) {
    let Some(env) = env(kind) else { return };
    let passes = Arc::new(AtomicUsize::new(0));
    let counter = |passes: &Arc<AtomicUsize>| {
        let passes = Arc::clone(passes);
        move |_: &str, _: u64, _: Option<&Error>| {
            passes.fetch_add(1, Ordering::SeqCst);
        }
    };
    let a = purger(&env, &[SPEC], enabled()).on_purge(counter(&passes));
    let b = purger(&env, &[SPEC], enabled()).on_purge(counter(&passes));
    let first = a.start().expect("start");
    let second = b.start().expect("start again");
    let third = a.start().expect("and again");
    for round in 1..=3 {
        wait_for("a pass", || first.passes() == round);
        assert_eq!(second.passes(), round, "the handles share one loop");
        assert_eq!(
            passes.load(Ordering::SeqCst),
            usize::try_from(round).expect("small")
        );
        env.clock.advance(HOUR);
    }
    first.stop().expect("stop");
    third.stop().expect("stop");
    env.clock.advance(HOUR);
    wait_for("the fourth pass", || second.passes() == 4);
    second.stop().expect("the last handle stops the loop");
    env.clock.advance(HOUR);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        passes.load(Ordering::SeqCst),
        4,
        "no pass after the last stop"
    );
}

fn a_panic_in_a_pass_is_caught_and_the_loop_goes_on(kind: Kind) {
    let Some(env) = env(kind) else { return };
    fill_eligible(&env, SPEC, 4);
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let p = purger(&env, &[SPEC], enabled()).on_purge(move |_, _, _| {
        assert!(
            seen.fetch_add(1, Ordering::SeqCst) > 0,
            "planted panic in the first pass"
        );
    });
    let running = p.start().expect("start");
    wait_for("the first pass", || running.passes() == 1);
    wait_for("the lock to be free", || {
        env.lock_is_free(&env.lock("test_lock"))
    });
    fill_eligible(&env, SPEC, 2);
    env.clock.advance(HOUR);
    wait_for("the pass after the panic", || running.passes() == 2);
    assert_eq!(env.count(SPEC), 0);
    running.stop().expect("stop");
}

fn the_table_list_is_asked_for_at_every_pass(kind: Kind) {
    let Some(env) = env(kind) else { return };
    env.create_table("extra");
    fill_eligible(&env, "extra", 5);
    let asked = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&asked);
    let p = env.purger_with(
        &env.lock("test_lock"),
        move || {
            let n = count.fetch_add(1, Ordering::SeqCst);
            if n == 0 {
                vec![SPEC.to_owned()]
            } else {
                vec!["extra".to_owned()]
            }
        },
        enabled(),
    );
    assert_eq!(p.run_pass().expect("pass").purged(), 0);
    assert_eq!(p.run_pass().expect("pass").purged(), 5);
    assert_eq!(asked.load(Ordering::SeqCst), 2);
}

fn stopping_the_loop_from_its_own_callback_returns(kind: Kind) {
    let Some(env) = env(kind) else { return };
    fill_eligible(&env, SPEC, 3);
    let handle: Arc<Mutex<Option<cairn_purger::Running>>> = Arc::default();
    let (stopped, calls, armed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let (slot, flag, count) = (
        Arc::clone(&handle),
        Arc::clone(&stopped),
        Arc::clone(&calls),
    );
    let list_armed = Arc::clone(&armed);
    // The second table joins the list once the handle is in place, so the pass that stops
    // is one that has a table after the stop.
    let list = move || {
        let mut list = vec![SPEC.to_owned()];
        if list_armed.load(Ordering::SeqCst) {
            list.push(REPLICA.to_owned());
        }
        list
    };
    let p = env
        .purger_with(&env.lock("test_lock"), list, enabled())
        .on_purge(move |_, _, _| {
            count.fetch_add(1, Ordering::SeqCst);
            // Taking the handle out first: the lock guarding it is not held across the stop.
            let running = slot.lock().expect("slot").take();
            if let Some(running) = running {
                running.stop().expect("stop from inside the loop");
                flag.store(true, Ordering::SeqCst);
            }
        });
    let running = p.start().expect("start");
    wait_for("the first pass", || calls.load(Ordering::SeqCst) >= 1);
    fill_eligible(&env, REPLICA, 3);
    *handle.lock().expect("slot") = Some(running);
    armed.store(true, Ordering::SeqCst);
    env.clock.advance(HOUR);
    wait_for("the stop from the callback", || {
        stopped.load(Ordering::SeqCst)
    });
    assert_eq!(env.count(SPEC), 0);
    // The pass that was stopped ends before its next table.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(env.count(REPLICA), 3, "purged after the stop");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "no table ran after the stop"
    );
}

/// The embedded tables only: a server's unique index led by `deleted_at` serves the purge's
/// range select as well as any other, but the embedded unique index's entries do not end in
/// row ids.
#[test]
fn a_unique_index_led_by_deleted_at_is_not_taken_for_the_purge_index() {
    let f = Fixture::new();
    let t = f
        .tables
        .create_table(
            Schema::new("u")
                .column("name", ColumnType::Text)
                .unique("uk_deleted_name", &["deleted_at", "name"])
                .soft_delete(),
        )
        .expect("create");
    let at = f.now() - ms(2 * HOUR);
    fill(&t, "old", 10, |_| Some(at));
    let list = || vec!["u".to_owned()];
    let report = Purger::new(f.tables.clone(), "test_lock", list, enabled())
        .run_pass()
        .expect("pass");
    let table = only_table(&report);
    assert!(
        table.full_scan,
        "a unique index's entries do not end in row ids"
    );
    assert_eq!(table.purged, 10);
}
