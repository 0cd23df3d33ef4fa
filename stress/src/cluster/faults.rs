//! The run's faults: which node goes down (SIGKILL or a power cut), is paused (SIGSTOP) or
//! stays down past the grace period, and how it comes back (the others compacting first when
//! it was down past the grace period), each recovery followed by a check of the node's data.

use std::time::{Duration, Instant};

use cairn_raft::client;
use cairn_raft::wire::{ClientCall, ClientReply, NodeStatus};
use rand::Rng;

use super::{CATCH_UP, Crash, Down, FaultKind, PAUSE_CAP, Run, now_ms, text};

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

    /// One fault, drawn by weight among those the run injects: a node killed (the leader more
    /// often than not) or its power cut, the leader paused, a follower down past the grace
    /// period, or the whole cluster's power cut.
    pub(super) async fn fault(&mut self) {
        let leader = self.leader().await;
        let count = self.config.nodes;
        let random = u64::try_from(self.rng.random_range(1..=count)).unwrap_or(1);
        let follower = (1..=u64::try_from(count).unwrap_or(3))
            .filter(|id| Some(*id) != leader)
            .nth(self.rng.random_range(0..count - 1));
        let kind = self.draw_fault(leader.is_some());
        match (kind, leader, follower) {
            (FaultKind::PastGrace, _, Some(follower)) => {
                let how = self.draw_crash();
                self.take_down(follower, how, true).await;
            }
            (FaultKind::Pause, Some(leader), _) => {
                let until = Instant::now() + self.config.election_min * 3;
                match self.nodes.pause(leader, true) {
                    Ok(()) => {
                        self.report.pauses += 1;
                        tracing::info!("paused the leader, node {leader}");
                        self.paused = Some((leader, until));
                    }
                    Err(e) => {
                        let why = e.to_string();
                        self.fail("pause failed", Some(leader), "", "", &why, "a fault");
                    }
                }
            }
            // No leader to pause, or no follower: this fault waits for the next draw.
            (FaultKind::Pause | FaultKind::PastGrace, _, _) => {}
            (FaultKind::ClusterCrash, _, _) => self.cluster_crash().await,
            (kind @ (FaultKind::Kill | FaultKind::PowerCut), leader, _) => {
                let how = if kind == FaultKind::PowerCut {
                    Crash::PowerCut
                } else {
                    Crash::Kill
                };
                let id = match leader {
                    Some(leader) if self.rng.random_bool(0.6) => {
                        self.report.leader_kills += 1;
                        leader
                    }
                    _ => random,
                };
                // Half the time in the middle of the next put: its answer may be lost.
                if self.rng.random_bool(0.5) {
                    self.crash_in_flight = Some((id, how));
                } else {
                    self.take_down(id, how, false).await;
                }
            }
        }
    }

    /// The kind of the next fault: each kind the run injects once, the leader's pause first
    /// (so even a short run probes a deposed leader's reads), then drawn by weight.
    fn draw_fault(&mut self, leader_known: bool) -> FaultKind {
        // Each kind once first, a pause first, so that a short run meets every kind it asks for.
        if let Some(at) = self
            .undrawn
            .iter()
            .position(|k| leader_known || *k != FaultKind::Pause)
        {
            return self.undrawn.remove(at);
        }
        let kinds = &self.config.faults;
        let total: u32 = kinds.iter().map(|k| k.weight()).sum();
        let mut roll = self.rng.random_range(0..total.max(1));
        for &kind in kinds {
            if roll < kind.weight() {
                return kind;
            }
            roll -= kind.weight();
        }
        FaultKind::Kill
    }

    /// How a node goes down: its power cut where power cuts are injected, one time in two.
    pub(super) fn draw_crash(&mut self) -> Crash {
        if self.config.faults.contains(&FaultKind::PowerCut) && self.rng.random_bool(0.5) {
            Crash::PowerCut
        } else {
            Crash::Kill
        }
    }

    pub(super) async fn take_down(&mut self, id: u64, how: Crash, past_grace: bool) {
        let log_before = self.log_end(id).await;
        self.crash_down(id, how, past_grace, log_before);
    }

    /// Where node `id`'s log ends, if it answers.
    pub(super) async fn log_end(&self, id: u64) -> Option<u64> {
        self.status_of(id).await?.last_log
    }

    /// Crashes node `id` now and keeps it down for a while (past the grace period, or 0.2 to
    /// 1.5 s); `log_before` is where its log ended.
    pub(super) fn crash_down(
        &mut self,
        id: u64,
        how: Crash,
        past_grace: bool,
        log_before: Option<u64>,
    ) {
        if let Err(e) = self.crash(&[id], how) {
            self.fail("kill failed", Some(id), "", "", &e.to_string(), "a fault");
            return;
        }
        let down_for = if past_grace {
            self.report.behind_past_grace += 1;
            self.config.grace * 2 + Duration::from_millis(500)
        } else {
            Duration::from_millis(self.rng.random_range(200..1500))
        };
        tracing::info!(
            "{} node {id}{}",
            how.done(),
            if past_grace { " (past grace)" } else { "" }
        );
        self.down = Some(Down {
            id,
            until: Instant::now() + down_for,
            past_grace,
            log_before,
        });
    }

    /// Crashes the nodes `ids` at once, and counts them.
    pub(super) fn crash(&mut self, ids: &[u64], how: Crash) -> std::io::Result<()> {
        match how {
            Crash::Kill => {
                for &id in ids {
                    self.nodes.kill(id)?;
                }
            }
            Crash::PowerCut => {
                self.nodes.cut_power(ids)?;
                self.report.power_cuts += ids.len() as u64;
            }
        }
        self.report.kills += ids.len() as u64;
        Ok(())
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
        if down.past_grace {
            self.leader_snapshot_settled().await;
        }
        let purged = self.leader_purged().await;
        if !self.restart(down.id) {
            return;
        }
        // The leader no longer has the entry after the node's last: it must send a snapshot.
        if let (Some(purged), Some(last)) = (purged, down.log_before)
            && purged > last
        {
            self.report.snapshot_catch_ups += 1;
            // Half the time, the node crashes again in the middle of installing it.
            if self.rng.random_bool(0.5) && !self.crash_while_installing(down.id).await {
                return;
            }
        }
        self.check_replica(down.id, "after its recovery").await;
    }

    /// Starts node `id` again; false (and a failure) if it does not come up.
    pub(super) fn restart(&mut self, id: u64) -> bool {
        match self.nodes.start(id) {
            Ok(()) => true,
            Err(e) => {
                let why = e.to_string();
                self.fail("restart failed", Some(id), "", "", &why, "a recovery");
                false
            }
        }
    }

    /// Waits (up to 5 s) until the leader has built the snapshots its log calls for, so the
    /// snapshot a returning node is sent stays the newest while it installs: a newer one would
    /// replace whatever a crash in the install left, and hide it.
    async fn leader_snapshot_settled(&self) {
        let every = self.config.snapshot_every;
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(5) {
            if let Some(status) = self.leader_status().await
                && let Some(applied) = status.last_applied
                && status
                    .snapshot
                    .map_or(applied + 1 < every, |s| applied < s + every)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tracing::warn!("the leader's snapshots did not settle in 5 s; the node returns anyway");
    }

    pub(super) async fn leader_purged(&self) -> Option<u64> {
        self.leader_status().await?.purged
    }

    /// The index the leader's newest snapshot covers.
    pub(super) async fn leader_snapshot(&self) -> Option<u64> {
        self.leader_status().await?.snapshot
    }

    async fn leader_status(&self) -> Option<NodeStatus> {
        self.status_of(self.leader().await?).await
    }

    /// What node `id` says of itself, if it answers within a second.
    async fn status_of(&self, id: u64) -> Option<NodeStatus> {
        let node = self.nodes.get(id)?;
        client::status(&node.addr, Duration::from_secs(1))
            .await
            .ok()
    }
}
