//! `cairn inspect levels`: each column family's tables summed by level, from a read-only
//! open, as tables or JSON, and drawn with `--plot`.

use std::path::Path;

use cairn::TableInfo;
use serde::Serialize;

use crate::output::{
    self, FAILED, LEVEL_HEADER, LevelSums, age_text, print_json, print_table, time_text,
};
use crate::plot::LevelBar;

/// One level of one column family, summed over its tables.
#[derive(Debug, Default, Clone, Serialize)]
struct LevelRow {
    column_family: String,
    #[serde(flatten)]
    sums: LevelSums,
    /// When its oldest tombstone was written.
    oldest_tombstone_ms: Option<u64>,
    oldest_tombstone: Option<String>,
    /// How long ago, on the system clock (none on the stress harness's manual clock).
    oldest_tombstone_age_ms: Option<u64>,
    oldest_tombstone_age: Option<String>,
}

pub fn run(dir: &Path, plot: Option<&Path>, json: bool) -> i32 {
    let png = |p: &Path| p.extension().is_some_and(|x| x.eq_ignore_ascii_case("png"));
    if let Some(p) = plot.filter(|p| !png(p)) {
        return crate::bad_args(&format!(
            "--plot {}: the chart is a PNG: give a file ending in .png",
            p.display()
        ));
    }
    if let Some(Err(code)) = plot.map(|p| output::check_output_path("--plot", p)) {
        return code;
    }
    let db = match output::open_read_only(dir) {
        Ok(db) => db,
        Err(code) => return code,
    };
    let now = output::age_clock(dir, db.now_ms());
    let rows = match level_rows(&db, now) {
        Ok(rows) => rows,
        Err(e) => return output::engine_failed("inspect levels", &e),
    };
    if let Some(path) = plot {
        let bars: Vec<LevelBar> = rows
            .iter()
            .map(|r| LevelBar {
                label: format!("{} L{}", r.column_family, r.sums.level),
                bytes: r.sums.bytes,
                tombstone_share: r.sums.tombstone_share(),
            })
            .collect();
        let title = format!(
            "{} at {}",
            dir.display(),
            time_text(
                u64::try_from(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap_or_default()
                        .as_millis()
                )
                .unwrap_or(u64::MAX)
            )
        );
        if let Err(e) = crate::plot::levels(&bars, &title, path) {
            eprintln!("cairn inspect levels: cannot draw {}: {e}", path.display());
            return FAILED;
        }
        eprintln!("cairn inspect levels: drew {}", path.display());
    }
    output::not_verified("inspect levels", dir);
    if json {
        print_json(&rows);
    } else {
        print_levels(&rows);
    }
    0
}

/// Every column family's levels that hold a table, in family and level order.
fn level_rows(db: &cairn::Db, now: Option<u64>) -> cairn::Result<Vec<LevelRow>> {
    let mut rows = Vec::new();
    let mut names = db.list_column_families();
    names.sort();
    for name in names {
        let tables = db.column_family(&name)?.tables()?;
        let deepest = tables.iter().map(|t| t.level).max();
        for level in 0..=deepest.unwrap_or(0) {
            let on: Vec<&TableInfo> = tables.iter().filter(|t| t.level == level).collect();
            if on.is_empty() {
                continue;
            }
            let oldest = on.iter().filter_map(|t| t.oldest_tombstone_time).min();
            rows.push(LevelRow {
                column_family: name.clone(),
                sums: LevelSums {
                    level,
                    files: on.len(),
                    bytes: on.iter().map(|t| t.bytes).sum(),
                    entries: on.iter().map(|t| t.entries).sum(),
                    point_tombstones: on.iter().map(|t| t.point_tombstones).sum(),
                    range_tombstones: on.iter().map(|t| t.range_tombstones).sum(),
                },
                oldest_tombstone_ms: oldest,
                oldest_tombstone: oldest.map(time_text),
                oldest_tombstone_age_ms: oldest.and_then(|t| output::age_ms(now, t)),
                oldest_tombstone_age: oldest.map(|t| age_text(now, t)),
            });
        }
    }
    Ok(rows)
}

fn print_levels(rows: &[LevelRow]) {
    if rows.is_empty() {
        println!("no tables (everything is still in the log, or the database is empty)");
    }
    let mut families: Vec<&str> = rows.iter().map(|r| r.column_family.as_str()).collect();
    families.dedup();
    for (i, family) in families.into_iter().enumerate() {
        if i > 0 {
            println!();
        }
        println!("{family}:");
        let cells: Vec<Vec<String>> = rows
            .iter()
            .filter(|r| r.column_family == family)
            .map(|r| {
                let mut cells = r.sums.cells();
                cells.push(format!("{:.1}%", r.sums.tombstone_share() * 100.0));
                cells.push(
                    r.oldest_tombstone_age
                        .clone()
                        .unwrap_or_else(|| "-".to_owned()),
                );
                cells
            })
            .collect();
        let mut header = LEVEL_HEADER.to_vec();
        header.extend(["TOMBSTONE SHARE", "OLDEST TOMBSTONE AGE"]);
        print_table(&header, &cells);
    }
}
