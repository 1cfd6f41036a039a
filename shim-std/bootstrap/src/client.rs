//! The PE side: [`Bootstrap`] (join, card fetches, barriers, goodbye); the
//! rendezvous that makes one is in `meet.rs`.

use std::{
    io,
    net::{Shutdown, SocketAddr, TcpStream},
    thread,
    time::{Duration, Instant},
};

use crate::{
    auth::{JobSecret, PURPOSE_BOOTSTRAP, nonce},
    card::Card,
    env::fnv1a,
    error::BootstrapError,
    frame::{
        AllCards, FLAG_LAZY, FLAG_NODE, FLAG_STORE, Handshake, KIND_ALL_CARDS, KIND_BARRIER,
        KIND_BYE, KIND_CARD_ANSWER, KIND_CARD_REFUSAL, KIND_CARD_REQUEST, KIND_CHALLENGE,
        KIND_ERROR, KIND_JOINED, KIND_LOCALITIES, KIND_NODE_LOCALITIES, KIND_RELEASE, KIND_WELCOME,
        MAX_FRAME_LEN, PROTOCOL_VERSION, all_cards_cap, decode_challenge, decode_error_frame,
        decode_joined, frame, kind_name, u64_payload,
    },
    lazy::{self, CardRefusal, Cards, Localities, MAX_CARDS_PER_REQUEST},
    root::{check_size, check_timeout},
    store::CardSource,
    stream::{ReadError, read_frame, write_frame},
};

/// How much longer than its own timeout a PE waits for the root's answer,
/// so that the root's verdict (which names the missing ranks) comes first.
fn grace(timeout: Duration) -> Duration {
    (timeout / 2).min(Duration::from_secs(2))
}

/// One PE's connection to the root.
#[derive(Debug)]
pub struct Bootstrap {
    stream: TcpStream,
    root: SocketAddr,
    rank: u32,
    size: u32,
    job_id: u64,
    barriers: u64,
    timeout: Duration,
    broken: bool,
    /// The class encoding version of our card (checked on fetched cards).
    class: u8,
    /// Where the cards come from.
    cards_from: CardSource,
    /// This PE's locality (its card's).
    me_at: crate::lazy::Locality,
    /// The localities the root sent (lazy PEs): every fetched card's
    /// locality is checked against them.
    locs: Option<Localities>,
    /// Under PMIx: the store the cards come from instead of the root, while
    /// cards may still be fetched (lazy cards).
    #[cfg(feature = "pmix")]
    store: Option<crate::pmix::CardStore>,
}

/// What the allgather gave a PE: every card, or (lazy) every locality.
enum Gathered {
    All(Vec<Card>),
    Lazy(Localities),
    Store,
}

fn connect_retry(
    root: SocketAddr,
    deadline: Instant,
    timeout: Duration,
    rank: u32,
) -> Result<TcpStream, BootstrapError> {
    let mut backoff = Duration::from_millis(10);
    let mut attempt: u32 = 0;
    loop {
        let now = Instant::now();
        let left = deadline.saturating_duration_since(now);
        let err = match TcpStream::connect_timeout(
            &root,
            left.clamp(Duration::from_millis(1), Duration::from_secs(1)),
        ) {
            Ok(s) => return Ok(s),
            Err(e) => e,
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(BootstrapError::Connect {
                root,
                waited: timeout,
                source: err,
            });
        }
        // Jitter in [1/2, 1) of the backoff, so that many PEs do not retry
        // in lockstep.
        let h = fnv1a(&[
            &rank.to_le_bytes(),
            &attempt.to_le_bytes(),
            &std::process::id().to_le_bytes(),
        ]);
        let frac = 0.5 + (h % 1000) as f64 / 2000.0;
        thread::sleep(backoff.mul_f64(frac).min(left));
        backoff = (backoff * 2).min(Duration::from_millis(250));
        attempt = attempt.wrapping_add(1);
    }
}

impl Bootstrap {
    /// Connects to the root at `root` (retrying until `timeout`: the root may
    /// not be up yet), answers its challenge with a proof of `secret`, checks
    /// the root's own proof, posts `my_card`, and returns the connection and
    /// every PE's card, indexed by rank.
    ///
    /// Neither the secret nor the job id crosses the wire: the hello carries
    /// a MAC under a key derived from both, and the cards travel with a job
    /// id of 0 (each side puts its own back).
    ///
    /// The root's answer is awaited for `timeout` plus a grace (half of it,
    /// at most 2 s), so that a root failing on its own deadline can say
    /// which ranks it missed first.
    ///
    /// # Errors
    /// [`BootstrapError::InvalidArgument`] (size 0 or above [`MAX_PES`](crate::MAX_PES),
    /// rank not below size, a card of another job or rank, a zero timeout),
    /// [`BootstrapError::BadCard`] (our card does not encode, or one received
    /// does not decode), [`BootstrapError::Connect`],
    /// [`BootstrapError::RootReported`] (the root failed the job and said
    /// why, e.g. a missing or duplicate rank, or refused us for a wrong job
    /// id), [`BootstrapError::Timeout`], [`BootstrapError::RootClosed`],
    /// [`BootstrapError::SendFrame`], [`BootstrapError::ReceiveFrame`],
    /// [`BootstrapError::JobIdMismatch`],
    /// [`BootstrapError::ClassVersionMismatch`] or
    /// [`BootstrapError::Protocol`] for an all-cards frame that does not
    /// add up; [`BootstrapError::RootNotAuthenticated`] when the root's
    /// welcome does not prove the secret.
    pub fn join(
        root: SocketAddr,
        rank: u32,
        size: u32,
        job_id: u64,
        my_card: Card,
        timeout: Duration,
        secret: &JobSecret,
    ) -> Result<(Bootstrap, Vec<Card>), BootstrapError> {
        match Bootstrap::join_with(root, (rank, size, job_id), my_card, timeout, secret, 0)? {
            (boot, Gathered::All(cards)) => Ok((boot, cards)),
            (boot, Gathered::Lazy(_)) => Err(boot.unexpected(KIND_LOCALITIES, "allgather")),
            (boot, Gathered::Store) => Err(boot.unexpected(KIND_JOINED, "allgather")),
        }
    }

    /// [`Bootstrap::join_lazy`] that asks only for this PE's node's
    /// localities (the hello's node flag, covered by its proof): once all
    /// PEs are in, the root sends this PE the node localities frame (the
    /// job size, the class encoding version and the runs of the ranks on
    /// its node: O(1) + O(its node's runs) bytes, whatever the job's size
    /// or number of nodes). The returned [`Localities`] has gaps for the
    /// ranks of other nodes ([`Localities::get`] is `None` there); an
    /// off-node rank's locality comes with its card
    /// ([`Bootstrap::fetch_cards`]), which is checked to be off this
    /// node.
    ///
    /// # Errors
    /// As [`Bootstrap::join`], with [`BootstrapError::Protocol`] for a
    /// node localities frame that does not decode, names another size, or
    /// does not place this PE where its card says.
    pub fn join_lazy_node(
        root: SocketAddr,
        rank: u32,
        size: u32,
        job_id: u64,
        my_card: Card,
        timeout: Duration,
        secret: &JobSecret,
    ) -> Result<(Bootstrap, Localities), BootstrapError> {
        let flags = FLAG_LAZY | FLAG_NODE;
        Bootstrap::join_with(root, (rank, size, job_id), my_card, timeout, secret, flags)
            .and_then(Bootstrap::localities_of)
    }

    /// What a lazy join ([`Bootstrap::join_lazy`],
    /// [`Bootstrap::join_lazy_node`]) expects: localities, not every card
    /// nor the store's joined frame.
    fn localities_of(
        (boot, got): (Bootstrap, Gathered),
    ) -> Result<(Bootstrap, Localities), BootstrapError> {
        match got {
            Gathered::Lazy(locs) => Ok((boot, locs)),
            Gathered::All(_) => Err(boot.unexpected(KIND_ALL_CARDS, "allgather")),
            Gathered::Store => Err(boot.unexpected(KIND_JOINED, "allgather")),
        }
    }

    /// [`Bootstrap::join`] with lazy cards: the hello asks for them (the
    /// flag is covered by its proof), and once all PEs are in, the root
    /// sends this PE every rank's [`Localities`] (node, switch and tree id,
    /// as runs) instead of every card. The cards this PE needs it fetches
    /// with [`Bootstrap::fetch_cards`], between barriers. The root's bytes
    /// per PE are then O(runs + cards fetched), not O(job size).
    ///
    /// # Errors
    /// As [`Bootstrap::join`], with [`BootstrapError::Protocol`] for a
    /// localities frame that does not add up.
    pub fn join_lazy(
        root: SocketAddr,
        rank: u32,
        size: u32,
        job_id: u64,
        my_card: Card,
        timeout: Duration,
        secret: &JobSecret,
    ) -> Result<(Bootstrap, Localities), BootstrapError> {
        let flags = FLAG_LAZY;
        Bootstrap::join_with(root, (rank, size, job_id), my_card, timeout, secret, flags)
            .and_then(Bootstrap::localities_of)
    }

    /// [`Bootstrap::join_lazy`] for a PE whose cards and localities come
    /// from a key-value store (PMIx's): the hello says so (the store flag,
    /// covered by its proof), and once all PEs are in, the root sends this
    /// PE only the joined frame (the job size and the class encoding
    /// version every PE announced: O(1) bytes, whatever the job's size),
    /// not the localities. `my_card` need hold only the locality (the root
    /// checks its rank and class version).
    ///
    /// # Errors
    /// As [`Bootstrap::join`], with [`BootstrapError::Protocol`] for a
    /// joined frame that does not decode or names another size, and
    /// [`BootstrapError::ClassVersionMismatch`] for another class version.
    #[cfg_attr(not(feature = "pmix"), allow(dead_code))]
    pub(crate) fn join_store(
        root: SocketAddr,
        rank: u32,
        size: u32,
        job_id: u64,
        my_card: Card,
        timeout: Duration,
        secret: &JobSecret,
    ) -> Result<(Bootstrap, ()), BootstrapError> {
        let flags = FLAG_LAZY | FLAG_STORE;
        match Bootstrap::join_with(root, (rank, size, job_id), my_card, timeout, secret, flags)? {
            (boot, Gathered::Store) => Ok((boot, ())),
            (boot, Gathered::All(_)) => Err(boot.unexpected(KIND_ALL_CARDS, "allgather")),
            (boot, Gathered::Lazy(_)) => Err(boot.unexpected(KIND_LOCALITIES, "allgather")),
        }
    }

    fn join_with(
        root: SocketAddr,
        (rank, size, job_id): (u32, u32, u64),
        my_card: Card,
        timeout: Duration,
        secret: &JobSecret,
        flags: u8,
    ) -> Result<(Bootstrap, Gathered), BootstrapError> {
        check_size(size)?;
        check_timeout(timeout)?;
        if rank >= size {
            return Err(BootstrapError::InvalidArgument {
                reason: format!("rank {rank} is not below the job size {size}"),
            });
        }
        if my_card.rank != rank || my_card.job_id != job_id {
            return Err(BootstrapError::InvalidArgument {
                reason: format!(
                    "the card is for job {:016x} rank {}, joining job {job_id:016x} as rank {rank}",
                    my_card.job_id, my_card.rank
                ),
            });
        }
        let wire_card = Card {
            job_id: 0,
            ..my_card.clone()
        };
        let card = wire_card
            .encode()
            .map_err(|source| BootstrapError::BadCard {
                from: "our own card".into(),
                source,
            })?;
        let pe_nonce = nonce()?;
        let key = secret.derive_key(job_id, PURPOSE_BOOTSTRAP);
        let deadline = Instant::now() + timeout;
        let stream = connect_retry(root, deadline, timeout, rank)?;
        let _ = stream.set_nodelay(true);
        let mut boot = Bootstrap {
            stream,
            root,
            rank,
            size,
            job_id,
            barriers: 0,
            timeout,
            broken: false,
            class: my_card.class_encoding_version,
            cards_from: CardSource::Root,
            me_at: crate::lazy::Locality::of(&my_card),
            locs: None,
            #[cfg(feature = "pmix")]
            store: None,
        };
        let answer_by = deadline + grace(timeout);
        let cards = boot
            .challenge(deadline, timeout)
            .and_then(|root_nonce| {
                boot.authenticate(&key, root_nonce, (pe_nonce, flags), card, answer_by)
            })
            .and_then(|()| boot.read_reply("allgather", answer_by, all_cards_cap(size)))
            .and_then(|(kind, body)| match kind {
                KIND_ALL_CARDS if flags & FLAG_LAZY == 0 => boot
                    .check_cards(&body, my_card.class_encoding_version)
                    .map(Gathered::All),
                KIND_LOCALITIES if flags & (FLAG_LAZY | FLAG_STORE | FLAG_NODE) == FLAG_LAZY => {
                    boot.check_localities(&body, false).map(Gathered::Lazy)
                }
                KIND_NODE_LOCALITIES if flags & FLAG_NODE != 0 => {
                    boot.check_localities(&body, true).map(Gathered::Lazy)
                }
                KIND_JOINED if flags & FLAG_STORE != 0 => {
                    boot.check_joined(&body).map(|()| Gathered::Store)
                }
                other => Err(boot.unexpected(other, "allgather")),
            });
        match cards {
            Ok(cards) => Ok((boot, cards)),
            Err(e) => {
                boot.broken = true;
                Err(e)
            }
        }
    }

    /// The root's challenge, by `deadline`. A root that closes before
    /// sending it (its connection limit was reached, e.g. under a flood of
    /// idle connections) is tried again until the deadline.
    fn challenge(
        &mut self,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<[u8; crate::auth::NONCE_LEN], BootstrapError> {
        loop {
            match self.read_reply("challenge", deadline, MAX_FRAME_LEN) {
                Ok((KIND_CHALLENGE, body)) => {
                    // Another protocol version is refused by its number.
                    if body.len() > 4 && body.starts_with(b"SYBS") && body[4] != PROTOCOL_VERSION {
                        return Err(BootstrapError::ProtocolVersion {
                            peer: format!("the root at {}", self.root),
                            found: body[4],
                            supported: PROTOCOL_VERSION,
                        });
                    }
                    return decode_challenge(&body).map_err(|reason| BootstrapError::Protocol {
                        peer: format!("the root at {}", self.root),
                        reason,
                    });
                }
                Ok((kind, _)) => return Err(self.unexpected(kind, "challenge")),
                Err(BootstrapError::RootClosed { .. } | BootstrapError::ReceiveFrame { .. })
                    if Instant::now() < deadline =>
                {
                    thread::sleep(Duration::from_millis(20));
                    let stream = connect_retry(self.root, deadline, timeout, self.rank)?;
                    let _ = stream.set_nodelay(true);
                    self.stream = stream;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The rest of the handshake: our hello with its proof over the root's
    /// nonce, the root's welcome with its own (by `answer_by`).
    fn authenticate(
        &mut self,
        key: &[u8; crate::auth::MAC_LEN],
        root_nonce: [u8; crate::auth::NONCE_LEN],
        (pe_nonce, flags): ([u8; crate::auth::NONCE_LEN], u8),
        card: Vec<u8>,
        answer_by: Instant,
    ) -> Result<(), BootstrapError> {
        let hs = Handshake {
            key,
            job_id: self.job_id,
            root_nonce,
        };
        let hello = hs
            .hello(self.rank, self.size, pe_nonce, card, flags)
            .encode();
        let (kind, body) = self.exchange(&hello, "allgather", answer_by, MAX_FRAME_LEN)?;
        if kind != KIND_WELCOME {
            return Err(self.unexpected(kind, "allgather"));
        }
        if !hs.welcome_is_authentic(&body, (self.rank, self.size, flags), &pe_nonce) {
            return Err(BootstrapError::RootNotAuthenticated { root: self.root });
        }
        Ok(())
    }

    /// This PE's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The job size.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The job id.
    pub fn job_id(&self) -> u64 {
        self.job_id
    }

    /// The root's address.
    pub fn root(&self) -> SocketAddr {
        self.root
    }

    /// Barriers completed so far.
    pub fn barriers_done(&self) -> u64 {
        self.barriers
    }

    /// Where [`Bootstrap::fetch_cards`] gets the cards: the root, or, for a
    /// PE that joined under PMIx ([`rendezvous_at`](crate::rendezvous_at) and
    /// [`rendezvous_at_lazy`](crate::rendezvous_at_lazy) with the `pmix` feature), the PMIx store.
    pub fn card_source(&self) -> CardSource {
        self.cards_from
    }

    /// Takes the cards from `store` from now on.
    #[cfg(feature = "pmix")]
    pub(crate) fn set_card_store(&mut self, store: crate::pmix::CardStore) {
        self.cards_from = CardSource::Pmix;
        self.store = Some(store);
    }

    /// Drops the store (and with it this PE's hold on the PMIx session):
    /// every card was fetched. Later fetches are refused
    /// ([`CardRefusal::NotNow`], as the root refuses them when it kept no
    /// cards).
    #[cfg(feature = "pmix")]
    pub(crate) fn close_card_store(&mut self) {
        self.store = None;
    }

    fn unexpected(&self, kind: u8, phase: &str) -> BootstrapError {
        BootstrapError::Protocol {
            peer: format!("the root at {}", self.root),
            reason: format!(
                "sent a {} frame (kind {kind}) in the {phase}",
                kind_name(kind)
            ),
        }
    }

    /// Sends `bytes`, then reads the answer by `deadline`. An error frame
    /// becomes [`BootstrapError::RootReported`]; a failed send still looks
    /// for the root's verdict before giving up.
    fn exchange(
        &mut self,
        bytes: &[u8],
        phase: &'static str,
        deadline: Instant,
        cap: usize,
    ) -> Result<(u8, Vec<u8>), BootstrapError> {
        let result = self.exchange_inner(bytes, phase, deadline, cap);
        if result.is_err() {
            self.broken = true;
        }
        result
    }

    fn exchange_inner(
        &mut self,
        bytes: &[u8],
        phase: &'static str,
        deadline: Instant,
        cap: usize,
    ) -> Result<(u8, Vec<u8>), BootstrapError> {
        if let Err(source) = write_frame(&mut self.stream, bytes, self.timeout) {
            // The root may have closed after telling us why.
            let soon = Instant::now() + Duration::from_millis(200);
            if let Ok((KIND_ERROR, body)) = read_frame(&mut self.stream, Some(soon), MAX_FRAME_LEN)
            {
                return Err(self.root_error(&body));
            }
            return Err(BootstrapError::SendFrame {
                phase,
                peer: format!("the root at {}", self.root),
                source,
            });
        }
        self.read_reply(phase, deadline, cap)
    }

    /// Reads the root's next frame by `deadline`; an error frame becomes
    /// [`BootstrapError::RootReported`].
    fn read_reply(
        &mut self,
        phase: &'static str,
        deadline: Instant,
        cap: usize,
    ) -> Result<(u8, Vec<u8>), BootstrapError> {
        match read_frame(&mut self.stream, Some(deadline), cap) {
            Ok((KIND_ERROR, body)) => Err(self.root_error(&body)),
            Ok(f) => Ok(f),
            Err(ReadError::Timeout) => Err(BootstrapError::Timeout {
                phase,
                missing: Vec::new(),
                waited: self.timeout,
            }),
            Err(ReadError::Eof) => Err(BootstrapError::RootClosed {
                phase,
                root: self.root,
            }),
            Err(ReadError::Io(source)) => Err(BootstrapError::ReceiveFrame {
                phase,
                peer: format!("the root at {}", self.root),
                source,
            }),
            Err(e) => Err(BootstrapError::Protocol {
                peer: format!("the root at {}", self.root),
                reason: e.to_string(),
            }),
        }
    }

    fn root_error(&self, body: &[u8]) -> BootstrapError {
        decode_error_frame(body).unwrap_or_else(|reason| BootstrapError::Protocol {
            peer: format!("the root at {}", self.root),
            reason,
        })
    }

    fn check_joined(&self, body: &[u8]) -> Result<(), BootstrapError> {
        let proto = |reason: String| BootstrapError::Protocol {
            peer: format!("the root at {}", self.root),
            reason,
        };
        let (size, class) =
            decode_joined(body).map_err(|e| proto(format!("bad joined frame: {e}")))?;
        if size != self.size {
            return Err(proto(format!(
                "says the job has {size} PEs, this PE joined a job of {}",
                self.size
            )));
        }
        if class != self.class {
            return Err(BootstrapError::ClassVersionMismatch {
                rank: self.rank,
                found: class,
                reference: self.rank,
                expected: self.class,
            });
        }
        Ok(())
    }

    /// Checks the localities frame (or, `node`, the node localities
    /// frame) and keeps what it says for the fetched cards' checks.
    fn check_localities(&mut self, body: &[u8], node: bool) -> Result<Localities, BootstrapError> {
        let proto = |reason: String| BootstrapError::Protocol {
            peer: format!("the root at {}", self.root),
            reason,
        };
        let locs = if node {
            Localities::decode_node(body)
        } else {
            Localities::decode(body)
        }
        .map_err(|e| proto(e.to_string()))?;
        if locs.len() != self.size {
            return Err(proto(format!(
                "sent {} localities for a job of {} PEs",
                locs.len(),
                self.size
            )));
        }
        if locs.class_encoding_version() != self.class {
            return Err(BootstrapError::ClassVersionMismatch {
                rank: self.rank,
                found: locs.class_encoding_version(),
                reference: self.rank,
                expected: self.class,
            });
        }
        if locs.get(self.rank) != Some(self.me_at) {
            return Err(proto(format!(
                "placed rank {} at {:?}, its card says {:?}",
                self.rank,
                locs.get(self.rank),
                self.me_at
            )));
        }
        self.locs = Some(locs.clone());
        Ok(locs)
    }

    /// Whether `card`'s locality agrees with the localities the root sent:
    /// the same where they name the rank; off this PE's node in a gap
    /// (the node localities frame names every rank of this node).
    fn locality_fits(&self, card: &Card) -> bool {
        let Some(locs) = &self.locs else {
            return true;
        };
        match locs.get(card.rank) {
            Some(l) => l == crate::lazy::Locality::of(card),
            None => card.node_id != self.me_at.node_id,
        }
    }

    /// Fetches the cards of `ranks` (after a lazy join, see
    /// [`Bootstrap::join_lazy`]) from where [`Bootstrap::card_source`]
    /// says. From the root: in requests of at most
    /// [`MAX_CARDS_PER_REQUEST`] ranks, one outstanding at a time; the root
    /// serves a card at most
    /// [`MAX_SERVES_PER_CARD`](crate::MAX_SERVES_PER_CARD) times per
    /// connection: keep what you fetch. From PMIx: a `PMIx_Get` per rank
    /// (duplicates fetched once), each waiting at most the join's timeout,
    /// the card also checked against the rank's locality from the root.
    /// Each card comes back checked (rank, job, class encoding version)
    /// and with this job's id.
    ///
    /// # Errors
    /// [`BootstrapError::InvalidArgument`] for no ranks;
    /// [`BootstrapError::CardRefused`] when the root refuses a request
    /// (a rank not in the job, a card asked for too often; the connection
    /// stays usable, the cards of earlier requests of this call are
    /// dropped), or, from PMIx, for a rank not in the job;
    /// [`BootstrapError::BadCard`], [`BootstrapError::Protocol`] for an
    /// answer (or a stored card) that does not match; the errors of a
    /// frame exchange, which leave the connection unusable; from PMIx,
    /// [`BootstrapError::Pmix`] for a failed `PMIx_Get` (the connection
    /// stays usable), [`BootstrapError::PmixValue`],
    /// [`BootstrapError::JobIdMismatch`],
    /// [`BootstrapError::ClassVersionMismatch`].
    pub fn fetch_cards(&mut self, ranks: &[u32]) -> Result<Cards, BootstrapError> {
        if self.broken {
            return Err(BootstrapError::Unusable);
        }
        if ranks.is_empty() {
            return Err(BootstrapError::InvalidArgument {
                reason: "no ranks to fetch cards of".into(),
            });
        }
        if self.cards_from == CardSource::Pmix {
            #[cfg(feature = "pmix")]
            if let Some(store) = &self.store {
                let who = crate::pmix::Asker {
                    me: self.rank,
                    size: self.size,
                    job_id: self.job_id,
                    class: self.class,
                    timeout: self.timeout,
                };
                return store.fetch(ranks, &who);
            }
            // Every card came at the rendezvous; the root has none.
            return Err(BootstrapError::CardRefused {
                refusal: CardRefusal::NotNow,
            });
        }
        let mut out = Cards::default();
        for chunk in ranks.chunks(MAX_CARDS_PER_REQUEST) {
            out.extend(self.fetch_chunk(chunk)?);
        }
        Ok(out)
    }

    /// Sends one request of at most [`MAX_CARDS_PER_REQUEST`] ranks
    /// (more is sent as asked, for tests of the root's refusal).
    fn fetch_chunk(&mut self, ranks: &[u32]) -> Result<Cards, BootstrapError> {
        let request = frame(KIND_CARD_REQUEST, &lazy::encode_request(ranks));
        let deadline = Instant::now() + self.timeout + grace(self.timeout);
        let (kind, body) = self.exchange(&request, "card fetch", deadline, lazy::ANSWER_CAP)?;
        let proto = |reason: String| BootstrapError::Protocol {
            peer: format!("the root at {}", self.root),
            reason,
        };
        match kind {
            KIND_CARD_REFUSAL => {
                let refusal = CardRefusal::decode(&body).map_err(|e| proto(e.to_string()));
                match refusal {
                    Ok(refusal) => Err(BootstrapError::CardRefused { refusal }),
                    Err(e) => {
                        self.broken = true;
                        Err(e)
                    }
                }
            }
            KIND_CARD_ANSWER => {
                let checked = self.check_answer(ranks, &body, &proto);
                if checked.is_err() {
                    self.broken = true;
                }
                checked
            }
            other => {
                self.broken = true;
                Err(self.unexpected(other, "card fetch"))
            }
        }
    }

    fn check_answer(
        &self,
        ranks: &[u32],
        body: &[u8],
        proto: &impl Fn(String) -> BootstrapError,
    ) -> Result<Cards, BootstrapError> {
        let got = lazy::decode_answer(body).map_err(|source| BootstrapError::BadCard {
            from: "a card answer (relayed by the root)".into(),
            source,
        })?;
        if got.len() != ranks.len() {
            return Err(proto(format!(
                "answered {} cards to a request of {}",
                got.len(),
                ranks.len()
            )));
        }
        let mut out = Cards::default();
        for (mut card, &rank) in got.into_iter().zip(ranks) {
            if card.rank != rank {
                return Err(proto(format!(
                    "answered the card of rank {} for rank {rank}",
                    card.rank
                )));
            }
            if card.job_id != 0 {
                return Err(BootstrapError::JobIdMismatch {
                    what: format!("the card of rank {rank} (cards travel with job id 0)"),
                    expected: 0,
                    found: card.job_id,
                });
            }
            if card.class_encoding_version != self.class {
                return Err(BootstrapError::ClassVersionMismatch {
                    rank,
                    found: card.class_encoding_version,
                    reference: self.rank,
                    expected: self.class,
                });
            }
            if !self.locality_fits(&card) {
                return Err(proto(format!(
                    "answered a card of rank {rank} at node {:#x} switch {} tree {}, not where the localities it sent place it",
                    card.node_id, card.switch_id, card.tree_id
                )));
            }
            card.job_id = self.job_id;
            out.insert(card);
        }
        Ok(out)
    }

    /// Sends a card request of `ranks` as it is (no splitting), for tests
    /// of the root's limits.
    #[doc(hidden)]
    pub fn fetch_cards_unsplit(&mut self, ranks: &[u32]) -> Result<Cards, BootstrapError> {
        if self.broken {
            return Err(BootstrapError::Unusable);
        }
        self.fetch_chunk(ranks)
    }

    fn check_cards(&self, body: &[u8], my_class: u8) -> Result<Vec<Card>, BootstrapError> {
        let proto = |reason: String| BootstrapError::Protocol {
            peer: format!("the root at {}", self.root),
            reason,
        };
        let (mut all, count) = AllCards::open(body).map_err(|e| proto(e.to_string()))?;
        if count != self.size {
            return Err(proto(format!(
                "sent {count} cards for a job of {} PEs",
                self.size
            )));
        }
        let mut cards = Vec::with_capacity(count as usize);
        for rank in 0..count {
            let raw = all.next_card().map_err(|e| proto(e.to_string()))?;
            let mut card = Card::decode(raw).map_err(|source| BootstrapError::BadCard {
                from: format!("rank {rank} (relayed by the root)"),
                source,
            })?;
            // Cards travel without their job id (the root checked it is 0).
            if card.job_id != 0 {
                return Err(BootstrapError::JobIdMismatch {
                    what: format!("the card of rank {rank} (cards travel with job id 0)"),
                    expected: 0,
                    found: card.job_id,
                });
            }
            card.job_id = self.job_id;
            if card.rank != rank {
                return Err(proto(format!(
                    "card {rank} is the card of rank {}",
                    card.rank
                )));
            }
            if card.class_encoding_version != my_class {
                return Err(BootstrapError::ClassVersionMismatch {
                    rank,
                    found: card.class_encoding_version,
                    reference: self.rank,
                    expected: my_class,
                });
            }
            cards.push(card);
        }
        all.end().map_err(|e| proto(e.to_string()))?;
        Ok(cards)
    }

    /// Waits until every PE has entered this barrier (the n-th of the job).
    /// The root fails a barrier `timeout` after its first PE entered it; this
    /// PE waits `timeout` plus a grace for the root's answer.
    ///
    /// # Errors
    /// [`BootstrapError::RootReported`] when the root failed the job (it
    /// names the ranks: those that never entered, or one that disconnected,
    /// which is reported as soon as the root sees it);
    /// [`BootstrapError::Timeout`] when the root said nothing in time;
    /// [`BootstrapError::RootClosed`], [`BootstrapError::SendFrame`],
    /// [`BootstrapError::ReceiveFrame`], [`BootstrapError::Protocol`];
    /// [`BootstrapError::Unusable`] after an earlier error;
    /// [`BootstrapError::InvalidArgument`] for a zero timeout.
    pub fn barrier(&mut self, timeout: Duration) -> Result<(), BootstrapError> {
        check_timeout(timeout)?;
        if self.broken {
            return Err(BootstrapError::Unusable);
        }
        let n = self.barriers + 1;
        let bytes = frame(KIND_BARRIER, &n.to_le_bytes());
        let saved = self.timeout;
        self.timeout = timeout;
        let deadline = Instant::now() + timeout + grace(timeout);
        let answer = self.exchange(&bytes, "barrier", deadline, MAX_FRAME_LEN);
        self.timeout = saved;
        let (kind, body) = answer?;
        let result = match kind {
            KIND_RELEASE => match u64_payload(&body, "release number") {
                Ok(m) if m == n => Ok(()),
                Ok(m) => Err(BootstrapError::Protocol {
                    peer: format!("the root at {}", self.root),
                    reason: format!("released barrier {m}, expected barrier {n}"),
                }),
                Err(reason) => Err(BootstrapError::Protocol {
                    peer: format!("the root at {}", self.root),
                    reason,
                }),
            },
            other => Err(self.unexpected(other, "barrier")),
        };
        match result {
            Ok(()) => {
                self.barriers = n;
                Ok(())
            }
            Err(e) => {
                self.broken = true;
                Err(e)
            }
        }
    }

    /// Says goodbye and closes the connection. Collective: once one PE has
    /// said goodbye, the root gives the others its timeout to do the same.
    ///
    /// # Errors
    /// [`BootstrapError::RootReported`] when the root had failed the job;
    /// [`BootstrapError::SendFrame`], [`BootstrapError::Timeout`] (the root
    /// did not close within the join timeout), [`BootstrapError::Protocol`];
    /// [`BootstrapError::Unusable`] after an earlier error.
    pub fn finish(mut self) -> Result<(), BootstrapError> {
        if self.broken {
            return Err(BootstrapError::Unusable);
        }
        let root = format!("the root at {}", self.root);
        if let Err(source) = write_frame(&mut self.stream, &frame(KIND_BYE, &[]), self.timeout) {
            let soon = Instant::now() + Duration::from_millis(200);
            if let Ok((KIND_ERROR, body)) = read_frame(&mut self.stream, Some(soon), MAX_FRAME_LEN)
            {
                return Err(self.root_error(&body));
            }
            return Err(BootstrapError::SendFrame {
                phase: "goodbye",
                peer: root,
                source,
            });
        }
        let _ = self.stream.shutdown(Shutdown::Write);
        // The root closes on our goodbye; an error frame there means it had
        // failed before reading it.
        match read_frame(
            &mut self.stream,
            Some(Instant::now() + self.timeout),
            MAX_FRAME_LEN,
        ) {
            Err(ReadError::Eof) => Ok(()),
            // A reset after the goodbye was sent: the root has closed.
            Err(ReadError::Io(e)) if e.kind() == io::ErrorKind::ConnectionReset => Ok(()),
            Err(ReadError::Io(source)) => Err(BootstrapError::ReceiveFrame {
                phase: "goodbye",
                peer: root,
                source,
            }),
            Err(ReadError::Timeout) => Err(BootstrapError::Timeout {
                phase: "goodbye",
                missing: Vec::new(),
                waited: self.timeout,
            }),
            Err(e) => Err(BootstrapError::Protocol {
                peer: root,
                reason: e.to_string(),
            }),
            Ok((KIND_ERROR, body)) => Err(self.root_error(&body)),
            Ok((other, _)) => Err(self.unexpected(other, "goodbye")),
        }
    }
}

#[cfg(test)]
mod test {
    use std::thread;

    use super::*;
    use crate::root::RootServer;

    const JOB: u64 = 0x10c5;
    const T: Duration = Duration::from_secs(10);

    /// How a test PE joins.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Mode {
        All,
        Lazy,
        Store,
        /// Lazily, its node's localities only.
        Node,
        /// As `Node`, then fetches the card of an off-node rank and of a
        /// node mate, and checks their localities.
        NodeFetch,
    }

    /// A job of `modes.len()` PEs, each joining as its mode says, each on
    /// the node `node(rank)`; every PE checks what it got, enters one
    /// barrier and says goodbye. The root's bytes sent in all.
    fn job(modes: &[Mode], node: fn(u32) -> u64) -> u64 {
        let size = u32::try_from(modes.len()).expect("size");
        let secret = JobSecret::generate().expect("secret");
        let root = RootServer::bind("127.0.0.1:0".parse().expect("addr"), JOB, size, T, &secret)
            .expect("bind");
        let addr = root.local_addr();
        let stats = root.stats();
        let served = root.spawn().expect("spawn");
        let pes: Vec<_> = modes
            .iter()
            .enumerate()
            .map(|(r, &mode)| {
                let secret = secret.clone();
                let rank = u32::try_from(r).expect("rank");
                thread::spawn(move || -> Result<(), BootstrapError> {
                    let card = Card::new(JOB, rank, node(rank));
                    let mut boot = match mode {
                        Mode::All => {
                            let (b, cards) =
                                Bootstrap::join(addr, rank, size, JOB, card, T, &secret)?;
                            assert_eq!(cards.len(), size as usize);
                            b
                        }
                        Mode::Lazy => {
                            let (b, locs) =
                                Bootstrap::join_lazy(addr, rank, size, JOB, card, T, &secret)?;
                            for r in 0..size {
                                assert_eq!(locs.get(r).map(|l| l.node_id), Some(node(r)));
                            }
                            b
                        }
                        Mode::Store => {
                            let (b, ()) =
                                Bootstrap::join_store(addr, rank, size, JOB, card, T, &secret)?;
                            b
                        }
                        Mode::Node | Mode::NodeFetch => {
                            let (mut b, locs) =
                                Bootstrap::join_lazy_node(addr, rank, size, JOB, card, T, &secret)?;
                            let mine = node(rank);
                            for r in 0..size {
                                let want = (node(r) == mine).then_some(mine);
                                assert_eq!(locs.get(r).map(|l| l.node_id), want, "rank {r}");
                            }
                            assert_eq!(locs.len(), size);
                            let one_node = (0..size).all(|r| node(r) == mine);
                            assert_eq!(locs.is_complete(), one_node);
                            if mode == Mode::NodeFetch {
                                let other = (0..size).find(|&r| node(r) != mine);
                                let mate = (0..size).find(|&r| r != rank && node(r) == mine);
                                let asked: Vec<u32> = other.into_iter().chain(mate).collect();
                                if !asked.is_empty() {
                                    let got = b.fetch_cards(&asked)?;
                                    for r in asked {
                                        assert_eq!(got.get(r).map(|c| c.node_id), Some(node(r)));
                                    }
                                }
                            }
                            b
                        }
                    };
                    boot.barrier(T)?;
                    boot.finish()
                })
            })
            .collect();
        for pe in pes {
            pe.join().expect("PE thread").expect("PE");
        }
        served.join().expect("root thread").expect("root");
        stats.bytes_sent()
    }

    /// Challenge, welcome, joined frame, one release.
    const STORE_BYTES_PER_PE: u64 = 26 + 37 + 10 + 13;

    #[test]
    fn a_store_pe_gets_o1_bytes_whatever_the_localities() {
        let store = [Mode::Store; 6];
        // One node, or a node per rank: the same bytes, a fixed count a PE.
        let one_node = job(&store, |_| 7);
        let node_per_rank = job(&store, u64::from);
        assert_eq!(one_node, 6 * STORE_BYTES_PER_PE);
        assert_eq!(node_per_rank, one_node);
        // Lazy PEs get the localities, whose bytes grow with the runs.
        let lazy = [Mode::Lazy; 6];
        assert!(job(&lazy, |_| 7) > one_node);
        assert_eq!(job(&lazy, u64::from) - job(&lazy, |_| 7), 6 * 5 * 20);
    }

    #[test]
    fn store_lazy_and_eager_pes_share_a_job() {
        use Mode::{All, Lazy, Node, NodeFetch, Store};
        job(
            &[Store, Lazy, All, Store, All, Lazy, Node, NodeFetch],
            u64::from,
        );
        job(&[NodeFetch, Lazy, NodeFetch, All, Node, NodeFetch], |r| {
            u64::from(r / 2)
        });
    }

    /// The node localities frame of `runs` runs: its header (size, class
    /// version, node, run count) and 16 bytes per run, framed.
    fn node_frame_bytes(runs: u64) -> u64 {
        5 + 4 + 1 + 8 + 4 + 16 * runs
    }

    #[test]
    fn a_node_pe_gets_bytes_independent_of_the_job_and_its_nodes() {
        // Challenge, welcome, one release, and the node frame of one run
        // (ranks placed by blocks): the same bytes at 2, 16 and 64 PEs, on
        // one node, four PEs a node or a node per PE.
        let per_pe = 26 + 37 + 13 + node_frame_bytes(1);
        assert_eq!(per_pe, 114);
        for n in [2usize, 16, 64] {
            let node = vec![Mode::Node; n];
            let layouts: [fn(u32) -> u64; 3] = [|_| 7, |r| u64::from(r / 4), u64::from];
            for layout in layouts {
                assert_eq!(job(&node, layout), n as u64 * per_pe, "{n} PEs");
            }
        }
        // Ranks dealt round-robin over four nodes: a run per rank of the
        // node, so O(the node's PEs), still not O(job) per PE's node count.
        let n = 16u64;
        assert_eq!(
            job(&[Mode::Node; 16], |r| u64::from(r % 4)),
            n * (26 + 37 + 13 + node_frame_bytes(n / 4))
        );
        // The lazy PEs of the same jobs get every node's runs.
        assert!(job(&[Mode::Lazy; 64], u64::from) > 64 * 20 * 64);
    }

    /// A root that proves the secret, then answers the hello with `after`
    /// (raw frames, in turn: one after the hello, then one per frame the
    /// PE sends). The PE's result.
    fn against_fake_root(
        node_of_pe: u64,
        after: Vec<Vec<u8>>,
        then: impl FnOnce(&mut Bootstrap) -> Result<(), BootstrapError>,
    ) -> Result<(), BootstrapError> {
        use std::net::TcpListener;
        let secret = JobSecret::generate().expect("secret");
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let key = secret.derive_key(JOB, PURPOSE_BOOTSTRAP);
        let fake = thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            let deadline = Some(Instant::now() + T);
            let root_nonce = [9; crate::auth::NONCE_LEN];
            write_frame(&mut s, &crate::frame::challenge_frame(&root_nonce), T).expect("send");
            let Ok((_, body)) = read_frame(&mut s, deadline, MAX_FRAME_LEN) else {
                panic!("no hello");
            };
            let hello = crate::frame::Hello::decode(&body).expect("a hello");
            let hs = Handshake {
                key: &key,
                job_id: JOB,
                root_nonce,
            };
            write_frame(&mut s, &hs.welcome_frame(&hello), T).expect("send");
            for (i, f) in after.iter().enumerate() {
                if i > 0 && read_frame(&mut s, deadline, MAX_FRAME_LEN).is_err() {
                    return;
                }
                if write_frame(&mut s, f, T).is_err() {
                    return;
                }
            }
            // Holds the connection until the PE is done.
            let _ = read_frame(&mut s, deadline, MAX_FRAME_LEN);
        });
        let card = Card::new(JOB, 1, node_of_pe);
        let r = Bootstrap::join_lazy_node(addr, 1, 4, JOB, card, T, &secret)
            .and_then(|(mut b, _)| then(&mut b));
        fake.join().expect("the fake root");
        r
    }

    fn node_frame(size: u32, node: u64, runs: &[(u32, u32)]) -> Vec<u8> {
        let runs: Vec<lazy::NodeRun> = runs
            .iter()
            .map(|&(first, len)| lazy::NodeRun {
                first,
                len,
                switch_id: crate::SWITCH_UNKNOWN,
                tree_id: crate::SWITCH_UNKNOWN,
            })
            .collect();
        let class = switchyard_core_class();
        frame(
            KIND_NODE_LOCALITIES,
            &Localities::encode_node(size, class, node, &runs),
        )
    }

    /// The class encoding version `Card::new` announces.
    fn switchyard_core_class() -> u8 {
        Card::new(0, 0, 0).class_encoding_version
    }

    #[test]
    fn a_node_pe_refuses_node_frames_and_cards_that_do_not_fit() {
        let is_protocol = |r: Result<(), BootstrapError>, what: &str| match r {
            Err(BootstrapError::Protocol { reason, .. }) => {
                assert!(reason.contains(what), "{reason}")
            }
            other => panic!("{other:?}"),
        };
        // Well formed, this PE (rank 1 of 4, node 5) on its node with rank
        // 0: joins; rank 2's card (another node) fits; rank 3's card
        // claiming node 5, in a gap of the frame, does not.
        let good = node_frame(4, 5, &[(0, 2)]);
        let answer = |rank: u32, node: u64| {
            let c = Card::new(0, rank, node).encode().expect("a card");
            frame(
                KIND_CARD_ANSWER,
                &lazy::encode_answer([c.as_slice()].into_iter()),
            )
        };
        against_fake_root(5, vec![good.clone(), answer(2, 6)], |b| {
            let got = b.fetch_cards(&[2])?;
            assert_eq!(got.get(2).map(|c| c.node_id), Some(6));
            Ok(())
        })
        .expect("a card that fits");
        is_protocol(
            against_fake_root(5, vec![good.clone(), answer(3, 5)], |b| {
                b.fetch_cards(&[3]).map(drop)
            }),
            "not where the localities",
        );
        // A node mate's card with another node.
        is_protocol(
            against_fake_root(5, vec![good, answer(0, 6)], |b| {
                b.fetch_cards(&[0]).map(drop)
            }),
            "not where the localities",
        );
        // Frames that do not place this PE where its card says, or do not
        // add up.
        for (bad, what) in [
            (node_frame(4, 6, &[(0, 2)]), "placed rank 1"),
            (node_frame(4, 5, &[(2, 2)]), "placed rank 1"),
            (node_frame(4, 5, &[(0, 5)]), "past the job size"),
            (node_frame(4, 5, &[(0, 2), (1, 1)]), "overlaps"),
            (node_frame(4, 5, &[]), "no run"),
            (node_frame(3, 5, &[(0, 2)]), "3 localities"),
            (
                frame(KIND_LOCALITIES, &Localities::from_cards(&[], 0).encode()),
                "localities frame",
            ),
        ] {
            is_protocol(against_fake_root(5, vec![bad], |_| Ok(())), what);
        }
    }
}
