//! Value parsers and their text forms: sizes, durations, counts, on/off,
//! address lists (public where other commands parse sizes and durations the
//! same way). Each returns `None` for a bad value; the caller turns that into
//! a [`ConfigError::BadValue`](super::ConfigError::BadValue) naming the key.

use std::{net::IpAddr, time::Duration};

pub(super) const KIB: u64 = 1 << 10;
pub(super) const MIB: u64 = 1 << 20;
pub(super) const GIB: u64 = 1 << 30;
pub(super) const TIB: u64 = 1 << 40;

pub(super) const US: Duration = Duration::from_micros(1);
pub(super) const MS: Duration = Duration::from_millis(1);
pub(super) const SEC: Duration = Duration::from_secs(1);
pub(super) const DAY: Duration = Duration::from_secs(24 * 3600);

/// Parses `digits[.digits]` times `scale`, exactly: `None` when malformed, when
/// the result is not whole, or on overflow.
fn scaled_decimal(num: &str, scale: u128) -> Option<u128> {
    let (int, frac) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || int.len() > 24 || frac.len() > 9 || !digits(int) || !digits(frac) {
        return None;
    }
    if num.ends_with('.') {
        return None;
    }
    let pow = 10u128.checked_pow(u32::try_from(frac.len()).ok()?)?;
    let int_v: u128 = int.parse().ok()?;
    let frac_v: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    let n = int_v.checked_mul(pow)?.checked_add(frac_v)?;
    let total = n.checked_mul(scale)?;
    (total % pow == 0).then_some(total / pow)
}

/// Splits `s` into its number (digits and points) and its unit, trimmed.
fn split_unit(s: &str) -> (&str, &str) {
    let s = s.trim();
    let at = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(at);
    (num, unit.trim())
}

/// Parses a size in bytes: `65536`, `64K`, `64MiB`, `1.5G` (see the module
/// doc). `None` when `s` is not a size or does not fit in a `u64`.
pub fn parse_size(s: &str) -> Option<u64> {
    let (num, unit) = split_unit(s);
    let scale = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => KIB,
        "m" | "mb" | "mib" => MIB,
        "g" | "gb" | "gib" => GIB,
        "t" | "tb" | "tib" => TIB,
        _ => return None,
    };
    u64::try_from(scaled_decimal(num, u128::from(scale))?).ok()
}

/// Formats a size the shortest way [`parse_size`] reads back: `64M`, `1536K`,
/// `1000`.
pub fn format_size(bytes: u64) -> String {
    for (unit, scale) in [("T", TIB), ("G", GIB), ("M", MIB), ("K", KIB)] {
        if bytes != 0 && bytes.is_multiple_of(scale) {
            return format!("{}{unit}", bytes / scale);
        }
    }
    bytes.to_string()
}

/// Parses a duration: `500ms`, `5s`, `2m`, `1.5s`, `250us`, `1h` (a unit is
/// required). `None` when `s` is not a duration or is longer than `u64`
/// nanoseconds (about 584 years).
pub fn parse_duration(s: &str) -> Option<Duration> {
    let (num, unit) = split_unit(s);
    let scale: u128 = match unit.to_ascii_lowercase().as_str() {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    };
    let ns = u64::try_from(scaled_decimal(num, scale)?).ok()?;
    Some(Duration::from_nanos(ns))
}

/// Formats a duration the shortest way [`parse_duration`] reads back: `200ms`,
/// `30s`, `2m`, `1500us`.
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    for (unit, scale) in [
        ("h", 3_600_000_000_000u128),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
    ] {
        if ns.is_multiple_of(scale) {
            return format!("{}{unit}", ns / scale);
        }
    }
    format!("{ns}ns")
}

/// Parses a plain decimal count (digits only).
pub(super) fn parse_count(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

pub(super) fn in_range<T: PartialOrd>(v: T, lo: T, hi: T) -> Option<T> {
    (lo <= v && v <= hi).then_some(v)
}

pub(super) fn pow2_in(v: u64, lo: u64, hi: u64) -> Option<u32> {
    in_range(v, lo, hi)
        .filter(|v| v.is_power_of_two())
        .and_then(|v| u32::try_from(v).ok())
}

/// Parses `on`/`off` (`true`/`false` too), case-insensitive.
pub(super) fn parse_on_off(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "on" | "true" => Some(true),
        "off" | "false" => Some(false),
        _ => None,
    }
}

/// Most addresses in `tcp_addrs` (TCP rails).
pub const MAX_TCP_ADDRS: usize = 4;

/// Reads `auto` (the empty list) or comma-separated IP addresses: at most
/// [`MAX_TCP_ADDRS`], no duplicates, no empty item.
pub(super) fn parse_addrs(s: &str) -> Option<Vec<IpAddr>> {
    let s = s.trim();
    if s.is_empty() || s.eq_ignore_ascii_case("auto") {
        return Some(Vec::new());
    }
    let mut out = Vec::new();
    for item in s.split(',') {
        if out.len() == MAX_TCP_ADDRS {
            return None;
        }
        let addr: IpAddr = item.trim().parse().ok()?;
        if out.contains(&addr) {
            return None;
        }
        out.push(addr);
    }
    Some(out)
}

/// The text form [`parse_addrs`] reads back: `auto`, or the addresses joined by
/// commas.
pub(super) fn format_addrs(addrs: &[IpAddr]) -> String {
    if addrs.is_empty() {
        return "auto".into();
    }
    addrs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
