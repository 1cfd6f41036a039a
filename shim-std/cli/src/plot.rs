//! What `perf --plot` and `topo --svg` share: errors, axis numbers, writing
//! the file, and (for tests) checking that an SVG is well-formed.
//!
//! Both draw with `plotters`' SVG backend only: text is written as SVG
//! `<text>` elements (the viewer's sans-serif font), so no font is read.

use std::path::Path;

/// A plotters error as text.
pub(crate) fn error(e: impl std::fmt::Display) -> String {
    format!("cannot draw the picture: {e}")
}

/// An axis number as a person reads it: `40`, `1200`, `0.5`.
pub(crate) fn number(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.1}");
        s.strip_suffix(".0").map_or(s.clone(), str::to_string)
    }
}

/// Writes `svg` to `path`.
///
/// # Errors
///
/// The file cannot be written, with its path.
pub(crate) fn save(path: &Path, svg: &str) -> Result<(), String> {
    std::fs::write(path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Parses `svg` as XML and checks its root is an `<svg>` with a size.
#[cfg(test)]
pub(crate) fn check_svg(svg: &str) -> roxmltree::Document<'_> {
    let doc = roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("not XML: {e}\n{svg}"));
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert_eq!(
        root.tag_name().namespace(),
        Some("http://www.w3.org/2000/svg")
    );
    for a in ["width", "height"] {
        assert!(
            root.attribute(a)
                .and_then(|v| v.parse::<u32>().ok())
                .is_some_and(|v| v > 0),
            "{a}"
        );
    }
    doc
}

/// The text of every `<text>` element of `doc`, in order.
#[cfg(test)]
pub(crate) fn texts(doc: &roxmltree::Document<'_>) -> Vec<String> {
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| {
            let s: String = n
                .descendants()
                .filter(|t| t.is_text())
                .filter_map(|t| t.text())
                .collect();
            s.trim().to_string()
        })
        .collect()
}

#[cfg(test)]
mod test {
    #[test]
    fn numbers() {
        assert_eq!(super::number(1200.4), "1200");
        assert_eq!(super::number(0.5), "0.5");
        assert_eq!(super::number(2.0), "2");
    }
}
