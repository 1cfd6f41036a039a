//! Building a [`Context`] from the environment: configuration, rank and size,
//! the own shared-memory object, the card exchange, connecting the peers.

use std::path::PathBuf;

use switchyard_core::class::{CLASS_ENCODING_VERSION, NO_SWITCH};
use switchyard_shm::{HugePages, SHM_DIR, remove_stale};

use super::{Context, PeerInfo, Progress, Result, Setup};
use crate::{
    bootstrap::{self, Card, RankInfo},
    config::{self, Config},
};

impl Context {
    /// The context of this PE, from `SWITCHYARD_*` configuration and the
    /// launcher's environment (`switchyard run`, Open MPI, Slurm or PMI). A
    /// process started without any launcher is a job of one PE.
    ///
    /// Collective: every PE of the job must call it; it returns once every PE
    /// has connected to every same-node peer.
    ///
    /// # Errors
    ///
    /// [`Error::Config`](super::Error::Config) naming the bad variable or key, [`Error::Bootstrap`](super::Error::Bootstrap)
    /// naming missing ranks and the timeout, [`Error::Shm`](super::Error::Shm).
    pub fn from_env() -> Result<Context> {
        let cfg = Config::from_env()?;
        Context::with_config(&cfg)
    }

    /// As [`Context::from_env`], with a configuration already loaded.
    ///
    /// # Errors
    ///
    /// As [`Context::from_env`].
    pub fn with_config(cfg: &Config) -> Result<Context> {
        let info = RankInfo::from_env()?;
        let setup = Setup {
            job_id: info.job_id,
            me: info.rank,
            n_pes: info.size,
            heap_size: cfg.heap_size,
            huge_pages: match cfg.huge_pages {
                config::HugePages::Auto => HugePages::Auto,
                config::HugePages::On => HugePages::On,
                config::HugePages::Off => HugePages::Off,
            },
            numa_node: numa_node_of_bound_cpu(),
            op_timeout: cfg.op_timeout,
            progress: match cfg.progress {
                config::Progress::Busy => Progress::Busy,
                config::Progress::Adaptive | config::Progress::Caller => Progress::Adaptive {
                    spin: cfg.spin_before_park,
                },
            },
            policy: cfg.policy(),
        };
        // Objects of dead jobs (a crash the launcher could not clean up).
        let _ = remove_stale(std::path::Path::new(SHM_DIR), Some(info.job_id));
        let own = Context::create_segment(&setup)?;
        // Fallbacks the user asked to hear about (huge pages requested but
        // unavailable, NUMA placement refused); also kept in `warnings()`.
        for w in own.warnings() {
            eprintln!("switchyard: warning: PE {}: {w}", info.rank);
        }
        let card = Card {
            job_id: info.job_id,
            rank: info.rank,
            node_id: bootstrap::node_id_here()?,
            switch_id: NO_SWITCH,
            tree_id: NO_SWITCH,
            cookie: [0; 16],
            class_encoding_version: CLASS_ENCODING_VERSION,
            pid: std::process::id(),
            shm: Some(own.path().to_string_lossy().into_owned()),
            tcp: Vec::new(),
            verbs: None,
        };
        if info.size == 1 {
            let peers = [peer_of(&card)];
            return Context::from_parts(setup, own, &peers);
        }
        let root = info.root_addr()?;
        let mut rv =
            bootstrap::rendezvous(&info, root, card, cfg.bootstrap_timeout, info.hosts_root())?;
        let peers: Vec<PeerInfo> = rv.cards.iter().map(peer_of).collect();
        let mut ctx = Context::from_parts(setup, own, &peers)?;
        // Everyone has attached everyone before anyone returns (and may put).
        rv.bootstrap.barrier(cfg.bootstrap_timeout)?;
        ctx.attach_bootstrap(rv.bootstrap, rv.root);
        Ok(ctx)
    }
}

fn peer_of(c: &Card) -> PeerInfo {
    PeerInfo {
        node: c.node_id,
        switch: c.switch_id,
        shm: c.shm.as_ref().map(PathBuf::from),
    }
}

/// The NUMA node of the core the launcher pinned this PE to, when the machine
/// has more than one node (placing the heap matters only then).
fn numa_node_of_bound_cpu() -> Option<u32> {
    let cpu: u32 = std::env::var("SWITCHYARD_BOUND_CPU").ok()?.parse().ok()?;
    let nodes = std::fs::read_dir("/sys/devices/system/node")
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("node"))
        .count();
    if nodes < 2 {
        return None;
    }
    std::fs::read_dir(format!("/sys/devices/system/cpu/cpu{cpu}"))
        .ok()?
        .flatten()
        .find_map(|e| {
            e.file_name()
                .to_string_lossy()
                .strip_prefix("node")?
                .parse()
                .ok()
        })
}
