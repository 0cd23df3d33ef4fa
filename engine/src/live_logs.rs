//! The write-ahead logs a running database still needs: the one taking records, and the ones a
//! memtable switch closed whose records are neither flushed into tables nor known synced.
//!
//! A switch does not sync the log it closes: it ends it with an unsynced end mark (every log
//! starts with a begin mark, which promises one). Like `RocksDB` with one column family, the
//! rule that a later synced write never survives a power loss that drops an earlier unsynced
//! one is kept when a sync comes: every closed log is sealed, oldest first, and a sealed mark
//! put in the current log, before the synced record is appended and the current log synced. A
//! closed log whose memtables reach a table first is forgotten unsynced (its file is then
//! deleted, often before the kernel wrote it back at all).
//!
//! What recovery makes of it (see `recovery::replay_logs`): a log before the last that is not
//! whole (torn, or without its end mark) lost its unsynced tail to a power loss, and nothing
//! after the loss was synced, in it or in any later log (a sync there would have sealed it
//! first), so replay stops there — unless a later log holds a sealed mark, which makes it
//! corruption.
//!
//! This module decides nothing about when to sync; the write path and `close` do.

use cairn_sstable::SeqNo;
use cairn_wal::LogWriter;

/// The current log and the closed logs not yet sealed, oldest first.
#[derive(Debug)]
pub(crate) struct LiveLogs {
    current: LogWriter,
    closed: Vec<ClosedLog>,
}

/// A log a switch closed: its number, the last sequence number it holds, and its writer.
#[derive(Debug)]
struct ClosedLog {
    number: u64,
    last_seqno: SeqNo,
    writer: LogWriter,
}

impl LiveLogs {
    /// Logs with `current` taking records and none closed.
    pub(crate) fn new(current: LogWriter) -> Self {
        Self {
            current,
            closed: Vec::new(),
        }
    }

    /// Appends a record to the current log; returns its offset. With `sync`, the record and
    /// every one before it, in every log, are durable when this returns: the closed logs are
    /// sealed first (see [`sync`](Self::sync)), then the record appended and the log synced.
    pub(crate) fn write(&mut self, payload: &[u8], sync: bool) -> cairn_wal::Result<u64> {
        if sync {
            self.seal_closed()?;
        }
        let offset = self.current.add_record(payload)?;
        if sync {
            self.current.sync()?;
        }
        Ok(offset)
    }

    /// Makes every record added so far, in every log, durable: the closed logs are sealed oldest
    /// first and a sealed mark put in the current log, which is then synced. A failure leaves
    /// the logs not yet sealed in place.
    pub(crate) fn sync(&mut self) -> cairn_wal::Result<()> {
        self.seal_closed()?;
        self.current.sync()
    }

    /// As [`sync`](Self::sync), but seals the current log too: for a close.
    pub(crate) fn seal(&mut self) -> cairn_wal::Result<()> {
        self.seal_closed()?;
        self.current.seal()
    }

    /// Ends the current log with an end mark, unsynced, before a switch: recovery can then
    /// tell it whole from one a power loss shortened.
    pub(crate) fn end_current(&mut self) -> cairn_wal::Result<()> {
        self.current.end()
    }

    /// Puts `next` (begun: [`LogWriter::begin`]) in place of the current log, which
    /// [`end_current`](Self::end_current) ended. Unless `sealed` (by [`seal`](Self::seal)),
    /// it is kept as a closed log to seal at the next sync. `number` is the current log's file
    /// number and `last_seqno` the last sequence number written to it.
    pub(crate) fn switch(&mut self, number: u64, last_seqno: SeqNo, next: LogWriter, sealed: bool) {
        let writer = std::mem::replace(&mut self.current, next);
        if !sealed {
            self.closed.push(ClosedLog {
                number,
                last_seqno,
                writer,
            });
        }
    }

    /// Forgets the closed logs numbered `number` or lower, whose memtables are now in durable
    /// tables: they need no sync. Returns the last sequence number they held, if any was
    /// forgotten; every write up to it is durable.
    pub(crate) fn retire_through(&mut self, number: u64) -> Option<SeqNo> {
        let retired = self.closed.iter().take_while(|log| log.number <= number);
        let last = retired.map(|log| log.last_seqno).max();
        self.closed.retain(|log| log.number > number);
        last
    }

    /// The number of closed logs not yet sealed.
    #[cfg(test)]
    fn closed_count(&self) -> usize {
        self.closed.len()
    }

    /// Seals the closed logs, oldest first, and says so in the current log with a sealed mark.
    fn seal_closed(&mut self) -> cairn_wal::Result<()> {
        if self.closed.is_empty() {
            return Ok(());
        }
        while let Some(oldest) = self.closed.first_mut() {
            oldest.writer.seal()?;
            self.closed.remove(0);
        }
        if self.current.is_ended() {
            // A switch ended it and then failed: it takes no mark, and no record to vouch for.
            return Ok(());
        }
        self.current.mark_predecessors_sealed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_fs::{FileSystem, RealFs};
    use cairn_wal::{LogReader, RecoveryMode};

    fn begun(dir: &std::path::Path, n: u64) -> LogWriter {
        let file = RealFs::new()
            .create(&dir.join(format!("{n}.log")))
            .expect("create");
        let mut writer = LogWriter::new(file);
        writer.begin().expect("begin");
        writer
    }

    /// Reads log `n` to its end: its records, whether it is whole, and whether it vouches for
    /// the logs before it.
    fn read(dir: &std::path::Path, n: u64) -> (Vec<Vec<u8>>, bool, bool) {
        let path = dir.join(format!("{n}.log"));
        let mut reader = LogReader::open(&RealFs::new(), &path, RecoveryMode::AbsoluteConsistency)
            .expect("open");
        let mut records = Vec::new();
        while let Some((_, record)) = reader.next_record().expect("read") {
            records.push(record);
        }
        (
            records,
            reader.closed_whole(),
            reader.vouches_for_earlier_logs(),
        )
    }

    #[test]
    fn a_synced_write_seals_the_closed_logs_first_and_a_flush_retires_them_unsynced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut logs = LiveLogs::new(begun(dir.path(), 1));
        logs.write(b"one", false).expect("write");
        logs.end_current().expect("end");
        logs.switch(1, 1, begun(dir.path(), 2), false);
        logs.write(b"two", false).expect("write");
        logs.end_current().expect("end");
        logs.switch(2, 2, begun(dir.path(), 3), false);
        assert_eq!(logs.retire_through(1), Some(1));
        assert_eq!(logs.retire_through(1), None, "retired once");
        assert_eq!(logs.closed_count(), 1);
        logs.write(b"three", true).expect("synced write");
        assert_eq!(logs.closed_count(), 0, "sealed and let go");
        let len = |n: u64| {
            std::fs::metadata(dir.path().join(format!("{n}.log")))
                .expect("stat")
                .len()
        };
        // Begin mark 7, a 10-byte record, end mark 7; the sealed log has a 15-byte sync mark.
        assert_eq!(len(1), 24, "the retired log got no sync mark");
        assert_eq!(len(2), 39, "sealed");
        assert_eq!(read(dir.path(), 2), (vec![b"two".to_vec()], true, false));
        assert_eq!(
            read(dir.path(), 3),
            (vec![b"three".to_vec()], false, true),
            "still open, and vouching for the sealed log before it"
        );
    }

    #[test]
    fn a_log_switched_away_from_under_a_seal_is_not_kept_to_seal_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut logs = LiveLogs::new(begun(dir.path(), 1));
        logs.write(b"one", false).expect("write");
        logs.end_current().expect("end");
        logs.seal().expect("seal");
        logs.switch(1, 1, begun(dir.path(), 2), true);
        assert_eq!(logs.closed_count(), 0);
        logs.sync().expect("sync");
        assert_eq!(
            read(dir.path(), 2),
            (vec![], false, false),
            "no sealed mark"
        );
    }
}
