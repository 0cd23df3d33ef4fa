//! The run's checks: a read judged against the model, a replica's own data read whole once it
//! has applied the client's last acknowledged write, and the replicas compared at the end.

use std::time::{Duration, Instant};

use cairn_raft::client;
use cairn_raft::wire::{ClientCall, ClientReply, MAX_SCAN};

use super::model::Wrong;
use super::{CATCH_UP, Pairs, Run, now_ms, text};

impl Run<'_> {
    /// Judges a scan from `start` to the end: every pair read, and every key the model has
    /// there that the scan did not return.
    pub(super) fn judge_all(
        &mut self,
        pairs: &[(Vec<u8>, Vec<u8>)],
        (start, end): (&[u8], Option<&[u8]>),
        when: (u64, u64),
        node: Option<u64>,
        what: &str,
    ) {
        let read: std::collections::BTreeMap<&[u8], &[u8]> = pairs
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
            .collect();
        let mut keys: Vec<Vec<u8>> = self
            .model
            .keys()
            .filter(|k| *k >= start && end.is_none_or(|end| *k < end))
            .map(<[u8]>::to_vec)
            .collect();
        keys.extend(read.keys().map(|k| k.to_vec()));
        keys.sort();
        keys.dedup();
        for key in keys {
            let observed = read.get(key.as_slice()).copied();
            self.judge(&key, observed, when, node, what);
        }
    }

    pub(super) fn judge(
        &mut self,
        key: &[u8],
        observed: Option<&[u8]>,
        (from, to): (u64, u64),
        node: Option<u64>,
        what: &str,
    ) {
        if let Some(wrong) = self.model.judge(key, observed, from, to) {
            let kind = match (wrong, node) {
                // A replica missing a newer write: it lost it.
                (Wrong::StaleRead, Some(_)) => Wrong::LostWrite,
                (wrong, _) => wrong,
            };
            let expected = self.model.describe(key);
            let observed = observed.map_or_else(|| "absent".to_owned(), text);
            self.fail(kind.name(), node, &text(key), &expected, &observed, what);
        }
    }

    /// Waits for node `id` to apply the last acknowledged write, then judges all its data.
    pub(super) async fn check_replica(&mut self, id: u64, what: &str) -> Option<Pairs> {
        let addr = self.nodes.get(id)?.addr.clone();
        let started = Instant::now();
        loop {
            let status = client::status(&addr, Duration::from_secs(2)).await;
            if status
                .as_ref()
                .is_ok_and(|s| s.last_applied >= Some(self.last_acked))
            {
                break;
            }
            if started.elapsed() > CATCH_UP {
                let seen = format!("{status:?}");
                let expected = format!("applied {}", self.last_acked);
                self.fail("no catch-up", Some(id), "", &expected, &seen, what);
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let from = now_ms();
        match local_scan_all(&addr).await {
            Ok(pairs) => {
                self.report.replica_checks += 1;
                let to = now_ms();
                self.judge_all(&pairs, (b"", None), (from, to), Some(id), what);
                Some(pairs)
            }
            Err(seen) => {
                self.fail("unreadable replica", Some(id), "", "its data", &seen, what);
                None
            }
        }
    }

    /// Ends every fault, then checks every replica and that they hold the same data.
    pub(super) async fn finish(&mut self) {
        if let Some((id, _)) = self.paused.take() {
            let _ = self.nodes.pause(id, false);
        }
        if let Some(down) = self.down.take() {
            self.bring_back(down).await;
        }
        let ids: Vec<u64> = self.nodes.procs.iter().map(|n| n.id).collect();
        // A write whose answer was lost may be applied after the last acknowledged one: every
        // replica reads at the furthest any has applied, so they are compared at one point.
        for node in &self.nodes.procs {
            if let Ok(status) = client::status(&node.addr, Duration::from_secs(2)).await
                && let Some(applied) = status.last_applied
            {
                self.last_acked = self.last_acked.max(applied);
            }
        }
        let mut replicas = Vec::new();
        let from = now_ms();
        for id in ids {
            if let Some(pairs) = self.check_replica(id, "the end").await {
                replicas.push((id, pairs));
            }
        }
        // A value expiring while the replicas were read may be on some and not others; the
        // rest must be the same everywhere.
        let to = now_ms();
        let lasting = |pairs: &[(Vec<u8>, Vec<u8>)]| -> Pairs {
            pairs
                .iter()
                .filter(|(k, _)| !self.model.may_expire_between(k, from, to))
                .cloned()
                .collect()
        };
        let lasting: Vec<(u64, Pairs)> = replicas
            .iter()
            .map(|(id, pairs)| (*id, lasting(pairs)))
            .collect();
        if let Some((first, reference)) = lasting.first() {
            for (id, pairs) in lasting.iter().skip(1) {
                if let Some(key) = first_difference(reference, pairs) {
                    let expected = format!("what node {first} has");
                    self.fail(
                        "replicas differ",
                        Some(*id),
                        &key,
                        &expected,
                        "other",
                        "the end",
                    );
                }
            }
        }
    }
}

/// Every pair of the replica at `addr`, a page of [`MAX_SCAN`] at a time.
async fn local_scan_all(addr: &str) -> Result<Pairs, String> {
    let mut pairs = Pairs::new();
    let mut start = Vec::new();
    loop {
        let page = ClientCall::LocalScan {
            start: start.clone(),
            end: None,
            limit: MAX_SCAN,
        };
        match client::call_node(addr, page, CATCH_UP).await {
            Ok(ClientReply::Pairs(page)) => {
                let full = page.len() >= MAX_SCAN;
                if let Some((last, _)) = page.last() {
                    start.clone_from(last);
                    start.push(0);
                }
                pairs.extend(page);
                if !full {
                    return Ok(pairs);
                }
            }
            other => return Err(format!("{other:?}")),
        }
    }
}

/// The first key where two replicas' pairs differ, if any.
fn first_difference(a: &[(Vec<u8>, Vec<u8>)], b: &[(Vec<u8>, Vec<u8>)]) -> Option<String> {
    let (mut a, mut b) = (a.iter(), b.iter());
    loop {
        match (a.next(), b.next()) {
            (None, None) => return None,
            (Some(x), Some(y)) if x == y => {}
            (Some((k, _)), None) | (None, Some((k, _))) => return Some(text(k)),
            (Some((x, _)), Some((y, _))) => return Some(text(x.min(y))),
        }
    }
}
