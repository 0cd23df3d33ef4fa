//! Builds a block from keys added in order.

/// Accumulates entries into the block layout described in the [module doc](super).
#[derive(Debug)]
pub(crate) struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    restart_interval: usize,
    since_restart: usize,
    last_key: Vec<u8>,
    entries: usize,
}

impl BlockBuilder {
    /// A builder that stores a whole key every `restart_interval` entries (at least one).
    pub(crate) fn new(restart_interval: usize) -> Self {
        Self {
            buf: Vec::new(),
            restarts: vec![0],
            restart_interval: restart_interval.max(1),
            since_restart: 0,
            last_key: Vec::new(),
            entries: 0,
        }
    }

    /// Adds an entry whose value is the concatenation of `value_parts`. Keys must be added in
    /// the block's order; the caller checks it. The block must stay under 4 GiB; the table
    /// writer bounds entries and blocks so it does.
    pub(crate) fn add(&mut self, key: &[u8], value_parts: &[&[u8]]) {
        let shared = if self.since_restart < self.restart_interval {
            common_prefix(&self.last_key, key)
        } else {
            self.restarts.push(offset_u32(self.buf.len()));
            self.since_restart = 0;
            0
        };
        let unshared = key.get(shared..).unwrap_or_default();
        let value_len: usize = value_parts.iter().map(|p| p.len()).sum();
        crate::coding::put_varint(&mut self.buf, shared as u64);
        crate::coding::put_varint(&mut self.buf, unshared.len() as u64);
        crate::coding::put_varint(&mut self.buf, value_len as u64);
        self.buf.extend_from_slice(unshared);
        for part in value_parts {
            self.buf.extend_from_slice(part);
        }
        self.last_key.truncate(shared);
        self.last_key.extend_from_slice(unshared);
        self.since_restart += 1;
        self.entries += 1;
    }

    /// The size the block would have if finished now.
    pub(crate) fn estimated_size(&self) -> usize {
        self.buf.len() + 4 * self.restarts.len() + 4
    }

    /// True if no entry has been added since the last reset.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// The last key added.
    pub(crate) fn last_key(&self) -> &[u8] {
        &self.last_key
    }

    /// Appends the restart array and returns the finished block. Call `reset` before reuse.
    pub(crate) fn finish(&mut self) -> &[u8] {
        for restart in &self.restarts {
            self.buf.extend_from_slice(&restart.to_le_bytes());
        }
        let count = offset_u32(self.restarts.len());
        self.buf.extend_from_slice(&count.to_le_bytes());
        &self.buf
    }

    /// Empties the builder for the next block.
    pub(crate) fn reset(&mut self) {
        self.buf.clear();
        self.restarts.clear();
        self.restarts.push(0);
        self.since_restart = 0;
        self.last_key.clear();
        self.entries = 0;
    }
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn offset_u32(n: usize) -> u32 {
    // The table writer caps entries at 1 GiB and cuts blocks at their target size, so a block
    // never reaches 4 GiB.
    u32::try_from(n).unwrap_or(u32::MAX)
}
