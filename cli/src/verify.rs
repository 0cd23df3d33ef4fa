//! `cairn verify DIR` (ldb `checkconsistency`, `sst_dump --command=verify`): every block of
//! every table the MANIFEST lists, every log record and every MANIFEST edit read and checked,
//! each damage reported with its file and offset. Exit 0 only when clean, 1 when damage is
//! found, 2 when the database cannot be read at all, 4 when there is none. It takes no lock and changes nothing.

use clap::Args;
use serde::Serialize;

use crate::db_arg::{self, DbArg};
use crate::output::{self, NO, print_json};

#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    db: DbArg,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct DamageView {
    file: String,
    offset: Option<u64>,
    reason: String,
}

#[derive(Debug, Serialize)]
struct VerifyView {
    clean: bool,
    manifest: String,
    manifest_edits: u64,
    tables: u64,
    table_entries: u64,
    logs: u64,
    log_records: u64,
    damage: Vec<DamageView>,
}

pub fn run(args: &VerifyArgs) -> i32 {
    crate::init_logging(false);
    if let Err(code) = db_arg::check_database(args.db.path(), "") {
        return code;
    }
    let report = match cairn::verify(args.db.path()) {
        Ok(r) => r,
        Err(e) => return output::failed("verify", &e),
    };
    let view = VerifyView {
        clean: report.is_clean(),
        manifest: report.manifest.display().to_string(),
        manifest_edits: report.manifest_edits,
        tables: report.tables,
        table_entries: report.table_entries,
        logs: report.logs,
        log_records: report.log_records,
        damage: report
            .damage
            .iter()
            .map(|e| match e {
                cairn::Error::Corruption {
                    file,
                    offset,
                    reason,
                } => DamageView {
                    file: file.display().to_string(),
                    offset: Some(*offset),
                    reason: reason.clone(),
                },
                other => DamageView {
                    file: String::new(),
                    offset: None,
                    reason: other.to_string(),
                },
            })
            .collect(),
    };
    if args.json {
        print_json(&view);
    } else {
        let n = |v: u64, noun: &str| output::count(usize::try_from(v).unwrap_or(usize::MAX), noun);
        println!(
            "{}: {}; {}, {}; {}, {}",
            view.manifest,
            n(view.manifest_edits, "edit"),
            n(view.tables, "table"),
            n(view.table_entries, "entry"),
            n(view.logs, "log"),
            n(view.log_records, "record")
        );
        for d in &view.damage {
            match d.offset {
                Some(offset) => println!("DAMAGE {} at offset {offset}: {}", d.file, d.reason),
                None => println!("DAMAGE {}", d.reason),
            }
        }
        println!(
            "{}",
            if view.clean {
                "clean".to_owned()
            } else {
                format!("{} damaged", output::count(view.damage.len(), "place"))
            }
        );
    }
    if view.clean { 0 } else { NO }
}
