//! `topo --svg FILE.svg`: the class matrix as a heat map with a legend, and
//! with `--as PE` that PE's routes drawn over its row.
//!
//! Up to [`MATRIX_LIMIT`] PEs, one cell per ordered PE pair; above it, one
//! per ordered node pair (as the text view). A job with more nodes than that
//! has no matrix to draw. Each cell is coloured by class, from LOCAL (the
//! same PE) to UNREACHABLE. With `--as`, the PE's row (its node's in the
//! node view) is outlined and each of its cells carries a mark coloured by
//! the transport chosen for long messages, and, where the cell is wide
//! enough, the route as text (`shm`, `verbs/tcp` when short and long
//! messages differ, `*` a fallback, `!` no route).

use plotters::{
    prelude::*,
    style::text_anchor::{HPos, Pos, VPos},
};
use switchyard_core::class::PathClass;

use super::{
    Job, MATRIX_LIMIT, TopoCliError, Transport,
    model::{AsView, Choice, LEGEND, View, cell, group, switch_name},
};
use crate::plot;

/// Cell side, pixels, at most and at least.
const CELL: (u32, u32) = (64, 14);

/// The matrix's side at most, pixels (cells shrink to fit, down to
/// `CELL.1`).
const MATRIX: u32 = 960;

/// Width of the legend column, pixels.
const LEGEND_WIDTH: u32 = 470;

/// Height of the title line, pixels.
const TITLE: u32 = 34;

/// The fill of each class, by [`PathClass::ALL`]'s order: cool for near,
/// warm for far.
const CLASS_COLOURS: [RGBColor; 5] = [
    RGBColor(0x2c, 0x7b, 0xb6),
    RGBColor(0xab, 0xd9, 0xe9),
    RGBColor(0xff, 0xff, 0xbf),
    RGBColor(0xfd, 0xae, 0x61),
    RGBColor(0xd7, 0x19, 0x1c),
];

/// The mark of each transport (by [`Transport::ALL`]'s order), and of no
/// route.
const TRANSPORT_COLOURS: [RGBColor; 3] = [
    RGBColor(0x1a, 0x1a, 0x1a),
    RGBColor(0x76, 0x2a, 0x83),
    RGBColor(0x8c, 0x51, 0x0a),
];

/// The mark of a pair with no route.
const NO_ROUTE: RGBColor = RGBColor(0xff, 0xff, 0xff);

/// The fill of `class`.
pub(super) fn class_colour(class: PathClass) -> RGBColor {
    let i = PathClass::ALL.iter().position(|c| *c == class).unwrap_or(4);
    CLASS_COLOURS[i]
}

/// The mark of a route: its transport's colour, white when there is none.
fn route_colour(c: &Choice) -> RGBColor {
    Transport::ALL
        .iter()
        .position(|t| Some(t.name()) == c.transport)
        .map_or(NO_ROUTE, |i| TRANSPORT_COLOURS[i])
}

/// A route as a cell shows it: one transport, or short/long when they
/// differ.
fn route_text(short: &Choice, long: &Choice) -> String {
    let (s, l) = (short.text(), long.text());
    if s == l { l } else { format!("{s}/{l}") }
}

/// What the heat map draws: labels of the rows (= columns), the class of
/// each cell, and the outlined row with its routes.
struct Matrix<'a> {
    labels: Vec<String>,
    class: Box<dyn Fn(u32, u32) -> PathClass + 'a>,
    /// The `--as` row and, per column, the routes for short and long
    /// messages.
    routes: Option<(u32, Vec<(Choice, Choice)>)>,
}

/// The matrix of `job` in `view`, with `as_view`'s routes.
fn matrix<'a>(
    job: &'a Job,
    view: View,
    as_view: Option<&AsView>,
) -> Result<Matrix<'a>, TopoCliError> {
    let route_to = |v: &AsView, peer: u32| {
        v.rows
            .iter()
            .find(|r| r.first <= peer && peer <= r.last)
            .map(|r| (r.short.clone(), r.long.clone()))
    };
    let (spec, ppn) = (&job.spec, job.ppn);
    match view {
        View::Pe => Ok(Matrix {
            labels: (0..job.n_pes).map(|pe| format!("PE{pe}")).collect(),
            class: Box::new(move |a, b| spec.class_of(ppn, a, b)),
            routes: as_view.map(|v| {
                let r = (0..job.n_pes).filter_map(|p| route_to(v, p)).collect();
                (v.pe, r)
            }),
        }),
        View::Node => Ok(Matrix {
            labels: job.spec.nodes().iter().map(|n| n.name.clone()).collect(),
            class: Box::new(move |a, b| spec.node_class(a, b)),
            routes: as_view.map(|v| {
                let me = v.pe / ppn;
                let r = (0..job.spec.nodes().len() as u32)
                    .filter_map(|n| {
                        // On its own node: another PE there, if any.
                        let first = n * ppn;
                        let peer = if n == me && ppn > 1 && first == v.pe {
                            first + 1
                        } else {
                            first
                        };
                        route_to(v, peer)
                    })
                    .collect();
                (me, r)
            }),
        }),
        View::Summary => Err(TopoCliError::Svg(format!(
            "the job has {} nodes: the matrix is drawn for at most {MATRIX_LIMIT} nodes",
            group(job.spec.nodes().len())
        ))),
    }
}

/// The SVG of `job`'s class matrix in `view`, with `as_view`'s routes.
///
/// # Errors
///
/// More nodes than [`MATRIX_LIMIT`] ([`TopoCliError::Svg`]).
pub(super) fn render_svg(
    job: &Job,
    view: View,
    as_view: Option<&AsView>,
    down: &[Transport],
) -> Result<String, TopoCliError> {
    let m = matrix(job, view, as_view)?;
    draw(job, &m, as_view, down).map_err(TopoCliError::Svg)
}

fn draw(
    job: &Job,
    m: &Matrix<'_>,
    as_view: Option<&AsView>,
    down: &[Transport],
) -> Result<String, String> {
    let n = m.labels.len() as u32;
    let c = (MATRIX / n.max(1)).clamp(CELL.1, CELL.0);
    let longest = m.labels.iter().map(|l| l.len()).max().unwrap_or(2) as u32;
    // Room for the row labels on the left and the column labels (turned)
    // on top: about 7 px a character at 11 px.
    let gutter = longest * 7 + 12;
    let (x0, y0) = (gutter, TITLE + gutter);
    let legend_height = 30 + 22 * 6 + if m.routes.is_some() { 22 * 6 } else { 0 };
    let width = x0 + n * c + 24 + LEGEND_WIDTH;
    let height = (y0 + n * c + 16).max(TITLE + legend_height);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(plot::error)?;
        let px = |v: u32| v as i32;
        let text = |s: &str, (x, y): (u32, u32), size: u32, pos: Pos| {
            let style = ("sans-serif", size).into_font().color(&BLACK).pos(pos);
            root.draw(&Text::new(s.to_string(), (px(x), px(y)), style))
                .map_err(plot::error)
        };
        let left_middle = Pos::new(HPos::Left, VPos::Center);
        let centre = Pos::new(HPos::Center, VPos::Center);
        text(&title(job, as_view, down), (8, TITLE / 2), 14, left_middle)?;
        let label_style = ("sans-serif", 11).into_font().color(&BLACK);
        for (i, l) in m.labels.iter().enumerate() {
            let mid = (i as u32) * c + c / 2;
            text(
                l,
                (x0 - 6, y0 + mid),
                11,
                Pos::new(HPos::Right, VPos::Center),
            )?;
            let turned = label_style
                .transform(FontTransform::Rotate270)
                .pos(Pos::new(HPos::Left, VPos::Center));
            root.draw(&Text::new(l.clone(), (px(x0 + mid), px(y0 - 6)), turned))
                .map_err(plot::error)?;
        }
        // A cell's text at 10 px, else 8 px, when it fits (about 0.6 em
        // a character); none otherwise (the colour and mark say it).
        let fit = |s: &str| {
            [10, 8]
                .into_iter()
                .find(|&px| s.len() as u32 * px * 6 / 10 + 4 <= c)
        };
        for a in 0..n {
            for b in 0..n {
                let class = (m.class)(a, b);
                let (x, y) = (x0 + b * c, y0 + a * c);
                root.draw(&Rectangle::new(
                    [(px(x), px(y)), (px(x + c), px(y + c))],
                    class_colour(class).filled(),
                ))
                .map_err(plot::error)?;
                if let Some(size) = fit(cell(class))
                    && m.routes.as_ref().is_none_or(|(row, _)| *row != a)
                {
                    text(cell(class), (x + c / 2, y + c / 2), size, centre)?;
                }
            }
        }
        // The grid: white lines between the cells.
        for i in 0..=n {
            let v = px(i * c);
            let lines = [
                [(px(x0), px(y0) + v), (px(x0 + n * c), px(y0) + v)],
                [(px(x0) + v, px(y0)), (px(x0) + v, px(y0 + n * c))],
            ];
            for l in lines {
                root.draw(&PathElement::new(l.to_vec(), WHITE.stroke_width(1)))
                    .map_err(plot::error)?;
            }
        }
        if let Some((row, routes)) = &m.routes {
            let y = y0 + row * c;
            for (b, (short, long)) in routes.iter().enumerate() {
                let x = x0 + b as u32 * c;
                let r = (c / 6).max(3);
                let mark = (px(x + r + 2), px(y + r + 2));
                root.draw(&Circle::new(mark, r, route_colour(long).filled()))
                    .map_err(plot::error)?;
                root.draw(&Circle::new(mark, r, BLACK.stroke_width(1)))
                    .map_err(plot::error)?;
                let route = route_text(short, long);
                if let Some(size) = fit(&route) {
                    text(&route, (x + c / 2, y + c * 3 / 5), size, centre)?;
                }
            }
            root.draw(&Rectangle::new(
                [(px(x0), px(y)), (px(x0 + n * c), px(y + c))],
                BLACK.stroke_width(3),
            ))
            .map_err(plot::error)?;
        }
        // The legend.
        let lx = x0 + n * c + 24;
        let mut ly = TITLE + 10;
        text(
            "Path class of each ordered pair (row to column)",
            (lx, ly),
            12,
            left_middle,
        )?;
        ly += 22;
        for (class, what) in LEGEND {
            root.draw(&Rectangle::new(
                [(px(lx), px(ly) - 8), (px(lx + 16), px(ly) + 8)],
                class_colour(class).filled(),
            ))
            .map_err(plot::error)?;
            let line = format!("{} {}: {what}", cell(class), class.name());
            text(&line, (lx + 22, ly), 11, left_middle)?;
            ly += 22;
        }
        if let (Some(v), Some(_)) = (as_view, &m.routes) {
            ly += 12;
            let head = format!(
                "PE{}'s routes (outlined row): mark = transport of a long put",
                v.pe
            );
            text(&head, (lx, ly), 12, left_middle)?;
            ly += 22;
            let marks = Transport::ALL
                .iter()
                .map(|t| (t.name().to_string(), route_colour(&choice(Some(t.name())))))
                .chain(std::iter::once(("no route".to_string(), NO_ROUTE)));
            for (name, colour) in marks {
                root.draw(&Circle::new((px(lx + 8), px(ly)), 6, colour.filled()))
                    .map_err(plot::error)?;
                root.draw(&Circle::new((px(lx + 8), px(ly)), 6, BLACK.stroke_width(1)))
                    .map_err(plot::error)?;
                text(&name, (lx + 22, ly), 11, left_middle)?;
                ly += 22;
            }
            let note = format!(
                "text: short/long route (threshold {} B); * fallback, ! none",
                v.threshold
            );
            text(&note, (lx, ly), 11, left_middle)?;
        }
        root.present().map_err(plot::error)?;
    }
    Ok(svg)
}

/// A route by transport name only (for the legend's marks).
fn choice(transport: Option<&'static str>) -> Choice {
    Choice {
        transport,
        fallback: false,
        error: None,
        short_error: "",
    }
}

/// The picture's title: the job, and with `--as` the PE, its node and what
/// is down.
fn title(job: &Job, as_view: Option<&AsView>, down: &[Transport]) -> String {
    let mut t = format!(
        "switchyard topo: {}: {} nodes x {} PE{} per node = {} PEs",
        job.source,
        group(job.spec.nodes().len()),
        job.ppn,
        if job.ppn == 1 { "" } else { "s" },
        group(job.n_pes as usize)
    );
    if let Some(v) = as_view {
        let node = v.pe / job.ppn;
        let name = job
            .spec
            .nodes()
            .get(node as usize)
            .map_or("?", |n| n.name.as_str());
        t.push_str(&format!(
            "; as PE{} on {name} (switch {})",
            v.pe,
            switch_name(&job.spec, node)
        ));
        if !down.is_empty() {
            let d: Vec<&str> = down.iter().map(|t| t.name()).collect();
            t.push_str(&format!("; down: {}", d.join(", ")));
        }
    }
    t
}

#[cfg(test)]
mod test {
    use switchyard_topo::{ClusterSpec, Format, parse_topology};

    use super::*;
    use crate::topo::{
        model::{pair_counts, routes},
        test::job_of,
    };

    fn job(text: Option<&str>, ppn: u32) -> Job {
        let spec = text.map_or_else(ClusterSpec::example, |t| {
            parse_topology(t, Format::Auto).unwrap()
        });
        job_of(spec, ppn)
    }

    /// The `<tag>` elements filled with `colour`.
    fn filled(doc: &roxmltree::Document<'_>, tag: &str, colour: RGBColor) -> usize {
        let hex = format!("#{:02X}{:02X}{:02X}", colour.0, colour.1, colour.2);
        doc.descendants()
            .filter(|n| n.has_tag_name(tag) && n.attribute("fill") == Some(hex.as_str()))
            .count()
    }

    /// The cells (and legend swatches) of `colour`.
    fn rects(doc: &roxmltree::Document<'_>, colour: RGBColor) -> usize {
        filled(doc, "rect", colour)
    }

    /// The route marks of `colour`.
    fn marks(doc: &roxmltree::Document<'_>, colour: RGBColor) -> usize {
        filled(doc, "circle", colour)
    }

    #[test]
    fn pe_matrix_with_routes() {
        let job = job(None, 2);
        let v = routes(&job, 0, 8192, &[]).unwrap();
        let svg = render_svg(&job, View::Pe, Some(&v), &[]).unwrap();
        let doc = plot::check_svg(&svg);
        // One cell per ordered pair, by class, plus the legend's swatch.
        for (class, count) in PathClass::ALL.into_iter().zip(pair_counts(&job)) {
            assert_eq!(
                rects(&doc, class_colour(class)),
                count as usize + 1,
                "{class:?}"
            );
        }
        let texts = plot::texts(&doc);
        for want in [
            "switchyard topo: test: 4 nodes x 2 PEs per node = 8 PEs; as PE0 on node01 (switch leaf0)",
            "PE0",
            "PE7",
            "X LOCAL: the same PE",
            "-- UNREACHABLE: no link: switches in disconnected trees, or a node under no switch",
            "PE0's routes (outlined row): mark = transport of a long put",
            "tcp/verbs",
            "verbs",
        ] {
            assert!(texts.iter().any(|t| t == want), "{want}: {texts:?}");
        }
        // PE0's row: shm to PE0 and PE1, verbs to the other six (long
        // puts), each with a mark; the legend has one of each.
        let [shm, verbs, tcp] = TRANSPORT_COLOURS;
        assert_eq!(marks(&doc, shm), 2 + 1);
        assert_eq!(marks(&doc, verbs), 6 + 1);
        assert_eq!(marks(&doc, tcp), 1);
        // Cells of the other rows name their class.
        assert!(texts.iter().filter(|t| *t == "RTD").count() >= 7 * 4);
        // Without --as: no marks, no route legend.
        let svg = render_svg(&job, View::Pe, None, &[]).unwrap();
        let doc = plot::check_svg(&svg);
        assert_eq!(
            doc.descendants()
                .filter(|n| n.has_tag_name("circle"))
                .count(),
            0
        );
        assert!(!plot::texts(&doc).iter().any(|t| t.contains("routes")));
    }

    #[test]
    fn node_matrix_and_too_many_nodes() {
        let text =
            "SwitchName=a Nodes=n[1-4]\nSwitchName=b Nodes=n[5-8]\nSwitchName=t Switches=a,b\n";
        let job = job(Some(text), 16);
        let v = routes(&job, 16, 8192, &[Transport::Verbs]).unwrap();
        let svg = render_svg(&job, View::Node, Some(&v), &[Transport::Verbs]).unwrap();
        let doc = plot::check_svg(&svg);
        let texts = plot::texts(&doc);
        assert!(texts.iter().any(|t| t == "n8"), "{texts:?}");
        assert!(
            texts
                .iter()
                .any(|t| t.ends_with("as PE16 on n2 (switch a); down: verbs"))
        );
        // 8 x 8 nodes: 8 SHM cells on the diagonal, 2 x 4 x 3 NEAR, 32 RTD.
        assert_eq!(rects(&doc, class_colour(PathClass::Shm)), 8 + 1);
        assert_eq!(rects(&doc, class_colour(PathClass::Near)), 24 + 1);
        assert_eq!(rects(&doc, class_colour(PathClass::Routed)), 32 + 1);
        // n2's row: shm on its own node, TCP (a fallback for NEAR) elsewhere.
        let [shm, _, tcp] = TRANSPORT_COLOURS;
        assert_eq!((marks(&doc, shm), marks(&doc, tcp)), (1 + 1, 7 + 1));
        let text = "SwitchName=a Nodes=n[1-100]\n";
        let job = self::job(Some(text), 1);
        let e = render_svg(&job, View::Summary, None, &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--svg: the job has 100 nodes: the matrix is drawn for at most 64 nodes"
        );
    }

    #[test]
    fn the_command_writes_the_file() {
        let dir = std::env::temp_dir().join(format!("switchyard-topo-svg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.svg");
        let p = path.to_str().unwrap();
        let out = crate::run(&["topo", "--as", "3", "--svg", p].map(String::from));
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(out.stdout.contains("PE3's view"), "{}", out.stdout);
        let svg = std::fs::read_to_string(&path).unwrap();
        plot::check_svg(&svg);
        assert!(svg.contains("PE3&apos;s routes") || svg.contains("PE3's routes"));
        let bad = dir.join("no/such/dir/m.svg");
        let out = crate::run(&["topo", "--svg", bad.to_str().unwrap()].map(String::from));
        assert_eq!(out.code, crate::EXIT_USAGE);
        assert!(out.stderr.contains("--svg: cannot write"), "{}", out.stderr);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
