//! The write-ahead logs a running database still needs: the one taking records, and the ones a
//! memtable switch closed whose records are neither flushed into tables nor known synced.
//!
//! A switch does not sync the log it closes. Like `RocksDB` with one column family, the rule
//! that a later synced write never survives a power loss that drops an earlier unsynced one is
//! kept when a sync comes: [`sync`](LiveLogs::sync) seals every closed log, oldest first, before
//! it syncs the current one. A closed log whose memtables reach a table first is forgotten
//! unsynced (its file is then deleted, often before the kernel wrote it back at all).
//!
//! What recovery makes of it (see `recovery::replay_logs`): an unsealed log before the last can
//! have a torn tail after a power loss, and nothing after the tear was synced, in it or in any
//! later log (a sync there would have sealed it first), so replay stops at the tear.
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

    /// Appends a record to the current log; returns its offset.
    pub(crate) fn add_record(&mut self, payload: &[u8]) -> cairn_wal::Result<u64> {
        self.current.add_record(payload)
    }

    /// Makes every record added so far, in every log, durable: the closed logs are sealed oldest
    /// first, then the current one is synced. A failure leaves the logs not yet sealed in place.
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

    /// Puts `next` in place of the current log (ended by [`end_current`](Self::end_current)),
    /// which is closed unsynced. `number` is the current log's file number and `last_seqno` the
    /// last sequence number written to it.
    pub(crate) fn switch(&mut self, number: u64, last_seqno: SeqNo, next: LogWriter) {
        let writer = std::mem::replace(&mut self.current, next);
        self.closed.push(ClosedLog {
            number,
            last_seqno,
            writer,
        });
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

    fn seal_closed(&mut self) -> cairn_wal::Result<()> {
        while let Some(oldest) = self.closed.first_mut() {
            oldest.writer.seal()?;
            self.closed.remove(0);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_fs::{FileSystem, RealFs};
    use cairn_wal::{LogReader, RecoveryMode};

    fn writer(dir: &std::path::Path, n: u64) -> LogWriter {
        LogWriter::new(
            RealFs::new()
                .create(&dir.join(format!("{n}.log")))
                .expect("create"),
        )
    }

    #[test]
    fn a_sync_seals_the_closed_logs_and_a_flush_retires_them_unsynced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut logs = LiveLogs::new(writer(dir.path(), 1));
        logs.add_record(b"one").expect("add");
        logs.end_current().expect("end");
        logs.switch(1, 1, writer(dir.path(), 2));
        logs.add_record(b"two").expect("add");
        logs.end_current().expect("end");
        logs.switch(2, 2, writer(dir.path(), 3));
        assert_eq!(logs.retire_through(1), Some(1));
        assert_eq!(logs.retire_through(1), None, "retired once");
        assert_eq!(logs.closed_count(), 1);
        logs.sync().expect("sync");
        assert_eq!(logs.closed_count(), 0, "sealed and let go");
        // Log 2 carries a seal: damage before its mark would be corruption, so it was synced.
        let mut reader = LogReader::open(
            &RealFs::new(),
            &dir.path().join("2.log"),
            RecoveryMode::AbsoluteConsistency,
        )
        .expect("open");
        assert_eq!(
            reader.next_record().expect("read"),
            Some((0, b"two".to_vec()))
        );
        assert_eq!(reader.next_record().expect("read"), None);
        assert!(reader.ended_with_mark());
        let len = |n: u64| std::fs::metadata(dir.path().join(format!("{n}.log"))).map(|m| m.len());
        // A 10-byte record and a 7-byte end mark; the sealed one has a 15-byte sync mark too.
        assert_eq!(
            len(1).expect("stat"),
            17,
            "the retired log got no sync mark"
        );
        assert_eq!(len(2).expect("stat"), 32, "sealed");
    }
}
