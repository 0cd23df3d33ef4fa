//! `cairn cf list|create|drop DIR`: a database's column families. `list` opens it read-only;
//! `create` and `drop` open it for writing (the service must be stopped), after checking the
//! name read-only, so a refused command changes no file.

use std::time::Duration;

use cairn::CfOptions;
use clap::{Args, Subcommand};
use serde::Serialize;

use crate::db_arg::{DbArg, DbPos};
use crate::kv::human_ms;
use crate::output::{self, print_json, print_table};

#[derive(Debug, Args)]
pub struct CfArgs {
    #[command(subcommand)]
    command: CfCommand,
}

#[derive(Debug, Subcommand)]
enum CfCommand {
    /// The column families with their TTL, version limit and tombstone grace (read-only).
    List {
        #[command(flatten)]
        db: DbArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Creates a column family (the service must be stopped).
    Create {
        #[command(flatten)]
        db: DbPos,
        /// The new family's name.
        name: String,
        /// Every value expires this long after it is written (`30d`, `1h`; at least 1s).
        #[arg(long, value_parser = output::parse_duration)]
        ttl: Option<Duration>,
        /// Versions of a key reads may see (at least 1).
        #[arg(long)]
        max_versions: Option<u32>,
        /// How long a tombstone is kept before compaction may drop it.
        #[arg(long, value_parser = output::parse_duration)]
        grace: Option<Duration>,
    },
    /// Drops a column family and its data (the service must be stopped).
    Drop {
        #[command(flatten)]
        db: DbPos,
        /// The family's name (not `default`).
        name: String,
    },
}

#[derive(Debug, Serialize)]
struct FamilyView {
    name: String,
    ttl_ms: Option<u64>,
    ttl: Option<String>,
    max_versions: u32,
    tombstone_grace_ms: u64,
    tombstone_grace: String,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub fn run(args: &CfArgs) -> i32 {
    crate::init_logging(false);
    match &args.command {
        CfCommand::List { db, json } => list(db.path(), *json),
        CfCommand::Create {
            db,
            name,
            ttl,
            max_versions,
            grace,
        } => {
            if ttl.is_some_and(|t| t < crate::kv::MIN_TTL) {
                return crate::bad_args(
                    "a TTL under 1s expires every value before anyone can read it: give --ttl \
                     1s or more",
                );
            }
            if name.starts_with("cairn.") {
                return crate::bad_args(&format!(
                    "{name:?}: names starting with `cairn.` are Cairn's own (the purger's and the \
                     TTL tasks' tables: `cairn purge --init` or `cairn ttl trigger --init` make them)"
                ));
            }
            if *max_versions == Some(0) {
                return crate::bad_args("--max-versions must be at least 1");
            }
            let mut options = CfOptions::default();
            if let Some(t) = ttl {
                options = options.ttl(*t);
            }
            if let Some(n) = max_versions {
                options = options.max_versions(*n);
            }
            if let Some(g) = grace {
                options = options.tombstone_grace(*g);
            }
            change(db.path(), name, false, |db| {
                db.create_column_family(name, options).map(|_| ())
            })
        }
        CfCommand::Drop { db, name } => {
            if name == "default" {
                return crate::bad_args("the default column family cannot be dropped");
            }
            change(db.path(), name, true, |db| db.drop_column_family(name))
        }
    }
}

fn list(dir: &std::path::Path, json: bool) -> i32 {
    let db = match output::open_read_only(dir) {
        Ok(db) => db,
        Err(code) => return code,
    };
    let mut views = Vec::new();
    for name in db.list_column_families() {
        let options = match db.column_family(&name).and_then(|cf| cf.options()) {
            Ok(o) => o,
            Err(e) => return output::engine_failed("cf list", &e),
        };
        views.push(FamilyView {
            ttl_ms: options.ttl_value().map(ms),
            ttl: options.ttl_value().map(|t| human_ms(ms(t))),
            max_versions: options.max_versions_value(),
            tombstone_grace_ms: ms(options.tombstone_grace_value()),
            tombstone_grace: human_ms(ms(options.tombstone_grace_value())),
            name,
        });
    }
    if json {
        print_json(&views);
    } else {
        let rows: Vec<Vec<String>> = views
            .iter()
            .map(|v| {
                vec![
                    v.name.clone(),
                    v.ttl.clone().unwrap_or_else(|| "-".to_owned()),
                    v.max_versions.to_string(),
                    v.tombstone_grace.clone(),
                ]
            })
            .collect();
        print_table(
            &["COLUMN FAMILY", "TTL", "MAX VERSIONS", "TOMBSTONE GRACE"],
            &rows,
        );
    }
    0
}

/// Checks read-only that `name` exists (`must_exist`) or does not, then applies `op` on a
/// database opened for writing.
fn change(
    dir: &std::path::Path,
    name: &str,
    must_exist: bool,
    op: impl FnOnce(&cairn::Db) -> cairn::Result<()>,
) -> i32 {
    let names = match output::open_read_only(dir) {
        Ok(db) => db.list_column_families(),
        Err(code) => return code,
    };
    let exists = names.iter().any(|n| n == name);
    if exists != must_exist {
        let why = if exists {
            "already exists"
        } else {
            "does not exist"
        };
        return crate::bad_args(&format!(
            "column family {name:?} {why} (the database has {})",
            names.join(", ")
        ));
    }
    let db = match output::open_for_writing(dir) {
        Ok(db) => db,
        Err(code) => return code,
    };
    if let Err(e) = op(&db) {
        let _ = db.close();
        return output::engine_failed("cf", &e);
    }
    match db.close() {
        Ok(()) => 0,
        Err(e) => output::failed("cf (closing failed)", &e),
    }
}
