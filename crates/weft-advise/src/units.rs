//! Parsing and showing the quantities the advisor takes and prints: sizes (`256K`, `4G`,
//! binary), counts (`70e9`, `1024`) and durations (`1h`, `60s`, `500ms`).

use crate::Error;

/// A size like `256K`, `4M`, `1G` or `1T` (powers of 1024) or plain bytes; above zero.
pub fn parse_size(s: &str) -> Result<u64, Error> {
    let bad = || Error::Input(format!("'{s}' is not a size (like 256K, 4M, 1G)"));
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(bad()),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|&n| n > 0)
        .ok_or_else(bad)
}

/// A positive, finite count such as `70e9` or `1024`.
pub fn parse_count(s: &str) -> Result<f64, Error> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v > 0.0 && *v < 1e30)
        .ok_or_else(|| Error::Input(format!("'{s}' is not a positive number")))
}

/// A duration in seconds: a number with `ms`, `s`, `m`, `h` or `d` (plain numbers are
/// seconds); above zero and at most a year.
pub fn parse_duration(s: &str) -> Result<f64, Error> {
    let t = s.trim();
    let bad = || Error::Input(format!("'{s}' is not a duration (like 60s, 5m, 1h)"));
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult = match unit {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => return Err(bad()),
    };
    num.parse::<f64>()
        .ok()
        .map(|v| v * mult)
        .filter(|v| v.is_finite() && *v > 0.0 && *v <= 366.0 * 86400.0)
        .ok_or_else(bad)
}

/// Bytes per second in decimal units (`1.2 GB/s`), as bandwidth is quoted.
pub fn fmt_rate(bps: f64) -> String {
    format!("{}/s", fmt_bytes_si(bps))
}

/// Bytes in decimal units (`980 GB`).
pub fn fmt_bytes_si(b: f64) -> String {
    let units = [
        (1e15, "PB"),
        (1e12, "TB"),
        (1e9, "GB"),
        (1e6, "MB"),
        (1e3, "kB"),
    ];
    for (m, u) in units {
        if b.abs() >= m {
            return format!("{:.3} {u}", b / m)
                .replace(".000 ", " ")
                .to_string();
        }
    }
    format!("{b:.0} B")
}

/// A size in the binary units `setstripe` takes (`4M`, `256K`), exact.
pub fn fmt_size_arg(b: u64) -> String {
    for (shift, u) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if b >= 1 << shift && b.is_multiple_of(1 << shift) {
            return format!("{}{u}", b >> shift);
        }
    }
    b.to_string()
}

/// Seconds, shown in the largest unit that keeps them readable.
pub fn fmt_secs(s: f64) -> String {
    if s >= 3600.0 {
        format!("{:.2} h", s / 3600.0)
    } else if s >= 60.0 {
        format!("{:.1} min", s / 60.0)
    } else if s >= 1.0 {
        format!("{s:.2} s")
    } else {
        format!("{:.2} ms", s * 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_and_reject() {
        assert_eq!(parse_size("256K").unwrap(), 256 << 10);
        assert_eq!(parse_size("4g").unwrap(), 4 << 30);
        assert!(parse_size("0").is_err() && parse_size("4Q").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert_eq!(parse_count("70e9").unwrap(), 70e9);
        assert!(parse_count("-1").is_err() && parse_count("nan").is_err());
        assert_eq!(parse_duration("1h").unwrap(), 3600.0);
        assert_eq!(parse_duration("60s").unwrap(), 60.0);
        assert_eq!(parse_duration("500ms").unwrap(), 0.5);
        assert_eq!(parse_duration("90").unwrap(), 90.0);
        assert!(parse_duration("1y").is_err() && parse_duration("0s").is_err());
        assert!(parse_duration("1e400s").is_err());
    }

    #[test]
    fn quantities_show() {
        assert_eq!(fmt_size_arg(4 << 20), "4M");
        assert_eq!(fmt_size_arg(192 << 10), "192K");
        assert_eq!(fmt_rate(200e9), "200 GB/s");
        assert_eq!(fmt_secs(500.0), "8.3 min");
        assert_eq!(fmt_secs(0.0125), "12.50 ms");
    }
}
