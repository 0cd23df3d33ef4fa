//! A named, lease-based advisory lock stored in the engine: MySQL's `GET_LOCK` for replicas
//! that share one database through this process, with a lease so that a holder that dies
//! without releasing loses the lock once its lease runs out.
//!
//! Acquiring never waits: it reads the lock record in a transaction and writes its own if the
//! record is absent, expired or already its own; two sessions racing conflict at commit and
//! only one wins. Leases are measured on the engine clock.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::keys;
use crate::tables::Tables;

/// The holder of a lock and when its lease ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Who holds it.
    pub holder: String,
    /// When the lease ends, in engine-clock milliseconds.
    pub expires_at_ms: u64,
}

impl Tables {
    /// The named advisory lock (see [`AdvisoryLock`]).
    pub fn advisory_lock(&self, name: &str) -> AdvisoryLock {
        AdvisoryLock::new(self.clone(), name)
    }
}

/// One named advisory lock, from [`Tables::advisory_lock`].
///
/// ```
/// use std::time::Duration;
/// # fn main() -> cairn_purger::Result<()> {
/// # let dir = tempfile::tempdir().map_err(cairn_fs::Error::from).map_err(cairn::Error::from)?;
/// # let db = std::sync::Arc::new(cairn::Db::open(dir.path(), cairn::Options::default())?);
/// let tables = cairn_purger::Tables::open(db)?;
/// let lock = tables.advisory_lock(cairn_purger::CUBEMASTER_LOCK);
/// assert!(lock.try_acquire("replica-a", Duration::from_secs(60))?);
/// assert!(!lock.try_acquire("replica-b", Duration::from_secs(60))?);
/// assert!(lock.release("replica-b").is_err()); // current session did not hold lock
/// lock.release("replica-a")?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct AdvisoryLock {
    tables: Tables,
    name: String,
}

impl AdvisoryLock {
    pub(crate) fn new(tables: Tables, name: &str) -> Self {
        Self {
            tables,
            name: name.to_owned(),
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Takes the lock for `holder` for `lease`, without waiting. Returns `true` if `holder`
    /// now holds it (taking it anew, or renewing its own lease), `false` if another holder's
    /// lease is still running or another session took it at the same moment.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty holder or a lease under 1ms; engine errors.
    pub fn try_acquire(&self, holder: &str, lease: Duration) -> Result<bool> {
        if holder.is_empty() {
            return Err(Error::invalid("an advisory lock holder needs a name"));
        }
        if lease < Duration::from_millis(1) {
            return Err(Error::invalid(
                "an advisory lock lease must be at least 1ms",
            ));
        }
        let db = &self.tables.inner.db;
        let key = keys::lock(&self.name);
        let mut tx = db.transaction();
        let now = db.now_ms();
        if let Some(current) = self.read(&mut tx, &key)?
            && current.holder != holder
            && current.expires_at_ms > now
        {
            return Ok(false);
        }
        let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        let record = encode(holder, now.saturating_add(lease_ms));
        tx.put_cf(&self.tables.inner.cf, &key, record);
        match tx.commit() {
            Ok(_) => Ok(true),
            Err(cairn::Error::Conflict { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Releases the lock `holder` holds.
    ///
    /// # Errors
    /// `LockNotHeld` ("current session did not hold lock") if `holder` does not hold it: it
    /// is free, another holder has it, or another session took it over after `holder`'s lease
    /// ran out.
    pub fn release(&self, holder: &str) -> Result<()> {
        let db = &self.tables.inner.db;
        let key = keys::lock(&self.name);
        let mut tx = db.transaction();
        let not_held = || Error::LockNotHeld {
            name: self.name.clone(),
        };
        match self.read(&mut tx, &key)? {
            Some(current) if current.holder == holder => {}
            _ => return Err(not_held()),
        }
        tx.delete_cf(&self.tables.inner.cf, &key);
        match tx.commit() {
            Ok(_) => Ok(()),
            Err(cairn::Error::Conflict { .. }) => Err(not_held()),
            Err(e) => Err(e.into()),
        }
    }

    /// Who holds the lock now, if anyone's lease is running.
    ///
    /// # Errors
    /// Engine errors; `Corruption` for an undecodable record.
    pub fn holder(&self) -> Result<Option<Lease>> {
        let key = keys::lock(&self.name);
        let now = self.tables.inner.db.now_ms();
        let current = self.tables.inner.cf.get(&key)?;
        let current = current.map(|bytes| decode(&key, &bytes)).transpose()?;
        Ok(current.filter(|lease| lease.expires_at_ms > now))
    }

    /// Fails with `LockLost` unless `holder` holds the lock with a lease still running, as
    /// `tx` reads it. The read is checked at commit: if another session takes the lock after
    /// `tx`'s snapshot, `tx`'s commit conflicts. So a write made under the lock commits only
    /// while the lock is really held.
    pub(crate) fn check_held(&self, tx: &mut cairn::Transaction<'_>, holder: &str) -> Result<()> {
        let now = self.tables.inner.db.now_ms();
        match self.read(tx, &keys::lock(&self.name))? {
            Some(lease) if lease.holder == holder && lease.expires_at_ms > now => Ok(()),
            _ => Err(Error::LockLost {
                name: self.name.clone(),
            }),
        }
    }

    fn read(&self, tx: &mut cairn::Transaction<'_>, key: &[u8]) -> Result<Option<Lease>> {
        tx.get_cf(&self.tables.inner.cf, key)?
            .map(|bytes| decode(key, &bytes))
            .transpose()
    }
}

/// A lock record: the lease end (u64 BE), then the holder's name.
fn encode(holder: &str, expires_at_ms: u64) -> Vec<u8> {
    [&expires_at_ms.to_be_bytes()[..], holder.as_bytes()].concat()
}

fn decode(key: &[u8], bytes: &[u8]) -> Result<Lease> {
    let (expiry, holder) = bytes
        .split_first_chunk::<8>()
        .ok_or_else(|| Error::corruption(key, "lock record shorter than its lease"))?;
    let holder = std::str::from_utf8(holder)
        .map_err(|_| Error::corruption(key, "lock holder is not UTF-8"))?;
    Ok(Lease {
        holder: holder.to_owned(),
        expires_at_ms: u64::from_be_bytes(*expiry),
    })
}
