//! Versioned schema migrations. Each is idempotent (it checks before it changes anything) and
//! is recorded in the catalog once applied, so a reopened database does not run it again.

use cairn::WriteBatch;

use crate::error::{Error, Result};
use crate::keys;
use crate::row::DELETED_AT;
use crate::schema::{Index, TableDef};
use crate::tables::{Catalog, Tables, add_index_def};
use crate::targets;

/// Adds a leading `deleted_at` index to every purge target that lacks one, so the purger's
/// `deleted_at < cutoff` selection is a range scan instead of a full table scan.
pub const DELETED_AT_INDEX: u64 = 20_260_731_120_000;

/// Every migration, in the order they apply.
pub(crate) const ALL: &[u64] = &[DELETED_AT_INDEX];

impl Tables {
    /// Applies every pending migration, in version order, and records each. Idempotent.
    /// Returns the versions this call applied.
    ///
    /// # Errors
    /// As [`add_index`](Self::add_index).
    pub fn migrate(&self) -> Result<Vec<u64>> {
        let mut catalog = self.catalog_mut();
        let mut applied = Vec::new();
        for &version in ALL {
            if catalog.migrations.contains_key(&version) {
                continue;
            }
            apply(self, &mut catalog, version)?;
            let now = self.inner.db.now_ms();
            let mut batch = WriteBatch::new();
            batch.put_cf(&self.inner.cf, keys::migration(version), now.to_be_bytes());
            self.write_synced(batch)?;
            catalog.migrations.insert(version, now);
            tracing::info!(version, "applied migration");
            applied.push(version);
        }
        Ok(applied)
    }

    /// The migrations applied to this database, in version order.
    pub fn applied_migrations(&self) -> Vec<u64> {
        self.catalog().migrations.keys().copied().collect()
    }
}

fn apply(tables: &Tables, catalog: &mut Catalog, version: u64) -> Result<()> {
    match version {
        DELETED_AT_INDEX => add_deleted_at_indexes(tables, catalog),
        other => Err(Error::invalid(format!("unknown migration {other}"))),
    }
}

fn add_deleted_at_indexes(tables: &Tables, catalog: &mut Catalog) -> Result<()> {
    for name in targets::migration_targets() {
        let Ok(def) = catalog.def(&name) else {
            continue;
        };
        let mut def = TableDef::clone(def);
        if declare_deleted_at_index(&mut def)? {
            tables.backfill_and_store(catalog, &def)?;
        }
    }
    Ok(())
}

/// Adds `idx_<table>_deleted_at` to `def` if it soft-deletes, is a purge target and has no
/// index led by `deleted_at`. Returns whether it added one (the caller back-fills it).
pub(crate) fn declare_deleted_at_index(def: &mut TableDef) -> Result<bool> {
    let is_target = targets::migration_targets().contains(&def.name);
    if !is_target || !def.soft_delete || def.deleted_at_index().is_some() {
        return Ok(false);
    }
    let index = Index {
        name: format!("idx_{}_{DELETED_AT}", def.name),
        columns: vec![DELETED_AT.to_owned()],
        unique: false,
    };
    add_index_def(def, index)?;
    Ok(true)
}
