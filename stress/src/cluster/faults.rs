//! The run's faults: which node goes down (SIGKILL), is paused (SIGSTOP) or stays down past
//! the grace period, and how it comes back (the others compacting first when it was down past
//! the grace period), each recovery followed by a check of the node's data.

use std::time::{Duration, Instant};

use cairn_raft::client;
use cairn_raft::wire::{ClientCall, ClientReply};
use rand::Rng;

use super::{CATCH_UP, Down, PAUSE_CAP, Run, now_ms, text};

/// Reads sent to a resumed old leader.
const PROBES: usize = 4;

impl Run<'_> {
    /// The leader as a running, unpaused node sees it.
    pub(super) async fn leader(&self) -> Option<u64> {
        for node in self
            .nodes
            .procs
            .iter()
            .filter(|n| n.is_up() && !n.is_paused())
        {
            if let Ok(status) = client::status(&node.addr, Duration::from_secs(1)).await
                && let Some(leader) = status.leader
            {
                return Some(leader);
            }
        }
        None
    }

    /// One fault: a follower down past the grace period (2 in 10), the leader paused (2 in
    /// 10), or a node killed, the leader more often than not.
    pub(super) async fn fault(&mut self) {
        let leader = self.leader().await;
        let count = self.config.nodes;
        let random = u64::try_from(self.rng.random_range(1..=count)).unwrap_or(1);
        // The first fault with a leader known pauses it, so even a short run probes a deposed
        // leader's reads; later ones are drawn.
        let roll = if self.report.pauses == 0 && leader.is_some() {
            2
        } else {
            self.rng.random_range(0..10)
        };
        let follower = (1..=u64::try_from(count).unwrap_or(3))
            .filter(|id| Some(*id) != leader)
            .nth(self.rng.random_range(0..count - 1));
        match (roll, leader, follower) {
            (0..2, _, Some(follower)) => self.take_down(follower, true).await,
            (2..4, Some(leader), _) => {
                let until = Instant::now() + self.config.election_min * 3;
                if self.nodes.pause(leader, true).is_ok() {
                    self.report.pauses += 1;
                    tracing::info!("paused the leader, node {leader}");
                    self.paused = Some((leader, until));
                }
            }
            (_, Some(leader), _) if self.rng.random_bool(0.6) => {
                self.report.leader_kills += 1;
                self.take_down(leader, false).await;
            }
            _ => self.take_down(random, false).await,
        }
    }

    pub(super) async fn take_down(&mut self, id: u64, past_grace: bool) {
        let log_before = match self.nodes.get(id) {
            Some(node) => client::status(&node.addr, Duration::from_secs(1))
                .await
                .ok()
                .and_then(|s| s.last_log),
            None => None,
        };
        if let Err(e) = self.nodes.kill(id) {
            self.fail("kill failed", Some(id), "", "", &e.to_string(), "a fault");
            return;
        }
        self.report.kills += 1;
        let down_for = if past_grace {
            self.report.behind_past_grace += 1;
            self.config.grace * 2 + Duration::from_millis(500)
        } else {
            Duration::from_millis(self.rng.random_range(200..1500))
        };
        tracing::info!(
            "killed node {id}{}",
            if past_grace { " (past grace)" } else { "" }
        );
        self.down = Some(Down {
            id,
            until: Instant::now() + down_for,
            past_grace,
            log_before,
        });
    }

    pub(super) async fn end_faults_due(&mut self) {
        // A paused leader stays paused until a write was acknowledged without it (or 15 s):
        // then it is asked for that key as it wakes, still believing it leads.
        if let Some((id, until)) = self.paused
            && Instant::now() >= until
            && (!self.written_while_paused.is_empty() || Instant::now() >= until + PAUSE_CAP)
        {
            self.paused = None;
            self.resume_and_probe(id).await;
        }
        if self
            .down
            .as_ref()
            .is_some_and(|d| Instant::now() >= d.until)
            && let Some(down) = self.down.take()
        {
            self.bring_back(down).await;
        }
    }

    /// Sends reads of keys put while node `id` was paused (up to [`PROBES`]) to it before it is
    /// resumed, then resumes it: a deposed leader that serves reads without confirming its leadership
    /// answers with what the key was before (a stale read); a correct one refuses, or answers
    /// only once it has the new value.
    async fn resume_and_probe(&mut self, id: u64) {
        let mut keys = std::mem::take(&mut self.written_while_paused);
        keys.dedup();
        let addr = self
            .nodes
            .get(id)
            .map(|n| n.addr.clone())
            .unwrap_or_default();
        let probes: Vec<_> = keys
            .into_iter()
            .rev()
            .take(PROBES)
            .map(|key| {
                let addr = addr.clone();
                tokio::spawn(async move {
                    let from = now_ms();
                    let call = ClientCall::Get { key: key.clone() };
                    (key, from, client::call_node(&addr, call, CATCH_UP).await)
                })
            })
            .collect();
        // Time for the probes to connect and send; the stopped node's kernel takes both.
        tokio::time::sleep(Duration::from_millis(50)).await;
        if let Err(e) = self.nodes.pause(id, false) {
            self.fail("resume failed", Some(id), "", "", &e.to_string(), "a fault");
            return;
        }
        self.report.deposed_leader_probes += probes.len() as u64;
        for probe in probes {
            let Ok((key, from, answer)) = probe.await else {
                continue;
            };
            tracing::debug!("the resumed old leader, node {id}, answered {answer:?}");
            if let Ok(ClientReply::Value(value)) = answer {
                self.report.deposed_leader_reads += 1;
                let to = now_ms();
                // Whatever is wrong with it, it is the state from before the pause: stale.
                if self.model.judge(&key, value.as_deref(), from, to).is_some() {
                    let expected = self.model.describe(&key);
                    let seen = value.as_deref().map_or_else(|| "absent".to_owned(), text);
                    let what = "a read of the resumed old leader";
                    self.fail("stale read", Some(id), &text(&key), &expected, &seen, what);
                }
            }
        }
    }

    /// Restarts a node that was down; past grace, the others compact first. Then checks it.
    pub(super) async fn bring_back(&mut self, down: Down) {
        if down.past_grace {
            for node in &self.nodes.procs {
                if node.is_up() {
                    let compacted =
                        client::call_node(&node.addr, ClientCall::Compact, CATCH_UP).await;
                    if !matches!(compacted, Ok(ClientReply::Done)) {
                        tracing::warn!("node {} did not compact: {compacted:?}", node.id);
                    }
                }
            }
        }
        let purged = self.leader_purged().await;
        if let Err(e) = self.nodes.start(down.id) {
            self.fail(
                "restart failed",
                Some(down.id),
                "",
                "",
                &e.to_string(),
                "a recovery",
            );
            return;
        }
        // The leader no longer has the entry after the node's last: it must send a snapshot.
        if let (Some(purged), Some(last)) = (purged, down.log_before)
            && purged > last
        {
            self.report.snapshot_catch_ups += 1;
        }
        self.check_replica(down.id, "after its recovery").await;
    }

    pub(super) async fn leader_purged(&self) -> Option<u64> {
        let leader = self.leader().await?;
        let node = self.nodes.get(leader)?;
        client::status(&node.addr, Duration::from_secs(1))
            .await
            .ok()?
            .purged
    }
}
