//! The text rendering: the class matrix (per PE, per node, or a summary),
//! one PE's routes, and the footprint table.

use std::fmt::Write as _;

use switchyard_core::{class::PathClass, topology::Footprint};

use super::{
    FOOTPRINT_READERS, Job, MATRIX_LIMIT, Transport,
    model::{AsView, LEGEND, View, cell, group, pair_counts, pe_range, switch_name},
};

pub(super) fn render_text(
    job: &Job,
    view: View,
    as_view: Option<&AsView>,
    down: &[Transport],
) -> String {
    let spec = &job.spec;
    let mut o = String::new();
    let n_nodes = spec.nodes().len();
    let orphans = spec.nodes().iter().filter(|n| n.switch.is_none()).count();
    let _ = writeln!(
        o,
        "switchyard topo: {} ({}): {} nodes x {} PE{} per node = {} PEs; {} leaf switches in {} {}{}",
        job.source,
        spec.format().name(),
        group(n_nodes),
        job.ppn,
        if job.ppn == 1 { "" } else { "s" },
        group(job.n_pes as usize),
        spec.leaves().len(),
        spec.trees(),
        if spec.trees() == 1 { "tree" } else { "trees" },
        if orphans > 0 {
            format!("; {orphans} nodes under no switch")
        } else {
            String::new()
        }
    );
    o.push('\n');
    match as_view {
        Some(v) => text_as(&mut o, job, v, down),
        None => {
            match view {
                View::Pe => text_pe_matrix(&mut o, job),
                View::Node => text_node_matrix(&mut o, job),
                View::Summary => text_summary(&mut o, job),
            }
            o.push_str("\nLegend:\n");
            for (class, what) in LEGEND {
                let _ = writeln!(o, "  {:<5} {:<12} {what}", cell(class), class.name());
            }
        }
    }
    o.push('\n');
    text_footprint(&mut o, job);
    o
}

fn text_pe_matrix(o: &mut String, job: &Job) {
    let spec = &job.spec;
    let w = format!("PE{}", job.n_pes.saturating_sub(1)).len().max(4) + 2;
    let _ = write!(o, "{:w$}", "");
    for pe in 0..job.n_pes {
        let _ = write!(o, "{:<w$}", format!("PE{pe}"));
    }
    let nw = spec
        .nodes()
        .iter()
        .map(|n| n.name.len())
        .max()
        .unwrap_or(4)
        .max(4)
        + 2;
    let _ = writeln!(o, "{:<nw$}Switch", "Node");
    for a in 0..job.n_pes {
        let _ = write!(o, "{:<w$}", format!("PE{a}"));
        for b in 0..job.n_pes {
            let _ = write!(o, "{:<w$}", cell(spec.class_of(job.ppn, a, b)));
        }
        let node = a / job.ppn;
        let name = spec
            .nodes()
            .get(node as usize)
            .map_or("?", |n| n.name.as_str());
        let _ = writeln!(o, "{name:<nw$}{}", switch_name(spec, node));
    }
}

fn text_node_matrix(o: &mut String, job: &Job) {
    let spec = &job.spec;
    let _ = writeln!(
        o,
        "{} PEs are more than {MATRIX_LIMIT}: one row per node (all {} PEs of a node share memory; X in the PE matrix would be SHM here).\n",
        group(job.n_pes as usize),
        job.ppn
    );
    let nodes = spec.nodes();
    let w = nodes.iter().map(|n| n.name.len()).max().unwrap_or(4).max(4) + 2;
    let _ = write!(o, "{:w$}", "");
    for n in nodes {
        let _ = write!(o, "{:<w$}", n.name);
    }
    let pw = format!("{}-{}", job.n_pes, job.n_pes).len() + 2;
    let _ = writeln!(o, "{:<pw$}Switch", "PEs");
    for a in 0..nodes.len() as u32 {
        let _ = write!(o, "{:<w$}", nodes[a as usize].name);
        for b in 0..nodes.len() as u32 {
            let _ = write!(o, "{:<w$}", cell(spec.node_class(a, b)));
        }
        let first = a * job.ppn;
        let _ = writeln!(
            o,
            "{:<pw$}{}",
            format!("{first}-{}", first + job.ppn - 1),
            switch_name(spec, a)
        );
    }
}

fn text_summary(o: &mut String, job: &Job) {
    let spec = &job.spec;
    let _ = writeln!(
        o,
        "{} PEs on {} nodes are too many for a matrix: summary by leaf switch.\n",
        group(job.n_pes as usize),
        group(spec.nodes().len())
    );
    let nw = spec
        .leaves()
        .iter()
        .take(MATRIX_LIMIT as usize)
        .filter_map(|&s| spec.switches().get(s as usize))
        .map(|s| s.name.len())
        .max()
        .unwrap_or(0)
        .max(11)
        + 2;
    let _ = writeln!(o, "{:<nw$}{:<8}{:<10}PEs", "Leaf switch", "Tree", "Nodes");
    for &s in spec.leaves().iter().take(MATRIX_LIMIT as usize) {
        let Some(sw) = spec.switches().get(s as usize) else {
            continue;
        };
        let _ = writeln!(
            o,
            "{:<nw$}{:<8}{:<10}{}",
            sw.name,
            sw.tree,
            group(sw.nodes.len()),
            group(sw.nodes.len() * job.ppn as usize)
        );
    }
    if spec.leaves().len() > MATRIX_LIMIT as usize {
        let _ = writeln!(
            o,
            "... and {} more leaf switches",
            group(spec.leaves().len() - MATRIX_LIMIT as usize)
        );
    }
    let _ = writeln!(o, "\nOrdered PE pairs by class:");
    for (class, count) in PathClass::ALL.into_iter().zip(pair_counts(job)) {
        let _ = writeln!(
            o,
            "  {:<5} {:<12} {:>20}",
            cell(class),
            class.name(),
            group(count as usize)
        );
    }
}

fn text_as(o: &mut String, job: &Job, v: &AsView, down: &[Transport]) {
    let spec = &job.spec;
    let node = v.pe / job.ppn;
    let node_name = |n: u32| {
        spec.nodes()
            .get(n as usize)
            .map_or("?", |n| n.name.as_str())
    };
    let downs: Vec<&str> = down.iter().map(|t| t.name()).collect();
    let _ = writeln!(
        o,
        "PE{}'s view (on {}, switch {}): transport per peer under the current health (down: {}).",
        v.pe,
        node_name(node),
        switch_name(spec, node),
        if downs.is_empty() {
            "none".into()
        } else {
            downs.join(", ")
        }
    );
    if v.merged {
        let _ = writeln!(
            o,
            "{} PEs are more than {MATRIX_LIMIT}: consecutive peers with the same routes share a row.",
            group(job.n_pes as usize)
        );
    }
    o.push('\n');
    let short_h = format!("Short (<{} B)", v.threshold);
    let long_h = format!("Long (>={} B)", v.threshold);
    let cells: Vec<[String; 5]> = v
        .rows
        .iter()
        .map(|r| {
            let (na, nb) = (r.first / job.ppn, r.last / job.ppn);
            let nodes = if na == nb {
                node_name(na).to_string()
            } else {
                format!("{}..{}", node_name(na), node_name(nb))
            };
            [
                pe_range(r.first, r.last),
                nodes,
                r.class.to_string(),
                r.short.text(),
                r.long.text(),
            ]
        })
        .collect();
    let head = [
        "Peer".to_string(),
        "Node".into(),
        "Class".into(),
        short_h,
        long_h,
    ];
    let mut widths = head.clone().map(|h| h.len());
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    for row in std::iter::once(&head).chain(&cells) {
        let mut line = String::new();
        for (c, w) in row.iter().zip(widths) {
            let _ = write!(line, "{c:<w$}  ", w = w);
        }
        let _ = writeln!(o, "{}", line.trim_end());
    }
    o.push_str(
        "\nTransports: shm = shared memory (t0), verbs = RDMA verbs (t1), tcp = TCP (t2).\n\
         * = fallback: not the class's first choice. ! = select failed: no link (UNREACHABLE),\n\
         none healthy (every candidate is down).\n",
    );
    if let Some(e) = v
        .rows
        .iter()
        .flat_map(|r| [&r.short.error, &r.long.error])
        .flatten()
        .next()
    {
        let _ = writeln!(o, "First select error: {e}.");
    }
}

fn text_footprint(o: &mut String, job: &Job) {
    let f = Footprint::of(job.n_pes, 3, true, FOOTPRINT_READERS);
    let m = Footprint::of(1_000_000, 3, true, FOOTPRINT_READERS);
    let mib = |b: usize| b as f64 / (1u64 << 20) as f64;
    let _ = writeln!(
        o,
        "Topology memory per PE (3 transports, health and load bits, {FOOTPRINT_READERS} reader slots):"
    );
    let rows = [
        (
            "class row",
            f.class_row,
            m.class_row,
            "2 bits per peer".to_string(),
        ),
        (
            "health bits",
            f.health,
            m.health,
            "1 bit per transport and peer".into(),
        ),
        (
            "load bits",
            f.load,
            m.load,
            "1 bit per transport and peer".into(),
        ),
        (
            "row total",
            f.row(),
            m.row(),
            format!("{:.2} MiB at 1,000,000 PEs", mib(m.row())),
        ),
        (
            "versioned topology",
            f.total(),
            m.total(),
            format!("2 class rows, bits, readers; {:.2} MiB", mib(m.total())),
        ),
    ];
    let job_h = format!("this job ({} PEs)", group(job.n_pes as usize));
    let million_h = "1,000,000 PEs";
    let jw = rows
        .iter()
        .map(|r| group(r.1).len() + 2)
        .chain([job_h.len()])
        .max()
        .unwrap_or(0);
    let mw = rows
        .iter()
        .map(|r| group(r.2).len() + 2)
        .chain([million_h.len()])
        .max()
        .unwrap_or(0);
    let _ = writeln!(o, "  {:<20}{job_h:>jw$}  {million_h:>mw$}", "");
    for (what, a, b, note) in rows {
        let (a, b) = (format!("{} B", group(a)), format!("{} B", group(b)));
        let _ = writeln!(o, "  {what:<20}{a:>jw$}  {b:>mw$}  {note}");
    }
}
