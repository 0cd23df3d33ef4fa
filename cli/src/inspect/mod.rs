//! `cairn inspect sst|manifest|levels`: what is on disk, read without opening the database for
//! writing (the `sst_dump` and `ldb manifest_dump` of Cairn).
//!
//! `sst` reads one table file alone; `manifest` decodes the MANIFEST edit by edit without
//! taking the lock; `levels` opens the database read-only (beside a live writer, if one runs)
//! and sums each column family's
//! tables by level, and can draw them (`--plot`, in `plot.rs`).

mod levels;
mod manifest;
mod sst;

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::db_arg::DbArg;

#[derive(Debug, Args)]
pub struct InspectArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// One table file: properties, blocks, tombstone counts and density; `--entries` lists every entry.
    Sst {
        /// The `.sst` file.
        file: PathBuf,
        /// Every entry too: user key, seqno, kind, write time, TTL (and each range tombstone).
        #[arg(long)]
        entries: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// The version edits of the MANIFEST that CURRENT names, in order (takes no lock).
    Manifest {
        #[command(flatten)]
        db: DbArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Per column family and level: files, bytes, entries, tombstones, oldest tombstone age.
    Levels {
        #[command(flatten)]
        db: DbArg,
        /// Also draw bytes per level and the tombstone share into this PNG.
        #[arg(long, value_name = "FILE.png")]
        plot: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: &InspectArgs) -> i32 {
    crate::init_logging(false);
    match &args.what {
        What::Sst {
            file,
            entries,
            json,
        } => sst::run(file, *entries, *json),
        What::Manifest { db, json } => manifest::run(db.path(), *json),
        What::Levels { db, plot, json } => levels::run(db.path(), plot.as_deref(), *json),
    }
}
