//! The clock as records and locks write it: RFC 3339 in UTC with milliseconds.

/// Now, in RFC 3339 with milliseconds (`2026-11-30T00:15:00.123Z`).
pub(crate) fn now_rfc3339() -> String {
    rfc3339_millis(chrono::Utc::now())
}

/// `at` as [`now_rfc3339`] writes it. A run of thousands of quick stages stamps two events a
/// stage, so the date and time of day are formatted once a second (per thread) and only the
/// milliseconds each time.
pub(crate) fn rfc3339_millis(at: chrono::DateTime<chrono::Utc>) -> String {
    thread_local! {
        static SECOND: std::cell::RefCell<(i64, String)> =
            const { std::cell::RefCell::new((i64::MIN, String::new())) };
    }
    let millis = at.timestamp_subsec_millis();
    if millis > 999 {
        // A leap second: rare enough for the general path.
        return at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    }
    SECOND.with(|second| {
        let mut second = second.borrow_mut();
        if second.0 != at.timestamp() {
            *second = (at.timestamp(), at.format("%Y-%m-%dT%H:%M:%S").to_string());
        }
        let mut out = String::with_capacity(second.1.len() + 5);
        out.push_str(&second.1);
        out.push('.');
        for digit in [millis / 100, millis / 10 % 10, millis % 10] {
            out.push(char::from(b'0' + digit as u8));
        }
        out.push('Z');
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_written_as_chrono_writes_them() {
        use chrono::TimeZone;
        let start = chrono::Utc
            .with_ymd_and_hms(2026, 12, 31, 23, 59, 58)
            .unwrap();
        // Across seconds, a minute, a day and a year, in one thread (so through the cache).
        for step in [
            0, 1, 7, 999, 1000, 1001, 1999, 2000, 2001, 2500, 60_000, 3_600_007,
        ] {
            let at = start + chrono::Duration::milliseconds(step);
            assert_eq!(
                rfc3339_millis(at),
                at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            );
        }
    }
}
