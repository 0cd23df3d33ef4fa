//! The `soft_delete_purge` configuration block, as CubeSandbox reads it: every field optional,
//! off unless `enable: true`, durations in Go's syntax (`168h`, `90m`, `1h30m`, `-5s`), and
//! clamps that keep a slip of the keyboard from purging everything at once. `time_zone` names
//! the zone that zoneless `deleted_at` columns are written in (see [`TimeZone`]).

use std::time::Duration;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::zone::TimeZone;

/// The retention used when none (or a non-positive one) is given: 7 days.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(168 * 3600);
/// The shortest retention: shorter positive values are raised to it.
pub const MIN_RETENTION: Duration = Duration::from_secs(3600);
/// The interval used when none (or a non-positive one) is given.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(3600);
/// The shortest interval: shorter positive values are raised to it.
pub const MIN_INTERVAL: Duration = Duration::from_secs(60);

/// What the purger does, after clamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PurgeConfig {
    /// Whether the purger runs at all (default off: purging cannot be undone).
    pub enable: bool,
    /// Count what would be purged and delete nothing.
    pub dry_run: bool,
    /// Rows soft-deleted longer ago than this are purged.
    pub retention: Duration,
    /// The time from the end of one pass to the start of the next.
    pub interval: Duration,
    /// The zone the application writes zoneless `deleted_at` values in (MySQL `DATETIME`,
    /// PostgreSQL `timestamp`). Without it such a table is refused: the purger cannot tell an
    /// hour-old row from a fresh one written five hours west of UTC. Zoned columns (MySQL
    /// `TIMESTAMP`, PostgreSQL `timestamptz`) and the embedded tables need none.
    pub time_zone: Option<TimeZone>,
}

impl Default for PurgeConfig {
    fn default() -> Self {
        Self {
            enable: false,
            dry_run: false,
            retention: DEFAULT_RETENTION,
            interval: DEFAULT_INTERVAL,
            time_zone: None,
        }
    }
}

#[derive(Debug, Deserialize)]
struct File {
    soft_delete_purge: Option<Block>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Block {
    enable: Option<bool>,
    dry_run: Option<bool>,
    retention: Option<GoDuration>,
    interval: Option<GoDuration>,
    time_zone: Option<String>,
}

/// A duration as YAML gives it: a Go duration string, or a bare number (only 0 is accepted).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum GoDuration {
    Text(String),
    Nanos(i64),
}

impl PurgeConfig {
    /// Reads the `soft_delete_purge` block of a YAML document (other top-level keys are the
    /// rest of the component's configuration and are ignored) and applies the clamps.
    ///
    /// ```
    /// use std::time::Duration;
    /// let config = cairn_purger::PurgeConfig::from_yaml(
    ///     "soft_delete_purge:\n  enable: true\n  retention: 30m\n  interval: 0s\n",
    /// )?;
    /// assert!(config.enable);
    /// assert_eq!(config.retention, Duration::from_secs(3600)); // (0, 1h) -> 1h
    /// assert_eq!(config.interval, Duration::from_secs(3600)); // <= 0 -> 1h
    /// # Ok::<(), cairn_purger::Error>(())
    /// ```
    ///
    /// # Errors
    /// `Config` naming the field for bad YAML, an unknown field in the block, a wrong type or
    /// a bad duration.
    pub fn from_yaml(text: &str) -> Result<Self> {
        let file: File = serde_yaml_ng::from_str(text).map_err(|e| yaml_error(&e))?;
        let Some(block) = file.soft_delete_purge else {
            return Ok(Self::default());
        };
        let retention = parse_field(block.retention, "retention")?;
        let interval = parse_field(block.interval, "interval")?;
        let time_zone = block
            .time_zone
            .map(|text| TimeZone::parse_text(&text))
            .transpose()
            .map_err(|reason| Error::Config {
                field: "soft_delete_purge.time_zone".to_owned(),
                reason,
            })?;
        Ok(Self {
            enable: block.enable.unwrap_or(false),
            dry_run: block.dry_run.unwrap_or(false),
            retention: clamp(retention, DEFAULT_RETENTION, MIN_RETENTION),
            interval: clamp(interval, DEFAULT_INTERVAL, MIN_INTERVAL),
            time_zone,
        })
    }

    /// This configuration with the clamps applied (for one built in code): a zero retention
    /// or interval becomes the default, a positive one below the minimum becomes the minimum.
    #[must_use]
    pub fn clamped(self) -> Self {
        let nanos = |d: Duration| Some(i128::try_from(d.as_nanos()).unwrap_or(i128::MAX));
        Self {
            retention: clamp(nanos(self.retention), DEFAULT_RETENTION, MIN_RETENTION),
            interval: clamp(nanos(self.interval), DEFAULT_INTERVAL, MIN_INTERVAL),
            ..self
        }
    }
}

/// CubeMaster's `common.disable_hard_delete` (absent: `false`), which decides whether the
/// instance tables are purge targets (see [`cube_master_purge_tables`](crate::cube_master_purge_tables)).
///
/// # Errors
/// `Config` naming `common.disable_hard_delete` for bad YAML or a value that is not a bool.
pub fn disable_hard_delete_from_yaml(text: &str) -> Result<bool> {
    HardDeleteSetting::from_yaml(text).map(|s| s.disable_hard_delete)
}

/// One good reading of CubeMaster's `common.disable_hard_delete`: the value, and how much of
/// it the file spelled out. A purger that re-reads its config at every pass keeps the last
/// good reading and asks [`reload`](Self::reload) whether a new text may replace it.
///
/// The rule, because purging cannot be undone: a file that does not parse, or that lost the
/// `common` block or the `disable_hard_delete` key the last good reading had (an empty file,
/// one truncated mid-write, one whose block was cut), keeps the last good value and warns.
/// Only a file that says `disable_hard_delete: false` turns an exemption off.
///
/// ```
/// use cairn_purger::HardDeleteSetting;
/// let good = HardDeleteSetting::from_yaml("common:\n  disable_hard_delete: true\n")?;
/// let empty = good.reload("");
/// assert!(empty.setting.disable_hard_delete && empty.warning.is_some());
/// let off = good.reload("common:\n  disable_hard_delete: false\n");
/// assert!(!off.setting.disable_hard_delete && off.warning.is_none());
/// # Ok::<(), cairn_purger::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HardDeleteSetting {
    /// Whether hard deletes of instance records are disabled (the instance tables exempt).
    pub disable_hard_delete: bool,
    said: Said,
}

/// How much of `common.disable_hard_delete` a file spelled out; ordered, so that "less than
/// the last good reading" is a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Said {
    /// No `common` block.
    Nothing,
    /// A `common` block without a `disable_hard_delete` value.
    Block,
    /// `disable_hard_delete: true` or `false`.
    Key,
}

impl Said {
    fn what(self) -> &'static str {
        match self {
            Self::Nothing => "no common block",
            Self::Block => "a common block without disable_hard_delete",
            Self::Key => "common.disable_hard_delete",
        }
    }
}

/// What a [`HardDeleteSetting::reload`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HardDeleteReload {
    /// The reading now in force: the new one, or the last good one kept.
    pub setting: HardDeleteSetting,
    /// Why the new text was not taken, to log as a warning; `None` when it was.
    pub warning: Option<String>,
}

impl HardDeleteSetting {
    /// Reads `common.disable_hard_delete` from a whole config file; a file without the block
    /// or the key reads as `false`, CubeMaster's default.
    ///
    /// # Errors
    /// `Config` naming `common.disable_hard_delete` for bad YAML, a top level or a `common`
    /// that is not a mapping, or a value that is not a bool.
    pub fn from_yaml(text: &str) -> Result<Self> {
        let bad = |reason: String| Error::Config {
            field: "common.disable_hard_delete".to_owned(),
            reason,
        };
        let file: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(text).map_err(|e| bad(e.to_string()))?;
        let common = match &file {
            // An empty document.
            serde_yaml_ng::Value::Null => None,
            serde_yaml_ng::Value::Mapping(top) => top.get("common"),
            _ => return Err(bad("the file is not a mapping of blocks".to_owned())),
        };
        let (disable_hard_delete, said) = match common {
            None => (false, Said::Nothing),
            Some(serde_yaml_ng::Value::Null) => (false, Said::Block),
            Some(serde_yaml_ng::Value::Mapping(block)) => match block.get("disable_hard_delete") {
                None | Some(serde_yaml_ng::Value::Null) => (false, Said::Block),
                Some(serde_yaml_ng::Value::Bool(value)) => (*value, Said::Key),
                Some(other) => return Err(bad(format!("expected true or false, got {other:?}"))),
            },
            Some(_) => return Err(bad("the common block is not a mapping".to_owned())),
        };
        Ok(Self {
            disable_hard_delete,
            said,
        })
    }

    /// Whether the instance tables stay out of the purge: unless the file said
    /// `disable_hard_delete: false` in so many words. A file that says nothing (no `common`
    /// block, or no key in it) may be one cut short mid-write, and a purge cannot be undone, so
    /// silence keeps them out, at the first read as at a re-read (CubeMaster itself reads
    /// silence as `false`).
    pub fn exempts_instance_tables(&self) -> bool {
        self.disable_hard_delete || self.said != Said::Key
    }

    /// Decides what a re-read of the config file yields, this being the last good reading:
    /// the new reading if `text` parses and says at least as much as this one did, else this
    /// one kept, with a warning saying why.
    #[must_use]
    pub fn reload(self, text: &str) -> HardDeleteReload {
        let keep = |why: String| HardDeleteReload {
            setting: self,
            warning: Some(format!(
                "{why}; keeping disable_hard_delete: {} from the last good read",
                self.disable_hard_delete
            )),
        };
        match Self::from_yaml(text) {
            Err(e) => keep(format!("the config does not parse ({e})")),
            Ok(new) if new.said < self.said => keep(format!(
                "the config has {} where the last good read had {}",
                new.said.what(),
                self.said.what()
            )),
            Ok(new) => HardDeleteReload {
                setting: new,
                warning: None,
            },
        }
    }
}

fn parse_field(value: Option<GoDuration>, name: &str) -> Result<Option<i128>> {
    let field = || format!("soft_delete_purge.{name}");
    match value {
        None => Ok(None),
        Some(GoDuration::Nanos(0)) => Ok(Some(0)),
        // Go would read a bare number as nanoseconds; `interval: 10` is far likelier to be a
        // slip than 10ns, so it is refused rather than clamped silently.
        Some(GoDuration::Nanos(n)) => Err(Error::Config {
            field: field(),
            reason: format!("bad duration {n}: missing unit (write 10s, 5m or 1h)"),
        }),
        Some(GoDuration::Text(text)) => {
            if text.contains('d') {
                tracing::warn!(
                    field = %field(),
                    value = %text,
                    "Go's time.ParseDuration has no `d`: a Go service reading this file too \
                     (CubeMaster's replicas) will refuse it; write hours (`168h`) in a shared file"
                );
            }
            parse_go_duration(&text)
                .map(Some)
                .map_err(|reason| Error::Config {
                    field: field(),
                    reason,
                })
        }
    }
}

/// `None` or `<= 0` → `default`; `(0, min)` → `min`; otherwise the value.
fn clamp(nanos: Option<i128>, default: Duration, min: Duration) -> Duration {
    match nanos {
        None => default,
        Some(n) if n <= 0 => default,
        Some(n) => {
            let d = Duration::from_nanos(u64::try_from(n).unwrap_or(u64::MAX));
            d.max(min)
        }
    }
}

/// A YAML error as a config error: the field is the path the parser names at the start of its
/// message (`soft_delete_purge.enable: invalid type …`), so it is said once.
fn yaml_error(e: &serde_yaml_ng::Error) -> Error {
    let text = e.to_string();
    match text.split_once(": ") {
        Some((path, reason)) if path.starts_with("soft_delete_purge") && !path.contains(' ') => {
            Error::Config {
                field: path.to_owned(),
                reason: reason.to_owned(),
            }
        }
        _ => Error::Config {
            field: "soft_delete_purge".to_owned(),
            reason: text,
        },
    }
}

/// Parses a Go duration (`time.ParseDuration`): an optional sign, then one or more decimal
/// numbers (a fraction allowed) each with a unit of `ns`, `us` (`µs`), `ms`, `s`, `m` or `h`
/// (and `d`, 24 hours, which Go lacks but the command line takes); or a bare `0`. Returns
/// nanoseconds.
pub(crate) fn parse_go_duration(text: &str) -> std::result::Result<i128, String> {
    let bad = |why: &str| format!("bad duration {text:?}: {why}");
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(bad("empty"));
    }
    let mut total: i128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let scale: i128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "d" => 86_400_000_000_000,
            "" => return Err(bad("missing unit")),
            other => return Err(bad(&format!("unknown unit {other:?}"))),
        };
        total = total
            .checked_add(scaled(number, scale).ok_or_else(|| bad("not a number"))?)
            .filter(|t| *t <= i128::from(i64::MAX))
            .ok_or_else(|| bad("out of range"))?;
        rest = after;
    }
    Ok(if negative { -total } else { total })
}

/// `number` (digits, maybe with one `.`) times `scale`, in whole nanoseconds.
fn scaled(number: &str, scale: i128) -> Option<i128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    if !digits(whole) || !digits(fraction) {
        return None;
    }
    let whole: i128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut value = whole.checked_mul(scale)?;
    let mut place = scale;
    for c in fraction.chars().take(18) {
        place /= 10;
        value += i128::from(c.to_digit(10)?) * place;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_as_go_parses_them() {
        let cases: &[(&str, i128)] = &[
            ("0", 0),
            ("168h", 168 * 3_600_000_000_000),
            ("90m", 90 * 60_000_000_000),
            ("1h30m", 90 * 60_000_000_000),
            ("30s", 30_000_000_000),
            ("1.5s", 1_500_000_000),
            (".5m", 30_000_000_000),
            ("-1h", -3_600_000_000_000),
            ("+10s", 10_000_000_000),
            ("250ms", 250_000_000),
            ("3us", 3_000),
            ("3µs", 3_000),
            ("7ns", 7),
            ("0s", 0),
            // Days, as the command line takes them (issue 32): Go has none.
            ("7d", 7 * 86_400_000_000_000),
            ("1d12h", 36 * 3_600_000_000_000),
        ];
        for &(text, nanos) in cases {
            assert_eq!(parse_go_duration(text), Ok(nanos), "{text}");
        }
        for bad in [
            "",
            "-",
            "7w",
            "10",
            "h",
            "1.2.3s",
            "1h 2m",
            "99999999999h",
            ".",
        ] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn a_yaml_error_names_its_field_once() {
        for (text, field) in [
            (
                "soft_delete_purge:\n  bogus: 1\n",
                "config: soft_delete_purge: unknown field",
            ),
            (
                "soft_delete_purge:\n  enable: yes please\n",
                "config: soft_delete_purge.enable: invalid type",
            ),
        ] {
            let message = PurgeConfig::from_yaml(text)
                .expect_err("refused")
                .to_string();
            assert!(message.starts_with(field), "{message}");
            assert_eq!(message.matches("soft_delete_purge").count(), 1, "{message}");
        }
    }
}
