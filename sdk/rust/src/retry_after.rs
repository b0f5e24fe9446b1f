//! Reading an HTTP `Retry-After` value (RFC 9110 §10.2.3): delta-seconds, or an HTTP-date in the
//! IMF-fixdate form every server sends (`Sun, 06 Nov 1994 08:49:37 GMT`).
//!
//! The value comes from the destination, so it is hostile: anything else is `None` (retry with the
//! host's backoff), a huge number saturates instead of overflowing, and a date in the past asks for
//! no wait. The host caps whatever is asked at its backoff maximum.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Values longer than this are not read at all.
const MAX_VALUE_BYTES: usize = 64;

/// The wait a `Retry-After` value asks for, reckoned from `now` when it is a date.
pub fn parse(value: &[u8], now: SystemTime) -> Option<Duration> {
    if value.len() > MAX_VALUE_BYTES {
        return None;
    }
    let text = std::str::from_utf8(value).ok()?.trim_matches([' ', '\t']);
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        // Only digits: too many of them for a u64 is a very long wait, which the host caps.
        return Some(Duration::from_secs(text.parse().unwrap_or(u64::MAX)));
    }
    let at = imf_fixdate(text)?;
    let now = now.duration_since(UNIX_EPOCH).ok()?.as_secs();
    Some(Duration::from_secs(at.saturating_sub(now)))
}

/// Unix seconds of `Sun, 06 Nov 1994 08:49:37 GMT`; `None` for anything else.
fn imf_fixdate(text: &str) -> Option<u64> {
    let (weekday, rest) = text.split_once(", ")?;
    const WEEKDAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    if !WEEKDAYS.contains(&weekday) {
        return None;
    }
    let fields: Vec<&str> = rest.split(' ').collect();
    let [day, month, year, time, "GMT"] = fields[..] else {
        return None;
    };
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.iter().position(|name| *name == month)? as u64 + 1;
    let day = digits(day, 2)?;
    let year = digits(year, 4)?;
    let time: Vec<&str> = time.split(':').collect();
    let [hour, minute, second] = time[..] else {
        return None;
    };
    let (hour, minute, second) = (digits(hour, 2)?, digits(minute, 2)?, digits(second, 2)?);
    if !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 || year < 1970 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(days * 86_400 + hour * 3_600 + minute * 60 + second)
}

/// Exactly `width` ASCII digits.
fn digits(text: &str, width: usize) -> Option<u64> {
    (text.len() == width && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse().ok())
        .flatten()
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar, from 1970 on (Howard
/// Hinnant's `days_from_civil`).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year / 400;
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::parse;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    fn at(unix_seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(unix_seconds)
    }

    #[test]
    fn delta_seconds() {
        assert_eq!(parse(b"2", at(0)), Some(Duration::from_secs(2)));
        assert_eq!(parse(b" 120 ", at(0)), Some(Duration::from_secs(120)));
        assert_eq!(parse(b"0", at(0)), Some(Duration::ZERO));
    }

    #[test]
    fn a_huge_number_saturates() {
        let huge = "9".repeat(40);
        assert_eq!(
            parse(huge.as_bytes(), at(0)),
            Some(Duration::from_secs(u64::MAX))
        );
    }

    #[test]
    fn an_http_date_is_a_wait_from_now() {
        // 1994-11-06 08:49:37 UTC is Unix time 784111777.
        let date = b"Sun, 06 Nov 1994 08:49:37 GMT";
        assert_eq!(
            parse(date, at(784_111_777 - 5)),
            Some(Duration::from_secs(5))
        );
        assert_eq!(parse(date, at(784_111_777 + 60)), Some(Duration::ZERO));
        // 2024-02-29 00:00:00 UTC is Unix time 1709164800.
        let leap = b"Thu, 29 Feb 2024 00:00:00 GMT";
        assert_eq!(
            parse(leap, at(1_709_164_800 - 3)),
            Some(Duration::from_secs(3))
        );
    }

    #[test]
    fn anything_else_is_none() {
        for bad in [
            &b""[..],
            b"-1",
            b"1.5",
            b"soon",
            b"2 seconds",
            b"Sun, 06 Nov 1994 08:49:37 UTC",
            b"Sunday, 06-Nov-94 08:49:37 GMT",
            b"Sun Nov  6 08:49:37 1994",
            b"Sun, 36 Nov 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 25:49:37 GMT",
            b"\xff\xfe",
        ] {
            assert_eq!(parse(bad, at(0)), None, "{bad:?}");
        }
        assert_eq!(parse("1".repeat(65).as_bytes(), at(0)), None);
    }
}
