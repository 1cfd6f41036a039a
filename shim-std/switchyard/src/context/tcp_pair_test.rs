//! Tests' pair of contexts over TCP: two PEs in two threads of one process,
//! each on a node of its own, on one switch (NEAR) or on two (ROUTED), TCP
//! over loopback their only link, no progress thread.

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicU32, Ordering},
        mpsc::{Receiver, Sender, channel},
    },
    time::{Duration, Instant},
};

use switchyard_core::{class::NO_SWITCH, route::PolicyConfig};
use switchyard_shm::HugePages;
use switchyard_socket::{SocketDriver, TcpConfig};

use super::{
    Context, PeerInfo, Progress, Setup, TRACE_RECORDS,
    pes_test::{PeScript, exit_barrier, run_pes},
};

/// How a pair is set up.
#[derive(Debug, Clone)]
pub(super) struct Pair {
    /// Job id (unique among this process's tests).
    pub(super) job: u64,
    /// The PEs are on two switches (ROUTED), not one (NEAR).
    pub(super) routed: bool,
    /// The route policy (roles are filled in by the context).
    pub(super) policy: PolicyConfig,
    /// The TCP driver's settings; job, key, PE and job size are set
    /// here.
    pub(super) tcp: TcpConfig,
}

type Chans<'a> = (&'a Sender<Vec<SocketAddr>>, &'a Receiver<Vec<SocketAddr>>);

impl Pair {
    /// A NEAR pair (one switch) of job `job` on the default route policy,
    /// its TCP driver set as `tcp` (listen addresses, windows).
    pub(super) fn near(job: u64, tcp: TcpConfig) -> Pair {
        Pair {
            job,
            routed: false,
            policy: PolicyConfig::default(),
            tcp,
        }
    }

    /// PE `me`'s context; its addresses go to the other PE through `tx`,
    /// the other's come through `rx`; `leave` is its exit barrier.
    fn context(
        &self,
        me: u32,
        (tx, rx): Chans<'_>,
        tweak: fn(&mut Setup),
        leave: impl Fn(&mut Context),
    ) -> Context {
        let mut setup = setup(self.job, me, self.policy);
        tweak(&mut setup);
        let seg = Context::create_segment(&setup).expect("segment");
        let (heap, len) = (seg.mapped().heap_ptr(), seg.mapped().heap_len());
        let tcfg = TcpConfig {
            job_id: self.job,
            key: switchyard_socket::JobKey(*b"tcp-pair-of-PEs!tcp-pair-of-PEs!"),
            me,
            n_pes: 2,
            ..self.tcp.clone()
        };
        #[allow(unsafe_code)]
        // SAFETY: the segment's heap mapping, valid for `len` bytes; the
        // segment moves into the context with the driver and outlives it.
        let tcp = unsafe { SocketDriver::new(tcfg, heap, len) }.expect("tcp driver");
        tx.send(tcp.local_addrs().to_vec()).unwrap();
        let other = rx.recv_timeout(WAIT).expect("the other PE's addresses");
        let info = |pe: u32, tcp: Vec<SocketAddr>| PeerInfo {
            node: 1000 + u64::from(pe),
            switch: if self.routed { 5 + pe } else { 5 },
            tree: NO_SWITCH,
            shm: None,
            tcp,
        };
        let mine = tcp.local_addrs().to_vec();
        let peers = if me == 0 {
            [info(0, mine), info(1, other)]
        } else {
            [info(0, other), info(1, mine)]
        };
        let mut ctx = Context::from_parts(setup, seg, &peers, Some(tcp)).expect("context");
        leave(&mut ctx);
        ctx
    }

    /// Runs `script` as PE 0 and PE 1 ([`run_pes`]); a PE's `finalize`
    /// meets the other's in an exit barrier.
    pub(super) fn run(&self, script: impl Fn(Context) + Send + Clone + 'static) {
        self.run_with(|_| {}, script);
    }

    /// [`Pair::run`] with both PEs' setups changed by `tweak`.
    pub(super) fn run_with(
        &self,
        tweak: fn(&mut Setup),
        script: impl Fn(Context) + Send + Clone + 'static,
    ) {
        let (tx0, rx1) = channel();
        let (tx1, rx0) = channel();
        let leave = exit_barrier(2);
        let pe = |me: u32, tx: Sender<_>, rx: Receiver<_>| -> PeScript {
            let (pair, script, leave) = (self.clone(), script.clone(), leave.clone());
            Box::new(move || script(pair.context(me, (&tx, &rx), tweak, leave)))
        };
        run_pes(vec![pe(0, tx0, rx0), pe(1, tx1, rx1)]);
    }
}

/// How long a test waits for anything (a deadline, never a timing).
pub(super) const WAIT: Duration = Duration::from_secs(20);

/// The setup of PE `me` of a pair: 1 MiB heaps, waits bounded by
/// [`WAIT`], adaptive progress, the route `policy`.
pub(super) fn setup(job: u64, me: u32, policy: PolicyConfig) -> Setup {
    Setup {
        job_id: job,
        me,
        n_pes: 2,
        heap_size: 1 << 20,
        huge_pages: HugePages::Off,
        numa_node: None,
        op_timeout: WAIT,
        progress: Progress::Adaptive { spin: 64 },
        policy,
        connect_timeout: WAIT,
        shm_peers: true,
        symmetric_data: None,
        verbs_atomics: crate::config::VerbsAtomics::Auto,
        verbs_routed: true,
        verbs_context_sets: false,
        trace_records: TRACE_RECORDS,
        stats: true,
        trace: crate::config::TraceMode::All,
    }
}

/// Waits (bounded by [`WAIT`]) until `step` reaches `want`, calling
/// nothing of the library but, with `progress`, progress steps.
pub(super) fn wait_for(ctx: &mut Context, step: &AtomicU32, want: u32, progress: bool) {
    let start = Instant::now();
    while step.load(Ordering::SeqCst) < want {
        assert!(start.elapsed() < WAIT, "step {want}");
        if progress {
            ctx.poll_once();
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// A job id for the test `tag`, unique to this process.
pub(super) fn job(tag: u64) -> u64 {
    tag << 32 ^ u64::from(std::process::id()) << 8
}
