//! The crashes beyond one node's: the whole cluster's power cut at once, and a node crashed
//! while it installs a snapshot. Each is followed by the checks that would see what it broke.

use std::time::{Duration, Instant};

use cairn_raft::client;
use rand::Rng;

use super::{CATCH_UP, Crash, Run};

impl Run<'_> {
    /// Cuts every node's power at once (a building losing power), starts them all again, and
    /// checks that the cluster kept every acknowledged write: the new leader's log reaches the
    /// last acknowledged entry, and every replica's data is judged.
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
        let Some(log_end) = self.elected_log_end().await else {
            let expected = "a leader elected";
            self.fail("no catch-up", None, "", expected, "none in 30 s", what);
            return;
        };
        if log_end < self.last_acked {
            let expected = format!("a log through index {} (acknowledged)", self.last_acked);
            let observed = format!("the new leader's log ends at {log_end}");
            self.fail("lost write", None, "", &expected, &observed, what);
            // The replicas are judged key by key from where the log is.
            self.last_acked = log_end;
        }
        for id in ids {
            self.check_replica(id, what).await;
        }
    }

    /// Where the log of a newly elected leader ends, once one is.
    async fn elected_log_end(&self) -> Option<u64> {
        let started = Instant::now();
        while started.elapsed() < CATCH_UP {
            if let Some(leader) = self.leader().await
                && let Some(node) = self.nodes.get(leader)
                && let Ok(status) = client::status(&node.addr, Duration::from_secs(1)).await
                && status.state == "Leader"
            {
                return Some(status.last_log.unwrap_or(0));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
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
        let how = self.draw_crash();
        if let Err(e) = self.crash(&[id], how) {
            self.fail("kill failed", Some(id), "", "", &e.to_string(), "a fault");
            return false;
        }
        self.report.crashes_while_installing += 1;
        tracing::info!("{} node {id} while it installed a snapshot", how.done());
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.restart(id)
    }
}
