//! The model both renderings share: matrix cells, the view a job gets, one
//! PE's routes (run through the core's route selector), pair counts.

use serde::Serialize;
use switchyard_core::{
    class::PathClass,
    route::{
        Op, Policy, PolicyConfig, Route, SelectError, Selector, TransportRoles, UnreachableReason,
    },
    topology::{Shape, Topology, TopologyBox},
};
use switchyard_topo::ClusterSpec;

use super::{Job, MATRIX_LIMIT, SHM, TCP, TopoCliError, Transport, VERBS};

/// Short matrix cell for a class.
pub fn cell(class: PathClass) -> &'static str {
    match class {
        PathClass::Local => "X",
        PathClass::Shm => "SHM",
        PathClass::Near => "NEAR",
        PathClass::Routed => "RTD",
        PathClass::Unreachable => "--",
    }
}

pub(super) const LEGEND: [(PathClass, &str); 5] = [
    (PathClass::Local, "the same PE"),
    (PathClass::Shm, "another PE on the same node: shared memory"),
    (
        PathClass::Near,
        "another node behind the same leaf switch: RDMA (verbs)",
    ),
    (
        PathClass::Routed,
        "another leaf switch, joined through a spine/router switch",
    ),
    (
        PathClass::Unreachable,
        "no link: switches in disconnected trees, or a node under no switch",
    ),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum View {
    Pe,
    Node,
    Summary,
}

impl View {
    pub(super) fn of(job: &Job) -> View {
        if job.n_pes <= MATRIX_LIMIT {
            View::Pe
        } else if job.spec.nodes().len() <= MATRIX_LIMIT as usize {
            View::Node
        } else {
            View::Summary
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            View::Pe => "pe",
            View::Node => "node",
            View::Summary => "summary",
        }
    }
}

/// The outcome of one select, for display.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct Choice {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) transport: Option<&'static str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(super) fallback: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) error: Option<String>,
    #[serde(skip)]
    pub(super) short_error: &'static str,
}

impl Choice {
    pub(super) fn of(r: Result<Route, SelectError>) -> Choice {
        match r {
            Ok(route) => Choice {
                transport: Some(Transport::from_id(route.transport).map_or("?", Transport::name)),
                fallback: route.downgraded,
                error: None,
                short_error: "",
            },
            Err(e) => Choice {
                transport: None,
                fallback: false,
                short_error: match e {
                    SelectError::Unreachable {
                        reason: UnreachableReason::NoLink,
                        ..
                    } => "no link",
                    SelectError::Unreachable {
                        reason: UnreachableReason::NoHealthyTransport,
                        ..
                    } => "none healthy",
                    SelectError::Unreachable { .. } => "none configured",
                    SelectError::DowngradeForbidden { .. } => "fallback forbidden",
                    SelectError::InvalidPe { .. } => "no such PE",
                },
                error: Some(e.to_string()),
            },
        }
    }

    pub(super) fn text(&self) -> String {
        match self.transport {
            Some(t) if self.fallback => format!("{t}*"),
            Some(t) => t.into(),
            None => format!("! {}", self.short_error),
        }
    }
}

/// Consecutive peers with the same class and choices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct RouteRow {
    pub(super) first: u32,
    pub(super) last: u32,
    pub(super) class: &'static str,
    pub(super) short: Choice,
    pub(super) long: Choice,
}

pub(super) struct AsView {
    pub(super) pe: u32,
    pub(super) threshold: u32,
    pub(super) rows: Vec<RouteRow>,
    pub(super) merged: bool,
}

pub(super) fn routes(
    job: &Job,
    me: u32,
    threshold: u32,
    down: &[Transport],
) -> Result<AsView, TopoCliError> {
    let shape = Shape {
        me,
        n_pes: job.n_pes,
        n_transports: 3,
        load_hints: true,
    };
    let store = TopologyBox::new(shape, 1);
    let topo = Topology::new(store.mem(), shape, |peer| {
        job.spec.class_of(job.ppn, me, peer)
    })?;
    for t in Transport::ALL.into_iter().filter(|t| !down.contains(t)) {
        for peer in 0..job.n_pes {
            topo.set_health(t.id(), peer, true);
        }
    }
    let roles = TransportRoles {
        shm: Some(SHM),
        rdma: Some(VERBS),
        stream: [Some(TCP), None, None, None],
    };
    let policy = Policy::new(PolicyConfig {
        roles,
        short_threshold: threshold,
        ..PolicyConfig::default()
    });
    let mut selector = Selector::new(&topo, policy)?;
    let mut sel = selector.pin();
    let merged = job.n_pes > MATRIX_LIMIT;
    let mut rows: Vec<RouteRow> = Vec::new();
    for peer in 0..job.n_pes {
        let class = sel.class(peer).unwrap_or(PathClass::Unreachable);
        let short = if threshold == 0 {
            Choice {
                transport: None,
                fallback: false,
                error: Some("no message is shorter than a threshold of 0".into()),
                short_error: "n/a",
            }
        } else {
            Choice::of(sel.select(peer, threshold - 1, Op::Put))
        };
        let long = Choice::of(sel.select(peer, threshold, Op::Put));
        let row = RouteRow {
            first: peer,
            last: peer,
            class: class.name(),
            short,
            long,
        };
        match rows.last_mut() {
            Some(prev)
                if merged
                    && prev.last + 1 == peer
                    && prev.class == row.class
                    && prev.short == row.short
                    && prev.long == row.long =>
            {
                prev.last = peer;
            }
            _ => rows.push(row),
        }
    }
    Ok(AsView {
        pe: me,
        threshold,
        rows,
        merged,
    })
}

/// Ordered PE pairs per class, computed from group sizes (no N² walk).
pub(super) fn pair_counts(job: &Job) -> [u64; 5] {
    let spec = &job.spec;
    let ppn = job.ppn as u64;
    let n = job.n_pes as u64;
    let mut per_leaf = vec![0u64; spec.leaves().len()];
    let mut per_tree = vec![0u64; spec.switches().len()];
    for i in 0..spec.nodes().len() as u32 {
        let leaf = spec.node_locality(i).switch;
        if let Some(sw) = spec.leaf_switch(leaf) {
            per_leaf[leaf as usize] += ppn;
            per_tree[sw.tree as usize] += ppn;
        }
    }
    let local = n;
    let shm = spec.nodes().len() as u64 * ppn * ppn.saturating_sub(1);
    let sq = |x: &u64| x * x;
    let same_leaf: u64 = per_leaf.iter().map(sq).sum();
    let same_tree: u64 = per_tree.iter().map(sq).sum();
    let on_leaf_nodes = per_leaf.iter().sum::<u64>() / ppn.max(1);
    let near = same_leaf - on_leaf_nodes * ppn * ppn;
    let routed = same_tree - same_leaf;
    let unreachable = n * n - local - shm - near - routed;
    [local, shm, near, routed, unreachable]
}

/// Thousands separators: 1234567 → "1,234,567".
pub(super) fn group(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub(super) fn pe_range(first: u32, last: u32) -> String {
    if first == last {
        format!("PE{first}")
    } else {
        format!("PE{first}-PE{last}")
    }
}

pub(super) fn switch_name(spec: &ClusterSpec, node: u32) -> &str {
    spec.leaf_switch(spec.node_locality(node).switch)
        .map_or("(none)", |s| s.name.as_str())
}

// ---------------------------------------------------------------------------
// Rendering
