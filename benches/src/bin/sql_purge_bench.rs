//! `sql-purge-bench`: the soft-delete purger over MySQL/MariaDB or PostgreSQL. Per round, in the
//! database the URL names: a fresh GORM-shaped table of N rows soft-deleted long ago (so all
//! eligible; with `--sparse-every K` one in K, the rest live), purged to the end in passes
//! (5,000 rows a pass, 500 a batch) once with the `deleted_at` index of migration
//! `20260731120000` and once without. Reports medians of rows purged per second and the index's
//! speed-up measured side by side in each round.
//!
//! ```sh
//! cargo run --release -p cairn-bench --bin sql-purge-bench -- \
//!     --database-url mysql://root@127.0.0.1:3306/test --rows 1000000 --runs 3
//! ```

use std::time::{Duration, Instant};

use cairn_purger::{Dialect, PurgeConfig, Purger, SqlBackend};
use clap::Parser;
use sqlx::mysql::MySqlConnection;
use sqlx::postgres::PgConnection;
use sqlx::{Connection as _, Executor as _};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[derive(Debug, Parser)]
#[command(about = "Rows per second the purger deletes from a MySQL or PostgreSQL table")]
struct Args {
    /// The database (`mysql://…` or `postgres://…`); the bench creates and drops its table
    #[arg(long)]
    database_url: String,
    /// Rows in the table, all eligible
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    /// Rounds; the table shows medians
    #[arg(long, default_value_t = 3)]
    runs: u64,
    /// One row in this many is eligible, the rest live (1: all eligible)
    #[arg(long, default_value_t = 1)]
    sparse_every: u64,
}

const TABLE: &str = "cairn_purge_bench";

/// Rows purged per second in one round, with the index and without.
#[derive(Debug, Default)]
struct Round {
    indexed: f64,
    full_scan: f64,
}

type Metric = fn(&Round) -> f64;

fn main() -> Result<()> {
    let args = Args::parse();
    if args.rows > 1_000_000 {
        return Err(
            "--rows: at most 1,000,000 (the fill crosses a 1,000-row table with itself)".into(),
        );
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let dialect = Dialect::from_url(&args.database_url)?;
    let mut rounds = Vec::new();
    for run in 0..args.runs {
        let mut round = Round::default();
        for indexed in [true, false] {
            let fill = Instant::now();
            let filling =
                create_and_fill(&args.database_url, dialect, args.rows, args.sparse_every);
            runtime.block_on(filling)?;
            eprintln!("round {run}: {} rows in {:.1?}", args.rows, fill.elapsed());
            let eligible = args.rows.div_ceil(args.sparse_every.max(1));
            let rate = purge_all(&args.database_url, indexed, eligible)?;
            eprintln!("round {run}: indexed {indexed}: {rate:.0} rows/s");
            if indexed {
                round.indexed = rate;
            } else {
                round.full_scan = rate;
            }
        }
        rounds.push(round);
    }
    runtime.block_on(run_sql(&args.database_url, dialect, &[drop_table(dialect)]))?;
    let median = |f: Metric| {
        let mut v: Vec<f64> = rounds.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    println!(
        "{dialect:?}: {} rows, {} eligible, {} rounds, medians of rows purged per second:",
        args.rows,
        args.rows.div_ceil(args.sparse_every.max(1)),
        args.runs
    );
    let lines: [(&str, Metric); 3] = [
        ("deleted_at index", |r| r.indexed),
        ("no index (full scans)", |r| r.full_scan),
        ("  index speed-up (x)", |r| r.indexed / r.full_scan),
    ];
    for (name, f) in lines {
        let per_round: Vec<String> = rounds.iter().map(|r| format!("{:.1}", f(r))).collect();
        println!(
            "  {name:<24} {:>12.1}   rounds: {}",
            median(f),
            per_round.join(" ")
        );
    }
    Ok(())
}

fn drop_table(dialect: Dialect) -> String {
    format!("DROP TABLE IF EXISTS {}", dialect.quote(TABLE))
}

/// A fresh table of `rows` rows, one in `every` soft-deleted in 2020 and the rest live, made by
/// the server from a 1,000-row helper table crossed with itself.
async fn create_and_fill(url: &str, dialect: Dialect, rows: u64, every: u64) -> Result<()> {
    let every = every.max(1);
    let old = match dialect {
        Dialect::MySql => "TIMESTAMP '2020-01-01 00:00:00'",
        Dialect::Postgres => "TIMESTAMPTZ '2020-01-01 00:00:00+00'",
    };
    let t = dialect.quote(TABLE);
    let digits = dialect.quote("cairn_purge_bench_digits");
    let create = match dialect {
        Dialect::MySql => format!(
            "CREATE TABLE {t} (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, \
             name VARCHAR(191) NOT NULL, spec TEXT NULL, deleted_at DATETIME(3) NULL, \
             UNIQUE KEY uk_bench_name (name)) ENGINE=InnoDB"
        ),
        Dialect::Postgres => format!(
            "CREATE TABLE {t} (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL UNIQUE, \
             spec TEXT NULL, deleted_at TIMESTAMPTZ(3) NULL)"
        ),
    };
    let values: Vec<String> = (0..1000).map(|n| format!("({n})")).collect();
    let mut statements = vec![
        drop_table(dialect),
        format!("DROP TABLE IF EXISTS {digits}"),
        create,
        format!("CREATE TABLE {digits} (n INT NOT NULL)"),
        format!("INSERT INTO {digits} (n) VALUES {}", values.join(", ")),
        format!(
            "INSERT INTO {t} (name, spec, deleted_at) \
             SELECT CONCAT('sandbox-', a.n * 1000 + b.n), CONCAT('{{\"cpu\": ', b.n % 16, '}}'), \
             CASE WHEN (a.n * 1000 + b.n) % {every} = 0 THEN {old} END \
             FROM {digits} a CROSS JOIN {digits} b \
             WHERE a.n * 1000 + b.n < {rows}"
        ),
        format!("DROP TABLE {digits}"),
    ];
    if dialect == Dialect::Postgres {
        // As autovacuum would soon after a bulk load: fresh statistics, a visibility map.
        statements.push(format!("VACUUM ANALYZE {t}"));
    }
    run_sql(url, dialect, &statements).await
}

async fn run_sql(url: &str, dialect: Dialect, statements: &[String]) -> Result<()> {
    match dialect {
        Dialect::MySql => {
            let mut c = MySqlConnection::connect(url).await?;
            for s in statements {
                c.execute(sqlx::raw_sql(s)).await?;
            }
            c.close().await?;
        }
        Dialect::Postgres => {
            let mut c = PgConnection::connect(url).await?;
            for s in statements {
                c.execute(sqlx::raw_sql(s)).await?;
            }
            c.close().await?;
        }
    }
    Ok(())
}

/// Passes until one purges nothing; rows purged per second (the migration, when `indexed`, is
/// timed apart and not counted). Fails unless exactly `rows` went.
fn purge_all(url: &str, indexed: bool, rows: u64) -> Result<f64> {
    let backend = SqlBackend::new(url)?;
    if indexed {
        let start = Instant::now();
        backend.migrate(&[TABLE.to_owned()])?;
        eprintln!("  migration 20260731120000: {:.1?}", start.elapsed());
    }
    // The bench writes its MySQL `DATETIME` values in UTC.
    let config = PurgeConfig {
        enable: true,
        time_zone: Some(cairn_purger::TimeZone::UTC),
        ..PurgeConfig::default()
    };
    let purger = Purger::new(
        backend,
        "cairn_purge_bench",
        || vec![TABLE.to_owned()],
        config,
    );
    let start = Instant::now();
    let mut total = 0;
    loop {
        let report = purger.run_pass()?;
        if report
            .tables
            .first()
            .is_some_and(|t| t.full_scan == indexed)
        {
            return Err("the index is not what the round asked for".into());
        }
        if report.purged() == 0 {
            break;
        }
        total += report.purged();
    }
    let elapsed = start.elapsed();
    if total != rows {
        return Err(format!("purged {total} of {rows} rows").into());
    }
    Ok(rate(rows, elapsed))
}

#[allow(clippy::cast_precision_loss, reason = "a rate, not an exact count")]
fn rate(n: u64, elapsed: Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64().max(1e-9)
}
