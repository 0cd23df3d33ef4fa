//! Snapshot bytes kept in Cairn, and [`SnapshotData`], openraft's handle on them.
//!
//! Each snapshot is a *set* of chunks in the `raft.snap` family, keyed by the set's number and
//! the chunk's (both big-endian u64), [`CHUNK`] bytes each but the last: a snapshot is streamed
//! in and out a chunk at a time and never has to fit in memory, and it is as durable as
//! anything else in the database (power loss included, under `FaultyFs`). A set is removed
//! with one range delete.
//!
//! A reading handle reads through a Cairn snapshot taken when it was made, so a set deleted
//! while the handle is being sent to a follower stays readable to it. A receiving handle keeps
//! only the chunk being filled in memory; a receiving handle dropped without being installed
//! deletes what it wrote.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use cairn::{ColumnFamily, Db, WriteBatch};

/// The family of snapshot chunks.
pub const SNAPSHOT_FAMILY: &str = "raft.snap";

/// The size of a chunk.
pub(crate) const CHUNK: u64 = 1 << 20;

fn chunk_key(set: u64, chunk: u64) -> [u8; 16] {
    let mut key = [0; 16];
    key[..8].copy_from_slice(&set.to_be_bytes());
    key[8..].copy_from_slice(&chunk.to_be_bytes());
    key
}

/// Adds to `batch` the deletion of every chunk of `set`.
pub(crate) fn delete_set(batch: &mut WriteBatch, family: &ColumnFamily, set: u64) {
    match set.checked_add(1) {
        Some(next) => batch.delete_range_cf(family, chunk_key(set, 0), chunk_key(next, 0)),
        None => batch.delete_range_cf(family, chunk_key(set, 0), [0xff; 17]),
    }
}

/// Adds to `batch` the deletion of every chunk of every set but `keep`.
pub(crate) fn delete_sets_but(batch: &mut WriteBatch, family: &ColumnFamily, keep: Option<u64>) {
    match keep {
        None => batch.delete_range_cf(family, b"", [0xff; 17]),
        Some(set) => {
            batch.delete_range_cf(family, b"", chunk_key(set, 0));
            if let Some(next) = set.checked_add(1) {
                batch.delete_range_cf(family, chunk_key(next, 0), [0xff; 17]);
            }
        }
    }
}

/// The bytes of one snapshot, as openraft reads, writes and seeks them.
#[derive(Debug)]
pub struct SnapshotData {
    db: Arc<Db>,
    family: ColumnFamily,
    set: u64,
    len: u64,
    pos: u64,
    /// Reading: the view the chunks are read at. Receiving: none, chunks are read as they are.
    view: Option<cairn::Snapshot>,
    /// The last chunk read.
    cached: Option<(u64, Bytes)>,
    /// Chunks written and not yet stored.
    dirty: BTreeMap<u64, Vec<u8>>,
    /// Deleted on drop: a receiving handle openraft dropped without installing it.
    discard_on_drop: bool,
}

impl SnapshotData {
    /// A handle reading set `set` of `len` bytes at `view`.
    pub(crate) fn reader(
        db: Arc<Db>,
        family: ColumnFamily,
        view: cairn::Snapshot,
        set: u64,
        len: u64,
    ) -> Self {
        Self {
            db,
            family,
            set,
            len,
            pos: 0,
            view: Some(view),
            cached: None,
            dirty: BTreeMap::new(),
            discard_on_drop: false,
        }
    }

    /// A handle writing the new set `set`.
    pub(crate) fn receiver(db: Arc<Db>, family: ColumnFamily, set: u64) -> Self {
        Self {
            db,
            family,
            set,
            len: 0,
            pos: 0,
            view: None,
            cached: None,
            dirty: BTreeMap::new(),
            discard_on_drop: true,
        }
    }

    /// The set's number.
    pub(crate) fn set(&self) -> u64 {
        self.set
    }

    /// The snapshot's length in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// True when this is a receiving handle whose chunks are in `db`.
    pub(crate) fn is_receiver_in(&self, db: &Arc<Db>) -> bool {
        self.view.is_none() && Arc::ptr_eq(&self.db, db)
    }

    /// Stores every chunk written, and keeps the set when the handle is dropped.
    ///
    /// # Errors
    /// The engine's.
    pub(crate) fn keep(&mut self) -> cairn::Result<()> {
        self.store(|_, _| true)?;
        self.discard_on_drop = false;
        Ok(())
    }

    fn load(&self, chunk: u64) -> cairn::Result<Option<Bytes>> {
        let key = chunk_key(self.set, chunk);
        match &self.view {
            Some(view) => view.get_cf(&self.family, key),
            None => self.family.get(key),
        }
    }

    /// Writes the dirty chunks `which` picks, in one batch.
    fn store(&mut self, which: impl Fn(u64, &Vec<u8>) -> bool) -> cairn::Result<()> {
        let chosen: Vec<u64> = self
            .dirty
            .iter()
            .filter(|(n, bytes)| which(**n, bytes))
            .map(|(n, _)| *n)
            .collect();
        if chosen.is_empty() {
            return Ok(());
        }
        let mut batch = WriteBatch::new();
        for n in &chosen {
            if let Some(bytes) = self.dirty.get(n) {
                batch.put_cf(&self.family, chunk_key(self.set, *n), bytes);
            }
        }
        self.db.write(batch)?;
        for n in chosen {
            self.dirty.remove(&n);
        }
        Ok(())
    }

    /// Chunk `n`, from the dirty ones, the cache or the database.
    fn chunk(&mut self, n: u64) -> std::io::Result<Bytes> {
        if let Some(bytes) = self.dirty.get(&n) {
            return Ok(Bytes::copy_from_slice(bytes));
        }
        if let Some((cached, bytes)) = &self.cached
            && *cached == n
        {
            return Ok(bytes.clone());
        }
        let bytes = self
            .load(n)
            .map_err(std::io::Error::other)?
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("snapshot set {}: chunk {n} is missing", self.set),
                )
            })?;
        self.cached = Some((n, bytes.clone()));
        Ok(bytes)
    }
}

impl Read for SnapshotData {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos >= self.len || buf.is_empty() {
            return Ok(0);
        }
        let (n, offset) = (self.pos / CHUNK, self.pos % CHUNK);
        let chunk = self.chunk(n)?;
        let available = chunk
            .get(usize::try_from(offset).unwrap_or(usize::MAX)..)
            .filter(|rest| !rest.is_empty())
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("snapshot set {}: chunk {n} is cut short", self.set),
                )
            })?;
        let left = usize::try_from(self.len - self.pos).unwrap_or(usize::MAX);
        let take = available.len().min(left);
        let n = buf
            .iter_mut()
            .zip(available.iter().take(take))
            .map(|(to, from)| *to = *from)
            .count();
        self.pos += n as u64;
        Ok(n)
    }
}

impl Write for SnapshotData {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.view.is_some() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "a snapshot being read is not written",
            ));
        }
        let (n, offset) = (self.pos / CHUNK, self.pos % CHUNK);
        // A stream written again from the start (openraft resends a snapshot under the same
        // id from offset 0) is as long as what it writes this time.
        if self.pos == 0 {
            self.len = 0;
        }
        // Only the chunk being written stays in memory, wherever the writes land.
        self.store(|other, _| other != n)
            .map_err(std::io::Error::other)?;
        if !self.dirty.contains_key(&n) {
            let stored = self.load(n).map_err(std::io::Error::other)?;
            self.dirty
                .insert(n, stored.map(|b| b.to_vec()).unwrap_or_default());
        }
        let chunk = self.dirty.entry(n).or_default();
        let offset = usize::try_from(offset).unwrap_or(usize::MAX);
        let take = buf
            .len()
            .min(usize::try_from(CHUNK).unwrap_or(usize::MAX) - offset);
        if chunk.len() < offset + take {
            chunk.resize(offset + take, 0);
        }
        let to = chunk.iter_mut().skip(offset).take(take);
        let take = to.zip(buf).map(|(to, from)| *to = *from).count();
        self.cached = None;
        self.pos += take as u64;
        self.len = self.len.max(self.pos);
        // Full chunks go to the database at once: memory holds one chunk at most.
        self.store(|_, bytes| bytes.len() as u64 == CHUNK)
            .map_err(std::io::Error::other)?;
        Ok(take)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.store(|_, _| true).map_err(std::io::Error::other)
    }
}

impl Seek for SnapshotData {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(at) => Some(at),
            SeekFrom::End(by) => self.len.checked_add_signed(by),
            SeekFrom::Current(by) => self.pos.checked_add_signed(by),
        };
        let invalid = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
        let pos = pos.ok_or_else(|| invalid("a seek before the start of a snapshot"))?;
        // A receiving handle is written in order, resends aside: never past its end, so a
        // peer's offsets cannot leave holes or run the position to the end of u64.
        if self.view.is_none() && pos > self.len {
            return Err(invalid("a seek past the end of a snapshot being received"));
        }
        self.pos = pos;
        Ok(self.pos)
    }
}

// The engine's calls are short and synchronous, as in the rest of the store: each poll does
// its work and is ready.
impl tokio::io::AsyncRead for SnapshotData {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let n = this.read(buf.initialize_unfilled())?;
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl tokio::io::AsyncWrite for SnapshotData {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(self.get_mut().write(buf))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(self.get_mut().flush())
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(self.get_mut().flush())
    }
}

impl tokio::io::AsyncSeek for SnapshotData {
    fn start_seek(self: Pin<&mut Self>, to: SeekFrom) -> std::io::Result<()> {
        self.get_mut().seek(to).map(|_| ())
    }

    fn poll_complete(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<u64>> {
        Poll::Ready(Ok(self.pos))
    }
}

impl Drop for SnapshotData {
    fn drop(&mut self) {
        if self.discard_on_drop {
            let mut batch = WriteBatch::new();
            delete_set(&mut batch, &self.family, self.set);
            // Best effort: what is left is deleted when the state machine next opens.
            if let Err(e) = self.db.write(batch) {
                tracing::warn!(set = self.set, error = %e, "could not delete an abandoned snapshot");
            }
        }
    }
}
