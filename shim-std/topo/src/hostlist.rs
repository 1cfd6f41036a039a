//! Slurm-style hostlist expansion: `node[01-04]`, `node[1,3,5-7]`,
//! `rack[1-2]-n[1-3]`, several expressions separated by commas.
//!
//! # Grammar
//!
//! ```text
//! list  := expr (',' expr)*          commas inside brackets belong to the ranges
//! expr  := (name-chars | '[' range (',' range)* ']')+
//! range := number | number '-' number
//! ```
//!
//! Name characters are ASCII letters, digits, `-`, `_` and `.`. A range keeps the
//! zero padding of its start: `[08-10]` gives `08 09 10`, `[8-10]` gives
//! `8 9 10`. Several bracket groups in one expression multiply out, the rightmost
//! one varying fastest.
//!
//! Expansion is bounded: the number of names is computed before anything is
//! allocated and checked against a limit ([`MAX_HOSTS`] by default), so a hostile
//! `n[0-99999999999]` is an error, not an out-of-memory kill.

use std::fmt;

/// Most names one hostlist (or one whole topology file) may expand to.
pub const MAX_HOSTS: usize = 1 << 20;

/// Longest number accepted in a range (18 digits always fit in a `u64`).
const MAX_DIGITS: usize = 18;

/// A hostlist that cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostlistError {
    /// The hostlist is empty or blank.
    #[error("empty hostlist")]
    Empty,
    /// Two commas in a row, or a comma at either end.
    #[error("empty host name in hostlist '{list}'")]
    EmptyName {
        /// The whole hostlist.
        list: String,
    },
    /// A `[` without its `]`, a `]` without its `[`, or nested brackets.
    #[error("unbalanced brackets in hostlist '{expr}'")]
    Unbalanced {
        /// The expression.
        expr: String,
    },
    /// A character that cannot be part of a host name.
    #[error(
        "unexpected character '{ch}' in hostlist '{expr}' (expected letters, digits, '-', '_', '.', or a [range])"
    )]
    BadChar {
        /// The expression.
        expr: String,
        /// The character.
        ch: char,
    },
    /// A bracketed range that is not `a` or `a-b` with `a <= b`.
    #[error("bad hostlist range '{expr}': {problem}")]
    BadRange {
        /// The expression holding the range.
        expr: String,
        /// What is wrong with it.
        problem: RangeProblem,
    },
    /// The expansion would exceed the limit.
    #[error("hostlist '{expr}' expands to more than {limit} names")]
    TooMany {
        /// The expression that crossed the limit.
        expr: String,
        /// The limit in force.
        limit: usize,
    },
}

/// What is wrong with a bracketed range.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RangeProblem {
    /// `[]`, `[1,]` or `[-3]`.
    Empty,
    /// The start is greater than the end.
    StartAfterEnd,
    /// Not a decimal number.
    NotANumber(String),
    /// More than 18 digits.
    TooLarge(String),
}

impl fmt::Display for RangeProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("empty range (expected N or N-M)"),
            Self::StartAfterEnd => f.write_str("start after end"),
            Self::NotANumber(s) => write!(f, "'{s}' is not a number"),
            Self::TooLarge(s) => write!(f, "number '{s}' is too large"),
        }
    }
}

/// One piece of an expression: literal text or a set of numbered ranges.
enum Piece<'a> {
    Text(&'a str),
    Ranges(Vec<Range>),
}

/// `lo..=hi`, printed zero-padded to `width` digits.
#[derive(Clone, Copy)]
struct Range {
    lo: u64,
    hi: u64,
    width: usize,
}

impl Range {
    fn len(&self) -> u64 {
        self.hi - self.lo + 1
    }
}

/// Expands `list` with the default limit of [`MAX_HOSTS`] names.
///
/// # Errors
/// [`HostlistError`] for a malformed list or one of more than [`MAX_HOSTS`] names.
///
/// # Examples
/// ```
/// use switchyard_topo::hostlist::expand;
/// assert_eq!(expand("n[08-10],login").unwrap(), ["n08", "n09", "n10", "login"]);
/// ```
pub fn expand(list: &str) -> Result<Vec<String>, HostlistError> {
    expand_with_limit(list, MAX_HOSTS)
}

/// Expands `list` into at most `limit` names, in order (duplicates kept).
///
/// # Errors
/// [`HostlistError`] for a malformed list, or [`HostlistError::TooMany`] when
/// the names would number more than `limit` (checked before allocating them).
pub fn expand_with_limit(list: &str, limit: usize) -> Result<Vec<String>, HostlistError> {
    let list = list.trim();
    if list.is_empty() {
        return Err(HostlistError::Empty);
    }
    // Parse everything and count first, allocate names after.
    let mut exprs = Vec::new();
    let mut total: u64 = 0;
    for expr in split_top_level(list)? {
        if expr.is_empty() {
            return Err(HostlistError::EmptyName { list: list.into() });
        }
        let pieces = parse_expr(expr)?;
        let count = pieces.iter().try_fold(1u64, |acc, p| match p {
            Piece::Text(_) => Some(acc),
            Piece::Ranges(rs) => rs
                .iter()
                .try_fold(0u64, |n, r| n.checked_add(r.len()))
                .and_then(|n| acc.checked_mul(n)),
        });
        total = match count.and_then(|c| total.checked_add(c)) {
            Some(t) if t <= limit as u64 => t,
            _ => {
                return Err(HostlistError::TooMany {
                    expr: expr.into(),
                    limit,
                });
            }
        };
        exprs.push(pieces);
    }
    let mut out = Vec::with_capacity(total as usize);
    for pieces in &exprs {
        push_product(pieces, &mut String::new(), &mut out);
    }
    Ok(out)
}

/// Splits at commas outside brackets; checks bracket balance.
fn split_top_level(list: &str) -> Result<Vec<&str>, HostlistError> {
    let mut parts = Vec::new();
    let mut depth = 0u32;
    let mut start = 0;
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| HostlistError::Unbalanced {
                        expr: current_expr(list, start),
                    })?;
            }
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if depth > 1 {
            return Err(HostlistError::Unbalanced {
                expr: current_expr(list, start),
            });
        }
    }
    if depth != 0 {
        return Err(HostlistError::Unbalanced {
            expr: list[start..].into(),
        });
    }
    parts.push(&list[start..]);
    Ok(parts)
}

/// The expression starting at `start`, up to the next top-level comma (for messages).
fn current_expr(list: &str, start: usize) -> String {
    let rest = &list[start..];
    let mut depth = 0i32;
    for (i, c) in rest.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth <= 0 => return rest[..i].into(),
            _ => {}
        }
    }
    rest.into()
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

fn parse_expr(expr: &str) -> Result<Vec<Piece<'_>>, HostlistError> {
    let mut pieces = Vec::new();
    let mut rest = expr;
    while !rest.is_empty() {
        if let Some(inner) = rest.strip_prefix('[') {
            // Balance was checked by `split_top_level`: a `]` follows.
            let end = inner
                .find(']')
                .ok_or_else(|| HostlistError::Unbalanced { expr: expr.into() })?;
            pieces.push(Piece::Ranges(parse_ranges(expr, &inner[..end])?));
            rest = &inner[end + 1..];
        } else {
            let end = rest.find('[').unwrap_or(rest.len());
            let text = &rest[..end];
            if let Some(ch) = text.chars().find(|&c| !is_name_char(c)) {
                return Err(if ch == ']' {
                    HostlistError::Unbalanced { expr: expr.into() }
                } else {
                    HostlistError::BadChar {
                        expr: expr.into(),
                        ch,
                    }
                });
            }
            pieces.push(Piece::Text(text));
            rest = &rest[end..];
        }
    }
    Ok(pieces)
}

fn parse_ranges(expr: &str, inner: &str) -> Result<Vec<Range>, HostlistError> {
    let bad = |problem| HostlistError::BadRange {
        expr: expr.into(),
        problem,
    };
    let mut out = Vec::new();
    for item in inner.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(bad(RangeProblem::Empty));
        }
        let (lo_s, hi_s) = match item.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (item, item),
        };
        if lo_s.is_empty() || hi_s.is_empty() {
            return Err(bad(RangeProblem::Empty));
        }
        let lo = parse_number(lo_s).map_err(bad)?;
        let hi = parse_number(hi_s).map_err(bad)?;
        if lo > hi {
            return Err(bad(RangeProblem::StartAfterEnd));
        }
        out.push(Range {
            lo,
            hi,
            width: lo_s.len(),
        });
    }
    Ok(out)
}

fn parse_number(s: &str) -> Result<u64, RangeProblem> {
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(RangeProblem::NotANumber(s.into()));
    }
    if s.len() > MAX_DIGITS {
        return Err(RangeProblem::TooLarge(s.into()));
    }
    s.parse().map_err(|_| RangeProblem::NotANumber(s.into()))
}

/// Appends every name of `pieces` (prefixed by `prefix`) to `out`.
fn push_product(pieces: &[Piece<'_>], prefix: &mut String, out: &mut Vec<String>) {
    let Some((first, rest)) = pieces.split_first() else {
        out.push(prefix.clone());
        return;
    };
    let keep = prefix.len();
    match first {
        Piece::Text(t) => {
            prefix.push_str(t);
            push_product(rest, prefix, out);
        }
        Piece::Ranges(rs) => {
            for r in rs {
                for n in r.lo..=r.hi {
                    use fmt::Write as _;
                    // Writing to a String cannot fail.
                    let _ = write!(prefix, "{n:0width$}", width = r.width);
                    push_product(rest, prefix, out);
                    prefix.truncate(keep);
                }
            }
        }
    }
    prefix.truncate(keep);
}

#[cfg(test)]
mod test {
    use super::*;

    fn ok(s: &str) -> Vec<String> {
        expand(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn plain_names_and_lists() {
        assert_eq!(ok("login"), ["login"]);
        assert_eq!(ok("a,b.example,c-1_x"), ["a", "b.example", "c-1_x"]);
        assert_eq!(ok("  n1 "), ["n1"]);
    }

    #[test]
    fn ranges_and_padding() {
        assert_eq!(ok("node[01-04]"), ["node01", "node02", "node03", "node04"]);
        assert_eq!(ok("n[8-10]"), ["n8", "n9", "n10"]);
        assert_eq!(ok("n[08-10]"), ["n08", "n09", "n10"]);
        assert_eq!(ok("n[007-008]"), ["n007", "n008"]);
        assert_eq!(ok("dev[0-5]").len(), 6);
        assert_eq!(ok("s[0-1]"), ["s0", "s1"]);
        assert_eq!(ok("[1-2]"), ["1", "2"]);
        assert_eq!(ok("n[5]"), ["n5"]);
    }

    #[test]
    fn range_lists_and_several_hostlists() {
        assert_eq!(
            ok("node[1,3,5-7]"),
            ["node1", "node3", "node5", "node6", "node7"]
        );
        assert_eq!(ok("a[1-2],b[01-02],c"), ["a1", "a2", "b01", "b02", "c"]);
    }

    #[test]
    fn several_bracket_groups_multiply_out() {
        assert_eq!(
            ok("r[1-2]n[1-2].ib"),
            ["r1n1.ib", "r1n2.ib", "r2n1.ib", "r2n2.ib"]
        );
    }

    #[test]
    fn errors_name_the_expression_and_the_problem() {
        let msg = |s: &str| expand(s).unwrap_err().to_string();
        assert_eq!(
            msg("node[04-01]"),
            "bad hostlist range 'node[04-01]': start after end"
        );
        assert_eq!(
            msg("a,n[1-x]"),
            "bad hostlist range 'n[1-x]': 'x' is not a number"
        );
        assert_eq!(
            msg("n[]"),
            "bad hostlist range 'n[]': empty range (expected N or N-M)"
        );
        assert_eq!(
            msg("n[1,]"),
            "bad hostlist range 'n[1,]': empty range (expected N or N-M)"
        );
        assert_eq!(
            msg("n[-3]"),
            "bad hostlist range 'n[-3]': empty range (expected N or N-M)"
        );
        assert_eq!(
            msg("n[1-1234567890123456789]"),
            "bad hostlist range 'n[1-1234567890123456789]': number '1234567890123456789' is too large"
        );
        assert_eq!(msg("n[1-2"), "unbalanced brackets in hostlist 'n[1-2'");
        assert_eq!(msg("a,n1-2]"), "unbalanced brackets in hostlist 'n1-2]'");
        assert_eq!(msg("n[[1]]"), "unbalanced brackets in hostlist 'n[[1]]'");
        assert!(msg("n 1").starts_with("unexpected character ' ' in hostlist 'n 1'"));
        assert!(msg("n=1").contains("unexpected character '='"));
        assert_eq!(msg("a,,b"), "empty host name in hostlist 'a,,b'");
        assert_eq!(msg("a,"), "empty host name in hostlist 'a,'");
        assert_eq!(msg("  "), "empty hostlist");
        assert!(matches!(
            expand("n[1-2]"),
            Ok(v) if v.len() == 2
        ));
    }

    #[test]
    fn expansion_is_capped_before_allocating() {
        assert_eq!(
            expand("n[0-99999999999]").unwrap_err(),
            HostlistError::TooMany {
                expr: "n[0-99999999999]".into(),
                limit: MAX_HOSTS
            }
        );
        // Products overflowing u64 are caught too.
        let huge = "a[0-999999999999999999]b[0-999999999999999999]";
        assert!(matches!(expand(huge), Err(HostlistError::TooMany { .. })));
        // The limit counts the whole list.
        assert!(expand_with_limit("a[1-3],b[1-3]", 6).is_ok());
        assert_eq!(
            expand_with_limit("a[1-3],b[1-3]", 5)
                .unwrap_err()
                .to_string(),
            "hostlist 'b[1-3]' expands to more than 5 names"
        );
        assert_eq!(
            expand(&format!("n[1-{MAX_HOSTS}]")).unwrap().len(),
            MAX_HOSTS
        );
    }
}
