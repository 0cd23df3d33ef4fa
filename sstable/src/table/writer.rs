//! Writes one table from internal entries given in order.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use cairn_fs::WritableFile;

use super::block_io::BlockEncoder;
use super::footer::{BlockHandle, Footer};
use super::properties::{TableProperties, TombstoneWindow};
use super::range_tombstones::{FragmentedRangeTombstones, RangeTombstone};
use super::{Compression, TableOptions, dictionary_training_bytes};
use crate::block::BlockBuilder;
use crate::bloom::{BloomBuilder, bloom_hash};
use crate::key::{Kind, MAX_SEQNO, compare_internal_keys, parse_internal_key, user_key};
use crate::meta::{EntryMeta, MAX_WRITE_TIME};
use crate::{Error, Result};

/// The largest key plus value one entry may have.
pub const MAX_ENTRY_BYTES: usize = 1 << 30;

/// Buffered output is handed to the file in chunks of this size.
const WRITE_CHUNK: usize = 1 << 20;

/// What a finished table holds.
#[derive(Debug, Clone)]
pub struct TableSummary {
    /// The file written.
    pub path: PathBuf,
    /// Its size in bytes.
    pub file_size: u64,
    /// Its properties, as recorded in the file.
    pub properties: TableProperties,
    /// Its range tombstones, as recorded in the file.
    pub range_tombstones: FragmentedRangeTombstones,
}

/// Builds a table: point entries in strictly increasing internal-key order, range tombstones in
/// any order; [`finish`](Self::finish) writes the index, filter, range tombstones, properties and
/// footer, and syncs the file.
#[derive(Debug)]
pub struct TableWriter {
    file: Box<dyn WritableFile>,
    options: TableOptions,
    encoder: BlockEncoder,
    /// Encoded bytes not yet handed to the file.
    out: Vec<u8>,
    /// Bytes written or buffered so far: the offset of the next block.
    offset: u64,
    data_block: BlockBuilder,
    index_block: BlockBuilder,
    bloom: BloomBuilder,
    last_key: Vec<u8>,
    properties: TableProperties,
    window: TombstoneWindow,
    range_tombstones: Vec<RangeTombstone>,
    scratch: Vec<u8>,
    dictionary: DictionaryState,
}

/// Where a table stands with its zstd dictionary.
#[derive(Debug)]
enum DictionaryState {
    /// No dictionary: blocks are written as they fill.
    Off,
    /// Data blocks held uncompressed (each with its index key) until there are enough to train
    /// on; their raw bytes.
    Collecting {
        level: i32,
        blocks: Vec<(Vec<u8>, Vec<u8>)>,
        bytes: usize,
    },
    /// Trained (or training failed and blocks go without): the dictionary to store, if any.
    Settled(Option<Vec<u8>>),
}

impl TableWriter {
    /// A writer into `file`, which should be new and empty.
    ///
    /// # Errors
    /// `InvalidArgument` if the options are out of bounds (see [`TableOptions::validate`]) or
    /// the zstd level is not one zstd accepts.
    pub fn new(file: Box<dyn WritableFile>, options: TableOptions) -> Result<Self> {
        options.validate()?;
        let encoder = BlockEncoder::new(options.compression)
            .map_err(|e| Error::InvalidArgument(format!("compression level: {e}")))?;
        Ok(Self {
            file,
            data_block: BlockBuilder::new(options.restart_interval),
            index_block: BlockBuilder::new(1),
            encoder,
            out: Vec::new(),
            offset: 0,
            bloom: BloomBuilder::default(),
            last_key: Vec::new(),
            properties: TableProperties::default(),
            window: TombstoneWindow::default(),
            range_tombstones: Vec::new(),
            scratch: Vec::new(),
            dictionary: match options.compression {
                Compression::Zstd(level) if options.dictionary_bytes > 0 => {
                    DictionaryState::Collecting {
                        level,
                        blocks: Vec::new(),
                        bytes: 0,
                    }
                }
                _ => DictionaryState::Off,
            },
            options,
        })
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Bytes the table would have if finished now, not counting index, filter and footer.
    pub fn estimated_size(&self) -> u64 {
        let held = match &self.dictionary {
            DictionaryState::Collecting { bytes, .. } => *bytes as u64,
            _ => 0,
        };
        self.offset + held + self.data_block.estimated_size() as u64
    }

    /// Point entries added so far.
    pub fn num_entries(&self) -> u64 {
        self.properties.num_entries
    }

    /// Adds a point entry. `key` is an internal key and must sort after the previous one.
    ///
    /// # Errors
    /// `InvalidArgument` if the key is malformed, a range tombstone, out of order, too large, or
    /// its write time is beyond [`MAX_WRITE_TIME`]; `Io` if the file system fails.
    pub fn add(&mut self, key: &[u8], meta: EntryMeta, value: &[u8]) -> Result<()> {
        let parsed = parse_internal_key(key)
            .ok_or_else(|| Error::InvalidArgument("malformed internal key".into()))?;
        if parsed.kind == Kind::RangeDelete {
            return Err(Error::InvalidArgument(
                "range tombstones go through add_range_tombstone".into(),
            ));
        }
        if self.properties.num_entries > 0 && compare_internal_keys(&self.last_key, key).is_ge() {
            return Err(Error::InvalidArgument("keys added out of order".into()));
        }
        if key.len().saturating_add(value.len()) > MAX_ENTRY_BYTES {
            return Err(Error::InvalidArgument(format!(
                "entry of {} bytes exceeds {MAX_ENTRY_BYTES}",
                key.len().saturating_add(value.len())
            )));
        }
        if meta.write_time > MAX_WRITE_TIME {
            return Err(Error::InvalidArgument(format!(
                "write time {} too large",
                meta.write_time
            )));
        }
        let new_user_key =
            self.properties.num_entries == 0 || user_key(&self.last_key) != parsed.user_key;
        if new_user_key {
            self.bloom.add_hash(bloom_hash(parsed.user_key));
        }
        let older = self.properties.older_versions.unwrap_or(0);
        self.properties.older_versions = Some(older + u64::from(!new_user_key));
        self.properties.add_entry(
            parsed.user_key.len(),
            parsed.seqno,
            parsed.kind,
            meta,
            value.len(),
        );
        self.window.push(parsed.kind.is_point_tombstone());
        if self.properties.smallest_key.is_none() {
            self.properties.smallest_key = Some(Bytes::copy_from_slice(key));
        }
        self.scratch.clear();
        meta.encode(&mut self.scratch);
        self.data_block.add(key, &[&self.scratch, value]);
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        if self.data_block.estimated_size() >= self.options.block_size {
            self.flush_data_block()?;
        }
        Ok(())
    }

    /// Records the range tombstone `[start, end)` at `seqno`. Overlapping tombstones are
    /// fragmented when the table is finished; an empty range (`start == end`) is ignored.
    ///
    /// # Errors
    /// `InvalidArgument` if `start > end` or `seqno` exceeds 56 bits.
    pub fn add_range_tombstone(
        &mut self,
        start: &[u8],
        end: &[u8],
        seqno: u64,
        write_time: u64,
    ) -> Result<()> {
        if start > end {
            return Err(Error::InvalidArgument(
                "range tombstone start is after its end".into(),
            ));
        }
        if seqno > MAX_SEQNO || write_time > MAX_WRITE_TIME {
            return Err(Error::InvalidArgument(
                "range tombstone seqno or time out of range".into(),
            ));
        }
        if start < end {
            self.range_tombstones.push(RangeTombstone {
                start: Bytes::copy_from_slice(start),
                end: Bytes::copy_from_slice(end),
                seqno,
                write_time,
            });
        }
        Ok(())
    }

    /// Writes the rest of the table and syncs it.
    ///
    /// # Errors
    /// `Io` if the file system fails.
    pub fn finish(mut self) -> Result<TableSummary> {
        if !self.data_block.is_empty() {
            self.flush_data_block()?;
        }
        self.settle_dictionary()?;
        if let DictionaryState::Settled(Some(dictionary)) = &self.dictionary {
            let dictionary = dictionary.clone();
            let handle = self.write_block(&dictionary, false)?;
            self.properties.zstd_dictionary_offset = handle.offset;
            self.properties.zstd_dictionary_bytes = handle.size;
        }
        let range_tombstones =
            FragmentedRangeTombstones::fragment(std::mem::take(&mut self.range_tombstones));
        for piece in range_tombstones.iter_tombstones() {
            self.properties
                .add_range_tombstone(piece.seqno, piece.write_time);
        }
        let filter = self.bloom.finish(self.options.bloom_bits_per_key);
        let mut tombstone_block = Vec::new();
        range_tombstones.encode(&mut tombstone_block);
        let index = self.index_block.finish().to_vec();
        for meta in [&index, &tombstone_block] {
            self.properties.max_block_bytes =
                self.properties.max_block_bytes.max(meta.len() as u64);
        }
        self.properties.max_tombstones_in_window = self.window.max();
        self.properties.bloom_bits_per_key = if filter.is_empty() {
            0
        } else {
            self.options.bloom_bits_per_key
        };
        if self.properties.num_entries > 0 {
            self.properties.largest_key = Some(Bytes::copy_from_slice(&self.last_key));
        }
        let footer = Footer {
            filter: self.write_block(&filter, false)?,
            range_tombstones: self.write_block(&tombstone_block, true)?,
            index: self.write_block(&index, true)?,
            properties: self.write_block(&self.properties.encode(), true)?,
        };
        self.out.extend_from_slice(&footer.encode());
        self.offset = self.offset.saturating_add(super::footer::FOOTER_LEN as u64);
        self.flush_out()?;
        self.file.sync()?;
        Ok(TableSummary {
            path: self.file.path().to_path_buf(),
            file_size: self.offset,
            properties: self.properties,
            range_tombstones,
        })
    }

    fn flush_data_block(&mut self) -> Result<()> {
        let index_key = self.data_block.last_key().to_vec();
        let raw = self.data_block.finish();
        self.properties.max_block_bytes = self.properties.max_block_bytes.max(raw.len() as u64);
        self.properties.num_data_blocks += 1;
        if let DictionaryState::Collecting { blocks, bytes, .. } = &mut self.dictionary {
            *bytes += raw.len();
            blocks.push((index_key, raw.to_vec()));
            self.data_block.reset();
            let enough = dictionary_training_bytes(self.options.dictionary_bytes);
            return if *bytes >= enough {
                self.settle_dictionary()
            } else {
                Ok(())
            };
        }
        let handle = append_data_block(&mut self.encoder, &mut self.out, &mut self.offset, raw);
        self.data_block.reset();
        self.add_index_entry(&index_key, handle);
        self.flush_if_full()
    }

    /// Trains the dictionary on the blocks held (if it is still collecting) and writes them
    /// with it. A failed training (too few or too uniform samples) leaves the table without one.
    fn settle_dictionary(&mut self) -> Result<()> {
        let (level, blocks) = match &mut self.dictionary {
            DictionaryState::Collecting { level, blocks, .. } => (*level, std::mem::take(blocks)),
            _ => return Ok(()),
        };
        let samples: Vec<&[u8]> = blocks.iter().map(|(_, raw)| raw.as_slice()).collect();
        let trained = zstd::dict::from_samples(&samples, self.options.dictionary_bytes)
            .ok()
            .filter(|d| !d.is_empty());
        if let Some(dictionary) = &trained {
            self.encoder
                .set_dictionary(level, dictionary)
                .map_err(|e| Error::InvalidArgument(format!("zstd dictionary: {e}")))?;
        }
        self.dictionary = DictionaryState::Settled(trained);
        for (index_key, raw) in blocks {
            let handle =
                append_data_block(&mut self.encoder, &mut self.out, &mut self.offset, &raw);
            self.add_index_entry(&index_key, handle);
            self.flush_if_full()?;
        }
        Ok(())
    }

    fn add_index_entry(&mut self, index_key: &[u8], handle: BlockHandle) {
        self.scratch.clear();
        handle.encode_varint(&mut self.scratch);
        self.index_block.add(index_key, &[&self.scratch]);
    }

    fn write_block(&mut self, raw: &[u8], compress: bool) -> Result<BlockHandle> {
        let handle = append_block(
            &mut self.encoder,
            &mut self.out,
            &mut self.offset,
            raw,
            compress,
        );
        self.flush_if_full()?;
        Ok(handle)
    }

    fn flush_if_full(&mut self) -> Result<()> {
        if self.out.len() >= WRITE_CHUNK {
            self.flush_out()?;
        }
        Ok(())
    }

    fn flush_out(&mut self) -> Result<()> {
        if !self.out.is_empty() {
            self.file.append(&self.out)?;
            self.out.clear();
        }
        Ok(())
    }
}

/// Encodes the data block `raw` onto `out` at `offset` (with the table's dictionary, once it has
/// one) and advances `offset` past it.
fn append_data_block(
    encoder: &mut BlockEncoder,
    out: &mut Vec<u8>,
    offset: &mut u64,
    raw: &[u8],
) -> BlockHandle {
    let before = out.len();
    let size = encoder.encode_data(raw, out);
    let handle = BlockHandle {
        offset: *offset,
        size,
    };
    *offset += (out.len() - before) as u64;
    handle
}

/// Encodes `raw` onto `out` at `offset` and advances `offset` past it.
fn append_block(
    encoder: &mut BlockEncoder,
    out: &mut Vec<u8>,
    offset: &mut u64,
    raw: &[u8],
    compress: bool,
) -> BlockHandle {
    let before = out.len();
    let size = if compress {
        encoder.encode(raw, out)
    } else {
        BlockEncoder::encode_raw(raw, out)
    };
    let handle = BlockHandle {
        offset: *offset,
        size,
    };
    *offset += (out.len() - before) as u64;
    handle
}
