//! Which column families a TTL task covers, and how each splits into tablet tasks: key-range
//! partitions of about `tablet_bytes` each, cut at the starts of the family's tables.

use cairn::{ColumnFamily, Db, TableInfo};

use super::error::TtlResult;

/// One tablet task to create: a family and a key range (`None`: unbounded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tablet {
    pub(crate) family: String,
    pub(crate) family_id: u32,
    /// From 1 within the family.
    pub(crate) id: i64,
    pub(crate) start: Option<Vec<u8>>,
    pub(crate) end: Option<Vec<u8>>,
}

/// The tablets of every family that has something for a TTL task to reclaim: a TTL, a version
/// limit above one, or tables holding cells with their own TTL.
pub(crate) fn tablets(db: &Db, tablet_bytes: u64) -> TtlResult<Vec<Tablet>> {
    let mut out = Vec::new();
    for name in db.list_column_families() {
        let cf = match db.column_family(&name) {
            Ok(cf) => cf,
            Err(cairn::Error::ColumnFamilyNotFound(_)) => continue, // dropped meanwhile
            Err(e) => return Err(e.into()),
        };
        let Some(tables) = covered(&cf)? else {
            continue;
        };
        out.extend(partitions(&cf, &tables, tablet_bytes));
    }
    Ok(out)
}

/// The family's tables if a TTL task covers it.
fn covered(cf: &ColumnFamily) -> TtlResult<Option<Vec<TableInfo>>> {
    let options = match cf.options() {
        Ok(o) => o,
        Err(cairn::Error::ColumnFamilyNotFound(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let tables = match cf.tables() {
        Ok(t) => t,
        Err(cairn::Error::ColumnFamilyNotFound(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let cell_ttls = tables.iter().any(|t| t.earliest_expiry.is_some());
    let covered = options.ttl_value().is_some() || options.max_versions_value() > 1 || cell_ttls;
    Ok(covered.then_some(tables))
}

/// Cuts the family's key space at table starts, each piece holding about `tablet_bytes` of
/// tables; the first piece is open below, the last open above.
fn partitions(cf: &ColumnFamily, tables: &[TableInfo], tablet_bytes: u64) -> Vec<Tablet> {
    let mut by_start: Vec<&TableInfo> = tables.iter().collect();
    by_start.sort_by(|a, b| a.smallest.cmp(&b.smallest));
    let mut cuts: Vec<Vec<u8>> = Vec::new();
    let mut held = 0u64;
    for table in by_start {
        if held >= tablet_bytes.max(1)
            && cuts
                .last()
                .is_none_or(|c| c.as_slice() < table.smallest.as_ref())
        {
            cuts.push(table.smallest.to_vec());
            held = 0;
        }
        held += table.bytes;
    }
    let starts = std::iter::once(None).chain(cuts.iter().cloned().map(Some));
    let ends = cuts.iter().cloned().map(Some).chain(std::iter::once(None));
    starts
        .zip(ends)
        .zip(1..)
        .map(|((start, end), id)| Tablet {
            family: cf.name().to_owned(),
            family_id: cf.id(),
            id,
            start,
            end,
        })
        .collect()
}

/// One step of a tablet task: a compaction of `[from, last]` (`from` `None`: from the start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) from: Option<Vec<u8>>,
    /// The last key of the step; `None`: up to the tablet's end (exclusive).
    pub(crate) last: Option<Vec<u8>>,
    /// Where the next step starts; `None`: this is the tablet's last step.
    pub(crate) next: Option<Vec<u8>>,
}

/// The next step of the tablet `[start, end)` from `from`: up to the end of the first table
/// of `cf` that reaches `from`, so a step rewrites about one table. `None` if no table reaches
/// `from` (the tablet is done).
pub(crate) fn next_step(
    cf: &ColumnFamily,
    from: Option<&[u8]>,
    end: Option<&[u8]>,
) -> TtlResult<Option<Step>> {
    let first_end = cf
        .tables()?
        .into_iter()
        .filter(|t| from.is_none_or(|f| t.largest.as_ref() >= f))
        .filter(|t| end.is_none_or(|e| t.smallest.as_ref() < e))
        .map(|t| t.largest)
        .min();
    let Some(first_end) = first_end else {
        return Ok(None);
    };
    let from = from.map(<[u8]>::to_vec);
    if end.is_some_and(|e| first_end.as_ref() >= e) {
        return Ok(Some(Step {
            from,
            last: None,
            next: None,
        }));
    }
    // The smallest key above `first_end`.
    let mut next = first_end.to_vec();
    next.push(0);
    Ok(Some(Step {
        from,
        last: Some(first_end.to_vec()),
        next: Some(next),
    }))
}
