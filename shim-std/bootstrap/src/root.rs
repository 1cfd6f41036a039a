//! [`RootServer`]: the rendezvous. It challenges every connection, admits
//! the PEs that prove the job's secret (each rank once), collects their
//! cards, sends everyone all of them, serves barriers and waits for the
//! goodbyes; one reader thread per connection feeds its single coordinator.

use std::{
    collections::HashMap,
    io,
    net::{Shutdown, SocketAddr, TcpListener, TcpStream},
    sync::{Arc, mpsc},
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use switchyard_core::sync::atomic::{AtomicU64, Ordering};

use crate::{
    auth::{JobSecret, MAC_LEN, NONCE_LEN, PURPOSE_BOOTSTRAP, nonce},
    card::Card,
    error::{BootstrapError, RankList},
    frame::{
        Handshake, Hello, KIND_BARRIER, KIND_BYE, KIND_HELLO, KIND_RELEASE, MAX_FRAME_LEN,
        all_cards_frame, challenge_frame, error_frame, frame, kind_name, u64_payload,
    },
    stream::{read_frame, write_frame},
};

/// The largest job the rendezvous serves.
pub const MAX_PES: u32 = 1 << 20;

/// Coordinator poll step while accepting.
const POLL: Duration = Duration::from_millis(5);
/// How long a failing root keeps its sockets open so the error frame is read.
const LINGER: Duration = Duration::from_secs(1);
/// Connections accepted but not yet identified, beyond the ranks still
/// missing.
const MAX_UNIDENTIFIED: usize = 64;

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

/// What a root refused, readable while it serves ([`RootServer::stats`]).
#[derive(Debug, Clone, Default)]
pub struct RootStats {
    counts: Arc<[AtomicU64; 2]>,
}

const UNAUTHENTICATED: usize = 0;
const REFUSED: usize = 1;

impl RootStats {
    /// Connections whose hello did not prove the job's secret, or that said
    /// nothing well-formed before the deadline.
    pub fn unauthenticated(&self) -> u64 {
        self.counts[UNAUTHENTICATED].load(Ordering::Relaxed)
    }

    /// Authenticated hellos refused: a rank claimed a second time.
    pub fn refused(&self) -> u64 {
        self.counts[REFUSED].load(Ordering::Relaxed)
    }

    fn count(&self, which: usize) {
        self.counts[which].fetch_add(1, Ordering::Relaxed);
    }
}

/// Why a connection's first frame admits nothing.
enum Unadmitted {
    /// Not a hello of this protocol (the reason describes only the bytes).
    Malformed(String),
    /// A well-formed hello without the proof.
    Unauthenticated,
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

struct Conn {
    peer: SocketAddr,
    root_nonce: [u8; NONCE_LEN],
    /// The coordinator's handle: writes, and shutdown to end the reader.
    stream: TcpStream,
    rank: Option<u32>,
}

struct Root {
    job_id: u64,
    key: [u8; MAC_LEN],
    stats: RootStats,
    size: u32,
    timeout: Duration,
    listener: Option<TcpListener>,
    tx: Option<mpsc::Sender<Event>>,
    rx: mpsc::Receiver<Event>,
    conns: HashMap<u64, Conn>,
    threads: Vec<JoinHandle<()>>,
    next_conn: u64,
    /// rank → connection id.
    by_rank: Vec<Option<u64>>,
    cards: Vec<Vec<u8>>,
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
    /// [`BootstrapError::Spawn`].
    pub fn serve(self) -> Result<(), BootstrapError> {
        let (tx, rx) = mpsc::channel();
        let n = self.size as usize;
        let mut root = Root {
            job_id: self.job_id,
            key: self.key,
            stats: self.stats,
            size: self.size,
            timeout: self.timeout,
            listener: Some(self.listener),
            tx: Some(tx),
            rx,
            conns: HashMap::new(),
            threads: Vec::new(),
            next_conn: 0,
            by_rank: vec![None; n],
            cards: vec![Vec::new(); n],
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

/// What a connection's reader needs to check its hello.
struct Gate {
    conn: u64,
    job_id: u64,
    key: [u8; MAC_LEN],
    root_nonce: [u8; NONCE_LEN],
    deadline: Instant,
}

/// One accepted connection's reader: the challenge, then the hello within
/// the deadline, checked for its proof, then every frame until the
/// connection ends.
fn conn_reader(gate: Gate, mut stream: TcpStream, tx: mpsc::Sender<Event>) {
    let conn = gate.conn;
    let wait = gate.deadline.saturating_duration_since(Instant::now());
    let hello = match write_frame(&mut stream, &challenge_frame(&gate.root_nonce), wait) {
        Err(e) => Err(Unadmitted::Malformed(format!(
            "cannot send the challenge: {e}"
        ))),
        Ok(()) => match read_frame(&mut stream, Some(gate.deadline), MAX_FRAME_LEN) {
            Ok((KIND_HELLO, body)) => match Hello::decode(&body) {
                Ok(h) => {
                    let hs = Handshake {
                        key: &gate.key,
                        job_id: gate.job_id,
                        root_nonce: gate.root_nonce,
                    };
                    if hs.hello_is_authentic(&h) {
                        Ok(h)
                    } else {
                        Err(Unadmitted::Unauthenticated)
                    }
                }
                Err(e) => Err(Unadmitted::Malformed(e)),
            },
            Ok((kind, _)) => Err(Unadmitted::Malformed(format!(
                "first frame is a {} frame (kind {kind}), expected a hello",
                kind_name(kind)
            ))),
            Err(e) => Err(Unadmitted::Malformed(format!("no hello: {e}"))),
        },
    };
    let ok = hello.is_ok();
    if tx.send(Event::Hello { conn, hello }).is_err() || !ok {
        return;
    }
    if let Err(e) = stream.set_read_timeout(None) {
        let _ = tx.send(Event::Gone {
            conn,
            reason: e.to_string(),
        });
        return;
    }
    loop {
        match read_frame(&mut stream, None, MAX_FRAME_LEN) {
            Ok((kind, body)) => {
                if tx.send(Event::Frame { conn, kind, body }).is_err() {
                    return;
                }
            }
            Err(e) => {
                let _ = tx.send(Event::Gone {
                    conn,
                    reason: e.to_string(),
                });
                return;
            }
        }
    }
}

impl Root {
    fn run(&mut self) -> Result<(), BootstrapError> {
        let start = Instant::now();
        if let Err(e) = self.gather(start + self.timeout) {
            return self.fail(e);
        }
        // Everyone is here: stop accepting, and let the channel close when
        // the last reader ends.
        self.listener = None;
        self.tx = None;
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

    /// Refuses a connection that is not part of the job: tells it why, and
    /// forgets it.
    fn refuse(&mut self, id: u64, err: &BootstrapError) {
        if let Some(c) = self.conns.get_mut(&id) {
            let _ = write_frame(&mut c.stream, &error_frame(err), Duration::from_millis(200));
        }
        self.drop_conn(id);
    }

    /// Joins the reader threads that have ended, so that connection churn
    /// does not pile up finished threads (their stacks are kept until
    /// joined).
    fn reap_threads(&mut self) {
        let mut i = 0;
        while i < self.threads.len() {
            if self.threads[i].is_finished() {
                let _ = self.threads.swap_remove(i).join();
            } else {
                i += 1;
            }
        }
    }

    fn accept_new(&mut self, gather_deadline: Instant) -> Result<(), BootstrapError> {
        self.reap_threads();
        loop {
            let Some(listener) = &self.listener else {
                return Ok(());
            };
            let (stream, peer) = match listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // WouldBlock: nothing pending. Anything else (out of file
                // descriptors, an aborted connection): try again next round.
                Err(_) => return Ok(()),
            };
            let unidentified = self.conns.values().filter(|c| c.rank.is_none()).count();
            let still_missing = (self.size - self.arrived) as usize;
            if unidentified >= still_missing + MAX_UNIDENTIFIED {
                // Too many connections that have not said who they are:
                // close this one (a real PE among a flood fails to join and
                // says so, the root is not exhausted).
                drop(stream);
                continue;
            }
            let Some(tx) = self.tx.clone() else {
                return Ok(());
            };
            let setup = stream
                .set_nonblocking(false)
                .and_then(|()| stream.set_nodelay(true))
                .and_then(|()| stream.try_clone());
            let (Ok(reader), Ok(root_nonce)) = (setup, nonce()) else {
                continue;
            };
            let id = self.next_conn;
            self.next_conn += 1;
            let gate = Gate {
                conn: id,
                job_id: self.job_id,
                key: self.key,
                root_nonce,
                deadline: gather_deadline.min(Instant::now() + auth_window(self.timeout)),
            };
            let handle = thread::Builder::new()
                .name("switchyard-root-conn".into())
                .stack_size(256 << 10)
                .spawn(move || conn_reader(gate, reader, tx))
                .map_err(|source| BootstrapError::Spawn {
                    what: "bootstrap root connection",
                    source,
                })?;
            self.threads.push(handle);
            self.conns.insert(
                id,
                Conn {
                    peer,
                    root_nonce,
                    stream,
                    rank: None,
                },
            );
        }
    }

    fn gather(&mut self, deadline: Instant) -> Result<(), BootstrapError> {
        while self.arrived < self.size {
            let now = Instant::now();
            if now >= deadline {
                return Err(BootstrapError::Timeout {
                    phase: "allgather",
                    missing: self.missing(|r| self.by_rank[r as usize].is_some()),
                    waited: self.timeout,
                });
            }
            self.accept_new(deadline)?;
            if let Ok(ev) = self.rx.recv_timeout(POLL.min(deadline - now)) {
                self.on_gather_event(ev)?;
            }
        }
        Ok(())
    }

    fn on_gather_event(&mut self, ev: Event) -> Result<(), BootstrapError> {
        match ev {
            Event::Hello {
                conn,
                hello: Err(why),
            } => {
                // Not part of the job: it is told what was wrong with its
                // own bytes, or only that it proved nothing, and the job
                // goes on.
                self.stats.count(UNAUTHENTICATED);
                let peer = self.peer_name(conn);
                let reason = match why {
                    Unadmitted::Malformed(reason) => reason,
                    Unadmitted::Unauthenticated => {
                        "refused: the hello does not prove the job's secret".into()
                    }
                };
                self.refuse(conn, &BootstrapError::Protocol { peer, reason });
                Ok(())
            }
            Event::Hello { conn, hello: Ok(h) } => self.on_hello(conn, h),
            Event::Frame { conn, kind, .. } => match self.rank_of(conn) {
                Some(_) => Err(BootstrapError::Protocol {
                    peer: self.peer_name(conn),
                    reason: format!(
                        "sent a {} frame before the allgather finished",
                        kind_name(kind)
                    ),
                }),
                None => Ok(()),
            },
            Event::Gone { conn, reason } => match self.rank_of(conn) {
                Some(rank) => Err(BootstrapError::Disconnected {
                    rank,
                    during: "during the allgather".into(),
                    reason,
                }),
                None => {
                    self.drop_conn(conn);
                    Ok(())
                }
            },
        }
    }

    fn on_hello(&mut self, conn: u64, h: Hello) -> Result<(), BootstrapError> {
        let Some((peer, root_nonce)) = self.conns.get(&conn).map(|c| (c.peer, c.root_nonce)) else {
            return Ok(());
        };
        // The hello proved the secret (its reader checked): from here on the
        // peer is part of the job, and what it says wrongly fails the job;
        // except a second claim of a rank, which is refused and counted.
        if h.size != self.size {
            return Err(BootstrapError::SizeMismatch {
                rank: h.rank,
                expected: self.size,
                found: h.size,
            });
        }
        if h.rank >= self.size {
            return Err(BootstrapError::RankOutOfRange {
                rank: h.rank,
                size: self.size,
                peer,
            });
        }
        if let Some(first) = self.by_rank[h.rank as usize] {
            let first = self.conns.get(&first).map_or(peer, |c| c.peer);
            self.stats.count(REFUSED);
            self.refuse(
                conn,
                &BootstrapError::DuplicateRank {
                    rank: h.rank,
                    first,
                    second: peer,
                },
            );
            return Ok(());
        }
        let card = Card::decode(&h.card).map_err(|source| BootstrapError::BadCard {
            from: format!("rank {} ({peer})", h.rank),
            source,
        })?;
        // Cards travel with job id 0: the job id never crosses the wire.
        if card.job_id != 0 || card.rank != h.rank {
            return Err(BootstrapError::Protocol {
                peer: format!("rank {} ({peer})", h.rank),
                reason: format!(
                    "the card says job {:016x} rank {}, the hello rank {} (cards travel with job id 0)",
                    card.job_id, card.rank, h.rank
                ),
            });
        }
        match self.class_ref {
            None => self.class_ref = Some((h.rank, card.class_encoding_version)),
            Some((reference, expected)) if expected != card.class_encoding_version => {
                return Err(BootstrapError::ClassVersionMismatch {
                    rank: h.rank,
                    found: card.class_encoding_version,
                    reference,
                    expected,
                });
            }
            Some(_) => {}
        }
        let welcome = Handshake {
            key: &self.key,
            job_id: self.job_id,
            root_nonce,
        }
        .welcome_frame(&h);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.rank = Some(h.rank);
            // A failed write shows as the connection's end, from its reader.
            let _ = write_frame(&mut c.stream, &welcome, self.timeout);
        }
        self.by_rank[h.rank as usize] = Some(conn);
        self.cards[h.rank as usize] = h.card;
        self.arrived += 1;
        Ok(())
    }

    fn send_to_rank(
        &mut self,
        rank: u32,
        bytes: &[u8],
        phase: &'static str,
    ) -> Result<(), BootstrapError> {
        let id = self.by_rank[rank as usize];
        let Some(c) = id.and_then(|id| self.conns.get_mut(&id)) else {
            return Err(BootstrapError::Disconnected {
                rank,
                during: format!("during the {phase}"),
                reason: "connection closed".into(),
            });
        };
        write_frame(&mut c.stream, bytes, self.timeout).map_err(|source| {
            BootstrapError::SendFrame {
                phase,
                peer: format!("rank {rank} ({})", c.peer),
                source,
            }
        })
    }

    fn send_cards(&mut self) -> Result<(), BootstrapError> {
        let bytes = all_cards_frame(self.size, &self.cards);
        self.cards = Vec::new();
        for rank in 0..self.size {
            self.send_to_rank(rank, &bytes, "allgather")?;
        }
        Ok(())
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
                Some((at, phase)) => {
                    let now = Instant::now();
                    let got = if now < at {
                        self.rx.recv_timeout(at - now).ok()
                    } else {
                        None
                    };
                    match got {
                        Some(ev) => ev,
                        None if Instant::now() < at => continue,
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
                    }
                }
                None => match self.rx.recv() {
                    Ok(ev) => ev,
                    Err(_) => {
                        // Every reader has ended, yet not everyone said
                        // goodbye: the Gone events came first, so this is
                        // only reachable if a reader vanished silently.
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
                                let release = frame(KIND_RELEASE, &b.to_le_bytes());
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
    /// can read it, and returns the error.
    fn fail(&mut self, err: BootstrapError) -> Result<(), BootstrapError> {
        let bytes = error_frame(&err);
        let write_timeout = self.timeout.min(Duration::from_millis(500));
        for c in self.conns.values_mut() {
            let _ = write_frame(&mut c.stream, &bytes, write_timeout);
            let _ = c.stream.shutdown(Shutdown::Write);
        }
        let until = Instant::now() + LINGER.min(self.timeout);
        loop {
            let now = Instant::now();
            if now >= until || (self.conns.is_empty() && self.listener.is_none()) {
                break;
            }
            if let Some(listener) = &self.listener {
                while let Ok((mut s, _)) = listener.accept() {
                    let _ = s.set_nonblocking(false);
                    let _ = write_frame(&mut s, &bytes, Duration::from_millis(100));
                    let _ = s.shutdown(Shutdown::Write);
                }
            }
            match self.rx.recv_timeout(POLL.min(until - now)) {
                Ok(Event::Gone { conn, .. }) => self.drop_conn(conn),
                Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        Err(err)
    }

    fn close_all(&mut self) {
        self.listener = None;
        self.tx = None;
        for (_, c) in self.conns.drain() {
            let _ = c.stream.shutdown(Shutdown::Both);
        }
        // Every reader is unblocked by the shutdown (or by its hello
        // deadline), so these joins end.
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
