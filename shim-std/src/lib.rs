//! switchyard (std shim) — placeholder, filled by the topo command work.
