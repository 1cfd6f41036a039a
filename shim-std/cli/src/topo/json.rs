//! The JSON rendering (`switchyard topo --json`).

use serde::Serialize;
use switchyard_core::{class::PathClass, topology::Footprint};

use super::{
    FOOTPRINT_READERS, Job, Transport,
    model::{AsView, LEGEND, RouteRow, View, cell, pair_counts},
};

#[derive(Serialize)]
struct JsonPe<'a> {
    pe: u32,
    node: &'a str,
    node_id: u32,
    switch: Option<&'a str>,
    switch_id: Option<u32>,
}

#[derive(Serialize)]
struct JsonNode<'a> {
    id: u32,
    name: &'a str,
    switch: Option<&'a str>,
    switch_id: Option<u32>,
    tree: Option<u32>,
    first_pe: u32,
    last_pe: u32,
}

#[derive(Serialize)]
struct JsonSwitch<'a> {
    name: &'a str,
    line: u32,
    leaf_id: Option<u32>,
    tree: u32,
    switches: Vec<&'a str>,
    nodes: usize,
}

#[derive(Serialize)]
struct JsonClass {
    name: &'static str,
    cell: &'static str,
    meaning: &'static str,
}

#[derive(Serialize)]
struct JsonTransport {
    id: usize,
    name: &'static str,
    healthy: bool,
}

#[derive(Serialize)]
struct JsonAs<'a> {
    pe: u32,
    short_threshold: u32,
    down: Vec<&'static str>,
    transports: Vec<JsonTransport>,
    /// Whether consecutive peers with equal routes share an entry.
    merged: bool,
    routes: &'a [RouteRow],
}

#[derive(Serialize)]
struct JsonFootprint {
    class_row: usize,
    health: usize,
    load: usize,
    readers: usize,
    row: usize,
    total: usize,
}

impl From<Footprint> for JsonFootprint {
    fn from(f: Footprint) -> Self {
        JsonFootprint {
            class_row: f.class_row,
            health: f.health,
            load: f.load,
            readers: f.readers,
            row: f.row(),
            total: f.total(),
        }
    }
}

#[derive(Serialize)]
struct JsonFootprints {
    transports: u8,
    load_hints: bool,
    readers: usize,
    job: JsonFootprint,
    million_pes: JsonFootprint,
}

/// The `--json` document. Keys appear in this order.
#[derive(Serialize)]
struct JsonDoc<'a> {
    source: &'a str,
    format: &'static str,
    pes_per_node: u32,
    n_nodes: usize,
    n_pes: u32,
    leaf_switches: usize,
    trees: u32,
    /// `pe` (matrix of PEs), `node` (matrix of nodes) or `summary`.
    view: &'static str,
    classes: Vec<JsonClass>,
    nodes: Vec<JsonNode<'a>>,
    switches: Vec<JsonSwitch<'a>>,
    pair_counts: std::collections::BTreeMap<&'static str, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pes: Option<Vec<JsonPe<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    matrix: Option<Vec<Vec<&'static str>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    node_matrix: Option<Vec<Vec<&'static str>>>,
    #[serde(rename = "as", skip_serializing_if = "Option::is_none")]
    as_pe: Option<JsonAs<'a>>,
    footprint: JsonFootprints,
}

pub(super) fn render_json(
    job: &Job,
    view: View,
    as_view: Option<&AsView>,
    down: &[Transport],
) -> String {
    let spec = &job.spec;
    let leaf_of = |node: u32| {
        let l = spec.node_locality(node).switch;
        spec.leaf_switch(l).map(|s| (s, l))
    };
    let nodes = spec
        .nodes()
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let leaf = leaf_of(i as u32);
            JsonNode {
                id: i as u32,
                name: &n.name,
                switch: leaf.map(|(s, _)| s.name.as_str()),
                switch_id: leaf.map(|(_, l)| l),
                tree: leaf.map(|(s, _)| s.tree),
                first_pe: i as u32 * job.ppn,
                last_pe: (i as u32 + 1) * job.ppn - 1,
            }
        })
        .collect();
    let switches = spec
        .switches()
        .iter()
        .map(|s| JsonSwitch {
            name: &s.name,
            line: s.line,
            leaf_id: s.leaf,
            tree: s.tree,
            switches: s
                .children
                .iter()
                .filter_map(|&c| spec.switches().get(c as usize))
                .map(|c| c.name.as_str())
                .collect(),
            nodes: s.nodes.len(),
        })
        .collect();
    let pes = (view == View::Pe).then(|| {
        (0..job.n_pes)
            .map(|pe| {
                let node = pe / job.ppn;
                let leaf = leaf_of(node);
                JsonPe {
                    pe,
                    node: spec.nodes().get(node as usize).map_or("?", |n| &n.name),
                    node_id: node,
                    switch: leaf.map(|(s, _)| s.name.as_str()),
                    switch_id: leaf.map(|(_, l)| l),
                }
            })
            .collect()
    });
    let matrix = (view == View::Pe).then(|| {
        (0..job.n_pes)
            .map(|a| {
                (0..job.n_pes)
                    .map(|b| spec.class_of(job.ppn, a, b).name())
                    .collect()
            })
            .collect()
    });
    let node_matrix = (view == View::Node).then(|| {
        let n = spec.nodes().len() as u32;
        (0..n)
            .map(|a| (0..n).map(|b| spec.node_class(a, b).name()).collect())
            .collect()
    });
    let doc = JsonDoc {
        source: &job.source,
        format: spec.format().name(),
        pes_per_node: job.ppn,
        n_nodes: spec.nodes().len(),
        n_pes: job.n_pes,
        leaf_switches: spec.leaves().len(),
        trees: spec.trees(),
        view: view.name(),
        classes: LEGEND
            .iter()
            .map(|&(c, meaning)| JsonClass {
                name: c.name(),
                cell: cell(c),
                meaning,
            })
            .collect(),
        nodes,
        switches,
        pair_counts: PathClass::ALL
            .into_iter()
            .map(PathClass::name)
            .zip(pair_counts(job))
            .collect(),
        pes,
        matrix,
        node_matrix,
        as_pe: as_view.map(|v| JsonAs {
            pe: v.pe,
            short_threshold: v.threshold,
            down: down.iter().map(|t| t.name()).collect(),
            transports: Transport::ALL
                .iter()
                .map(|t| JsonTransport {
                    id: t.id().index(),
                    name: t.name(),
                    healthy: !down.contains(t),
                })
                .collect(),
            merged: v.merged,
            routes: &v.rows,
        }),
        footprint: JsonFootprints {
            transports: 3,
            load_hints: true,
            readers: FOOTPRINT_READERS,
            job: Footprint::of(job.n_pes, 3, true, FOOTPRINT_READERS).into(),
            million_pes: Footprint::of(1_000_000, 3, true, FOOTPRINT_READERS).into(),
        },
    };
    // Serializing plain structs and strings cannot fail.
    let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
    s.push('\n');
    s
}
