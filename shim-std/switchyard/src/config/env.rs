//! The environment as a source: `SWITCHYARD_*` names that are not keys, and
//! the "did you mean" suggestion for a misspelt name (shared with the file's
//! unknown keys).

use super::{ConfigWarning, ENV_PREFIX, Key, RESERVED_ENV, keys::DEPRECATED};

/// Warnings for the `SWITCHYARD_*` names among `names` that are neither keys nor
/// [`RESERVED_ENV`] (nor a renamed key's old variable, which
/// [`Config::load_from`](super::Config::load_from) warns about). The prefix is matched without regard to case, so
/// `switchyard_heap_size` is reported too.
pub fn check_env_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<ConfigWarning> {
    let known: Vec<&'static str> = Key::ALL
        .map(Key::env)
        .into_iter()
        .chain(RESERVED_ENV)
        .chain(DEPRECATED.map(|d| d.env))
        .collect();
    let mut out = Vec::new();
    for name in names {
        let looks_ours = name
            .get(..ENV_PREFIX.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(ENV_PREFIX));
        if !looks_ours || known.contains(&name) {
            continue;
        }
        let rest = &name[ENV_PREFIX.len()..];
        let suggestion = closest(rest, known.iter().map(|k| (&k[ENV_PREFIX.len()..], *k)));
        out.push(ConfigWarning {
            var: name.into(),
            suggestion,
            renamed_to: None,
        });
    }
    out
}

/// The candidate `given` most plausibly misspells: equal without regard to case
/// and underscores, or within a small edit distance.
pub(super) fn closest<'a>(
    given: &str,
    candidates: impl Iterator<Item = (&'a str, &'static str)>,
) -> Option<&'static str> {
    const MAX_LEN: usize = 64;
    if given.is_empty() || given.len() > MAX_LEN {
        return None;
    }
    let norm = |s: &str| -> Vec<u8> {
        s.bytes()
            .filter(|&b| b != b'_' && b != b'-')
            .map(|b| b.to_ascii_lowercase())
            .collect()
    };
    let g = norm(given);
    let mut best: Option<(usize, &'static str)> = None;
    for (cand, full) in candidates {
        let c = norm(cand);
        let d = edit_distance(&g, &c);
        let limit = if c.len() <= 5 { 1 } else { 2 };
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, full));
        }
    }
    best.map(|(_, full)| full)
}

/// Optimal-string-alignment distance (insert, delete, substitute, swap two
/// neighbours).
pub(super) fn edit_distance(a: &[u8], b: &[u8]) -> usize {
    let w = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * w];
    for (i, row) in d.chunks_mut(w).enumerate() {
        row[0] = i;
    }
    for (j, cell) in d.iter_mut().take(w).enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[(i - 1) * w + j] + 1)
                .min(d[i * w + j - 1] + 1)
                .min(d[(i - 1) * w + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[(i - 2) * w + j - 2] + 1);
            }
            d[i * w + j] = v;
        }
    }
    d[a.len() * w + b.len()]
}
