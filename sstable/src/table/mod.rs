//! Tables: one immutable file of sorted internal entries (see `FORMAT.md`).

mod block_io;
mod file;
mod footer;
mod iter;
pub(crate) mod properties;
pub(crate) mod range_tombstone_map;
pub(crate) mod range_tombstones;
mod reader;
mod writer;

pub use footer::FORMAT_VERSION;
pub use iter::TableIter;
pub use reader::{Table, WeakTable};
pub use writer::{TableSummary, TableWriter};

use crate::bloom::DEFAULT_BITS_PER_KEY;

/// How a table's blocks are compressed. Each block records its codec, so a reader needs no
/// setting, and a block that a codec shrinks by less than an eighth is stored raw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Compression {
    /// Raw blocks: no decoding cost on reads.
    None,
    /// LZ4 (`lz4_flex`): decodes about as fast as raw blocks; in `cairn-bench`'s 1M-key fill
    /// its tables took 17% more bytes than zstd level 3's.
    Lz4,
    /// zstd at this level (RocksDB and Cairn default to 3): the best ratio, the slowest to
    /// decode of the three.
    Zstd(i32),
}

/// How tables are built. Readers need none of it: everything is recorded in the file.
#[derive(Debug, Clone)]
pub struct TableOptions {
    pub(crate) block_size: usize,
    pub(crate) restart_interval: usize,
    pub(crate) bloom_bits_per_key: u32,
    pub(crate) compression: Compression,
    /// Bytes of zstd dictionary trained per table (0: none).
    pub(crate) dictionary_bytes: usize,
    /// [`compression`](TableOptions::compression) was called: the codec is the caller's
    /// choice, not the default.
    codec_chosen: bool,
}

impl Default for TableOptions {
    fn default() -> Self {
        Self {
            block_size: 4096,
            restart_interval: 16,
            bloom_bits_per_key: DEFAULT_BITS_PER_KEY,
            compression: Compression::Zstd(3),
            dictionary_bytes: 0,
            codec_chosen: false,
        }
    }
}

/// The largest [`TableOptions::block_size`] accepted (64 MiB): readers hold decompression to the
/// largest block a table records, and a target past this is a mistake, not a tuning.
pub const MAX_BLOCK_SIZE: usize = 64 << 20;

/// The largest [`TableOptions::zstd_dictionary_bytes`] accepted (1 MiB).
pub const MAX_DICTIONARY_BYTES: usize = 1 << 20;

/// The smallest non-zero [`TableOptions::zstd_dictionary_bytes`] accepted: zstd trains none
/// smaller.
pub const MIN_DICTIONARY_BYTES: usize = 256;

/// A table's dictionary is trained on its first data blocks, up to this many times the
/// dictionary's size of them (RocksDB's advice for `zstd_max_train_bytes`)…
const DICTIONARY_TRAINING_FACTOR: usize = 100;
/// …and at most this many bytes of them: they are held uncompressed until then.
const MAX_DICTIONARY_TRAINING_BYTES: usize = 16 << 20;

/// The bytes of data blocks a table holds back to train a dictionary of `dictionary_bytes`.
pub(crate) fn dictionary_training_bytes(dictionary_bytes: usize) -> usize {
    dictionary_bytes
        .saturating_mul(DICTIONARY_TRAINING_FACTOR)
        .min(MAX_DICTIONARY_TRAINING_BYTES)
}

impl TableOptions {
    /// Target size of an uncompressed data block in bytes (default 4096, at most
    /// [`MAX_BLOCK_SIZE`]). A block is cut once it reaches this size, so a block holding a large
    /// entry is larger.
    #[must_use]
    pub fn block_size(mut self, bytes: usize) -> Self {
        self.block_size = bytes;
        self
    }

    /// Checks the options.
    ///
    /// # Errors
    /// `InvalidArgument` if the block size is 0 or over [`MAX_BLOCK_SIZE`], or the dictionary
    /// size is neither 0 nor within [`MIN_DICTIONARY_BYTES`]`..=`[`MAX_DICTIONARY_BYTES`].
    pub fn validate(&self) -> crate::Result<()> {
        if self.block_size == 0 || self.block_size > MAX_BLOCK_SIZE {
            return Err(crate::Error::InvalidArgument(format!(
                "block size {} is outside 1..={MAX_BLOCK_SIZE}",
                self.block_size
            )));
        }
        if self.dictionary_bytes != 0
            && !(MIN_DICTIONARY_BYTES..=MAX_DICTIONARY_BYTES).contains(&self.dictionary_bytes)
        {
            return Err(crate::Error::InvalidArgument(format!(
                "zstd dictionary of {} bytes is outside {MIN_DICTIONARY_BYTES}..={MAX_DICTIONARY_BYTES}",
                self.dictionary_bytes
            )));
        }
        Ok(())
    }

    /// With zstd, trains a dictionary of at most `bytes` for each table from its first data
    /// blocks (up to 100 times `bytes` of them and at most 16 MiB, held uncompressed until
    /// then) and compresses
    /// its data blocks with it, as RocksDB's `max_dict_bytes` does; the dictionary is stored in
    /// the table and digested once when it opens. 0 (the default) trains none; other codecs
    /// ignore it. Small blocks of similar records gain most; RocksDB suggests 16 KiB.
    #[must_use]
    pub fn zstd_dictionary_bytes(mut self, bytes: usize) -> Self {
        self.dictionary_bytes = bytes;
        self
    }

    /// Entries between whole keys in a data block (default 16). Smaller seeks faster and takes
    /// more space.
    #[must_use]
    pub fn restart_interval(mut self, entries: usize) -> Self {
        self.restart_interval = entries.max(1);
        self
    }

    /// Bloom filter bits per distinct user key (default 10, about 1% false positives); 0 builds
    /// no filter.
    #[must_use]
    pub fn bloom_bits_per_key(mut self, bits: u32) -> Self {
        self.bloom_bits_per_key = bits.min(64);
        self
    }

    /// How blocks are compressed (default zstd level 3). A block is stored raw anyway when
    /// compression saves less than an eighth of it.
    #[must_use]
    pub fn compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self.codec_chosen = true;
        self
    }

    /// The codec set with [`compression`](Self::compression), if it was called (even with the
    /// default codec); `None` for the default.
    pub fn chosen_codec(&self) -> Option<Compression> {
        self.codec_chosen.then_some(self.compression)
    }
}
