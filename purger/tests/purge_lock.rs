//! The advisory lock: one replica per tick, leases that expire with a dead holder, and
//! releases only by the holder.

#![allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]

mod common;

use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use cairn_purger::{CUBEMASTER_LOCK, CUBEOPS_LOCK, Error, PassReport, Purger};
use common::{Fixture, HOUR, create_cube_tables, enabled, fill, ms};

const SPEC: &str = "t_cube_sandbox_spec";

fn fill_eligible(f: &Fixture, n: u64) {
    let t = f.tables.table(SPEC).expect("table");
    let at = f.now() - ms(2 * HOUR);
    fill(&t, "old", n, |_| Some(at));
}

fn replica(f: &Fixture, name: &str) -> Purger {
    Purger::new(
        f.tables.clone(),
        CUBEMASTER_LOCK,
        || vec![SPEC.to_owned()],
        enabled(),
    )
    .holder(name)
}

#[test]
fn release_by_a_non_holder_is_an_error() {
    let f = Fixture::new();
    let lock = f.tables.advisory_lock(CUBEMASTER_LOCK);
    let free = lock.release("a");
    assert!(matches!(&free, Err(Error::LockNotHeld { .. })), "{free:?}");
    assert!(lock.try_acquire("a", HOUR).expect("acquire"));
    let err = lock.release("b").expect_err("b does not hold it");
    assert!(
        err.to_string()
            .contains("current session did not hold lock"),
        "{err}"
    );
    assert_eq!(
        lock.holder().expect("holder").map(|l| l.holder),
        Some("a".to_owned())
    );
    lock.release("a").expect("the holder releases");
    assert_eq!(lock.holder().expect("holder"), None);
    let other = f.tables.advisory_lock(CUBEOPS_LOCK);
    assert!(lock.try_acquire("a", HOUR).expect("acquire"));
    assert!(
        other
            .try_acquire("b", HOUR)
            .expect("locks of other names are independent")
    );
}

#[test]
fn a_dead_holders_lease_expires_and_another_takes_over() {
    let f = Fixture::new();
    create_cube_tables(&f.tables);
    fill_eligible(&f, 10);
    let lease = Duration::from_secs(300);
    // Replica A takes the lock and dies without releasing it.
    let lock = f.tables.advisory_lock(CUBEMASTER_LOCK);
    assert!(lock.try_acquire("replica-a", lease).expect("acquire"));
    let b = replica(&f, "replica-b").lease(lease);
    assert!(b.run_pass().expect("pass").skipped, "A's lease still runs");
    f.clock.advance(Duration::from_millis(299_999));
    assert!(
        b.run_pass().expect("pass").skipped,
        "one millisecond before it ends"
    );
    f.clock.advance(Duration::from_millis(1));
    let report = b.run_pass().expect("pass");
    assert!(!report.skipped);
    assert_eq!(report.purged(), 10, "B took over once A's lease ran out");
    let late = lock.release("replica-a");
    assert!(matches!(late, Err(Error::LockNotHeld { .. })), "{late:?}");
}

#[test]
fn two_purgers_at_one_tick_purge_once() {
    let f = Fixture::new();
    create_cube_tables(&f.tables);
    fill_eligible(&f, 100);
    // B tries while A's pass is in the middle (from A's callback): B must skip.
    let b = replica(&f, "replica-b");
    let b_report: Arc<Mutex<Option<PassReport>>> = Arc::default();
    let slot = Arc::clone(&b_report);
    let a = replica(&f, "replica-a").on_purge(move |_, _, _| {
        *slot.lock().expect("slot") = Some(b.run_pass().expect("B's pass"));
    });
    let a_report = a.run_pass().expect("A's pass");
    assert_eq!(a_report.purged(), 100);
    let b_report = b_report.lock().expect("slot").take().expect("B ran");
    assert!(
        b_report.skipped && b_report.tables.is_empty(),
        "{b_report:?}"
    );
}

#[test]
fn racing_replicas_never_purge_side_by_side() {
    let f = Fixture::new();
    create_cube_tables(&f.tables);
    for _ in 0..10 {
        fill_eligible(&f, 50);
        let barrier = Barrier::new(4);
        let reports: Vec<PassReport> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|i| {
                    let name = format!("replica-{i}");
                    let lock = f.tables.advisory_lock(CUBEMASTER_LOCK);
                    // Mid-pass, the lock must name this replica and nobody else.
                    let p = replica(&f, &name).on_purge(move |_, _, _| {
                        let holder = lock.holder().expect("holder").expect("held mid-pass");
                        assert!(
                            holder.holder.starts_with(&name),
                            "{holder:?} while {name} purges"
                        );
                        std::thread::sleep(Duration::from_millis(20));
                    });
                    let barrier = &barrier;
                    s.spawn(move || {
                        barrier.wait();
                        p.run_pass().expect("pass")
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("thread"))
                .collect()
        });
        let purging = reports.iter().filter(|r| r.purged() > 0).count();
        assert_eq!(purging, 1, "exactly one replica purges: {reports:?}");
        let total: u64 = reports.iter().map(PassReport::purged).sum();
        assert_eq!(total, 50);
    }
}

#[test]
fn two_passes_of_one_purger_exclude_each_other() {
    let f = Fixture::new();
    create_cube_tables(&f.tables);
    fill_eligible(&f, 10);
    let twin: Arc<Mutex<Option<Purger>>> = Arc::default();
    let inner: Arc<Mutex<Option<PassReport>>> = Arc::default();
    let (slot, out) = (Arc::clone(&twin), Arc::clone(&inner));
    let p = replica(&f, "same-name").on_purge(move |_, _, _| {
        let twin = slot.lock().expect("twin").take();
        if let Some(twin) = twin {
            *out.lock().expect("out") = Some(twin.run_pass().expect("pass"));
        }
    });
    *twin.lock().expect("twin") = Some(p.clone());
    assert_eq!(p.run_pass().expect("pass").purged(), 10);
    let inner = inner.lock().expect("out").take().expect("the clone ran");
    assert!(
        inner.skipped,
        "a clone's pass, under the same holder name, must skip: {inner:?}"
    );
    let other = replica(&f, "same-name");
    let lock = f.tables.advisory_lock(CUBEMASTER_LOCK);
    assert!(lock.try_acquire("someone", HOUR).expect("acquire"));
    assert!(other.run_pass().expect("pass").skipped);
}

#[test]
fn a_zero_lease_is_refused() {
    let f = Fixture::new();
    let lock = f.tables.advisory_lock(CUBEMASTER_LOCK);
    let zero = lock.try_acquire("a", Duration::ZERO);
    assert!(matches!(zero, Err(Error::InvalidArgument(_))), "{zero:?}");
    let empty = lock.try_acquire("", HOUR);
    assert!(matches!(empty, Err(Error::InvalidArgument(_))), "{empty:?}");
}
