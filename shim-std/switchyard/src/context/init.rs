//! Building a [`Context`] from the environment: configuration, rank and size,
//! the own shared-memory object, the card exchange, connecting the peers.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket},
    path::PathBuf,
    time::Duration,
};

use switchyard_bootstrap::{self as bootstrap, Card, RankInfo};
use switchyard_core::class::{CLASS_ENCODING_VERSION, NO_SWITCH};
use switchyard_shm::{HugePages, SHM_DIR, remove_stale};
use switchyard_socket::{CrcPolicy, JobKey, SocketDriver, TcpConfig};

use super::{
    Context, Error, PeerInfo, Progress, Result, Setup,
    progress::{MAX_TICK, ThreadMode},
};
use crate::{
    config::{self, Config, Key},
    cpus,
};

impl Context {
    /// The context of this PE, from `SWITCHYARD_*` configuration and the
    /// launcher's environment (`switchyard run`, Open MPI, Slurm or PMI), or,
    /// built with the `pmix` feature under `srun --mpi=pmix` or `mpirun`,
    /// from PMIx (no `SWITCHYARD_ROOT` needed). A process started without
    /// any launcher is a job of one PE.
    ///
    /// Collective: every PE of the job must call it; it returns once every PE
    /// has connected to every same-node peer.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the bad variable or key, [`Error::Bootstrap`]
    /// naming missing ranks and the timeout, [`Error::Shm`], [`Error::Tcp`].
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
        Context::with_options(cfg, InitOptions::default())
    }

    /// As [`Context::with_config`], with options a front end sets (the C
    /// API's symmetric global variables).
    ///
    /// # Errors
    ///
    /// As [`Context::from_env`].
    ///
    /// A second call in a process whose PE (same job, same rank) is alive
    /// and not finalized makes no second PE: it returns a new context on
    /// that one ([`Pe::context`](super::Pe::context)), whose configuration
    /// stays the first call's.
    pub fn with_options(cfg: &Config, opts: InitOptions) -> Result<Context> {
        let info = RankInfo::from_env()?;
        super::pe::once(info.job_id, info.rank, || {
            Context::init(cfg, opts, info.clone())
        })
    }

    /// The first init of this process's PE `info.rank`.
    fn init(cfg: &Config, opts: InitOptions, info: RankInfo) -> Result<Context> {
        // Where the progress thread will run: a CPU outside the set allowed
        // is a configuration error, before anything is made.
        let machine = cpus::Machine::here(|v| std::env::var(v).ok());
        let plan = cpus::plan(cfg.progress_cpu, cfg.source(Key::ProgressCpu), &machine)?;
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
                config::Progress::Busy | config::Progress::Dedicated => Progress::Busy,
                config::Progress::Adaptive | config::Progress::Caller => Progress::Adaptive {
                    spin: cfg.spin_before_park,
                },
            },
            policy: cfg.policy(),
            connect_timeout: cfg.bootstrap_timeout,
            shm_peers: cfg.transports.shm,
            symmetric_data: opts.symmetric_data,
            verbs_atomics: cfg.verbs_atomics,
            verbs_routed: cfg.verbs_routed,
            verbs_context_sets: cfg.verbs_context_sets,
            trace_records: cfg.trace_records as usize,
            trace: cfg.trace,
            stats: cfg.stats,
        };
        // Objects of dead jobs (a crash the launcher could not clean up).
        let _ = remove_stale(std::path::Path::new(SHM_DIR), Some(info.job_id));
        let own = Context::create_segment(&setup)?;
        // Fallbacks the user asked to hear about (huge pages requested but
        // unavailable, NUMA placement refused): one event each (the
        // subscriber, if any, shows them); also kept in `warnings()`.
        for w in own.warnings() {
            tracing::warn!(pe = info.rank, transport = "shm", "{w}");
        }
        let (own_heap, own_heap_len) = (own.mapped().heap_ptr(), own.mapped().heap_len());
        let placement = Placement::from_env()?;
        // One PE needs no network; otherwise a TCP rail per configured
        // address (or the one that routes to the bootstrap root). Where the
        // root is and the job secret the PEs prove come from the
        // environment, or under PMIx from rank 0 (collective there).
        let meeting = if info.size > 1 {
            Some(info.meeting(cfg.bootstrap_timeout)?)
        } else {
            None
        };
        let root = meeting.as_ref().map(|m| m.root);
        let secret = meeting.as_ref().map(|m| m.secret.clone());
        let tcp = match (root, &secret) {
            (Some(root), Some(secret)) if cfg.transports.tcp => {
                let listen = if cfg.tcp_addrs.is_empty() {
                    vec![address_toward(root)]
                } else {
                    cfg.tcp_addrs.clone()
                };
                // The rails prove a key of their own, derived from the job
                // secret (the bootstrap's is another).
                let key = secret.derive_key(info.job_id, bootstrap::PURPOSE_TCP);
                let tcfg = tcp_config(cfg, &info, listen, JobKey(key));
                #[allow(unsafe_code)]
                // SAFETY: the heap is the own segment's mapping, valid for
                // `own_heap_len` bytes and page-aligned; the segment moves
                // into the context with the driver and outlives it (the
                // context's `tcp` field is declared, so dropped, before `shm`).
                let d = unsafe { SocketDriver::new(tcfg, own_heap, own_heap_len) }?;
                Some(d)
            }
            _ => None,
        };
        // RDMA verbs over the same heap, when a port is usable and the job
        // allows it (and has TCP: the pair addresses travel over it, on the
        // authenticated control connections). The initial PSNs come from a
        // seed derived from the job secret, not from the job id.
        let verbs_seed = secret.as_ref().map_or(info.job_id, |s| {
            let k = s.derive_key(info.job_id, PURPOSE_VERBS_PSN);
            u64::from_le_bytes([k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7]])
        });
        let lazy = cfg.cards == config::CardsMode::Lazy;
        let (verbs_drv, verbs_why) = super::verbs::create_driver(
            cfg,
            &info,
            verbs_seed,
            (tcp.is_some(), lazy),
            own_heap,
            own_heap_len,
        );
        let card = Card {
            job_id: info.job_id,
            rank: info.rank,
            node_id: placement.node_id.map_or_else(bootstrap::node_id_here, Ok)?,
            switch_id: placement.switch_id.unwrap_or(NO_SWITCH),
            tree_id: placement.tree_id.unwrap_or(NO_SWITCH),
            // Unused: the TCP rails authenticate with a key derived from the
            // job secret, which never travels.
            cookie: [0; 16],
            class_encoding_version: CLASS_ENCODING_VERSION,
            pid: std::process::id(),
            shm: Some(own.path().to_string_lossy().into_owned()),
            tcp: tcp
                .as_ref()
                .map(|t| t.local_addrs().to_vec())
                .unwrap_or_default(),
            verbs: super::verbs::pe_card_bytes(verbs_drv.as_ref()),
        };
        let Some(meeting) = meeting else {
            let peers = [peer_of(&card)];
            let mut ctx = Context::from_parts(setup, own, &peers, None)?;
            ctx.verbs_why = verbs_why;
            return Ok(ctx);
        };
        let host_root = info.hosts_root();
        // Under the own root with lazy cards: this node's localities only.
        let mut unlocated = None;
        let (mut boot, peers, verbs_cards, root) = match cfg.cards {
            config::CardsMode::All => {
                let rv = bootstrap::rendezvous_at(
                    &info,
                    meeting,
                    card,
                    cfg.bootstrap_timeout,
                    host_root,
                )?;
                let peers: Vec<PeerInfo> = rv.cards.iter().map(peer_of).collect();
                let verbs: Vec<Option<Vec<u8>>> =
                    rv.cards.iter().map(|c| c.verbs.clone()).collect();
                (rv.bootstrap, peers, verbs, rv.root)
            }
            // TCP connects on first use, and verbs (a lazy driver) pairs
            // with a peer then too: only same-node cards now.
            config::CardsMode::Lazy => {
                let (joined, node) = lazy_rendezvous(&info, meeting, card, cfg, host_root)?;
                unlocated = node;
                joined
            }
        };
        // Where the peers' cards came from: the root, or (under PMIx) its
        // store; `.ci/launchers.sh` looks for this event.
        tracing::debug!(
            pe = info.rank,
            cards = cfg.cards.name(),
            source = boot.card_source().name(),
            "cards from {}",
            boot.card_source()
        );
        let mut ctx = Context::from_parts_with(setup, own, &peers, tcp, lazy)?;
        if let (Some(l), Some(node), Some(me)) = (
            ctx.pe.lazy.as_ref(),
            unlocated,
            peers.get(info.rank as usize),
        ) {
            l.locate_on_first_use(info.rank, (me.node, me.switch, me.tree), node);
        }
        // Before anything polls the TCP driver: the peers' verbs records
        // wait in its event queue until the driver is attached.
        match verbs_drv {
            Some(d) => ctx.attach_verbs(d, verbs_seed, &verbs_cards),
            None => ctx.verbs_why = verbs_why,
        }
        ctx.start_progress_thread(cfg, &plan)?;
        if ctx.verbs_in() {
            ctx.verbs_connect(cfg.bootstrap_timeout);
        }
        // Everyone has attached everyone before anyone returns (and may put).
        boot.barrier(cfg.bootstrap_timeout)?;
        ctx.attach_bootstrap(boot, root);
        Ok(ctx)
    }
}

impl Context {
    /// Starts the TCP driver's progress thread as the configuration says:
    /// none with `progress = caller` or without TCP peers; spinning with
    /// `busy`; parked on the sockets with `adaptive` (its tick an eighth of
    /// the heartbeat window, so heartbeats go out while the application
    /// computes); never sleeping with `dedicated`. `plan` pins it
    /// (`progress_cpu`); when `auto` found no CPU to spare, a thread that
    /// spins (or an `auto` the user asked for) gets a warning, else an
    /// `info` event says so.
    fn start_progress_thread(&mut self, cfg: &Config, plan: &cpus::Plan) -> Result<()> {
        let mode = match cfg.progress {
            config::Progress::Caller => return Ok(()),
            config::Progress::Busy => ThreadMode::Busy,
            config::Progress::Dedicated => ThreadMode::Dedicated,
            config::Progress::Adaptive => ThreadMode::Adaptive {
                tick: (cfg.heartbeat / 8).clamp(Duration::from_micros(100), MAX_TICK),
            },
        };
        self.sx_to_progress_thread();
        let (me, clock) = (self.me, self.clock);
        let Some(t) = self.tcp.as_mut() else {
            return Ok(());
        };
        let placed = t
            .start(mode, clock, plan.cpu, me)
            .map_err(|e| Error::Tcp(switchyard_socket::SocketError::Epoll { source: e }))?;
        let asked = *cfg.source(Key::ProgressCpu) != config::Source::Default;
        let spins = matches!(mode, ThreadMode::Busy | ThreadMode::Dedicated);
        if plan.fell_back && (asked || spins) {
            let w = format!("the {} progress thread is {plan}", cfg.progress.name());
            tracing::warn!(pe = me, "{w}");
            self.warnings.push(w);
        } else {
            tracing::info!(pe = me, "the progress thread is {plan}");
        }
        if let Some(e) = placed.pin_error {
            tracing::warn!(pe = me, "{e}");
            self.warnings.push(e);
        }
        Ok(())
    }
}

/// What a rendezvous gives the context: the connection to the root, every
/// PE's [`PeerInfo`] and verbs card (by rank), the hosted root's thread.
type Joined = (
    bootstrap::Bootstrap,
    Vec<PeerInfo>,
    Vec<Option<Vec<u8>>>,
    Option<std::thread::JoinHandle<std::result::Result<(), bootstrap::BootstrapError>>>,
);

/// The rendezvous with `cards = lazy`: this node's localities from the
/// own root (every rank's under PMIx), then the cards this PE needs at
/// init fetched from the root: its node's other PEs' (for shared memory,
/// when `transports` allows it; else none). A peer whose card is not
/// fetched has no shm object, no TCP address and no verbs card: the TCP
/// driver fetches its card and connects at the first operation toward it
/// (connect-on-first-use, `first_use.rs`), and a verbs driver (created
/// with lazy peers) pairs with it then. One whose locality is not known
/// either (off this node, under the own root) is unreachable until then,
/// and its class comes with its card: the node's localities are returned
/// for that (`None` when every locality is known).
fn lazy_rendezvous(
    info: &RankInfo,
    meeting: bootstrap::Meeting,
    card: Card,
    cfg: &Config,
    host_root: bool,
) -> Result<(Joined, Option<bootstrap::Localities>)> {
    let me = info.rank;
    let own_peer = peer_of(&card);
    let own_verbs = card.verbs.clone();
    let mut rv =
        bootstrap::rendezvous_at_lazy_node(info, meeting, card, cfg.bootstrap_timeout, host_root)?;
    let locs = &rv.localities;
    let my_node = locs.get(me).map_or(own_peer.node, |l| l.node_id);
    let wanted: Vec<u32> = (0..info.size)
        .filter(|&r| r != me)
        // Without shm a same-node peer is reached over TCP: at first use.
        .filter(|&r| cfg.transports.shm && locs.get(r).is_some_and(|l| l.node_id == my_node))
        .collect();
    let fetched = if wanted.is_empty() {
        bootstrap::Cards::default()
    } else {
        rv.bootstrap.fetch_cards(&wanted)?
    };
    tracing::debug!(
        pe = me,
        fetched = fetched.len(),
        of = info.size,
        "lazy cards: fetched the peers this PE connects to"
    );
    let mut peers = Vec::with_capacity(info.size as usize);
    let mut verbs = Vec::with_capacity(info.size as usize);
    for r in 0..info.size {
        if r == me {
            peers.push(own_peer.clone());
            verbs.push(own_verbs.clone());
        } else if let Some(c) = fetched.get(r) {
            peers.push(peer_of(c));
            verbs.push(c.verbs.clone());
        } else {
            // Not located yet: another node than this one, no switch, so
            // unreachable until its first use.
            let l = locs.get(r).unwrap_or(bootstrap::Locality {
                node_id: !my_node,
                switch_id: NO_SWITCH,
                tree_id: NO_SWITCH,
            });
            peers.push(PeerInfo {
                node: l.node_id,
                switch: l.switch_id,
                tree: l.tree_id,
                shm: None,
                tcp: Vec::new(),
            });
            verbs.push(None);
        }
    }
    let node = (!rv.localities.is_complete()).then_some(rv.localities);
    Ok(((rv.bootstrap, peers, verbs, rv.root), node))
}

/// The purpose of the key from which the verbs PSN seed is taken.
const PURPOSE_VERBS_PSN: &str = "verbs psn seed";

/// Where the launcher placed this PE, when it says (`switchyard run --sim`,
/// or a site's own launcher): node, leaf switch and tree ids.
struct Placement {
    node_id: Option<u64>,
    switch_id: Option<u32>,
    tree_id: Option<u32>,
}

impl Placement {
    fn from_env() -> Result<Placement> {
        fn var<T: std::str::FromStr>(name: &'static str) -> Result<Option<T>> {
            match std::env::var(name) {
                Err(_) => Ok(None),
                Ok(v) if v.is_empty() => Ok(None),
                Ok(v) => v.trim().parse().map(Some).map_err(|_| {
                    Error::Bootstrap(bootstrap::BootstrapError::EnvBadValue {
                        var: name,
                        value: v.clone(),
                        expected: "a decimal number",
                    })
                }),
            }
        }
        Ok(Placement {
            node_id: var("SWITCHYARD_NODE_ID")?,
            switch_id: var("SWITCHYARD_SWITCH_ID")?,
            tree_id: var("SWITCHYARD_TREE_ID")?,
        })
    }
}

/// The local address this machine uses to reach `root` (a connected UDP
/// socket: no packet is sent), or the unspecified address when there is none.
fn address_toward(root: SocketAddr) -> IpAddr {
    let any: SocketAddr = if root.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    UdpSocket::bind(any)
        .and_then(|s| {
            s.connect(root)?;
            s.local_addr()
        })
        .map_or(any.ip(), |a| a.ip())
}

/// The TCP driver's settings from the configuration.
fn tcp_config(cfg: &Config, info: &RankInfo, listen: Vec<IpAddr>, key: JobKey) -> TcpConfig {
    TcpConfig {
        job_id: info.job_id,
        key,
        me: info.rank,
        n_pes: info.size,
        listen,
        data_connections: cfg.tcp_connections,
        window: cfg.tcp_window,
        crc: match cfg.payload_crc {
            config::PayloadCrc::Always => CrcPolicy::Always,
            config::PayloadCrc::Sample { every } => CrcPolicy::Sample {
                bulk_threshold: 64 << 10,
                every,
            },
        },
        heartbeat_interval: cfg.heartbeat / 4,
        detection_window: cfg.heartbeat,
        reconnect_base: cfg.reconnect_base,
        reconnect_cap: cfg.reconnect_cap,
        give_up: cfg.give_up,
        ..TcpConfig::default()
    }
}

fn peer_of(c: &Card) -> PeerInfo {
    PeerInfo {
        node: c.node_id,
        switch: c.switch_id,
        tree: c.tree_id,
        shm: c.shm.as_ref().map(PathBuf::from),
        tcp: c.tcp.clone(),
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

/// Options of [`Context::with_options`] that configuration files do not set.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct InitOptions {
    /// Memory to make symmetric besides the heap: see
    /// [`Setup::symmetric_data`](super::Setup::symmetric_data).
    pub symmetric_data: Option<switchyard_shm::Alias>,
}

impl InitOptions {
    /// Sets [`InitOptions::symmetric_data`].
    #[must_use]
    pub fn symmetric_data(mut self, alias: switchyard_shm::Alias) -> InitOptions {
        self.symmetric_data = Some(alias);
        self
    }
}
