//! The recovery modes differ only in what they do at damage, so on any bytes they agree: the
//! same records before the first damage, met at the same offset. This is the fuzz target's
//! property (`fuzz/fuzz_targets/log_reader.rs`) run on stable over damaged real logs.

mod common;

use cairn_wal::{BLOCK_SIZE, RecoveryMode};
use common::{ALL_MODES, TestLog, corruption_offset, payload, read_all, seed};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

/// A way to damage a log.
#[derive(Debug, Clone)]
enum Damage {
    Flip {
        at: prop::sample::Index,
        mask: u8,
    },
    Truncate(prop::sample::Index),
    Zero {
        at: prop::sample::Index,
        len: usize,
    },
    Garbage {
        at: prop::sample::Index,
        bytes: Vec<u8>,
    },
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<prop::sample::Index>(), 1..=255u8).prop_map(|(at, mask)| Damage::Flip { at, mask }),
        any::<prop::sample::Index>().prop_map(Damage::Truncate),
        (any::<prop::sample::Index>(), 1..40_000usize)
            .prop_map(|(at, len)| Damage::Zero { at, len }),
        (
            any::<prop::sample::Index>(),
            prop::collection::vec(any::<u8>(), 1..64)
        )
            .prop_map(|(at, bytes)| Damage::Garbage { at, bytes }),
    ]
}

fn apply(bytes: &mut Vec<u8>, damage: &Damage) {
    let len = bytes.len();
    if len == 0 {
        return;
    }
    match damage {
        Damage::Flip { at, mask } => {
            if let Some(b) = bytes.get_mut(at.index(len)) {
                *b ^= mask;
            }
        }
        Damage::Truncate(at) => bytes.truncate(at.index(bytes.len())),
        Damage::Zero { at, len } => {
            let start = at.index(bytes.len());
            let end = (start + len).min(bytes.len());
            if let Some(range) = bytes.get_mut(start..end) {
                range.fill(0);
            }
        }
        Damage::Garbage { at, bytes: garbage } => {
            let start = at.index(bytes.len());
            let end = (start + garbage.len()).min(bytes.len());
            if let (Some(range), Some(src)) =
                (bytes.get_mut(start..end), garbage.get(..end - start))
            {
                range.copy_from_slice(src);
            }
        }
    }
}

fn config() -> Config {
    Config {
        cases: common::cases(64),
        rng_seed: RngSeed::Fixed(seed()),
        failure_persistence: None,
        ..Config::default()
    }
}

/// Checks the agreement between modes on `bytes`.
fn assert_modes_agree(bytes: &[u8]) -> Result<(), TestCaseError> {
    let [tolerate, absolute, point, skip] = ALL_MODES.map(|mode| read_all(bytes, mode));
    let damage_at = |o: &common::Outcome| {
        let error = o
            .error
            .as_ref()
            .map(|e| corruption_offset(e).ok_or(format!("{e}")));
        error
            .transpose()
            .map(|e| e.or(o.stopped_at.as_ref().map(|d| d.offset)))
    };
    let first_damage = damage_at(&absolute).map_err(TestCaseError::fail)?;
    prop_assert_eq!(&absolute.records, &point.records);
    prop_assert_eq!(&absolute.records, &tolerate.records);
    prop_assert_eq!(
        damage_at(&point).map_err(TestCaseError::fail)?,
        first_damage
    );
    prop_assert_eq!(
        damage_at(&tolerate).map_err(TestCaseError::fail)?,
        first_damage
    );
    prop_assert!(skip.records.starts_with(&absolute.records));
    prop_assert_eq!(first_damage.is_some(), !skip.skipped.is_empty());
    prop_assert!(first_damage.is_none_or(|o| o < bytes.len() as u64));
    for outcome in [&tolerate, &absolute, &point, &skip] {
        let offsets: Vec<u64> = outcome.records.iter().map(|(o, _)| *o).collect();
        prop_assert!(offsets.windows(2).all(|w| w.first() < w.last()));
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn modes_agree_on_damaged_logs(
        lens in prop::collection::vec(prop_oneof![0..100usize, 100..20_000usize], 1..10),
        damages in prop::collection::vec(damage(), 0..4),
    ) {
        let records = lens.iter().zip(0..).map(|(&len, seed)| payload(seed, len)).collect();
        let mut bytes = TestLog::write(records).bytes.to_vec();
        for damage in &damages {
            apply(&mut bytes, damage);
        }
        assert_modes_agree(&bytes)?;
    }

    #[test]
    fn modes_agree_on_random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..2 * BLOCK_SIZE)) {
        assert_modes_agree(&bytes)?;
    }
}

#[test]
fn default_mode_is_tolerate_corrupted_tail() {
    assert_eq!(RecoveryMode::default(), RecoveryMode::TolerateCorruptedTail);
}
