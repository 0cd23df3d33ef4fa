//! Power loss: the tree rewound to what a disk holds after the power went.

use std::os::unix::fs::FileExt;
use std::path::Path;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::ledger::Ledger;
use super::{remove_if_exists, rename_real, trash_path};
use crate::{Error, Result};

/// The page size of the simulated disk: unsynced data persists (or not) a page at a time.
const PAGE: u64 = 4096;

/// How much unsynced data a simulated power loss drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerLoss {
    /// Every byte not covered by a `sync` is gone.
    DropAllUnsynced,
    /// Each file keeps a random prefix of its unsynced bytes (chosen from `seed`): the disk wrote
    /// some of the page cache back, in order, before the power went.
    DropRandomTail {
        /// Seed for the random cut in each file.
        seed: u64,
    },
    /// Each unsynced page of each file persists or not at random (chosen from `seed`), in no
    /// order: a page that did not persist, below one that did, reads back as zeros. Writeback
    /// does not go in file order, so a log can end in a hole of zeros followed by later records.
    ReorderedPages {
        /// Seed for which pages persist.
        seed: u64,
    },
}

/// What happens to the unsynced bytes of one file.
enum Cut {
    /// The file keeps its first `len` bytes.
    Keep(u64),
    /// The file keeps its first `len` bytes, with the ranges in `holes` zeroed.
    Holes { len: u64, holes: Vec<(u64, u64)> },
}

impl Ledger {
    /// Rewinds every file and name to its durable state. Handles opened before it fail from
    /// now on.
    pub(super) fn power_loss(&mut self, mode: PowerLoss) -> Result<()> {
        let mut rng = match mode {
            PowerLoss::DropAllUnsynced => None,
            PowerLoss::DropRandomTail { seed } | PowerLoss::ReorderedPages { seed } => {
                Some(SmallRng::seed_from_u64(seed))
            }
        };
        // Move surviving files out of the way first, so restoring names cannot collide.
        let mut staged = Vec::new();
        let mut ids: Vec<u64> = self.files.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let Some(state) = self.files.remove(&id) else {
                continue;
            };
            let Some(durable_name) = state.durable_name else {
                remove_if_exists(&state.path)?;
                continue;
            };
            let written = state.written.max(state.synced);
            let cut = match (mode, rng.as_mut()) {
                (PowerLoss::DropRandomTail { .. }, Some(rng)) => {
                    Cut::Keep(rng.random_range(state.synced..=written))
                }
                (PowerLoss::ReorderedPages { .. }, Some(rng)) => {
                    reordered_pages(state.synced, written, rng)
                }
                _ => Cut::Keep(state.synced),
            };
            apply_cut(&state.path, &cut)?;
            let staging = trash_path(&durable_name, &mut self.next_id);
            rename_real(&state.path, &staging)?;
            staged.push((staging, durable_name));
        }
        for entry in std::mem::take(&mut self.trash) {
            truncate(&entry.trash_path, entry.synced)?;
            rename_real(&entry.trash_path, &entry.durable_name)?;
        }
        for (staging, durable_name) in staged {
            rename_real(&staging, &durable_name)?;
        }
        self.ids.clear();
        self.epoch += 1;
        Ok(())
    }
}

/// Which of the pages in `[synced, written)` persist: each with even odds. The file ends with
/// the last page that persisted; the pages below it that did not are holes.
fn reordered_pages(synced: u64, written: u64, rng: &mut SmallRng) -> Cut {
    let mut len = synced;
    let mut holes: Vec<(u64, u64)> = Vec::new();
    let mut start = synced;
    while start < written {
        let end = ((start / PAGE + 1) * PAGE).min(written);
        if rng.random_bool(0.5) {
            len = end;
        } else {
            match holes.last_mut() {
                Some(last) if last.1 == start => last.1 = end,
                _ => holes.push((start, end)),
            }
        }
        start = end;
    }
    holes.retain(|&(s, _)| s < len);
    Cut::Holes { len, holes }
}

fn apply_cut(path: &Path, cut: &Cut) -> Result<()> {
    match cut {
        Cut::Keep(len) => truncate(path, *len),
        Cut::Holes { len, holes } => {
            truncate(path, *len)?;
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(|e| Error::io("power loss", path, e))?;
            for &(start, end) in holes {
                let zeros = vec![0u8; usize::try_from(end - start).unwrap_or(0)];
                file.write_all_at(&zeros, start)
                    .map_err(|e| Error::io("power loss", path, e))?;
            }
            Ok(())
        }
    }
}

fn truncate(path: &Path, len: u64) -> Result<()> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| Error::io("truncate", path, e))?;
    file.set_len(len)
        .map_err(|e| Error::io("truncate", path, e))
}
