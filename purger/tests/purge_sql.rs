//! What only a server shows: a second connection resurrecting rows with `UPDATE … SET
//! deleted_at = NULL` while passes purge, an operator killing the lock holder's connection, a
//! pass stuck behind a row lock until its timeout, and a server that is down. Each runs against
//! MySQL/MariaDB and PostgreSQL (`CAIRN_MYSQL_URL`, `CAIRN_PG_URL`); the down server needs
//! neither.

#![allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use cairn_purger::{
    DeleteTally, Error, PassTime, PurgeBackend, PurgeConfig, PurgeSession, Purger, SqlBackend,
    TableShape, TimeZone,
};
use common::env::{Env, Kind};
use common::sql::SqlClient;
use common::{HOUR, enabled, ms, seeds};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const SPEC: &str = "t_cube_sandbox_spec";
const REPLICA: &str = "t_cube_template_replica";

on_both_servers!(
    resurrected_rows_survive_racing_passes,
    killing_the_lock_holders_connection_frees_the_lock,
    a_pass_stuck_behind_a_row_lock_times_out_and_frees_the_lock,
);

const RACE_ROWS: u64 = 12_000;

/// A second connection clears `deleted_at` on random eligible rows (and now and then
/// soft-deletes one again, at a time past the cutoff) while passes purge. No row it
/// resurrected is gone; every row it never touched is gone; the passes' counts add up.
fn resurrected_rows_survive_racing_passes(kind: Kind) {
    for seed in seeds(1) {
        eprintln!("{kind:?} resurrection race: seed {seed} (replay with CAIRN_SEED={seed})");
        let Some(env) = Env::new(kind, true) else {
            return;
        };
        race(&env, seed);
    }
}

struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn race(env: &Env, seed: u64) {
    let sql = env.sql().expect("a server");
    let base = env.now() - ms(2 * HOUR) - RACE_ROWS;
    let ids = env.fill(SPEC, "row", RACE_ROWS, |i| Some(base + i));
    let racer = SqlClient::connect(&sql.url).expect("a second connection");
    let stop = AtomicBool::new(false);
    let touched = Mutex::new(HashSet::new());
    let commits = Arc::new(AtomicUsize::new(0));
    let paced = Paced {
        inner: sql.backend().clone(),
        touches: Arc::clone(&commits),
    };
    let list = vec![SPEC.to_owned()];
    let p = Purger::new(paced, &env.lock("race"), move || list.clone(), enabled());
    let mut purged = 0;
    let mut kept = 0;
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut rng = SmallRng::seed_from_u64(seed);
            let t = racer.quote(SPEC);
            let later = racer.timestamp(env.now());
            let cutoff = racer.timestamp(env.now() - ms(HOUR));
            let mut frontier = 0;
            for n in 0.. {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                // Aim at the rows the purger selects next: the oldest eligible ones.
                if n % 20 == 0 {
                    let first = format!(
                        "SELECT MIN(id) FROM {t} WHERE deleted_at IS NOT NULL \
                         AND deleted_at < {cutoff}"
                    );
                    let Some(first) = racer.opt_int(&first) else {
                        break;
                    };
                    let first = u64::try_from(first).expect("id");
                    frontier = ids.partition_point(|&id| id < first);
                }
                let window = (ids.len() - frontier.min(ids.len())).min(800);
                if window == 0 {
                    break;
                }
                let id = ids[frontier + rng.random_range(0..window)];
                let set = if rng.random_ratio(1, 4) {
                    later.clone()
                } else {
                    "NULL".to_owned()
                };
                let sql = format!(
                    "UPDATE {t} SET deleted_at = {set} WHERE id = {id} AND deleted_at < {later}"
                );
                // Recorded only once committed (autocommit): from then on the row is live
                // or soft-deleted past the cutoff, never eligible again.
                if racer.exec(&sql) == 1 {
                    touched.lock().expect("touched").insert(id);
                    commits.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        // Stops the racer however the passes end: a panic here would otherwise wait forever
        // for the racer's thread.
        let _stop = StopOnDrop(&stop);
        for _ in 0..4 {
            let report = p.run_pass().expect("pass");
            purged += report.purged();
            // Selected, then resurrected before the delete: the re-check kept them.
            kept += report
                .tables
                .iter()
                .map(|t| t.selected.saturating_sub(t.purged))
                .sum::<u64>();
        }
    });
    let touched = touched.into_inner().expect("touched");
    assert!(
        touched.len() > 20,
        "seed {seed}: the race resurrected only {} rows",
        touched.len()
    );
    let mut gone = 0;
    for &id in &ids {
        let exists = env.exists(SPEC, id);
        if touched.contains(&id) {
            assert!(exists, "seed {seed}: row {id} was resurrected, then purged");
        } else {
            assert!(
                !exists,
                "seed {seed}: row {id} stayed eligible yet was not purged"
            );
            gone += 1;
        }
    }
    assert_eq!(
        purged, gone,
        "seed {seed}: the passes' counts match the rows gone"
    );
    assert!(
        kept > 0,
        "seed {seed}: no row was resurrected between a select and its delete"
    );
    eprintln!(
        "seed {seed}: {} rows resurrected or re-deleted during the passes ({kept} between a \
         select and its delete), {gone} purged",
        touched.len()
    );
}

/// The real SQL backend, except that each batch's delete first waits (at most a second) until
/// the racer has committed a few more updates since the batch's select. However fast the
/// server deletes, those updates land between a batch's select and its delete, where only the
/// delete's re-check keeps a resurrected row.
struct Paced {
    inner: SqlBackend,
    touches: Arc<AtomicUsize>,
}

/// Racer commits each batch waits for.
const TOUCHES_PER_BATCH: usize = 3;

impl PurgeBackend for Paced {
    fn identity(&self) -> String {
        self.inner.identity()
    }

    fn now_ms(&self) -> u64 {
        self.inner.now_ms()
    }

    fn begin_pass(
        &self,
        name: &str,
        holder: &str,
        lease: Duration,
    ) -> cairn_purger::Result<Option<Box<dyn PurgeSession + '_>>> {
        let Some(inner) = self.inner.begin_pass(name, holder, lease)? else {
            return Ok(None);
        };
        Ok(Some(Box::new(PacedSession {
            inner,
            touches: &self.touches,
            seen: self.touches.load(Ordering::SeqCst),
        })))
    }
}

struct PacedSession<'a> {
    inner: Box<dyn PurgeSession + 'a>,
    touches: &'a AtomicUsize,
    seen: usize,
}

impl PurgeSession for PacedSession<'_> {
    fn renew(&mut self) -> cairn_purger::Result<()> {
        self.inner.renew()
    }

    fn pass_time(&mut self) -> cairn_purger::Result<PassTime> {
        self.inner.pass_time()
    }

    fn open_table(
        &mut self,
        table: &str,
        zone: Option<TimeZone>,
    ) -> cairn_purger::Result<TableShape> {
        self.inner.open_table(table, zone)
    }

    fn select(&mut self, cutoff_ms: u64, want: u64) -> cairn_purger::Result<Vec<u64>> {
        let ids = self.inner.select(cutoff_ms, want);
        self.seen = self.touches.load(Ordering::SeqCst);
        ids
    }

    fn count(&mut self, cutoff_ms: u64) -> cairn_purger::Result<u64> {
        self.inner.count(cutoff_ms)
    }

    fn delete(
        &mut self,
        ids: &[u64],
        cutoff_ms: u64,
        stop: &dyn Fn() -> bool,
        tally: &mut DeleteTally,
    ) -> cairn_purger::Result<()> {
        let want = self.seen + TOUCHES_PER_BATCH;
        let deadline = Instant::now() + Duration::from_secs(1);
        while self.touches.load(Ordering::SeqCst) < want && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.inner.delete(ids, cutoff_ms, stop, tally)
    }

    fn finish(self: Box<Self>) -> cairn_purger::Result<()> {
        self.inner.finish()
    }
}

/// A purger holds the lock mid-pass (its callback waits after the first table); another
/// skips. An operator kills the holder's connection: the server frees the lock, the other
/// purger's pass runs and purges, and the holder's next table fails instead of purging
/// without the lock.
fn killing_the_lock_holders_connection_frees_the_lock(kind: Kind) {
    let Some(env) = Env::new(kind, true) else {
        return;
    };
    let sql = env.sql().expect("a server");
    let at = env.now() - ms(2 * HOUR);
    env.fill(SPEC, "a", 10, |_| Some(at));
    env.fill(REPLICA, "b", 10, |_| Some(at));
    let lock = env.lock("kill");
    let (reached_tx, reached) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    let (reached_tx, go_rx) = (Mutex::new(reached_tx), Mutex::new(go_rx));
    let first_table = AtomicBool::new(true);
    let holder = env
        .purger(&lock, vec![SPEC.to_owned(), REPLICA.to_owned()], enabled())
        .on_purge(move |_, _, _| {
            if first_table.swap(false, Ordering::SeqCst) {
                let _ = reached_tx.lock().expect("tx").send(());
                // Bounded, so a failing test ends instead of waiting here for ever.
                let _ = go_rx
                    .lock()
                    .expect("rx")
                    .recv_timeout(Duration::from_secs(30));
            }
        });
    let other = env.purger(&lock, vec![REPLICA.to_owned()], enabled());
    std::thread::scope(|s| {
        let pass = s.spawn(|| holder.run_pass());
        reached
            .recv_timeout(Duration::from_secs(30))
            .expect("the holder's first table");
        assert!(other.run_pass().expect("pass").skipped, "the lock is held");
        let session = sql.client.lock_holder(&lock).expect("a holder");
        sql.client.kill(session);
        wait_until("the server frees the lock", || {
            sql.client.lock_holder(&lock).is_none()
        });
        let report = other.run_pass().expect("pass");
        assert!(!report.skipped, "the lock is free once its session is gone");
        assert_eq!(report.purged(), 10);
        go.send(()).expect("the holder waits");
        let Err(Error::PassFailed { table, report, .. }) = pass.join().expect("no panic") else {
            panic!("the holder's pass must fail once its session is gone");
        };
        assert_eq!(table, REPLICA);
        assert_eq!(
            report.tables[0].purged, 10,
            "its first table ran under the lock"
        );
    });
    assert_eq!((env.count(SPEC), env.count(REPLICA)), (0, 0));
}

/// A session holds a row lock on an eligible row, so the pass's `DELETE` waits on it. The
/// pass times out, and its server session is ended, which frees the advisory lock at once
/// (closing the connection alone would leave the statement waiting and the lock held).
fn a_pass_stuck_behind_a_row_lock_times_out_and_frees_the_lock(kind: Kind) {
    let Some(env) = Env::new(kind, true) else {
        return;
    };
    let sql = env.sql().expect("a server");
    let ids = env.fill(SPEC, "old", 10, |_| Some(env.now() - ms(2 * HOUR)));
    let blocker = SqlClient::connect(&sql.url).expect("a second connection");
    blocker.lock_row(SPEC, ids[3]);
    let backend = sql.backend().clone().pass_timeout(Duration::from_secs(2));
    let lock = env.lock("stuck");
    let p = Purger::new(backend, &lock, move || vec![SPEC.to_owned()], enabled());
    let started = Instant::now();
    let Err(Error::PassFailed { source, .. }) = p.run_pass() else {
        panic!("the pass cannot finish behind the row lock");
    };
    assert!(matches!(*source, Error::PassTimedOut(_)), "{source}");
    assert!(started.elapsed() < Duration::from_secs(30));
    wait_until("the stuck session to end and free the lock", || {
        sql.client.lock_holder(&lock).is_none()
    });
    blocker.exec("ROLLBACK");
    assert_eq!(
        env.count(SPEC),
        10,
        "the batch stuck behind the lock did not land"
    );
}

fn wait_until(what: &str, done: impl FnMut() -> bool) {
    common::wait_for(what, Duration::from_secs(10), done);
}

/// A server that refuses connections: each pass fails after a few attempts, with an error
/// naming the database and never its password, and the loop goes on to its next tick.
#[test]
fn a_server_that_is_down_fails_passes_and_the_loop_goes_on() {
    let clock = Arc::new(cairn::ManualClock::new(common::START_MS));
    let backend = SqlBackend::new("mysql://root:secret@127.0.0.1:1/test")
        .expect("a well-formed URL")
        .clock(Arc::clone(&clock) as Arc<dyn cairn::Clock>);
    let p = Purger::new(backend, "down", || vec![SPEC.to_owned()], enabled());
    let e = p.run_pass().expect_err("nothing listens on port 1");
    let text = e.to_string();
    assert!(
        text.contains("connecting to mysql://127.0.0.1:1/test"),
        "{text}"
    );
    assert!(!text.contains("secret"), "{text}");
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let config = PurgeConfig {
        interval: Duration::from_secs(60),
        ..enabled()
    };
    let running = Purger::new(
        SqlBackend::new("postgres://u:p@127.0.0.1:1/test")
            .expect("URL")
            .clock(Arc::clone(&clock) as Arc<dyn cairn::Clock>),
        "down",
        || vec![SPEC.to_owned()],
        config,
    )
    .on_purge(move |_, _, _| {
        let _ = tx.lock().expect("tx").send(());
    })
    .start()
    .expect("start");
    for pass in 1..=2 {
        let start = Instant::now();
        while running.passes() < pass {
            assert!(start.elapsed() < Duration::from_secs(30), "pass {pass}");
            std::thread::sleep(Duration::from_millis(20));
        }
        clock.advance(Duration::from_secs(60));
    }
    assert!(running.is_running());
    running.stop().expect("stop");
    assert!(rx.try_recv().is_err(), "no table ran without a connection");
}
