//! What a run is asked to do: the settings every workload and engine reads, below both (the
//! engines open with them, the workloads run by them).

use std::time::Duration;

use cairn_sstable::Compression;

/// What a run is asked to do.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Settings {
    /// Keys written by fills.
    pub num: u64,
    /// Bytes per value.
    pub value_size: usize,
    /// Lookups and seeks of the read workloads.
    pub reads: u64,
    /// Seed of every random order.
    pub seed: u64,
    /// Queue operations (a pop and a push each).
    pub queue_ops: u64,
    /// Items in the queue.
    pub queue_items: u64,
    /// The queue's time cap per engine, in seconds.
    pub queue_cap_secs: u64,
    /// Idle seconds a peer gets, after its own wait, to settle after mass deletes.
    pub idle_secs: u64,
    /// Keep each database's directory for inspection instead of removing it.
    pub keep_dirs: bool,
    /// Tables uncompressed, in every engine.
    pub uncompressed: bool,
    /// Cairn's memtable size, if not its default.
    pub memtable_bytes: Option<usize>,
    /// Cairn's read trigger (tombstones a scan steps over), if not its default.
    pub read_trigger: Option<u64>,
    /// How Cairn compresses its tables (`--uncompressed` overrides it).
    pub cairn_compression: CairnCompression,
    /// Bytes of zstd dictionary Cairn trains per zstd table (0: none).
    pub zstd_dictionary_bytes: usize,
    /// How long `readwhilewriting` reads and writes.
    #[serde(serialize_with = "as_secs")]
    pub rww_duration: Duration,
    /// Puts per second of `readwhilewriting`'s writer.
    pub rww_write_rate: u64,
    /// Reader threads of `readwhilewriting`.
    pub rww_readers: usize,
    /// How long `churn` runs.
    #[serde(serialize_with = "as_secs")]
    pub churn_duration: Duration,
    /// How often `churn` records a sample.
    #[serde(serialize_with = "as_secs")]
    pub churn_sample: Duration,
}

/// A duration in the JSON file: seconds.
fn as_secs<S: serde::Serializer>(d: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// How Cairn compresses its tables in a run (`--cairn-compression`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CairnCompression {
    /// Cairn's defaults.
    #[default]
    Default,
    /// No compression anywhere (what `--uncompressed` gives every engine).
    None,
    /// LZ4 everywhere (what fjall offers).
    Lz4,
    /// zstd level 3 everywhere.
    Zstd,
    /// LZ4 above the last level, zstd level 3 in it.
    Lz4Zstd,
    /// None above the last level, zstd level 3 in it.
    NoneZstd,
}

impl CairnCompression {
    /// The compression above the last level and in it; `None` for the engine's defaults.
    pub(crate) fn levels(self) -> Option<(Compression, Compression)> {
        let zstd = Compression::Zstd(3);
        match self {
            Self::Default => Option::None,
            Self::None => Some((Compression::None, Compression::None)),
            Self::Lz4 => Some((Compression::Lz4, Compression::Lz4)),
            Self::Zstd => Some((zstd, zstd)),
            Self::Lz4Zstd => Some((Compression::Lz4, zstd)),
            Self::NoneZstd => Some((Compression::None, zstd)),
        }
    }

    /// How the report names it.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Default => "Cairn's default (lz4 above the last level, zstd 3 in it)",
            Self::None => "none",
            Self::Lz4 => "lz4",
            Self::Zstd => "zstd 3",
            Self::Lz4Zstd => "lz4 above the last level, zstd 3 in it",
            Self::NoneZstd => "none above the last level, zstd 3 in it",
        }
    }
}
