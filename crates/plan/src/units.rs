//! Byte and time units. folio's figures mix binary sizes (KiB/MiB/GiB for memory) with decimal
//! rates (GB/s, TFLOP/s); keeping both named avoids the classic 7% slip between them.

pub const KIB: f64 = 1024.0;
pub const MIB: f64 = 1024.0 * 1024.0;
pub const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
pub const GB: f64 = 1e9;
pub const TFLOP: f64 = 1e12;

/// `ceil(a / b)` for positive integers.
pub fn ceil_div(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

/// `n` rounded up to a multiple of `block`.
pub fn round_up(n: u64, block: u64) -> u64 {
    ceil_div(n, block) * block
}

pub fn mib(bytes: f64) -> f64 {
    bytes / MIB
}

pub fn gib(bytes: f64) -> f64 {
    bytes / GIB
}

/// Formats with `d` decimals, trimming nothing (tables keep the reference rounding).
pub fn fx(v: f64, d: usize) -> String {
    format!("{v:.d$}")
}

/// Thousands separators for integers, as DESIGN.md writes byte counts.
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Parses a byte size: a plain integer, or a number with KiB/MiB/GiB/TiB or KB/MB/GB/TB
/// (e.g. `12GiB`, `1.5 GB`, `6144MiB`).
pub fn parse_bytes(s: &str) -> crate::Result<u64> {
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || crate::PlanError::Invalid {
        field: "byte size",
        value: s.into(),
        why: "expected a number with an optional unit B, KiB, MiB, GiB, TiB, KB, MB, GB or TB",
    };
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kib" | "k" => KIB,
        "mib" | "m" => MIB,
        "gib" | "g" => GIB,
        "tib" | "t" => GIB * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        _ => return Err(bad()),
    };
    let bytes = v * mult;
    if !(bytes.is_finite() && bytes >= 0.0) {
        return Err(bad());
    }
    Ok(bytes.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_bytes("12GiB").unwrap(), 12 << 30);
        assert_eq!(parse_bytes("6144 MiB").unwrap(), 6144 << 20);
        assert_eq!(parse_bytes("1.5GB").unwrap(), 1_500_000_000);
        assert_eq!(parse_bytes("1024").unwrap(), 1024);
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("-1GiB").is_err());
    }

    #[test]
    fn rounding_and_grouping() {
        assert_eq!(round_up(2303, 16), 2304);
        assert_eq!(round_up(8447, 16), 8448);
        assert_eq!(ceil_div(0, 16), 0);
        assert_eq!(group(15_136_811_008), "15,136,811,008");
        assert_eq!(group(42), "42");
    }
}
