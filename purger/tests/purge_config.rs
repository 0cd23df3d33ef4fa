//! The `soft_delete_purge` block: defaults, clamps at their edges, errors naming the field.

use std::time::Duration;

use cairn_purger::{Error, PurgeConfig};

const HOUR: Duration = Duration::from_secs(3600);
const MINUTE: Duration = Duration::from_secs(60);

fn config(block: &str) -> PurgeConfig {
    PurgeConfig::from_yaml(&format!("soft_delete_purge:\n{block}")).expect("valid config")
}

#[test]
fn absent_enable_means_off_and_defaults_apply() {
    let c = PurgeConfig::from_yaml("common:\n  disable_hard_delete: true\n").expect("valid");
    assert_eq!(c, PurgeConfig::default());
    assert!(!c.enable);
    assert_eq!(c.retention, 168 * HOUR);
    assert_eq!(c.interval, HOUR);
    let c = config("  dry_run: true\n");
    assert!(!c.enable, "enable absent is off even with other fields set");
    assert!(c.dry_run);
    assert!(config("  enable: true\n").enable);
    assert!(!config("  enable: false\n").enable);
}

#[test]
fn retention_clamps_at_its_edges() {
    for (given, want) in [
        ("30m", HOUR),
        ("59m59s", HOUR),
        ("1h", HOUR),
        ("1h1s", HOUR + Duration::from_secs(1)),
        ("168h", 168 * HOUR),
        ("1ms", HOUR),
        ("0", 168 * HOUR),
        ("0s", 168 * HOUR),
        ("-1h", 168 * HOUR),
        ("-1ns", 168 * HOUR),
    ] {
        let c = config(&format!("  retention: {given}\n"));
        assert_eq!(c.retention, want, "retention {given}");
    }
    assert_eq!(
        config("  retention: 0\n").retention,
        168 * HOUR,
        "a bare 0 is zero"
    );
}

#[test]
fn interval_clamps_at_its_edges() {
    for (given, want) in [
        ("10s", MINUTE),
        ("59s", MINUTE),
        ("1m", MINUTE),
        ("90s", Duration::from_secs(90)),
        ("90m", 90 * MINUTE),
        ("0s", HOUR),
        ("-5m", HOUR),
    ] {
        let c = config(&format!("  interval: {given}\n"));
        assert_eq!(c.interval, want, "interval {given}");
    }
}

#[test]
fn a_config_built_in_code_is_clamped_the_same_way() {
    let c = PurgeConfig {
        enable: true,
        dry_run: false,
        retention: 30 * MINUTE,
        interval: Duration::ZERO,
        time_zone: None,
    }
    .clamped();
    assert_eq!((c.retention, c.interval), (HOUR, HOUR));
}

#[test]
fn the_zone_of_zoneless_times_is_an_iana_name_or_an_offset() {
    assert_eq!(config("  enable: true\n").time_zone, None);
    for (given, shown) in [
        ("America/New_York", "America/New_York"),
        ("\"-05:00\"", "-05:00"),
        ("-05:00", "-05:00"),
        ("+08:00", "+08:00"),
        ("\"+08:00\"", "+08:00"),
        ("UTC", "UTC"),
    ] {
        let zone = config(&format!("  time_zone: {given}\n")).time_zone;
        assert_eq!(
            zone.map(|z| z.to_string()).as_deref(),
            Some(shown),
            "{given}"
        );
    }
}

#[test]
fn errors_name_the_field() {
    for (text, field, needle) in [
        (
            // Days are taken (`7d`, unlike Go); weeks are not.
            "soft_delete_purge:\n  retention: 7w\n",
            "soft_delete_purge.retention",
            "7w",
        ),
        (
            "soft_delete_purge:\n  interval: soon\n",
            "soft_delete_purge.interval",
            "soon",
        ),
        (
            "soft_delete_purge:\n  interval: 10\n",
            "soft_delete_purge.interval",
            "unit",
        ),
        (
            "soft_delete_purge:\n  enable: maybe\n",
            "soft_delete_purge.enable",
            "invalid type",
        ),
        (
            "soft_delete_purge:\n  retension: 1h\n",
            "soft_delete_purge",
            "retension",
        ),
        ("soft_delete_purge: [1, 2\n", "soft_delete_purge", ""),
        (
            "soft_delete_purge:\n  time_zone: Mars/Olympus\n",
            "soft_delete_purge.time_zone",
            "Mars/Olympus",
        ),
    ] {
        let got = PurgeConfig::from_yaml(text);
        match &got {
            Err(e @ Error::Config { field: f, .. }) => {
                assert_eq!(f, field, "{text:?}");
                assert!(e.to_string().contains(needle), "{text:?}: {e}");
            }
            other => panic!("{text:?} gave {other:?}"),
        }
    }
}

#[test]
fn disable_hard_delete_is_read_from_the_common_block() {
    let read = cairn_purger::disable_hard_delete_from_yaml;
    assert!(!read("soft_delete_purge:\n  enable: true\n").expect("valid"));
    assert!(read("common:\n  disable_hard_delete: true\n").expect("valid"));
    assert!(!read("common:\n  disable_hard_delete: false\n").expect("valid"));
    let bad = read("common:\n  disable_hard_delete: sometimes\n");
    assert!(
        matches!(&bad, Err(Error::Config { field, .. }) if field == "common.disable_hard_delete"),
        "{bad:?}"
    );
}

const EXEMPT: [&str; 2] = ["t_cube_instance_info", "t_cube_instance_userdata"];

const DISABLED: &str = "\
soft_delete_purge:
  enable: true
  dry_run: true
common:
  disable_hard_delete: true
  other: 1
";

fn targets(setting: cairn_purger::HardDeleteSetting) -> Vec<String> {
    cairn_purger::cube_master_purge_tables(setting.disable_hard_delete)
}

#[test]
fn a_reload_that_cannot_be_read_keeps_the_instance_tables_exempt() {
    let good = cairn_purger::HardDeleteSetting::from_yaml(DISABLED).expect("valid");
    assert!(good.disable_hard_delete);
    let cut = DISABLED.find("common:").expect("a common block");
    for (what, text) in [
        ("empty", ""),
        ("only whitespace", "\n  \n"),
        ("truncated before the common block", &DISABLED[..cut]),
        (
            "truncated after `common:`",
            &DISABLED[..cut + "common:\n".len()],
        ),
        (
            "truncated mid-key",
            &DISABLED[..DISABLED.find("_delete").expect("the key")],
        ),
        (
            "truncated after the key",
            &DISABLED[..DISABLED.find(" true").expect("the value")],
        ),
        (
            "without the common block",
            "soft_delete_purge:\n  enable: true\n",
        ),
        ("the common block without the key", "common:\n  other: 1\n"),
        ("invalid YAML", "common:\n  disable_hard_delete: [true\n"),
        ("not a mapping", "- common\n"),
        (
            "a value that is not a bool",
            "common:\n  disable_hard_delete: sometimes\n",
        ),
    ] {
        let reload = good.reload(text);
        assert_eq!(reload.setting, good, "{what}: {text:?}");
        assert!(reload.warning.is_some(), "{what}: no warning");
        for table in EXEMPT {
            assert!(
                !targets(reload.setting).iter().any(|t| t == table),
                "{what}: {table} became a target"
            );
        }
        // The kept reading is still the last good one: a second bad read is judged against it.
        assert_eq!(reload.setting.reload(text).setting, good, "{what}, twice");
    }
}

#[test]
fn only_a_file_saying_false_makes_the_instance_tables_targets() {
    let good = cairn_purger::HardDeleteSetting::from_yaml(DISABLED).expect("valid");
    let reload = good.reload(&DISABLED.replace("true\n  other", "false\n  other"));
    assert_eq!(reload.warning, None);
    assert!(!reload.setting.disable_hard_delete);
    for table in EXEMPT {
        assert!(
            targets(reload.setting).iter().any(|t| t == table),
            "{table}"
        );
    }
    // And back: a file saying true exempts them again, without a warning.
    let again = reload.setting.reload(DISABLED);
    assert_eq!((again.setting, again.warning), (good, None));
}

#[test]
fn a_file_that_never_had_the_block_reads_false_without_warnings() {
    let none = cairn_purger::HardDeleteSetting::from_yaml("soft_delete_purge:\n  enable: true\n")
        .expect("valid");
    assert!(!none.disable_hard_delete, "CubeMaster's default");
    let reload = none.reload("soft_delete_purge:\n  enable: true\n");
    assert_eq!((reload.setting, reload.warning), (none, None));
    // A bad read still warns and keeps (false here).
    let bad = none.reload("soft_delete_purge: [\n");
    assert_eq!(bad.setting, none);
    assert!(bad.warning.is_some());
    // Gaining the block is taken at once.
    let gained = none.reload("common:\n  disable_hard_delete: true\n");
    assert!(gained.setting.disable_hard_delete);
    assert_eq!(gained.warning, None);
}
