//! `cairn`: stress and crash-test storage engines, starting with Cairn, and look inside a
//! Cairn database: what is on disk, why deleted data is still there, where a key still lies.
//!
//! Exit codes: 0 pass (or done), 1 a verification failed (for `purge`, a table failed; for
//! `get`, no value; for `audit`, traces remain), 2 the engine failed or the database could not
//! be read (damage, I/O), 3 bad arguments or configuration, 4 not found (no such directory or
//! file, not a database), 5 locked by another process, 6 a replicated write's outcome is unknown
//! (its answer was lost after it was sent).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cf;
mod cluster;
mod cluster_stress;
mod compact;
mod db_arg;
mod dump;
mod erasure_cmd;
mod explain;
mod harness_cmd;
mod inspect;
mod kv;
mod output;
mod plot;
mod progress;
mod purge;
mod purge_demo;
mod serve;
mod signals;
mod ttl;
mod verify;

#[derive(Debug, Parser)]
#[command(
    name = "cairn",
    version,
    about = "Stress and crash-test Cairn, an LSM engine where deletion is done right, and look inside its databases",
    after_help = "The database is named first: cairn COMMAND DB …\n\
                  Exit codes: 0 done, 1 a check failed or the answer is no (get: no value, audit: traces remain), \
                  2 the engine failed or the database could not be read, 3 bad arguments, 4 not found \
                  (no such directory, not a database), 5 locked by another process, 6 a replicated write's \
                  outcome is unknown (its answer was lost). \
                  Durations read as 20s, 10m, 1h, 1d or 500ms; sizes as 4096, 64KiB or 1MiB."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Random concurrent operations with every read verified; 60 s on a temporary database by default.
    Stress(Box<harness_cmd::StressArgs>),
    /// Kill -9 and power-loss crash loops with full verification after each crash.
    Crashtest(harness_cmd::CrashArgs),
    /// The soft-delete tombstone purger over a database's tables; `purge demo` shows it end to end.
    Purge(purge::PurgeArgs),
    /// TTL tasks: status|trigger|suspend|resume|cancel|history of a database's expiry reclaiming.
    Ttl(ttl::TtlArgs),
    /// What is on disk: one table file, the MANIFEST's edits, or the levels of each column family.
    Inspect(inspect::InspectArgs),
    /// Why each tombstone in a range is still kept, grouped by reason (read-only).
    Explain(explain::ExplainArgs),
    /// Every place a key still lies; exits 0 only when nothing remains (read-only).
    Audit(explain::AuditArgs),
    /// The value of one key (read-only; exits 1 when it has none).
    Get(kv::GetArgs),
    /// Sets one key (the service must be stopped); `--ttl 1h` gives the cell a lifetime.
    Put(kv::PutArgs),
    /// Deletes one key (the service must be stopped).
    Delete(kv::DeleteArgs),
    /// Deletes the keys in [START, END) with one range tombstone (the service must be stopped).
    DeleteRange(kv::DeleteRangeArgs),
    /// Keys and values in order, from --from to --to (read-only).
    Scan(kv::ScanArgs),
    /// Levels, tombstones pending and droppable, memtables (read-only).
    Stats(kv::StatsArgs),
    /// Compacts a family's tables (or a key range) down to the last level (the service must be stopped).
    Compact(compact::CompactArgs),
    /// Writes the log's entries into level-0 tables (the service must be stopped).
    Flush(compact::FlushArgs),
    /// Reads every block, log record and MANIFEST edit; exits 0 only when nothing is damaged (read-only).
    Verify(verify::VerifyArgs),
    /// Each record of a write-ahead log: seqno, operations, keys (the file alone).
    DumpLog(dump::DumpLogArgs),
    /// A family's keys and values as JSON Lines, for `cairn load` (read-only).
    Dump(dump::DumpArgs),
    /// Writes JSON Lines of keys and values, as `cairn dump` prints them (the service must be stopped).
    Load(dump::LoadArgs),
    /// Column families: list (read-only), create, drop.
    Cf(cf::CfArgs),
    /// Runs one node of a replicated Cairn (openraft over TCP); stops cleanly on SIGTERM.
    Serve(serve::ServeArgs),
    /// A replicated Cairn's members: init, status, add, remove.
    Cluster(cluster::ClusterArgs),
    /// Reads and writes through a replicated Cairn's leader: put, get, delete, delete-range, scan.
    Kv(cluster::KvArgs),
}

fn main() -> ExitCode {
    quiet_on_closed_stdout();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 3 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let code = match cli.command {
        Command::Stress(args) => harness_cmd::stress(*args),
        Command::Crashtest(args) => harness_cmd::crashtest(&args),
        Command::Purge(args) => purge::run(args),
        Command::Ttl(args) => ttl::run(&args),
        Command::Inspect(args) => inspect::run(&args),
        Command::Explain(args) => explain::explain(&args),
        Command::Audit(args) => explain::audit(&args),
        Command::Get(args) => kv::get(&args),
        Command::Put(args) => kv::put(&args),
        Command::Delete(args) => kv::delete(&args),
        Command::DeleteRange(args) => kv::delete_range(&args),
        Command::Scan(args) => kv::scan(&args),
        Command::Stats(args) => kv::stats(&args),
        Command::Compact(args) => compact::compact(&args),
        Command::Flush(args) => compact::flush(&args),
        Command::Verify(args) => verify::run(&args),
        Command::DumpLog(args) => dump::dump_log(&args),
        Command::Dump(args) => dump::dump(&args),
        Command::Load(args) => dump::load(&args),
        Command::Cf(args) => cf::run(&args),
        Command::Serve(args) => serve::run(&args),
        Command::Cluster(args) => cluster::run(args),
        Command::Kv(args) => cluster::kv(args),
    };
    ExitCode::from(u8::try_from(code).unwrap_or(2))
}

/// Ends the process quietly when stdout is closed under it (`cairn scan DIR | head`), as
/// programs that die of SIGPIPE do, instead of the panic `println!` raises; any other failure
/// to write stdout (a full disk) is one line on stderr and exit 2. Other panics keep the
/// default report.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") {
            if message.contains("Broken pipe") {
                std::process::exit(0);
            }
            // A full disk or another write error: say so plainly, no Rust panic report.
            let why = message.trim_start_matches("failed printing to stdout: ");
            eprintln!("cairn: cannot write the output: {why}");
            std::process::exit(2);
        }
        default(info);
    }));
}

fn init_logging(quiet: bool) {
    let default = if quiet { "error" } else { "warn" };
    init_logging_with(default);
}

/// Logs to stderr at `default` unless `RUST_LOG` says otherwise.
fn init_logging_with(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colour only for a person at a terminal who has not asked for none (`NO_COLOR`).
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| progress::LogWriter)
        .with_ansi(colour)
        .try_init();
}

fn bad_args(why: &str) -> i32 {
    eprintln!("cairn: bad arguments: {why}");
    3
}
