//! From the raw form to the checked [`ClusterSpec`]: switch names resolved,
//! cycles refused, nodes placed under their leaves (in the job's order when
//! it gives one), and trees found.

use std::collections::HashMap;

use crate::{
    ClusterSpec, Format, Node, Switch, TopoErrorKind, TopoFileError,
    raw::{RawSpec, RawSwitch},
};

pub(crate) fn build(raw: RawSpec, format: Format) -> Result<ClusterSpec, TopoFileError> {
    // Switch names.
    let mut index: HashMap<&str, u32> = HashMap::with_capacity(raw.switches.len());
    for (i, s) in raw.switches.iter().enumerate() {
        if let Some(&first) = index.get(s.name.as_str()) {
            return Err(TopoFileError::at(
                s.line,
                TopoErrorKind::DuplicateSwitch {
                    name: s.name.clone(),
                    first_line: raw.switches[first as usize].line,
                },
            ));
        }
        index.insert(&s.name, i as u32);
    }
    // Children.
    let mut children: Vec<Vec<u32>> = Vec::with_capacity(raw.switches.len());
    for s in &raw.switches {
        let mut kids = Vec::with_capacity(s.children.len());
        for c in &s.children {
            let &k = index.get(c.as_str()).ok_or_else(|| {
                TopoFileError::at(
                    s.line,
                    TopoErrorKind::UnknownSwitch {
                        parent: s.name.clone(),
                        child: c.clone(),
                    },
                )
            })?;
            if !kids.contains(&k) {
                kids.push(k);
            }
        }
        children.push(kids);
    }
    check_cycles(&raw.switches, &children)?;

    // Nodes under leaves, in order of appearance.
    let mut node_ids: HashMap<&str, u32> = HashMap::new();
    let mut nodes: Vec<Node> = Vec::new();
    for (si, s) in raw.switches.iter().enumerate() {
        for n in &s.nodes {
            match node_ids.get(n.as_str()) {
                Some(&id) => {
                    let first = nodes[id as usize].switch.unwrap_or(0);
                    if first as usize != si {
                        return Err(TopoFileError::at(
                            s.line,
                            TopoErrorKind::NodeUnderTwoLeaves {
                                node: n.clone(),
                                first: raw.switches[first as usize].name.clone(),
                                second: s.name.clone(),
                            },
                        ));
                    }
                }
                None => {
                    node_ids.insert(n, nodes.len() as u32);
                    nodes.push(Node {
                        name: n.clone(),
                        switch: Some(si as u32),
                    });
                }
            }
        }
    }
    // The job's own node list, when given, picks and orders the nodes.
    if let Some((list, line)) = &raw.job_nodes {
        let mut seen: HashMap<&str, ()> = HashMap::with_capacity(list.len());
        let mut job = Vec::with_capacity(list.len());
        for n in list {
            if seen.insert(n, ()).is_some() {
                return Err(TopoFileError::at(
                    *line,
                    TopoErrorKind::DuplicateNode { node: n.clone() },
                ));
            }
            let switch = node_ids
                .get(n.as_str())
                .and_then(|&id| nodes[id as usize].switch);
            job.push(Node {
                name: n.clone(),
                switch,
            });
        }
        nodes = job;
    }
    if nodes.is_empty() {
        return Err(TopoFileError::whole(TopoErrorKind::NoNodes));
    }

    // Trees: union-find over parent/child links.
    let mut parent: Vec<u32> = (0..raw.switches.len() as u32).collect();
    fn root(parent: &mut [u32], mut x: u32) -> u32 {
        while parent[x as usize] != x {
            let up = parent[parent[x as usize] as usize];
            parent[x as usize] = up;
            x = up;
        }
        x
    }
    for (s, kids) in children.iter().enumerate() {
        for &k in kids {
            let (a, b) = (root(&mut parent, s as u32), root(&mut parent, k));
            if a != b {
                parent[a as usize] = b;
            }
        }
    }
    // Leaves and tree ids in order of first appearance.
    let mut switch_nodes: Vec<Vec<u32>> = vec![Vec::new(); raw.switches.len()];
    for (id, n) in nodes.iter().enumerate() {
        if let Some(s) = n.switch {
            switch_nodes[s as usize].push(id as u32);
        }
    }
    let mut tree_of_root: HashMap<u32, u32> = HashMap::new();
    let mut leaves = Vec::new();
    let mut switches = Vec::with_capacity(raw.switches.len());
    for (i, (s, kids)) in raw.switches.into_iter().zip(children).enumerate() {
        let r = root(&mut parent, i as u32);
        let next = tree_of_root.len() as u32;
        let tree = *tree_of_root.entry(r).or_insert(next);
        let leaf = (!s.nodes.is_empty()).then(|| {
            leaves.push(i as u32);
            leaves.len() as u32 - 1
        });
        switches.push(Switch {
            name: s.name,
            line: s.line,
            leaf,
            tree,
            children: kids,
            nodes: std::mem::take(&mut switch_nodes[i]),
        });
    }
    let mut leaf_trees: Vec<u32> = leaves.iter().map(|&s| switches[s as usize].tree).collect();
    leaf_trees.sort_unstable();
    leaf_trees.dedup();
    Ok(ClusterSpec {
        format,
        pes_per_node: raw.pes_per_node,
        rails: raw.rails,
        nodes,
        switches,
        leaves,
        trees: leaf_trees.len() as u32,
    })
}

/// Depth-first search for a switch that contains itself; iterative, so a long
/// chain of switches cannot overflow the stack.
fn check_cycles(switches: &[RawSwitch], children: &[Vec<u32>]) -> Result<(), TopoFileError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    let mut mark = vec![Mark::New; switches.len()];
    let mut stack: Vec<(u32, usize)> = Vec::new();
    for start in 0..switches.len() as u32 {
        if mark[start as usize] != Mark::New {
            continue;
        }
        mark[start as usize] = Mark::Open;
        stack.push((start, 0));
        while let Some(&mut (s, ref mut next)) = stack.last_mut() {
            match children[s as usize].get(*next) {
                Some(&k) => {
                    *next += 1;
                    match mark[k as usize] {
                        Mark::New => {
                            mark[k as usize] = Mark::Open;
                            stack.push((k, 0));
                        }
                        Mark::Open => {
                            let from = stack.iter().position(|&(x, _)| x == k).unwrap_or(0);
                            let mut path: Vec<String> = stack[from..]
                                .iter()
                                .map(|&(x, _)| switches[x as usize].name.clone())
                                .collect();
                            path.push(switches[k as usize].name.clone());
                            return Err(TopoFileError::at(
                                switches[k as usize].line,
                                TopoErrorKind::Cycle { path },
                            ));
                        }
                        Mark::Done => {}
                    }
                }
                None => {
                    mark[s as usize] = Mark::Done;
                    stack.pop();
                }
            }
        }
    }
    Ok(())
}
