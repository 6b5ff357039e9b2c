//! The timestamps SNS writes into its envelopes: ISO 8601 in UTC with milliseconds
//! (`2026-12-01T10:20:57.123Z`), read and written without a date-time library.
//!
//! An envelope's `Timestamp` is when the notification was published, the same for every queue's
//! copy of it; SQS's `SentTimestamp` is when SNS delivered one copy, minutes later when SNS had to
//! retry the delivery. A request's deadline counts from the earliest of them (see `worker`).

/// Milliseconds since the Unix epoch of a UTC timestamp `YYYY-MM-DDTHH:MM:SS[.fraction]Z`;
/// `None` for anything else (a missing zone, an offset, an impossible date).
pub fn parse_ms(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    let digits = |from: usize, count: usize| -> Option<u64> {
        let part = bytes.get(from..from + count)?;
        part.iter().all(u8::is_ascii_digit).then(|| part.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0')))
    };
    let separators = [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')];
    if separators.iter().any(|(at, byte)| bytes.get(*at) != Some(byte)) {
        return None;
    }
    let (year, month, day) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    let (hour, minute, second) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    let rest = &text[19..];
    let (fraction, zone) = match rest.strip_prefix('.') {
        Some(after) => {
            let count = after.bytes().take_while(u8::is_ascii_digit).count();
            (&after[..count], &after[count..])
        }
        None => ("", rest),
    };
    if zone != "Z" || (rest.starts_with('.') && fraction.is_empty()) || fraction.len() > 9 {
        return None;
    }
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 59 || year < 1970 {
        return None;
    }
    let millis = fraction.bytes().chain(std::iter::repeat(b'0')).take(3).fold(0, |n, d| n * 10 + u64::from(d - b'0'));
    let days = days_from_civil(year, month, day);
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis)
}

/// `epoch_ms` as SNS writes it: `2026-12-01T10:20:57.123Z`.
pub fn format_ms(epoch_ms: u64) -> String {
    let days = epoch_ms / 86_400_000;
    let in_day_ms = epoch_ms % 86_400_000;
    let (year, month, day) = civil_from_days(days);
    let (hour, minute) = (in_day_ms / 3_600_000, in_day_ms / 60_000 % 60);
    let (second, millis) = (in_day_ms / 1000 % 60, in_day_ms % 1000);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{millis:03}Z")
}

fn is_leap(year: u64) -> bool {
    year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400))
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a date on or after it (Howard Hinnant's algorithm); SNS's times
/// and the presigned URLs' `X-Amz-Date` are read with it.
pub(crate) fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year / 400;
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The Gregorian date (year, month, day) `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`); the lease store's signer writes its dates with it too.
pub fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let shifted = days + 719_468;
    let era = shifted / 146_097;
    let day_of_era = shifted - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sns_timestamps_read_and_write() {
        for (text, ms) in [
            ("1970-01-01T00:00:00.000Z", 0),
            ("2026-12-01T10:20:57.123Z", 1_796_120_457_123),
            ("2024-02-29T23:59:59.999Z", 1_709_251_199_999),
            ("2000-03-01T00:00:00.000Z", 951_868_800_000),
        ] {
            assert_eq!(parse_ms(text), Some(ms), "{text}");
            assert_eq!(format_ms(ms), text);
        }
        assert_eq!(parse_ms("2026-12-01T10:20:57Z"), Some(1_796_120_457_000), "no fraction");
        assert_eq!(parse_ms("2026-12-01T10:20:57.1Z"), Some(1_796_120_457_100));
        assert_eq!(parse_ms("2026-12-01T10:20:57.123456Z"), Some(1_796_120_457_123));
        for bad in [
            "",
            "2026-12-01",
            "2026-12-01T10:20:57.123",
            "2026-12-01T10:20:57.123+01:00",
            "2026-13-01T10:20:57Z",
            "2023-02-29T10:20:57Z",
            "2026-12-01T24:00:00Z",
            "2026-12-01T10:20:57.Z",
            "2026-12-01 10:20:57Z",
            "20x6-12-01T10:20:57Z",
        ] {
            assert_eq!(parse_ms(bad), None, "{bad:?}");
        }
        for ms in (0..2_000_000_000_000u64).step_by(86_399_999_937) {
            assert_eq!(parse_ms(&format_ms(ms)), Some(ms));
        }
    }
}
