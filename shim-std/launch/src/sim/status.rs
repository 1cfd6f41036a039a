//! A sim's status: each node's rails as the kernel sees them.

use std::{collections::HashSet, fmt, net::Ipv4Addr};

use serde::Serialize;

use super::{
    Sim, SimError, SimLeaf, SimNode,
    ip::{find_iface, ip_json, list_namespaces},
};

/// The state of one rail of one node, read from the kernel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RailStatus {
    /// The rail.
    pub rail: u32,
    /// The node's address on it (from the state file).
    pub addr: Ipv4Addr,
    /// Whether the node has the interface at all.
    pub present: bool,
    /// The node's `r<rail>` is administratively up.
    pub admin_up: bool,
    /// It has a carrier (`LOWER_UP`).
    pub carrier: bool,
    /// The kernel's operstate (`UP`, `DOWN`, ...).
    pub operstate: String,
    /// The switch end (in the fabric) is up: false after `link down`.
    pub switch_port_up: bool,
    /// The addresses the kernel has on it.
    pub kernel_addrs: Vec<String>,
}

impl RailStatus {
    /// `up`, `cut` (switch end down), `down` (node end down) or `missing`.
    pub fn word(&self) -> &'static str {
        if !self.present {
            "missing"
        } else if !self.switch_port_up {
            "cut"
        } else if !self.admin_up {
            "down"
        } else if self.carrier {
            "up"
        } else {
            "no-carrier"
        }
    }
}

/// One node's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeStatus {
    /// The node.
    pub node: SimNode,
    /// Whether its namespace exists.
    pub netns_present: bool,
    /// Each rail.
    pub rails: Vec<RailStatus>,
}

/// A sim's status: the state file and what the kernel says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SimStatus {
    /// The sim's name.
    pub name: String,
    /// Rails per node.
    pub rails: u32,
    /// PEs per node.
    pub pes_per_node: u32,
    /// Leaf switches.
    pub leaves: Vec<SimLeaf>,
    /// Nodes.
    pub nodes: Vec<NodeStatus>,
}

impl fmt::Display for SimStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let trees: HashSet<u32> = self.leaves.iter().map(|l| l.tree).collect();
        writeln!(
            f,
            "sim {}: {} node(s), {} leaf switch(es), {} tree(s), {} rail(s), {} PE(s) per node",
            self.name,
            self.nodes.len(),
            self.leaves.len(),
            trees.len(),
            self.rails,
            self.pes_per_node
        )?;
        write!(
            f,
            "{:<5} {:<12} {:<10} {:<14} {:<5} {:<13}",
            "node", "host", "netns", "leaf", "tree", "mg"
        )?;
        for r in 0..self.rails {
            write!(f, " {:<22}", format!("r{r}"))?;
        }
        writeln!(f)?;
        for n in &self.nodes {
            let leaf = format!("{} ({})", n.node.leaf, n.node.switch);
            let netns = if n.netns_present {
                n.node.netns.clone()
            } else {
                format!("{} (gone)", n.node.netns)
            };
            write!(
                f,
                "{:<5} {:<12} {:<10} {:<14} {:<5} {:<13}",
                n.node.index,
                n.node.host,
                netns,
                leaf,
                n.node.tree,
                n.node.mgmt.to_string()
            )?;
            for r in &n.rails {
                write!(f, " {:<22}", format!("{} {}", r.addr, r.word()))?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

impl Sim {
    /// Reads the state of every node's rails from the kernel.
    ///
    /// # Errors
    ///
    /// A failed command (a missing namespace is reported in the status, not
    /// as an error).
    pub fn status(&self) -> Result<SimStatus, SimError> {
        let present: HashSet<String> = list_namespaces()?.into_iter().collect();
        let fabric = if present.contains(&self.state().fabric_netns) {
            ip_json(&["-n", &self.state().fabric_netns, "-j", "link", "show"])?
        } else {
            Vec::new()
        };
        let mut nodes = Vec::with_capacity(self.state().nodes.len());
        for n in &self.state().nodes {
            let netns_present = present.contains(&n.netns);
            let links = if netns_present {
                ip_json(&["-n", &n.netns, "-j", "addr", "show"])?
            } else {
                Vec::new()
            };
            let rails = (0..self.state().rails)
                .map(|r| {
                    let iface = find_iface(&links, &format!("r{r}"));
                    let port = find_iface(&fabric, &format!("n{}r{r}", n.index));
                    let flags = |v: Option<&serde_json::Value>, flag: &str| {
                        v.and_then(|v| v.get("flags"))
                            .and_then(|f| f.as_array())
                            .is_some_and(|f| f.iter().any(|x| x.as_str() == Some(flag)))
                    };
                    RailStatus {
                        rail: r,
                        addr: n
                            .addrs
                            .get(r as usize)
                            .copied()
                            .unwrap_or(Ipv4Addr::UNSPECIFIED),
                        present: iface.is_some(),
                        admin_up: flags(iface, "UP"),
                        carrier: flags(iface, "LOWER_UP"),
                        operstate: iface
                            .and_then(|v| v.get("operstate"))
                            .and_then(|s| s.as_str())
                            .unwrap_or("MISSING")
                            .to_string(),
                        switch_port_up: flags(port, "UP"),
                        kernel_addrs: iface
                            .and_then(|v| v.get("addr_info"))
                            .and_then(|a| a.as_array())
                            .map(|a| {
                                a.iter()
                                    .filter_map(|x| {
                                        Some(format!(
                                            "{}/{}",
                                            x.get("local")?.as_str()?,
                                            x.get("prefixlen")?.as_u64()?
                                        ))
                                    })
                                    .collect()
                            })
                            .unwrap_or_default(),
                    }
                })
                .collect();
            nodes.push(NodeStatus {
                node: n.clone(),
                netns_present,
                rails,
            });
        }
        Ok(SimStatus {
            name: self.state().name.clone(),
            rails: self.state().rails,
            pes_per_node: self.state().pes_per_node,
            leaves: self.state().leaves.clone(),
            nodes,
        })
    }
}
