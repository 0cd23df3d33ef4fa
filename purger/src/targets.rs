//! The tables each component purges and the lock each takes, as CubeSandbox's `tombstone`
//! package lists them. Only tables that are really soft-deleted and have no reclaimer of their
//! own are here: artifact tables have their own GC, append-only history never sets
//! `deleted_at`, hard-delete-only tables have nothing to purge.

/// The advisory lock CubeMaster's purger takes each tick.
pub const CUBEMASTER_LOCK: &str = "cubemaster_tombstone_purge_v1";

/// The advisory lock CubeOps' purger takes each tick.
pub const CUBEOPS_LOCK: &str = "cubeops_tombstone_purge_v1";

/// CubeMaster's purge targets. With `disable_hard_delete` the operator keeps instance records
/// for audit and recovery, and that wins over purging: `t_cube_instance_info` and
/// `t_cube_instance_userdata` are then left out.
pub fn cube_master_purge_tables(disable_hard_delete: bool) -> Vec<String> {
    let mut tables = vec!["t_cube_sandbox_spec", "t_cube_template_replica"];
    if !disable_hard_delete {
        tables.extend(["t_cube_instance_info", "t_cube_instance_userdata"]);
    }
    tables.into_iter().map(str::to_owned).collect()
}

/// CubeOps' purge targets.
pub fn cube_ops_purge_tables() -> Vec<String> {
    [
        "t_agenthub_instance",
        "t_agenthub_snapshot",
        "t_agenthub_template",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect()
}

/// Every table either component may purge: the ones migration `20260731120000` indexes.
pub(crate) fn migration_targets() -> Vec<String> {
    let mut tables = cube_master_purge_tables(false);
    tables.extend(cube_ops_purge_tables());
    tables
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disable_hard_delete_exempts_instance_records() {
        assert_eq!(
            cube_master_purge_tables(false),
            [
                "t_cube_sandbox_spec",
                "t_cube_template_replica",
                "t_cube_instance_info",
                "t_cube_instance_userdata"
            ]
        );
        assert_eq!(
            cube_master_purge_tables(true),
            ["t_cube_sandbox_spec", "t_cube_template_replica"]
        );
        assert_eq!(
            cube_ops_purge_tables(),
            [
                "t_agenthub_instance",
                "t_agenthub_snapshot",
                "t_agenthub_template"
            ]
        );
    }
}
