//! The TTL task manager's settings, named after OceanBase's tenant parameters
//! (`enable_kv_ttl`, `kv_ttl_duty_duration`, `kv_ttl_history_recycle_interval`,
//! `ttl_thread_score`), and the daily duty window they give periodic tasks.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, NaiveDate, Timelike as _};

use super::error::{TtlError, TtlResult};
use crate::zone::TimeZone;

const DAY_SECS: u32 = 86_400;

/// The shortest `kv_ttl_history_recycle_interval` (OceanBase's bound): one day.
pub const MIN_HISTORY_RECYCLE_INTERVAL: Duration = Duration::from_secs(86_400);
/// The longest `kv_ttl_history_recycle_interval` (OceanBase's bound): 180 days.
pub const MAX_HISTORY_RECYCLE_INTERVAL: Duration = Duration::from_secs(180 * 86_400);

/// How the TTL tasks run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TtlSettings {
    /// Off (the default), every command fails with [`TtlError::NotEnabled`] and nothing runs.
    pub enable_kv_ttl: bool,
    /// The daily window in which a periodic task starts; empty (the default): no periodic tasks.
    pub kv_ttl_duty_duration: DutyDuration,
    /// How long finished tasks stay in `kv_ttl_task_history` (default 7 days; from 1 to 180
    /// days, as OceanBase allows).
    pub kv_ttl_history_recycle_interval: Duration,
    /// Worker threads running tablet tasks (default 2, at least 1).
    pub ttl_thread_score: usize,
    /// The zone whose wall clock `kv_ttl_duty_duration` is read in (default UTC). OceanBase
    /// reads it in the tenant's time zone: `"[02:00:00, 04:00:00]"` at `+08:00` opens at 18:00
    /// UTC.
    pub time_zone: TimeZone,
}

impl Default for TtlSettings {
    fn default() -> Self {
        Self {
            enable_kv_ttl: false,
            kv_ttl_duty_duration: DutyDuration::default(),
            kv_ttl_history_recycle_interval: Duration::from_secs(7 * 86_400),
            ttl_thread_score: 2,
            time_zone: TimeZone::UTC,
        }
    }
}

impl TtlSettings {
    /// Checks the settings' bounds: `kv_ttl_history_recycle_interval` from
    /// one day to 180 days (`MIN_HISTORY_RECYCLE_INTERVAL` to `MAX_HISTORY_RECYCLE_INTERVAL`).
    /// [`TtlTasks::open`](super::TtlTasks::open) refuses settings that fail this.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cairn_purger::TtlSettings;
    /// let hourly = TtlSettings {
    ///     kv_ttl_history_recycle_interval: Duration::from_secs(3600),
    ///     ..TtlSettings::default()
    /// };
    /// assert!(hourly.validate().is_err());
    /// assert!(TtlSettings::default().validate().is_ok());
    /// ```
    ///
    /// # Errors
    /// `InvalidArgument` naming the setting, its value and the bounds.
    pub fn validate(&self) -> TtlResult<()> {
        let interval = self.kv_ttl_history_recycle_interval;
        if !(MIN_HISTORY_RECYCLE_INTERVAL..=MAX_HISTORY_RECYCLE_INTERVAL).contains(&interval) {
            return Err(TtlError::InvalidArgument(format!(
                "kv_ttl_history_recycle_interval {interval:?}: must be from 1 day (86400s) to \
                 180 days (15552000s)"
            )));
        }
        Ok(())
    }
}

/// A daily window `[start, end]` of wall-clock times on the engine clock, read in
/// [`TtlSettings::time_zone`], written `"[22:00:00, 24:00:00]"`; the empty string is no window. A
/// window whose start is after its end wraps past midnight. In a zone with daylight saving, a
/// window the clocks skip does not open that day, and one they repeat opens once.
///
/// ```
/// use cairn_purger::DutyDuration;
/// let window: DutyDuration = "[22:00:00, 24:00:00]".parse().expect("valid");
/// assert_eq!(window.to_string(), "[22:00:00, 24:00:00]");
/// assert!("".parse::<DutyDuration>().expect("empty").is_empty());
/// assert!("[25:00:00, 26:00:00]".parse::<DutyDuration>().is_err());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DutyDuration {
    /// `(start, end)` in seconds of the day, both inclusive; `None` for no window.
    window: Option<(u32, u32)>,
}

impl DutyDuration {
    /// True if there is no window (no periodic tasks).
    pub fn is_empty(&self) -> bool {
        self.window.is_none()
    }

    /// The window occurrence the time `now_ms` falls in, its wall clock read in `zone`, named
    /// by the day (of that wall clock, since 1970-01-01) it started on; `None` outside the
    /// window.
    pub(crate) fn occurrence(&self, now_ms: u64, zone: TimeZone) -> Option<u64> {
        let (start, end) = self.window?;
        let wall = zone.wall(DateTime::from_timestamp_millis(
            i64::try_from(now_ms).ok()?,
        )?);
        // `NaiveDate::default()` is 1970-01-01.
        let day = u64::try_from((wall.date() - NaiveDate::default()).num_days()).ok()?;
        let second = wall.time().num_seconds_from_midnight();
        if start <= end {
            (start <= second && second <= end).then_some(day)
        } else if second >= start {
            Some(day)
        } else if second <= end {
            day.checked_sub(1)
        } else {
            None
        }
    }
}

impl FromStr for DutyDuration {
    type Err = TtlError;

    fn from_str(text: &str) -> Result<Self, TtlError> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(Self::default());
        }
        let bad = |why: &str| {
            TtlError::InvalidArgument(format!(
                "kv_ttl_duty_duration {text:?}: {why}; expected \"[HH:MM:SS, HH:MM:SS]\" or \"\""
            ))
        };
        let inner = text
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .ok_or_else(|| bad("not in brackets"))?;
        let (start, end) = inner
            .split_once(',')
            .ok_or_else(|| bad("no comma between start and end"))?;
        let start = seconds_of_day(start.trim()).ok_or_else(|| bad("bad start time"))?;
        let end = seconds_of_day(end.trim()).ok_or_else(|| bad("bad end time"))?;
        if start == end {
            return Err(bad("the window is empty"));
        }
        Ok(Self {
            window: Some((start, end)),
        })
    }
}

/// `HH:MM:SS` as seconds of the day; `24:00:00` is the end of the day.
fn seconds_of_day(text: &str) -> Option<u32> {
    let mut parts = text.split(':');
    let mut field = |max: u32| {
        let part = parts.next()?;
        let valid = part.len() == 2 && part.bytes().all(|b| b.is_ascii_digit());
        let n: u32 = part.parse().ok().filter(|_| valid)?;
        (n <= max).then_some(n)
    };
    let (h, m, s) = (field(24)?, field(59)?, field(59)?);
    if parts.next().is_some() {
        return None;
    }
    let total = h * 3600 + m * 60 + s;
    // The last second of the day stands for 24:00:00: the clock never reads 86 400.
    (total <= DAY_SECS).then_some(total.min(DAY_SECS - 1))
}

impl fmt::Display for DutyDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some((start, end)) = self.window else {
            return Ok(());
        };
        let hms = |s: u32| {
            let s = if s == DAY_SECS - 1 { DAY_SECS } else { s };
            format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
        };
        write!(f, "[{}, {}]", hms(start), hms(end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR_MS: u64 = 3_600_000;
    const DAY_MS: u64 = 24 * HOUR_MS;
    const UTC: TimeZone = TimeZone::UTC;

    #[test]
    fn a_window_within_a_day_names_the_day() {
        let w: DutyDuration = "[22:00:00, 24:00:00]".parse().expect("valid");
        let day = 20_000 * DAY_MS;
        assert_eq!(w.occurrence(day + 21 * HOUR_MS, UTC), None);
        assert_eq!(w.occurrence(day + 22 * HOUR_MS, UTC), Some(20_000));
        assert_eq!(w.occurrence(day + DAY_MS - 1, UTC), Some(20_000));
        assert_eq!(w.occurrence(day + DAY_MS, UTC), None, "next day, 00:00:00");
    }

    #[test]
    fn a_window_past_midnight_is_named_by_the_day_it_started() {
        let w: DutyDuration = "[23:00:00, 01:00:00]".parse().expect("valid");
        let day = 20_000 * DAY_MS;
        assert_eq!(w.occurrence(day + 23 * HOUR_MS, UTC), Some(20_000));
        assert_eq!(w.occurrence(day + DAY_MS + HOUR_MS / 2, UTC), Some(20_000));
        assert_eq!(w.occurrence(day + DAY_MS + 2 * HOUR_MS, UTC), None);
    }

    #[test]
    fn malformed_windows_are_refused_with_the_text() {
        for text in [
            "22:00:00, 24:00:00",
            "[22:00:00 24:00:00]",
            "[22:00, 24:00:00]",
            "[22:00:00, 24:00:01]",
            "[22:60:00, 23:00:00]",
            "[1:00:00, 2:00:00]",
            "[01:00:00, 01:00:00]",
            "[+1:00:00, 02:00:00]",
        ] {
            let e = text.parse::<DutyDuration>().expect_err(text);
            assert!(e.to_string().contains(text), "{e}");
        }
        assert_eq!(
            "  ".parse::<DutyDuration>().expect("blank"),
            DutyDuration::default()
        );
    }

    #[test]
    fn a_window_is_read_on_the_wall_clock_of_its_zone() {
        let w: DutyDuration = "[02:00:00, 03:00:00]".parse().expect("valid");
        let east = TimeZone::parse("+08:00").expect("zone");
        let day = 20_000 * DAY_MS;
        // 02:00 at +08:00 is 18:00 UTC the day before, named by the local day it opens on.
        assert_eq!(w.occurrence(day + 18 * HOUR_MS - 1000, east), None);
        assert_eq!(w.occurrence(day + 18 * HOUR_MS, east), Some(20_001));
        assert_eq!(w.occurrence(day + 19 * HOUR_MS, east), Some(20_001));
        assert_eq!(w.occurrence(day + 19 * HOUR_MS + 1000, east), None);
        assert_eq!(w.occurrence(day + 18 * HOUR_MS, TimeZone::UTC), None);
        assert_eq!(w.occurrence(day + 2 * HOUR_MS, TimeZone::UTC), Some(20_000));
        let west = TimeZone::parse("-05:00").expect("zone");
        assert_eq!(w.occurrence(day + 7 * HOUR_MS, west), Some(20_000));
        assert_eq!(w.occurrence(day + 2 * HOUR_MS, west), None);
    }

    #[test]
    fn the_history_recycle_interval_is_bounded_on_both_sides() {
        let with = |interval: Duration| TtlSettings {
            kv_ttl_history_recycle_interval: interval,
            ..TtlSettings::default()
        };
        for days in [1, 7, 180] {
            with(Duration::from_secs(days * 86_400))
                .validate()
                .expect("within bounds");
        }
        for interval in [
            Duration::ZERO,
            Duration::from_secs(86_399),
            Duration::from_secs(180 * 86_400 + 1),
            Duration::from_secs(365 * 86_400),
        ] {
            let e = with(interval).validate().expect_err("out of bounds");
            assert!(matches!(e, TtlError::InvalidArgument(_)), "{e:?}");
            assert!(
                e.to_string().contains("kv_ttl_history_recycle_interval"),
                "{e}"
            );
        }
    }
}
