//! A compaction job: merge the input tables, apply the rules, write the survivors.
//!
//! Outputs are cut at the target file size and where they would overlap too much of the level
//! below the output (the grandparents: a later compaction of the output would have to rewrite
//! them), but never between two versions of one user key, so the tables of a level stay disjoint.
//! Each output carries the surviving range tombstones clipped to its share of the key space.

use bytes::Bytes;
use cairn_fs::WritableFile;
use cairn_sstable::{
    FragmentedRangeTombstones, MergingIter, RangeTombstone, SeqNo, Table, TableIter, TableOptions,
    TableSummary, TableWriter,
};

use crate::Result;
use crate::compaction_iter::{CompactionIter, GcContext};
use crate::stats::DropCounts;

/// A table of the level below the output, as far as cutting is concerned.
#[derive(Debug, Clone)]
pub struct Grandparent {
    /// Its smallest user key.
    pub smallest: Bytes,
    /// Its largest user key.
    pub largest: Bytes,
    /// Its size in bytes.
    pub size: u64,
}

/// Where outputs go: the job asks for a new file each time it starts an output table.
pub trait OutputFiles {
    /// A new, empty file for output table `index` (0, 1, …) of this job.
    ///
    /// # Errors
    /// `Io` if the file cannot be created.
    fn create(&mut self, index: usize) -> cairn_fs::Result<Box<dyn WritableFile>>;
}

/// What a job is given.
pub struct JobSpec<'a> {
    /// The input tables, any order.
    pub inputs: Vec<Table>,
    /// The rules' context.
    pub ctx: GcContext<'a>,
    /// How output tables are built.
    pub table_options: TableOptions,
    /// Cut an output once it reaches this many bytes.
    pub target_file_size: u64,
    /// Tables of the level below the output level, sorted by key.
    pub grandparents: &'a [Grandparent],
    /// Cut an output once it overlaps this many bytes of grandparents.
    pub max_grandparent_overlap: u64,
}

/// What a job did.
#[derive(Debug, Clone, Default)]
pub struct JobOutput {
    /// The tables written (synced, under the names `OutputFiles` gave), in key order.
    pub tables: Vec<TableSummary>,
    /// Entries dropped, by rule.
    pub drops: DropCounts,
    /// `SingleDelete`s that covered more than one put.
    pub single_delete_misuse: u64,
    /// Bytes of input tables.
    pub bytes_read: u64,
    /// Bytes of output tables.
    pub bytes_written: u64,
    /// Point entries read.
    pub entries_in: u64,
    /// Point entries written.
    pub entries_out: u64,
    /// The earliest end of a grace period that kept a tombstone: a rewrite in place at the last
    /// level is worth repeating then, or once the oldest snapshot changes.
    pub next_change: Option<u64>,
    /// The oldest snapshot the rules were applied with.
    pub oldest_snapshot: Option<SeqNo>,
    /// Expired puts written out (`CompactionIter::kept_expired`): a rewrite in place at the
    /// last level cannot drop them before the oldest snapshot changes or more expires.
    pub kept_expired: u64,
    /// The earliest expiry, still to come, of a put written out.
    pub next_expiry: Option<u64>,
}

/// Runs a compaction.
///
/// # Errors
/// `Table` if an input is damaged or an output cannot be written; `Io` if the file system fails.
/// Outputs already written are left for the caller to delete.
pub fn run(spec: JobSpec<'_>, outputs: &mut dyn OutputFiles) -> Result<JobOutput> {
    let JobSpec {
        inputs,
        ctx,
        table_options,
        target_file_size,
        grandparents,
        max_grandparent_overlap,
    } = spec;
    let bytes_read = inputs.iter().map(Table::file_size).sum();
    let oldest_snapshot = ctx.snapshots.first().copied();
    let all_tombstones: Vec<RangeTombstone> = inputs
        .iter()
        .flat_map(|t| t.range_tombstones().iter_tombstones())
        .collect();
    let children: Vec<TableIter> = inputs.iter().map(|t| t.iter().fill_cache(false)).collect();
    let mut iter =
        CompactionIter::from_raw_tombstones(MergingIter::new(children), all_tombstones, ctx)?;
    let survivors = iter.surviving_range_tombstones();
    let mut writer = Writer {
        outputs,
        options: table_options,
        target_file_size,
        current: None,
        lower: None,
        survivors,
        done: Vec::new(),
        cutter: Cutter {
            grandparents,
            max_overlap: max_grandparent_overlap,
            index: 0,
            overlap: 0,
            seen_key: false,
        },
        last_user_key: Vec::new(),
        entries_out: 0,
    };
    while let Some(entry) = iter.next_entry()? {
        writer.add(&entry.key, entry.meta, &entry.value)?;
    }
    let tables = writer.finish()?;
    Ok(JobOutput {
        bytes_written: tables.iter().map(|t| t.file_size).sum(),
        tables,
        drops: *iter.drops(),
        next_change: iter.next_change(),
        oldest_snapshot,
        kept_expired: iter.kept_expired(),
        next_expiry: iter.next_expiry(),
        single_delete_misuse: iter.single_delete_misuse(),
        bytes_read,
        entries_in: iter.entries_in(),
        entries_out: writer.entries_out,
    })
}

/// Decides where the level below forces a cut (`LevelDB`'s `ShouldStopBefore`).
struct Cutter<'a> {
    grandparents: &'a [Grandparent],
    max_overlap: u64,
    index: usize,
    overlap: u64,
    seen_key: bool,
}

impl Cutter<'_> {
    /// True if the output should end before `user_key`.
    fn should_cut_before(&mut self, user_key: &[u8]) -> bool {
        while let Some(g) = self.grandparents.get(self.index) {
            if user_key <= g.largest.as_ref() {
                break;
            }
            if self.seen_key {
                self.overlap += g.size;
            }
            self.index += 1;
        }
        self.seen_key = true;
        if self.overlap > self.max_overlap {
            self.overlap = 0;
            return true;
        }
        false
    }
}

struct Writer<'a, 'o> {
    outputs: &'o mut dyn OutputFiles,
    options: TableOptions,
    target_file_size: u64,
    current: Option<TableWriter>,
    /// The first user key the current output owns (none: from the start of the key space).
    lower: Option<Bytes>,
    survivors: FragmentedRangeTombstones,
    done: Vec<TableSummary>,
    cutter: Cutter<'a>,
    last_user_key: Vec<u8>,
    entries_out: u64,
}

impl Writer<'_, '_> {
    fn add(&mut self, key: &[u8], meta: cairn_sstable::EntryMeta, value: &[u8]) -> Result<()> {
        let user_key = cairn_sstable::key::user_key(key);
        let new_user_key = self.current.is_none() || user_key != self.last_user_key.as_slice();
        if new_user_key {
            let full = self
                .current
                .as_ref()
                .is_some_and(|w| w.estimated_size() >= self.target_file_size);
            let cut = self.cutter.should_cut_before(user_key);
            if self.current.is_some() && (full || cut) {
                self.finish_current(Some(Bytes::copy_from_slice(user_key)))?;
            }
            self.last_user_key.clear();
            self.last_user_key.extend_from_slice(user_key);
        }
        if self.current.is_none() {
            let file = self.outputs.create(self.done.len())?;
            self.current = Some(TableWriter::new(file, self.options.clone())?);
        }
        if let Some(writer) = self.current.as_mut() {
            writer.add(key, meta, value)?;
            self.entries_out += 1;
        }
        Ok(())
    }

    /// Ends the current output at `upper` (exclusive; none: the end of the key space), giving it
    /// the surviving range tombstones in its share of the key space.
    fn finish_current(&mut self, upper: Option<Bytes>) -> Result<()> {
        let Some(mut writer) = self.current.take() else {
            return Ok(());
        };
        for t in clip(&self.survivors, self.lower.as_deref(), upper.as_deref()) {
            writer.add_range_tombstone(&t.start, &t.end, t.seqno, t.write_time)?;
        }
        self.done.push(writer.finish()?);
        self.lower = upper;
        Ok(())
    }

    fn finish(&mut self) -> Result<Vec<TableSummary>> {
        // An output is open from the first entry on, so none is open only when no entry
        // survived; surviving range tombstones still need a table then.
        if self.current.is_none() && !self.survivors.is_empty() {
            let file = self.outputs.create(0)?;
            self.current = Some(TableWriter::new(file, self.options.clone())?);
        }
        self.finish_current(None)?;
        Ok(std::mem::take(&mut self.done))
    }
}

/// The pieces of `list` inside `[lower, upper)`.
fn clip(
    list: &FragmentedRangeTombstones,
    lower: Option<&[u8]>,
    upper: Option<&[u8]>,
) -> Vec<RangeTombstone> {
    list.iter_tombstones()
        .filter_map(|mut t| {
            if let Some(lo) = lower.filter(|lo| t.start.as_ref() < *lo) {
                t.start = Bytes::copy_from_slice(lo);
            }
            if let Some(hi) = upper.filter(|hi| t.end.as_ref() > *hi) {
                t.end = Bytes::copy_from_slice(hi);
            }
            (t.start < t.end).then_some(t)
        })
        .collect()
}
