//! openraft's own storage test suite (`openraft::testing::Suite::test_all`), unpatched, against
//! the Cairn log store and state machine, each case on a fresh database in its own directory.

use std::sync::Arc;

use cairn::{Db, Options};
use cairn_raft::{LogStore, NodeId, StateMachine, TypeConfig};
use openraft::StorageError;
use openraft::testing::{StoreBuilder, Suite};
use tempfile::TempDir;

struct CairnBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for CairnBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError<NodeId>> {
        let dir = TempDir::new().map_err(|e| openraft::StorageIOError::write_logs(&e))?;
        let db = Db::open(dir.path(), Options::default())
            .map_err(|e| openraft::StorageIOError::write_logs(&e))?;
        let (log, state_machine) = cairn_raft::open_db(Arc::new(db))?;
        Ok((dir, log, state_machine))
    }
}

#[test]
fn openrafts_storage_suite_passes() {
    if let Err(e) = Suite::test_all(CairnBuilder) {
        panic!("openraft's storage suite failed: {e}");
    }
}
