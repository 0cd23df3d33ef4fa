//! The table layer's engine keys. Everything lives in one column family; the first byte says
//! what a key holds:
//!
//! | key | value |
//! | --- | --- |
//! | `c` table name | the table's definition (JSON) |
//! | `t` | the next table id (u32 BE) |
//! | `m` version (u64 BE) | when the migration was applied (ms, u64 BE) |
//! | `n` table id (u32 BE) | the row-id reservation: every id below it may be in use (u64 BE) |
//! | `r` table id, row id (u64 BE) | the row |
//! | `x` table id, index id (u16 BE), ordered values | unique index: the row id (u64 BE) |
//! | `x` table id, index id, ordered values, row id | secondary index: empty |
//! | `l` lock name | the advisory lock's holder and lease expiry |
//!
//! Big-endian ids keep a table's rows in id order and an index's entries in value order.

use crate::error::{Error, Result};
use crate::schema::IndexDef;
use crate::value::{Value, encode_ordered};

pub(crate) const NEXT_TABLE_ID: &[u8] = b"t";

pub(crate) fn table_def(name: &str) -> Vec<u8> {
    [b"c", name.as_bytes()].concat()
}

pub(crate) const TABLE_DEFS: &[u8] = b"c";

pub(crate) fn migration(version: u64) -> Vec<u8> {
    [&b"m"[..], &version.to_be_bytes()].concat()
}

pub(crate) const MIGRATIONS: &[u8] = b"m";

pub(crate) fn id_reservation(table: u32) -> Vec<u8> {
    [&b"n"[..], &table.to_be_bytes()].concat()
}

pub(crate) fn row_prefix(table: u32) -> Vec<u8> {
    [&b"r"[..], &table.to_be_bytes()].concat()
}

pub(crate) fn row(table: u32, id: u64) -> Vec<u8> {
    [&row_prefix(table)[..], &id.to_be_bytes()].concat()
}

/// The row id at the end of a row key or a secondary index key.
pub(crate) fn trailing_id(key: &[u8]) -> Result<u64> {
    key.last_chunk::<8>()
        .map(|b| u64::from_be_bytes(*b))
        .ok_or_else(|| Error::corruption(key, "key too short to end in a row id"))
}

pub(crate) fn index_prefix(table: u32, index: u16) -> Vec<u8> {
    [&b"x"[..], &table.to_be_bytes(), &index.to_be_bytes()].concat()
}

/// `[start, end)` of the entries of every index id from `next` up: ids no definition of the
/// table has reached, where only a back-fill a crash interrupted can have left entries.
pub(crate) fn unused_indexes(table: u32, next: u16) -> (Vec<u8>, Vec<u8>) {
    // The end of the table's whole index space; never `None`: the prefix starts with `x`.
    let end = prefix_end(&[&b"x"[..], &table.to_be_bytes()].concat()).unwrap_or_default();
    (index_prefix(table, next), end)
}

/// The index entry `values` (a whole row, in column order) gives row `id`, or `None` for a
/// unique index and a key holding a NULL (NULLs never collide, so they are not indexed).
pub(crate) fn index_entry(
    table: u32,
    index: &IndexDef,
    values: &[Value],
    id: u64,
) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut key = index_prefix(table, index.id);
    for &p in &index.positions {
        let value = values.get(p).unwrap_or(&Value::Null);
        if index.index.unique && value.is_null() {
            return None;
        }
        encode_ordered(value, &mut key);
    }
    if index.index.unique {
        Some((key, id.to_be_bytes().to_vec()))
    } else {
        key.extend_from_slice(&id.to_be_bytes());
        Some((key, Vec::new()))
    }
}

/// The unique-index key for `values` given in the index's own column order.
pub(crate) fn unique_lookup(table: u32, index: &IndexDef, values: &[Value]) -> Vec<u8> {
    let mut key = index_prefix(table, index.id);
    for value in values {
        encode_ordered(value, &mut key);
    }
    key
}

pub(crate) fn lock(name: &str) -> Vec<u8> {
    [b"l", name.as_bytes()].concat()
}

/// The smallest key greater than every key starting with `prefix` (`None` if there is none).
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// A row id read from a unique index entry's value.
pub(crate) fn id_value(key: &[u8], value: &[u8]) -> Result<u64> {
    <[u8; 8]>::try_from(value)
        .map(u64::from_be_bytes)
        .map_err(|_| Error::corruption(key, format!("row id of {} bytes", value.len())))
}
