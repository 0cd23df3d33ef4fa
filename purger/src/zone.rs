//! The time zone that zoneless times are written in: a `deleted_at` column of MySQL's
//! `DATETIME` or PostgreSQL's `timestamp` holds a wall-clock time with no zone, and the
//! application that wrote it decides which zone that was (GORM with `loc=Local`, `NOW()` in a
//! session at `-05:00`). The purger cannot know it; the operator says it
//! (`soft_delete_purge.time_zone`), as an IANA name (`America/New_York`) or a fixed offset
//! (`+08:00`, `-05:00`, `UTC`).
//!
//! Turning an instant into a wall-clock bound is where a purge can go wrong: when clocks fall
//! back, a wall time names two instants an hour apart, and a row whose wall time is just below
//! the bound may have been written after the cutoff. [`TimeZone::wall_bound`] picks the bound
//! so that every wall time below it is older than the cutoff under every reading; rows near a
//! transition are then kept up to an hour longer, never purged early.

use chrono::{DateTime, FixedOffset, LocalResult, NaiveDateTime, Offset as _, TimeZone as _, Utc};

use crate::error::{Error, Result};

/// A zone for wall-clock times: an IANA zone or a fixed offset from UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeZone {
    /// A fixed offset (`+08:00`, `-05:00`, `UTC` as `+00:00`).
    Fixed(FixedOffset),
    /// A zone of the IANA database, with its daylight-saving rules.
    Named(chrono_tz::Tz),
}

impl TimeZone {
    /// UTC.
    pub const UTC: Self = Self::Fixed(FixedOffset::east_opt(0).expect("zero is a valid offset"));

    /// Reads an IANA name (`America/New_York`, `Asia/Shanghai`, `UTC`, `Etc/UTC`) or an offset
    /// `±HH:MM` (`+08:00`, `-05:00`; `±HHMM` and `±HH` too, and `Z`).
    ///
    /// ```
    /// use cairn_purger::TimeZone;
    /// assert!(TimeZone::parse("America/New_York").is_ok());
    /// assert_eq!(TimeZone::parse("-05:00")?.to_string(), "-05:00");
    /// assert!(TimeZone::parse("EST5EDT-ish").is_err());
    /// # Ok::<(), cairn_purger::Error>(())
    /// ```
    ///
    /// # Errors
    /// `InvalidArgument` naming the text when it is neither.
    pub fn parse(text: &str) -> Result<Self> {
        Self::parse_text(text).map_err(Error::InvalidArgument)
    }

    /// [`parse`](Self::parse) with the reason alone, for callers that name the field.
    pub(crate) fn parse_text(text: &str) -> std::result::Result<Self, String> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("utc") {
            return Ok(Self::Named(chrono_tz::UTC));
        }
        if let Some(offset) = parse_offset(text) {
            return Ok(Self::Fixed(offset));
        }
        text.parse::<chrono_tz::Tz>().map(Self::Named).map_err(|_| {
            format!(
                "time zone {text:?}: not an IANA zone name (America/New_York) nor an offset \
                 (+08:00, -05:00)"
            )
        })
    }

    /// The wall-clock time in this zone at `at`.
    pub fn wall(self, at: DateTime<Utc>) -> NaiveDateTime {
        match self {
            Self::Fixed(offset) => at.with_timezone(&offset).naive_local(),
            Self::Named(tz) => at.with_timezone(&tz).naive_local(),
        }
    }

    /// The largest wall-clock bound such that every wall time below it, read in this zone in
    /// any way the zone allows, is an instant before `cutoff`: a zoneless `deleted_at <
    /// bound` then never selects a row written at or after the cutoff.
    pub fn wall_bound(self, cutoff: DateTime<Utc>) -> NaiveDateTime {
        let wall = self.wall(cutoff);
        let Self::Named(tz) = self else {
            return wall;
        };
        // In a fold (clocks fell back) the same wall time names a later instant too; its
        // offset is the smaller one, and the bound read with it lands on the cutoff itself.
        match tz.from_local_datetime(&wall) {
            LocalResult::Ambiguous(first, second) => {
                let latest = first.max(second);
                if latest.with_timezone(&Utc) > cutoff {
                    let offset = latest.offset().fix();
                    cutoff.with_timezone(&offset).naive_local()
                } else {
                    wall
                }
            }
            LocalResult::Single(_) | LocalResult::None => wall,
        }
    }
}

impl std::fmt::Display for TimeZone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Fixed(offset) => write!(f, "{offset}"),
            Self::Named(tz) => write!(f, "{}", tz.name()),
        }
    }
}

impl std::str::FromStr for TimeZone {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

/// `Z`, `±HH`, `±HHMM` or `±HH:MM`, within ±18 hours.
fn parse_offset(text: &str) -> Option<FixedOffset> {
    if text == "Z" {
        return FixedOffset::east_opt(0);
    }
    let (sign, rest) = match text.as_bytes().first()? {
        b'+' => (1, text.get(1..)?),
        b'-' => (-1, text.get(1..)?),
        _ => return None,
    };
    let digits: String = rest.chars().filter(|c| *c != ':').collect();
    let colons = rest.chars().filter(|c| *c == ':').count();
    let well_formed = match digits.len() {
        2 => colons == 0,
        4 => colons == 0 || (colons == 1 && rest.find(':') == Some(2)),
        _ => false,
    };
    if !well_formed || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let hours: i32 = digits.get(..2)?.parse().ok()?;
    let minutes: i32 = digits
        .get(2..)
        .filter(|m| !m.is_empty())
        .map_or(Some(0), |m| m.parse().ok())?;
    if hours > 18 || minutes > 59 {
        return None;
    }
    FixedOffset::east_opt(sign * (hours * 3600 + minutes * 60))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        text.parse().expect("an RFC 3339 time")
    }

    fn naive(text: &str) -> NaiveDateTime {
        text.parse().expect("a naive time")
    }

    #[test]
    fn offsets_and_names_parse_and_nonsense_does_not() {
        for (text, shown) in [
            ("+08:00", "+08:00"),
            ("-05:00", "-05:00"),
            ("+0530", "+05:30"),
            ("-03", "-03:00"),
            ("Z", "+00:00"),
            ("UTC", "UTC"),
            ("utc", "UTC"),
            ("America/New_York", "America/New_York"),
            (" Asia/Shanghai ", "Asia/Shanghai"),
        ] {
            let zone = TimeZone::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(zone.to_string(), shown, "{text}");
        }
        for bad in [
            "",
            "+",
            "+8",
            "+19:00",
            "+08:60",
            "08:00",
            "+08:0",
            "Mars/Olympus",
            "local",
        ] {
            let e = TimeZone::parse(bad).expect_err(bad);
            assert!(e.to_string().contains("time zone"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_fixed_offset_moves_the_wall_clock_by_the_offset() {
        let at = utc("2026-06-01T12:00:00Z");
        let west = TimeZone::parse("-05:00").expect("zone");
        let east = TimeZone::parse("+08:00").expect("zone");
        assert_eq!(west.wall_bound(at), naive("2026-06-01T07:00:00"));
        assert_eq!(east.wall_bound(at), naive("2026-06-01T20:00:00"));
    }

    #[test]
    fn in_a_fold_the_bound_takes_the_later_reading() {
        // New York falls back at 2026-11-01 06:00 UTC: 01:00–02:00 local happens twice.
        let ny = TimeZone::parse("America/New_York").expect("zone");
        // 05:40 UTC is 01:40 EDT, the first 01:40; the second 01:40 (EST) is 06:40 UTC, after
        // the cutoff. A row at wall time 01:30 may be that later one: the bound must not pass
        // it, so it is the cutoff read at EST, 00:40.
        let cutoff = utc("2026-11-01T05:40:00Z");
        assert_eq!(ny.wall(cutoff), naive("2026-11-01T01:40:00"));
        assert_eq!(ny.wall_bound(cutoff), naive("2026-11-01T00:40:00"));
        // After the fold the wall clock is unambiguous again.
        let later = utc("2026-11-01T08:00:00Z");
        assert_eq!(ny.wall_bound(later), naive("2026-11-01T03:00:00"));
        // In the second 01:xx the later reading is the cutoff's own.
        let second = utc("2026-11-01T06:40:00Z");
        assert_eq!(ny.wall_bound(second), naive("2026-11-01T01:40:00"));
    }

    #[test]
    fn every_wall_time_below_the_bound_is_before_the_cutoff() {
        let ny = TimeZone::parse("America/New_York").expect("zone");
        let start = utc("2026-10-31T20:00:00Z");
        for step in 0..(12 * 12) {
            let cutoff = start + chrono::Duration::minutes(5 * step);
            let bound = ny.wall_bound(cutoff);
            // The wall times just below the bound: every instant they can name precedes it.
            let below = bound - chrono::Duration::seconds(1);
            let latest = match chrono_tz::America::New_York.from_local_datetime(&below) {
                LocalResult::Single(t) => Some(t),
                LocalResult::Ambiguous(a, b) => Some(a.max(b)),
                LocalResult::None => None,
            };
            if let Some(latest) = latest {
                assert!(
                    latest.with_timezone(&Utc) < cutoff,
                    "cutoff {cutoff}: bound {bound}"
                );
            }
            // And the bound is never more than the fold's hour below the plain wall time.
            assert!(
                ny.wall(cutoff) - bound <= chrono::Duration::hours(1),
                "cutoff {cutoff}"
            );
        }
    }
}
