//! The block cache: verified, decompressed blocks shared by every table, bounded in bytes.

use std::sync::Arc;

use bytes::Bytes;

/// Blocks are keyed by table id and block offset.
type BlockKey = (u64, u64);

#[derive(Debug, Clone, Copy, Default)]
struct BlockWeighter;

impl quick_cache::Weighter<BlockKey, Bytes> for BlockWeighter {
    fn weight(&self, _key: &BlockKey, block: &Bytes) -> u64 {
        // Count the map entry too, so many tiny blocks cannot exceed the bound unseen.
        block.len() as u64 + 32
    }
}

/// A cache of blocks bounded by their total size. Cloning shares it.
///
/// A cached block has passed its checksum, so a hit skips both verification and decompression.
#[derive(Clone)]
pub struct BlockCache {
    blocks: Arc<quick_cache::sync::Cache<BlockKey, Bytes, BlockWeighter>>,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("capacity", &self.capacity())
            .field("usage", &self.usage())
            .finish()
    }
}

impl BlockCache {
    /// A cache that holds at most `capacity_bytes` of blocks.
    pub fn new(capacity_bytes: u64) -> Self {
        let estimated_blocks = usize::try_from(capacity_bytes / 4096)
            .unwrap_or(usize::MAX)
            .max(16);
        Self {
            blocks: Arc::new(quick_cache::sync::Cache::with_weighter(
                estimated_blocks,
                capacity_bytes,
                BlockWeighter,
            )),
        }
    }

    /// The bound in bytes.
    pub fn capacity(&self) -> u64 {
        self.blocks.capacity()
    }

    /// The bytes held now.
    pub fn usage(&self) -> u64 {
        self.blocks.weight()
    }

    pub(crate) fn get(&self, table_id: u64, offset: u64) -> Option<Bytes> {
        self.blocks.get(&(table_id, offset))
    }

    pub(crate) fn insert(&self, table_id: u64, offset: u64, block: Bytes) {
        self.blocks.insert((table_id, offset), block);
    }
}
