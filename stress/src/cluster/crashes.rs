//! The crashes beyond one node's: the whole cluster's power cut at once, and a node crashed
//! while it installs a snapshot. Each is followed by the checks that would see what it broke.

use std::time::{Duration, Instant};

use cairn_raft::client::{self, Client};
use rand::Rng;

use super::model::Possible;
use super::{CATCH_UP, Crash, Run};

impl Run<'_> {
    /// Cuts every node's power at once (a building losing power), starts them all again, and
    /// checks that the cluster kept every acknowledged write: the first write acknowledged
    /// after it must be placed past the last acknowledged before it (a cluster that lost
    /// acknowledged entries hands their indexes out again), then every replica is judged.
    pub(super) async fn cluster_crash(&mut self) {
        let ids: Vec<u64> = self
            .nodes
            .procs
            .iter()
            .filter(|n| n.is_up())
            .map(|n| n.id)
            .collect();
        if let Err(e) = self.crash(&ids, Crash::PowerCut) {
            self.fail("kill failed", None, "", "", &e.to_string(), "a fault");
            return;
        }
        self.report.cluster_crashes += 1;
        tracing::info!("cut the power of every node");
        for &id in &ids {
            if !self.restart(id) {
                return;
            }
        }
        let what = "after the cluster's power cut";
        let before = self.last_acked;
        let Some(index) = self.first_write_after().await else {
            let expected = "a write acknowledged";
            self.fail("no catch-up", None, "", expected, "none in 30 s", what);
            return;
        };
        // The leader's log holds every acknowledged entry, so the first write it acknowledges
        // goes after them. Not necessarily after a blank entry too: a node that led before the
        // cut can lead again in its old term without one (seen: an honest run placed it at
        // `before + 1`).
        if index <= before {
            let expected =
                format!("a new write placed after index {before}, the last acknowledged");
            let observed = format!("placed at {index}: acknowledged entries are gone");
            self.fail("lost write", None, "", &expected, &observed, what);
            // The replicas are judged key by key from where the log is now.
            self.last_acked = index;
        }
        for id in ids {
            self.check_replica(id, what).await;
        }
    }

    /// Puts random keys through a client of its own, each judged into the model like any
    /// other write, until one is acknowledged (within 30 s); its index.
    async fn first_write_after(&mut self) -> Option<u64> {
        let mut client = Client::new(self.nodes.addrs())
            .ok()?
            .deadline(Duration::from_secs(10))
            .attempt_timeout(Duration::from_secs(2));
        let started = Instant::now();
        while started.elapsed() < CATCH_UP {
            self.report.ops += 1;
            let key = self.key();
            let value = format!("s{}:{}", self.config.seed, self.report.ops).into_bytes();
            let written = client.put(&key, &value).await;
            let index = written.as_ref().ok().copied();
            let state = Possible {
                value: Some(value),
                expires_at_ms: None,
            };
            self.settle(&key, state, written);
            if index.is_some() {
                return index;
            }
        }
        None
    }

    /// Watches node `id` catch up after a restart and crashes it (a kill or a power cut) at a
    /// random moment of the snapshot install it is seen in, then starts it again. False when it did not
    /// come back (a failure is recorded).
    pub(super) async fn crash_while_installing(&mut self, id: u64) -> bool {
        let Some(addr) = self.nodes.get(id).map(|n| n.addr.clone()) else {
            return false;
        };
        // The leader's newest snapshot: an older one a stalled stream delivers first is
        // replaced by it at once, and whatever a crash in its install left with it.
        let newest = self.leader_snapshot().await;
        let started = Instant::now();
        let installing = loop {
            match client::status(&addr, Duration::from_millis(500)).await {
                Ok(status) if status.installing.is_some_and(|i| Some(i) >= newest) => break true,
                Ok(status) if status.last_applied >= Some(self.last_acked) => break false,
                _ if started.elapsed() > CATCH_UP => break false,
                _ => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        };
        if !installing {
            return true;
        }
        // At a random moment of the install: its steps are `install_pause` apart.
        let within = self.config.install_pause + Duration::from_millis(50);
        let at = self.rng.random_range(Duration::ZERO..within);
        tokio::time::sleep(at).await;
        // Counted only when it is still installing just before: the crash may come after.
        let still = client::status(&addr, Duration::from_millis(500))
            .await
            .is_ok_and(|status| status.installing.is_some());
        let how = self.draw_crash();
        if let Err(e) = self.crash(&[id], how) {
            self.fail("kill failed", Some(id), "", "", &e.to_string(), "a fault");
            return false;
        }
        if still {
            self.report.crashes_while_installing += 1;
        }
        tracing::info!("{} node {id} during its snapshot install", how.done());
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.restart(id)
    }
}
