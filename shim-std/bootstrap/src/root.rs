//! [`RootServer`]: the rendezvous. It challenges every connection, admits
//! the PEs that prove the job's secret (each rank once), collects their
//! cards, sends everyone all of them, serves barriers and waits for the
//! goodbyes; all of it on one thread, one event loop over every connection
//! (`poll(2)`), with bounded bytes, time and connections per peer.

mod conn;
mod gather;
mod stats;

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    io,
    net::{Shutdown, SocketAddr, TcpListener},
    rc::Rc,
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

pub use stats::{Refusal, RootStats};

use crate::{
    auth::{JobSecret, MAC_LEN, NONCE_LEN, PURPOSE_BOOTSTRAP, nonce},
    card::Card,
    error::{BootstrapError, RankList},
    frame::{
        FLAG_LAZY, FLAG_NODE, FLAG_STORE, Handshake, Hello, KIND_BARRIER, KIND_BYE,
        KIND_CARD_ANSWER, KIND_CARD_REFUSAL, KIND_CARD_REQUEST, KIND_HELLO, KIND_JOINED,
        KIND_LOCALITIES, KIND_NODE_LOCALITIES, KIND_RELEASE, all_cards_frame, challenge_frame,
        error_frame, frame, joined_payload, kind_name, u64_payload,
    },
    lazy::{self, CardRefusal, Localities, Locality, MAX_SERVES_PER_CARD},
    root::conn::{Conn, Input, READ_CHUNK, State, poll, pollfd},
    stream::ReadError,
};

/// The largest job the rendezvous serves.
pub const MAX_PES: u32 = 1 << 20;

/// How long a failing root keeps its sockets open so the error frame is read.
const LINGER: Duration = Duration::from_secs(1);
/// Connections kept beyond the job's size. At this many (or when the process
/// is out of descriptors) a new connection closes the oldest one that has
/// not proved the secret yet, so a flood cannot keep the PEs out.
const MAX_UNIDENTIFIED: usize = 64;
/// How long a failing root waits to write its verdict to one peer.
const VERDICT_WRITE: Duration = Duration::from_millis(500);

/// How long a connection has to answer the challenge: a quarter of the
/// timeout, within 1 to 5 s (a PE answers at once). A connection that says
/// nothing gives its slot back by then, so idle connections cannot keep the
/// PEs out for the whole allgather (they retry).
fn auth_window(timeout: Duration) -> Duration {
    (timeout / 4).clamp(Duration::from_secs(1), Duration::from_secs(5))
}

/// The rendezvous: collects every PE's card, hands all cards to everyone,
/// then serves barriers until every PE has said goodbye.
pub struct RootServer {
    listener: TcpListener,
    addr: SocketAddr,
    job_id: u64,
    size: u32,
    timeout: Duration,
    key: [u8; MAC_LEN],
    stats: RootStats,
}

impl std::fmt::Debug for RootServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RootServer")
            .field("addr", &self.addr)
            .field("size", &self.size)
            .field("timeout", &self.timeout)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Why a connection's first frame admits nothing.
enum Unadmitted {
    /// Not a hello of this protocol (the reason describes only the bytes).
    Malformed(String),
    /// A well-formed hello without the proof.
    Unauthenticated,
    /// The connection ended, or its deadline passed, before a hello.
    NoHello(String),
}

enum Event {
    /// A connection's first frame: an authentic hello, or why it is not.
    Hello {
        conn: u64,
        hello: Result<Hello, Unadmitted>,
    },
    /// A later frame.
    Frame { conn: u64, kind: u8, body: Vec<u8> },
    /// The connection ended (EOF, error, or a bad frame).
    Gone { conn: u64, reason: String },
}

struct Root {
    job_id: u64,
    key: [u8; MAC_LEN],
    stats: RootStats,
    size: u32,
    timeout: Duration,
    listener: Option<TcpListener>,
    /// By connection id, which grows: the first is the oldest.
    conns: BTreeMap<u64, Conn>,
    /// Events read but not yet handed to the coordinator.
    events: VecDeque<Event>,
    /// The poll set, and the connection of each entry after the listener's.
    fds: Vec<libc::pollfd>,
    fd_conns: Vec<u64>,
    scratch: Vec<u8>,
    /// The failing root's error frame, for late connections.
    verdict: Option<Rc<[u8]>>,
    next_conn: u64,
    /// rank → connection id.
    by_rank: Vec<Option<u64>>,
    cards: Vec<Vec<u8>>,
    /// Every rank's locality (for the localities frames).
    locs: Vec<Locality>,
    arrived: u32,
    /// The first card's rank and class encoding version.
    class_ref: Option<(u32, u8)>,
}

impl RootServer {
    /// Binds the rendezvous listener at `addr` (`127.0.0.1:0` picks a free
    /// port) for a job of `size` PEs whose PEs prove `secret`; `timeout`
    /// bounds the allgather, each barrier and the goodbyes (see the
    /// [crate docs](crate)).
    ///
    /// # Errors
    /// [`BootstrapError::InvalidArgument`] for a size of 0 or above
    /// [`MAX_PES`], or a zero timeout; [`BootstrapError::Bind`] when the
    /// address cannot be bound.
    pub fn bind(
        addr: SocketAddr,
        job_id: u64,
        size: u32,
        timeout: Duration,
        secret: &JobSecret,
    ) -> Result<RootServer, BootstrapError> {
        check_size(size)?;
        check_timeout(timeout)?;
        let bind_err = |source| BootstrapError::Bind { addr, source };
        let listener = TcpListener::bind(addr).map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let addr = listener.local_addr().map_err(bind_err)?;
        Ok(RootServer {
            listener,
            addr,
            job_id,
            size,
            timeout,
            key: secret.derive_key(job_id, PURPOSE_BOOTSTRAP),
            stats: RootStats::default(),
        })
    }

    /// The root's counts of refused connections, live while it serves.
    pub fn stats(&self) -> RootStats {
        self.stats.clone()
    }

    /// The address the listener is bound to (with the port picked).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves on a new thread (see [`RootServer::serve`]).
    ///
    /// # Errors
    /// [`BootstrapError::Spawn`] when the thread cannot be started; the
    /// thread's own result is [`RootServer::serve`]'s.
    pub fn spawn(self) -> Result<JoinHandle<Result<(), BootstrapError>>, BootstrapError> {
        thread::Builder::new()
            .name("switchyard-root".into())
            .spawn(move || self.serve())
            .map_err(|source| BootstrapError::Spawn {
                what: "bootstrap root",
                source,
            })
    }

    /// Serves on this thread: collects `size` cards (within the timeout from
    /// now), sends everyone all cards, then serves barriers until every PE has
    /// said goodbye. On failure it tells every PE why before returning.
    ///
    /// # Errors
    /// [`BootstrapError::Timeout`] naming the ranks that never arrived (in
    /// the allgather, a barrier, or the goodbyes);
    /// [`BootstrapError::Disconnected`] for a PE gone without a goodbye;
    /// [`BootstrapError::DuplicateRank`], [`BootstrapError::RankOutOfRange`],
    /// [`BootstrapError::SizeMismatch`],
    /// [`BootstrapError::ClassVersionMismatch`], [`BootstrapError::BadCard`]
    /// or [`BootstrapError::Protocol`] for a PE of the job that says
    /// something wrong; [`BootstrapError::SendFrame`] or
    /// [`BootstrapError::Poll`].
    pub fn serve(self) -> Result<(), BootstrapError> {
        let n = self.size as usize;
        let mut root = Root {
            job_id: self.job_id,
            key: self.key,
            stats: self.stats,
            size: self.size,
            timeout: self.timeout,
            listener: Some(self.listener),
            conns: BTreeMap::new(),
            events: VecDeque::new(),
            fds: Vec::new(),
            fd_conns: Vec::new(),
            scratch: vec![0; READ_CHUNK],
            verdict: None,
            next_conn: 0,
            by_rank: vec![None; n],
            cards: vec![Vec::new(); n],
            locs: vec![
                Locality {
                    node_id: 0,
                    switch_id: 0,
                    tree_id: 0
                };
                n
            ],
            arrived: 0,
            class_ref: None,
        };
        let result = root.run();
        root.close_all();
        result
    }
}

pub(crate) fn check_size(size: u32) -> Result<(), BootstrapError> {
    if size == 0 || size > MAX_PES {
        return Err(BootstrapError::InvalidArgument {
            reason: format!("job size {size} is not in 1..={MAX_PES}"),
        });
    }
    Ok(())
}

pub(crate) fn check_timeout(timeout: Duration) -> Result<(), BootstrapError> {
    if timeout.is_zero() {
        return Err(BootstrapError::InvalidArgument {
            reason: "the timeout is zero".into(),
        });
    }
    Ok(())
}

impl Root {
    fn run(&mut self) -> Result<(), BootstrapError> {
        let start = Instant::now();
        if let Err(e) = self.gather(start + self.timeout) {
            return self.fail(e);
        }
        // Everyone is here: stop accepting, and close the others.
        self.listener = None;
        let strays: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.rank.is_none())
            .map(|(id, _)| *id)
            .collect();
        for id in strays {
            self.drop_conn(id);
        }
        if let Err(e) = self.send_cards() {
            return self.fail(e);
        }
        match self.barriers() {
            Ok(()) => Ok(()),
            Err(e) => self.fail(e),
        }
    }

    fn missing(&self, present: impl Fn(u32) -> bool) -> Vec<u32> {
        (0..self.size).filter(|&r| !present(r)).collect()
    }

    fn rank_of(&self, conn: u64) -> Option<u32> {
        self.conns.get(&conn).and_then(|c| c.rank)
    }

    fn peer_name(&self, conn: u64) -> String {
        match self.conns.get(&conn) {
            Some(Conn {
                rank: Some(r),
                peer,
                ..
            }) => format!("rank {r} ({peer})"),
            Some(c) => c.peer.to_string(),
            None => format!("connection {conn}"),
        }
    }

    fn drop_conn(&mut self, id: u64) {
        if let Some(c) = self.conns.remove(&id) {
            let _ = c.stream.shutdown(Shutdown::Both);
        }
    }

    /// Refuses a connection that is not part of the job: tells it why (what
    /// the socket takes at once), and forgets it.
    fn refuse(&mut self, id: u64, err: &BootstrapError) {
        if let Some(c) = self.conns.get_mut(&id) {
            let _ = c.send(error_frame(err).into(), Instant::now());
        }
        self.drop_conn(id);
    }

    /// Accepts every pending connection and challenges it. At the cap on
    /// connections, or out of descriptors, the oldest connection still
    /// owing its hello is closed to make room.
    fn accept_new(&mut self) {
        let cap = self.size as usize + MAX_UNIDENTIFIED;
        // A bounded batch per round, so the connections already accepted
        // are read between batches.
        for _ in 0..MAX_UNIDENTIFIED {
            let Some(listener) = &self.listener else {
                return;
            };
            let (stream, peer) = match listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    // Out of descriptors (or an aborted connection): make
                    // room, and try again when poll says so.
                    self.make_room();
                    return;
                }
            };
            if let Some(verdict) = &self.verdict {
                // A failing root answers late connections with its verdict.
                let mut c = match Conn::new(stream, peer, [0; NONCE_LEN], Instant::now()) {
                    Ok(c) => c,
                    Err(_) => continue,
                };
                c.send_last(verdict, Duration::from_millis(100));
                continue;
            }
            if self.conns.len() >= cap && !self.make_room() {
                self.stats.count(Refusal::OverLimit);
                drop(stream);
                continue;
            }
            let Ok(root_nonce) = nonce() else {
                continue;
            };
            let now = Instant::now();
            let Ok(mut c) = Conn::new(stream, peer, root_nonce, now + auth_window(self.timeout))
            else {
                continue;
            };
            let id = self.next_conn;
            self.next_conn += 1;
            let challenge = challenge_frame(&root_nonce);
            self.stats.add_sent(challenge.len());
            let sent = c.send(challenge.into(), now);
            self.conns.insert(id, c);
            if let Err(e) = sent {
                self.end(id, &format!("cannot send the challenge: {e}"));
            }
        }
    }

    /// Makes room for one connection: first forgets the unidentified ones
    /// that have ended (each is read once; their refusal is already
    /// queued), else closes the oldest connection that has not said its
    /// hello. A PE answers the challenge at once, so its hello is read here
    /// and judged, not closed. False when no room can be made.
    fn make_room(&mut self) -> bool {
        let mut inputs = Vec::new();
        let waiting: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| matches!(c.state, State::AwaitHello { .. }))
            .map(|(id, _)| *id)
            .collect();
        for &id in &waiting {
            self.read_conn(id, &mut inputs);
        }
        let before = self.conns.len();
        self.conns
            .retain(|_, c| c.state != State::Silenced || c.rank.is_some());
        if self.conns.len() < before {
            return true;
        }
        let oldest = waiting.into_iter().find(|id| {
            self.conns
                .get(id)
                .is_some_and(|c| matches!(c.state, State::AwaitHello { .. }))
        });
        match oldest {
            Some(id) => {
                self.stats.count(Refusal::OverLimit);
                self.drop_conn(id);
                true
            }
            None => false,
        }
    }

    /// Reports a connection's end once: before its hello as a hello that
    /// admits nothing, after it as [`Event::Gone`].
    fn end(&mut self, id: u64, reason: &str) {
        self.end_unadmitted(id, reason, Unadmitted::NoHello);
    }

    /// [`Root::end`], saying how a connection that ends before its hello is
    /// counted (`why`).
    fn end_unadmitted(&mut self, id: u64, reason: &str, why: fn(String) -> Unadmitted) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let ev = match c.state {
            State::AwaitHello { .. } => Event::Hello {
                conn: id,
                hello: Err(why(reason.to_owned())),
            },
            State::Admitted => Event::Gone {
                conn: id,
                reason: reason.to_owned(),
            },
            State::Silenced | State::Draining => return,
        };
        c.state = State::Silenced;
        self.events.push_back(ev);
    }

    /// Judges a connection's first frame: an authentic hello, or why not.
    fn judge_hello(
        &self,
        root_nonce: [u8; NONCE_LEN],
        kind: u8,
        body: &[u8],
    ) -> Result<Hello, Unadmitted> {
        if kind != KIND_HELLO {
            return Err(Unadmitted::Malformed(format!(
                "first frame is a {} frame (kind {kind}), expected a hello",
                kind_name(kind)
            )));
        }
        let h = Hello::decode(body).map_err(Unadmitted::Malformed)?;
        let hs = Handshake {
            key: &self.key,
            job_id: self.job_id,
            root_nonce,
        };
        if hs.hello_is_authentic(&h) {
            Ok(h)
        } else {
            Err(Unadmitted::Unauthenticated)
        }
    }

    /// Reads connection `id` (poll said it is readable) into events.
    fn read_conn(&mut self, id: u64, inputs: &mut Vec<Input>) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let state = c.state;
        let root_nonce = c.root_nonce;
        inputs.clear();
        c.read(&mut self.scratch, inputs);
        let mut first = matches!(state, State::AwaitHello { .. });
        for input in inputs.drain(..) {
            match input {
                Input::Frame(kind, body) if first => {
                    first = false;
                    let hello = self.judge_hello(root_nonce, kind, &body);
                    if hello.is_err()
                        && let Some(c) = self.conns.get_mut(&id)
                    {
                        c.state = State::Silenced;
                    }
                    self.events.push_back(Event::Hello { conn: id, hello });
                }
                Input::Frame(kind, body) => {
                    if self
                        .conns
                        .get(&id)
                        .is_some_and(|c| c.state == State::Admitted)
                    {
                        self.events.push_back(Event::Frame {
                            conn: id,
                            kind,
                            body,
                        });
                    }
                }
                Input::End(_) if state == State::Draining => self.drop_conn(id),
                Input::End(e) if first => {
                    // Bytes no frame may be are malformed; an end is not.
                    let why = match e {
                        ReadError::Empty | ReadError::TooLong { .. } => Unadmitted::Malformed,
                        _ => Unadmitted::NoHello,
                    };
                    self.end_unadmitted(id, &format!("no hello: {e}"), why);
                }
                Input::End(e) => self.end(id, &e.to_string()),
            }
        }
    }

    /// Ends the connections past their deadline: a hello not said in time,
    /// output that made no progress for the timeout.
    fn expire(&mut self, now: Instant) {
        let mut late = Vec::new();
        for (id, c) in &self.conns {
            if let State::AwaitHello { deadline } = c.state
                && now >= deadline
            {
                late.push((*id, false));
            } else if c.out_since.is_some_and(|t| now >= t + self.timeout) {
                late.push((*id, true));
            }
        }
        for (id, stalled) in late {
            if !stalled {
                self.end(id, "no hello: timed out");
                continue;
            }
            if let Some(c) = self.conns.get_mut(&id) {
                // Not waited on again (a silenced one has no event to give).
                c.abandon_output();
            }
            self.end(id, "cannot send within the timeout");
        }
    }

    /// The earliest deadline of a connection, or `until`.
    fn next_wake(&self, until: Option<Instant>) -> Option<Instant> {
        let mut wake = until;
        let mut take = |t: Instant| wake = Some(wake.map_or(t, |w| w.min(t)));
        for c in self.conns.values() {
            if let State::AwaitHello { deadline } = c.state {
                take(deadline);
            }
            if let Some(t) = c.out_since {
                take(t + self.timeout);
            }
        }
        wake
    }

    /// The next event, waiting for it until `until` (none: as long as it
    /// takes); `None` when `until` passes, or when nothing is left to wait
    /// on.
    fn next_event(&mut self, until: Option<Instant>) -> Result<Option<Event>, BootstrapError> {
        let mut inputs = Vec::new();
        loop {
            if let Some(ev) = self.events.pop_front() {
                return Ok(Some(ev));
            }
            let now = Instant::now();
            if until.is_some_and(|u| now >= u) {
                return Ok(None);
            }
            self.expire(now);
            if !self.events.is_empty() {
                continue;
            }
            if !self.poll_once(self.next_wake(until), &mut inputs)? {
                return Ok(None);
            }
        }
    }

    /// One `poll(2)` round over the listener and every connection, waiting
    /// until `wake` at most; false when there is nothing to wait on.
    fn poll_once(
        &mut self,
        wake: Option<Instant>,
        inputs: &mut Vec<Input>,
    ) -> Result<bool, BootstrapError> {
        self.fds.clear();
        self.fd_conns.clear();
        if let Some(l) = &self.listener {
            self.fds.push(pollfd(l, libc::POLLIN));
        }
        let first_conn = self.fds.len();
        for (id, c) in &self.conns {
            let mut events = 0;
            if c.state != State::Silenced {
                events |= libc::POLLIN;
            }
            if c.wants_write() {
                events |= libc::POLLOUT;
            }
            if events != 0 {
                self.fds.push(pollfd(&c.stream, events));
                self.fd_conns.push(*id);
            }
        }
        if self.fds.is_empty() && wake.is_none() {
            return Ok(false);
        }
        let wait = wake.map(|w| w.saturating_duration_since(Instant::now()));
        poll(&mut self.fds, wait).map_err(|source| BootstrapError::Poll { source })?;
        if first_conn == 1 && self.fds.first().is_some_and(|f| f.revents != 0) {
            self.accept_new();
        }
        let now = Instant::now();
        for i in 0..self.fd_conns.len() {
            let (Some(&id), Some(f)) = (self.fd_conns.get(i), self.fds.get(first_conn + i)) else {
                break;
            };
            let revents = f.revents;
            if revents & (libc::POLLOUT | libc::POLLERR | libc::POLLHUP) != 0
                && let Some(c) = self.conns.get_mut(&id)
                && c.wants_write()
                && let Err(e) = c.flush(now)
            {
                self.end(id, &e.to_string());
            }
            if revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0 {
                self.read_conn(id, inputs);
            }
        }
        Ok(true)
    }

    fn barriers(&mut self) -> Result<(), BootstrapError> {
        let n = self.size as usize;
        let mut done: u64 = 0;
        let mut entered = vec![false; n];
        let mut entered_count: u32 = 0;
        let mut barrier_start: Option<Instant> = None;
        let mut bye = vec![false; n];
        let mut bye_count: u32 = 0;
        let mut first_bye: Option<Instant> = None;
        while bye_count < self.size {
            let wake = match (barrier_start, first_bye) {
                (Some(b), _) => Some((b + self.timeout, "barrier")),
                (None, Some(f)) => Some((f + self.timeout, "goodbye")),
                (None, None) => None,
            };
            let ev = match wake {
                Some((at, phase)) => match self.next_event(Some(at))? {
                    Some(ev) => ev,
                    None => {
                        let missing = if phase == "barrier" {
                            self.missing(|r| entered[r as usize])
                        } else {
                            self.missing(|r| bye[r as usize])
                        };
                        return Err(BootstrapError::Timeout {
                            phase,
                            missing,
                            waited: self.timeout,
                        });
                    }
                },
                None => match self.next_event(None)? {
                    Some(ev) => ev,
                    None => {
                        // No connection is left, yet not everyone said
                        // goodbye: the Gone events came first, so this is
                        // only reachable if a connection vanished silently.
                        let missing = self.missing(|r| bye[r as usize]);
                        return Err(BootstrapError::Disconnected {
                            rank: missing.first().copied().unwrap_or(0),
                            during: "after the allgather".into(),
                            reason: "every connection closed".into(),
                        });
                    }
                },
            };
            let during = |entered_count: u32| {
                if entered_count > 0 {
                    format!("in barrier {}", done + 1)
                } else if done == 0 {
                    "before the first barrier".to_owned()
                } else {
                    format!("after barrier {done}")
                }
            };
            match ev {
                Event::Hello { .. } => {}
                Event::Gone { conn, reason } => {
                    let Some(rank) = self.rank_of(conn) else {
                        continue;
                    };
                    if !bye[rank as usize] {
                        return Err(BootstrapError::Disconnected {
                            rank,
                            during: during(entered_count),
                            reason,
                        });
                    }
                }
                Event::Frame { conn, kind, body } => {
                    let Some(rank) = self.rank_of(conn) else {
                        continue;
                    };
                    let peer = self.peer_name(conn);
                    match kind {
                        KIND_BARRIER => {
                            let b = u64_payload(&body, "barrier number").map_err(|reason| {
                                BootstrapError::Protocol {
                                    peer: peer.clone(),
                                    reason,
                                }
                            })?;
                            if bye_count > 0 {
                                return Err(BootstrapError::Protocol {
                                    peer,
                                    reason: format!(
                                        "entered barrier {b} after ranks {} said goodbye",
                                        RankList(&self.missing(|r| !bye[r as usize]))
                                    ),
                                });
                            }
                            if b != done + 1 || entered[rank as usize] {
                                return Err(BootstrapError::Protocol {
                                    peer,
                                    reason: format!(
                                        "entered barrier {b}, expected barrier {}",
                                        done + 1
                                    ),
                                });
                            }
                            entered[rank as usize] = true;
                            entered_count += 1;
                            barrier_start.get_or_insert_with(Instant::now);
                            if entered_count == self.size {
                                let release: Rc<[u8]> =
                                    frame(KIND_RELEASE, &b.to_le_bytes()).into();
                                for r in 0..self.size {
                                    self.send_to_rank(r, &release, "barrier")?;
                                }
                                done = b;
                                entered.iter_mut().for_each(|e| *e = false);
                                entered_count = 0;
                                barrier_start = None;
                            }
                        }
                        KIND_BYE => {
                            if entered_count > 0 {
                                return Err(BootstrapError::Protocol {
                                    peer,
                                    reason: format!("said goodbye during barrier {}", done + 1),
                                });
                            }
                            bye[rank as usize] = true;
                            bye_count += 1;
                            first_bye.get_or_insert_with(Instant::now);
                            self.drop_conn(conn);
                        }
                        KIND_CARD_REQUEST => self.serve_cards(conn, &body)?,
                        other => {
                            return Err(BootstrapError::Protocol {
                                peer,
                                reason: format!("sent a {} frame (kind {other})", kind_name(other)),
                            });
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Tells every PE still connected why the job failed, lingers so they
    /// can read it (answering late connections with it too), and returns
    /// the error.
    fn fail(&mut self, err: BootstrapError) -> Result<(), BootstrapError> {
        let verdict: Rc<[u8]> = error_frame(&err).into();
        let write_timeout = self.timeout.min(VERDICT_WRITE);
        for c in self.conns.values_mut() {
            c.send_last(&verdict, write_timeout);
            c.state = State::Draining;
        }
        self.verdict = Some(verdict);
        self.events.clear();
        let until = Instant::now() + LINGER.min(self.timeout);
        let mut inputs = Vec::new();
        while Instant::now() < until && !(self.conns.is_empty() && self.listener.is_none()) {
            if self.poll_once(Some(until), &mut inputs).is_err() {
                break;
            }
            self.events.clear();
        }
        Err(err)
    }

    fn close_all(&mut self) {
        self.listener = None;
        for (_, c) in std::mem::take(&mut self.conns) {
            let _ = c.stream.shutdown(Shutdown::Both);
        }
    }
}
