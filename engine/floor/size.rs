//! Sizes in bytes as a workflow writes them: `"64MiB"`, `"500KB"`, `"1GiB"`, `"4096"`.

/// A size: a whole number, optionally followed by `B`, `KB`, `MB`, `GB` (powers of 1000) or
/// `KiB`, `MiB`, `GiB` (powers of 1024); case and a space before the unit do not matter.
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let digits = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits);
    let bad = || {
        format!("`{text}` is not a size: a whole number of bytes, or one with B, KB, MB, GB, KiB, MiB or GiB")
    };
    let number: u64 = number.parse().map_err(|_| bad())?;
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1000,
        "mb" => 1000 * 1000,
        "gb" => 1000 * 1000 * 1000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => return Err(bad()),
    };
    match number.checked_mul(factor) {
        Some(0) => Err(format!("`{text}`: a size must be more than 0 bytes")),
        Some(bytes) => Ok(bytes),
        None => Err(format!("`{text}` is too large")),
    }
}

/// A size as people read it: `64 MiB`, `1.5 GiB`, `512 bytes`.
pub(crate) fn format_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (factor, unit) in UNITS {
        if bytes >= factor {
            let value = bytes as f64 / factor as f64;
            return if bytes.is_multiple_of(factor) {
                format!("{} {unit}", bytes / factor)
            } else {
                format!("{value:.1} {unit}")
            };
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_decimal_and_binary_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("500 kb"), Ok(500_000));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert!(parse_size("0").is_err());
        assert!(parse_size("1.5MB").is_err());
        assert!(parse_size("ten").is_err());
        assert!(parse_size("99999999999GiB").is_err());
        assert_eq!(format_size(64 << 20), "64 MiB");
        assert_eq!(format_size(1536), "1.5 KiB");
        assert_eq!(format_size(12), "12 bytes");
    }
}
