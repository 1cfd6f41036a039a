//! Where a run happens and the launch of one step's job of PEs.

use std::path::Path;

use switchyard::config::Key;
use switchyard_launch::{self as launch, Bind, LaunchOptions};

use super::{
    Options, TRANSPORTS_VAR,
    baseline::TcpPath,
    plan::{Step, WORKER_TIMEOUT, heap_for},
    stats::Measurement,
};

/// Where a run happens: the sim (if any, with one PE per node) and the path
/// of the TCP baselines.
pub(super) struct Place {
    pub(super) sim: Option<switchyard_launch::sim::SimState>,
    pub(super) tcp: TcpPath,
    /// How the TCP path reads in the table's header.
    pub(super) tcp_desc: String,
}

pub(super) fn place(o: &Options) -> Result<Place, String> {
    let Some(name) = &o.sim else {
        return Ok(Place {
            sim: None,
            tcp: TcpPath::loopback(),
            tcp_desc: "loopback 127.0.0.1".into(),
        });
    };
    let sim = switchyard_launch::sim::Sim::open(name).map_err(|e| format!("--sim {name}: {e}"))?;
    let mut state = sim.state().clone();
    let nodes = state.nodes.len();
    if nodes < 2 {
        return Err(format!(
            "--sim {name}: the sim has {nodes} node(s); perf needs two (PEs 0 and 1 on different nodes)"
        ));
    }
    if o.standalone.is_none() && o.n as usize > nodes {
        return Err(format!(
            "--sim {name}: -n {} needs a node per PE and the sim has {nodes}",
            o.n
        ));
    }
    let (client, server) = (&state.nodes[0], &state.nodes[1]);
    let rail0 = |n: &switchyard_launch::sim::SimNode| {
        n.addrs
            .first()
            .copied()
            .ok_or_else(|| format!("--sim {name}: node {} has no rail address", n.host))
    };
    let server_ip = rail0(server)?;
    let tcp = TcpPath {
        server_ip: std::net::IpAddr::V4(server_ip),
        server_netns: Some(switchyard_launch::sim::netns_path(&server.netns)),
        client_netns: Some(switchyard_launch::sim::netns_path(&client.netns)),
    };
    let tcp_desc = format!(
        "sim {name}: {} ({}) -> {} ({server_ip}), rail 0",
        client.host,
        rail0(client)?,
        server.host
    );
    // One PE per node: PE 0 on node 0, PE 1 on node 1.
    state.pes_per_node = 1;
    Ok(Place {
        sim: Some(state),
        tcp,
        tcp_desc,
    })
}

/// Launches the job of PEs that runs `step` (each PE `switchyard perf
/// --worker`) and reads back PE 0's measurements.
pub(super) fn run(
    o: &Options,
    step: &Step,
    exe: &Path,
    place: &Place,
    pinned: bool,
) -> Result<Vec<Measurement>, String> {
    let dir = std::env::temp_dir();
    let out = dir.join(format!(
        "switchyard-perf-{}-{}.json",
        std::process::id(),
        step.test.name()
    ));
    let _ = std::fs::remove_file(&out);
    let mut args: Vec<std::ffi::OsString> = vec![
        "perf".into(),
        "--worker".into(),
        step.test.name().into(),
        "--iters".into(),
        step.iters.to_string().into(),
        "--warmup".into(),
        step.warmup.to_string().into(),
        "--window".into(),
        step.window.to_string().into(),
        "--worker-out".into(),
        out.clone().into(),
    ];
    if o.over_tcp() {
        args.extend(["--transport".into(), "tcp".into()]);
    }
    if o.threads > 1 {
        args.extend(["--threads".into(), o.threads.to_string().into()]);
    }
    let list: Vec<String> = step.sizes.iter().map(u64::to_string).collect();
    args.extend(["--sizes".into(), list.join(",").into()]);
    let mut lo = LaunchOptions::new(o.n, exe.to_path_buf());
    lo.args = args;
    lo.bind = if pinned { Bind::Core } else { Bind::None };
    lo.timeout = Some(WORKER_TIMEOUT);
    lo.sim = place.sim.clone();
    lo.env
        .push(("SWITCHYARD_HEAP_SIZE".into(), heap_for(&step.sizes)));
    if o.transport == "tcp" {
        lo.env.push((TRANSPORTS_VAR.into(), "tcp".into()));
    }
    if step.test.is_rate() {
        // PE 1 waits in a barrier for all of PE 0's stream, which may
        // outlast the 10 s default of an operation's wait: the job's
        // own limit bounds it instead.
        lo.env.push((
            Key::OpTimeout.env().into(),
            format!("{}s", WORKER_TIMEOUT.as_secs()),
        ));
    }
    let outcome = launch::launch(&lo).map_err(|e| e.to_string())?;
    if !outcome.success() {
        return Err(format!(
            "{} failed: {:?}{}",
            step.test.name(),
            outcome.end,
            outcome
                .bootstrap_error
                .map(|b| format!(" ({b})"))
                .unwrap_or_default()
        ));
    }
    let text = std::fs::read_to_string(&out).map_err(|e| {
        format!(
            "no results from {} ({}): {e}",
            step.test.name(),
            out.display()
        )
    })?;
    let _ = std::fs::remove_file(&out);
    serde_json::from_str(&text).map_err(|e| format!("bad results file: {e}"))
}
