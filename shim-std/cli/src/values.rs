//! Value parsers the commands share: seconds, sim names, rails, counts. Each
//! turns one command-line value into a typed value or says what it expected;
//! clap puts the flag and the value in front of the message.

use std::time::Duration;

use switchyard_launch::{
    MAX_DURATION,
    sim::{self, MAX_RAILS, SimError},
};

/// Seconds, whole or fractional (`2`, `0.5`, `1e3`), from 0 to
/// [`MAX_DURATION`] (a week).
pub(crate) fn seconds(v: &str) -> Result<Duration, String> {
    let secs: f64 = v
        .trim()
        .parse()
        .map_err(|_| "expected a number of seconds".to_string())?;
    if secs.is_nan() || secs < 0.0 {
        return Err("expected a number of seconds, not negative".into());
    }
    if secs > MAX_DURATION.as_secs_f64() {
        return Err(format!("at most a week ({} s)", MAX_DURATION.as_secs()));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// [`seconds`], more than 0.
pub(crate) fn positive_seconds(v: &str) -> Result<Duration, String> {
    let d = seconds(v)?;
    if d.is_zero() {
        return Err("must be more than 0".into());
    }
    Ok(d)
}

/// A whole number, 1 or more.
pub(crate) fn at_least_one(v: &str) -> Result<u32, String> {
    v.parse::<u32>()
        .ok()
        .filter(|&k| k > 0)
        .ok_or_else(|| "expected a whole number of at least 1".into())
}

/// A sim name ([`sim::check_name`]).
pub(crate) fn sim_name(v: &str) -> Result<String, String> {
    sim::check_name(v).map_err(|e| e.to_string())?;
    Ok(v.to_string())
}

/// Rails per node, `1..=`[`MAX_RAILS`].
pub(crate) fn rails(v: &str) -> Result<u32, String> {
    let r = v
        .parse::<u32>()
        .map_err(|_| format!("expected a number of rails, 1 to {MAX_RAILS}"))?;
    if r == 0 || r > MAX_RAILS {
        return Err(SimError::BadRails(r).to_string());
    }
    Ok(r)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn seconds_are_bounded() {
        assert_eq!(seconds("2.5"), Ok(Duration::from_millis(2500)));
        assert_eq!(seconds("0"), Ok(Duration::ZERO));
        assert_eq!(seconds("604800"), Ok(MAX_DURATION));
        for bad in ["", "x", "-1", "nan", "inf", "1e19", "604801"] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
        assert!(positive_seconds("0").is_err());
        assert!(seconds("1e19").unwrap_err().contains("a week"));
    }

    #[test]
    fn names_rails_counts() {
        assert_eq!(sim_name("c1"), Ok("c1".into()));
        assert!(sim_name("Bad").unwrap_err().contains("bad sim name 'Bad'"));
        assert_eq!(rails("4"), Ok(4));
        assert!(rails("0").unwrap_err().contains("bad number of rails 0"));
        assert!(rails("x").unwrap_err().contains("1 to 4"));
        assert_eq!(at_least_one("3"), Ok(3));
        assert!(at_least_one("0").is_err());
    }
}
