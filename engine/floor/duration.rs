//! Durations as a workflow writes them (`"300s"`, `"10m"`, `"1h30m"`, `"7d"`, `"500ms"`), parsed
//! once into [`Duration`]. The grammar is the format's own and stricter than a general parser's
//! (units in order, each at most once, no spaces), so a duration reads the same everywhere.

use std::time::Duration;

/// A duration such as `300s`, `10m`, `2h`, `7d`, `1w`, `1h30m` or `500ms`: one or more
/// `<digits><unit>` terms with units `w`, `d`, `h`, `m`, `s`, `ms`, each at most once and from the
/// largest to the smallest; `0` alone is also accepted.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let fail = |why: &str| {
        Err(format!(
            "`{text}` is not a duration ({why}; e.g. \"300s\", \"10m\", \"1h30m\", \"7d\", \"500ms\")"
        ))
    };
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return fail("it is empty");
    }
    // Units from the largest to the smallest, with their length in milliseconds.
    const UNITS: [(&str, u64); 6] = [
        ("w", 7 * 24 * 3_600_000),
        ("d", 24 * 3_600_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ];
    let mut millis: u64 = 0;
    let mut next_unit = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return fail("expected a number");
        }
        let Ok(amount) = rest[..digits].parse::<u64>() else {
            return fail("the number is too large");
        };
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let Some(position) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return if unit.is_empty() {
                fail("a number needs a unit")
            } else {
                fail(&format!("unknown unit `{unit}`"))
            };
        };
        if position < next_unit {
            return fail("units must go from the largest to the smallest, each once");
        }
        next_unit = position + 1;
        let Some(total) = amount
            .checked_mul(UNITS[position].1)
            .and_then(|term| millis.checked_add(term))
        else {
            return fail("it is too long");
        };
        millis = total;
    }
    Ok(Duration::from_millis(millis))
}
