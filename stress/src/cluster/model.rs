//! The expected state of a replicated cluster written by one client: for each key, every state
//! it may be in. An acknowledged write leaves one; a write whose answer was lost adds its state
//! to those the key had (Raft either commits it before the client's next acknowledged write or
//! never); an acknowledged write after it settles the key again. A value written with a TTL
//! may read as absent from its expiry on, and as present until then, give or take
//! [`CLOCK_SLACK_MS`] for the clocks of the client and the nodes (one machine's).
//!
//! [`Model::judge`] names what is wrong with a value read: a lost write, a resurrected delete,
//! a stale read (a value the key had before its newest possible state) or a wrong value.

use std::collections::BTreeMap;

/// How far a value's expiry may be off between the client's reading of the clock and a
/// node's.
pub const CLOCK_SLACK_MS: u64 = 250;

/// One state a key may be in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Possible {
    /// The value, or none for deleted.
    pub value: Option<Vec<u8>>,
    /// When the value expires (ms since the epoch), if it does.
    pub expires_at_ms: Option<u64>,
}

impl Possible {
    fn allows(&self, observed: Option<&[u8]>, read_from_ms: u64, read_to_ms: u64) -> bool {
        match (&self.value, observed, self.expires_at_ms) {
            (None, None, _) => true,
            (Some(value), Some(seen), None) => value.as_slice() == seen,
            (Some(value), Some(seen), Some(expires)) => {
                value.as_slice() == seen && read_from_ms < expires + CLOCK_SLACK_MS
            }
            (Some(_), None, Some(expires)) => read_to_ms + CLOCK_SLACK_MS >= expires,
            _ => false,
        }
    }
}

/// What a read found wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wrong {
    /// Absent, where every possible state has a live value: an acknowledged write is gone.
    LostWrite,
    /// A value, where the key's only possible state is deleted: a delete came undone.
    ResurrectedDelete,
    /// A value the key had before its newest possible states.
    StaleRead,
    /// A value the key never had at all.
    WrongValue,
}

impl Wrong {
    /// The name the report gives it.
    pub fn name(self) -> &'static str {
        match self {
            Self::LostWrite => "lost write",
            Self::ResurrectedDelete => "resurrected delete",
            Self::StaleRead => "stale read",
            Self::WrongValue => "wrong value",
        }
    }
}

/// Every key's possible states, and the values each key ever had.
#[derive(Debug, Default)]
pub struct Model {
    keys: BTreeMap<Vec<u8>, Vec<Possible>>,
    history: BTreeMap<Vec<u8>, Vec<Vec<u8>>>,
}

impl Model {
    /// `key` is now `state`, certainly (`certain`) or possibly.
    pub fn write(&mut self, key: &[u8], state: Possible, certain: bool) {
        if let Some(value) = &state.value {
            self.history
                .entry(key.to_vec())
                .or_default()
                .push(value.clone());
        }
        let states = self
            .keys
            .entry(key.to_vec())
            .or_insert_with(|| vec![deleted()]);
        if certain {
            *states = vec![state];
        } else if !states.contains(&state) {
            states.push(state);
        }
    }

    /// Every key in `[start, end)` is deleted, certainly or possibly.
    pub fn delete_range(&mut self, start: &[u8], end: &[u8], certain: bool) {
        let keys: Vec<Vec<u8>> = self
            .keys
            .range(start.to_vec()..end.to_vec())
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            self.write(&key, deleted(), certain);
        }
    }

    /// What is wrong with reading `observed` for `key` between `read_from_ms` and `read_to_ms`,
    /// if anything.
    pub fn judge(
        &self,
        key: &[u8],
        observed: Option<&[u8]>,
        read_from_ms: u64,
        read_to_ms: u64,
    ) -> Option<Wrong> {
        let never_written = [deleted()];
        let states = self.keys.get(key).map_or(&never_written[..], Vec::as_slice);
        if states
            .iter()
            .any(|s| s.allows(observed, read_from_ms, read_to_ms))
        {
            return None;
        }
        Some(match observed {
            None => Wrong::LostWrite,
            Some(seen) => {
                let had = self
                    .history
                    .get(key)
                    .is_some_and(|values| values.iter().any(|v| v.as_slice() == seen));
                if states.iter().all(|s| s.value.is_none()) {
                    Wrong::ResurrectedDelete
                } else if had {
                    Wrong::StaleRead
                } else {
                    Wrong::WrongValue
                }
            }
        })
    }

    /// Every key the model knows, in order (keys never written read as absent).
    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.keys.keys().map(Vec::as_slice)
    }

    /// True when a state `key` may be in expires between `from_ms` and `to_ms`, give or take
    /// [`CLOCK_SLACK_MS`]: replicas read in that time may differ on it.
    pub fn may_expire_between(&self, key: &[u8], from_ms: u64, to_ms: u64) -> bool {
        self.keys.get(key).is_some_and(|states| {
            states.iter().any(|s| {
                s.expires_at_ms.is_some_and(|at| {
                    at + CLOCK_SLACK_MS >= from_ms && at <= to_ms + CLOCK_SLACK_MS
                })
            })
        })
    }

    /// The states `key` may be in, as text for a report.
    pub fn describe(&self, key: &[u8]) -> String {
        let Some(states) = self.keys.get(key) else {
            return "never written".to_owned();
        };
        let texts: Vec<String> = states
            .iter()
            .map(|s| match (&s.value, s.expires_at_ms) {
                (None, _) => "deleted".to_owned(),
                (Some(v), None) => String::from_utf8_lossy(v).into_owned(),
                (Some(v), Some(at)) => format!("{} (expires {at})", String::from_utf8_lossy(v)),
            })
            .collect();
        texts.join(" or ")
    }
}

fn deleted() -> Possible {
    Possible {
        value: None,
        expires_at_ms: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(value: &str) -> Possible {
        Possible {
            value: Some(value.as_bytes().to_vec()),
            expires_at_ms: None,
        }
    }

    #[test]
    fn acknowledged_writes_settle_a_key_and_lost_answers_widen_it() {
        let mut model = Model::default();
        model.write(b"k", live("a"), true);
        assert_eq!(model.judge(b"k", Some(b"a"), 0, 0), None);
        assert_eq!(model.judge(b"k", None, 0, 0), Some(Wrong::LostWrite));
        model.write(b"k", live("b"), false);
        assert_eq!(model.judge(b"k", Some(b"a"), 0, 0), None);
        assert_eq!(model.judge(b"k", Some(b"b"), 0, 0), None);
        model.write(b"k", deleted(), true);
        assert_eq!(
            model.judge(b"k", Some(b"b"), 0, 0),
            Some(Wrong::ResurrectedDelete)
        );
        model.write(b"k", live("c"), true);
        assert_eq!(model.judge(b"k", Some(b"a"), 0, 0), Some(Wrong::StaleRead));
        assert_eq!(model.judge(b"k", Some(b"z"), 0, 0), Some(Wrong::WrongValue));
        assert_eq!(model.judge(b"never", None, 0, 0), None);
        assert_eq!(
            model.judge(b"never", Some(b"x"), 0, 0),
            Some(Wrong::ResurrectedDelete)
        );
    }

    #[test]
    fn range_deletes_and_expiry() {
        let mut model = Model::default();
        model.write(b"a", live("1"), true);
        model.write(b"b", live("2"), true);
        model.write(b"c", live("3"), true);
        model.delete_range(b"a", b"c", false);
        assert_eq!(model.judge(b"a", None, 0, 0), None);
        assert_eq!(model.judge(b"b", Some(b"2"), 0, 0), None);
        assert_eq!(model.judge(b"c", None, 0, 0), Some(Wrong::LostWrite));
        model.delete_range(b"a", b"c", true);
        assert_eq!(
            model.judge(b"a", Some(b"1"), 0, 0),
            Some(Wrong::ResurrectedDelete)
        );
        let ttl = Possible {
            value: Some(b"t".to_vec()),
            expires_at_ms: Some(10_000),
        };
        model.write(b"t", ttl, true);
        assert_eq!(model.judge(b"t", Some(b"t"), 9_000, 9_100), None);
        assert_eq!(
            model.judge(b"t", None, 9_000, 9_100),
            Some(Wrong::LostWrite)
        );
        assert_eq!(model.judge(b"t", None, 9_900, 9_900), None, "within slack");
        assert_eq!(model.judge(b"t", None, 11_000, 11_000), None);
        assert_eq!(
            model.judge(b"t", Some(b"t"), 11_000, 11_000),
            Some(Wrong::StaleRead),
            "expired long ago yet read"
        );
    }
}
