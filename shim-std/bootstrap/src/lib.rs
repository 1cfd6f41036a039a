//! Bootstrap: who am I (rank, size, job), and the card exchange at a root.
//!
//! # Rank, size and job id
//!
//! [`RankInfo::from_env`] (or [`RankInfo::from_lookup`], which takes the
//! environment as a function so tests need not touch the process's) reads
//! rank and size from the first of these sources whose rank variable is set:
//!
//! | source | rank / size | local rank / size |
//! |---|---|---|
//! | `switchyard run` | `SWITCHYARD_RANK` / `SWITCHYARD_SIZE` | `SWITCHYARD_LOCAL_RANK` / `SWITCHYARD_LOCAL_SIZE` |
//! | Open MPI | `OMPI_COMM_WORLD_RANK` / `OMPI_COMM_WORLD_SIZE` | `OMPI_COMM_WORLD_LOCAL_RANK` / `OMPI_COMM_WORLD_LOCAL_SIZE` |
//! | Slurm | `SLURM_PROCID` / `SLURM_NTASKS` | `SLURM_LOCALID` / `SLURM_NTASKS_PER_NODE` (each optional) |
//! | PMI | `PMI_RANK` / `PMI_SIZE` | none |
//!
//! Built with the `pmix` feature, a process whose environment has
//! `PMIX_RANK` and `PMIX_NAMESPACE` (started by `srun --mpi=pmix`, or Open
//! MPI's `mpirun`/`prterun`, which run a PMIx server) takes rank, size and
//! locality from PMIx instead (`PMIx_Init`, `PMIx_Get` of `pmix.job.size`,
//! `pmix.lrank`, `pmix.local.size`; [`EnvSource::Pmix`]), and its job id is
//! a hash of the PMIx namespace unless `SWITCHYARD_JOB_ID` is set. Not under
//! `switchyard run` (`SWITCHYARD_RANK` wins), nor with `SWITCHYARD_PMIX=off`.
//! The session is finalized (`PMIx_Finalize`) when the last clone of the
//! [`RankInfo`] (or, with lazy cards, the [`Bootstrap`] that fetches them
//! from PMIx) is dropped.
//!
//! With none of them the process is a singleton (rank 0 of 1). A source is
//! taken whole: once `SWITCHYARD_RANK` is set, garbage in `OMPI_*` is never
//! read. Half a pair (`SWITCHYARD_RANK` without `SWITCHYARD_SIZE`, or the
//! reverse; the same for the local pairs) is an error; only `SLURM_NTASKS`
//! alone is ignored, since an `salloc` shell sets it without being a job step.
//!
//! The job id is `SWITCHYARD_JOB_ID` (16 hex digits, set by the launcher);
//! else a hash of the job the rank source belongs to (`SLURM_JOB_ID` and
//! `SLURM_STEP_ID`, or `OMPI_MCA_ess_base_jobid`; the one matching the rank
//! source is tried first); else a hash of `SWITCHYARD_ROOT`; a singleton with
//! none of these gets a job id of its own.
//!
//! Every bad value is a [`BootstrapError`] that names the variable, the value
//! and what was expected, e.g. `SWITCHYARD_RANK=7 is not below
//! SWITCHYARD_SIZE=4`. Nothing here panics on any environment.
//!
//! # The rendezvous
//!
//! A [`RootServer`] listens at `SWITCHYARD_ROOT=host:port`. It is hosted by the
//! launcher (`SWITCHYARD_ROOT_HOST=launcher`) or, under srun or mpirun, by rank
//! 0 on a thread ([`rendezvous`], `SWITCHYARD_ROOT_HOST=rank0`, the default).
//! Every PE connects ([`Bootstrap::join`]) and posts its [`Card`]; once all
//! `size` cards are in, the root sends every PE all of them (an allgather),
//! then serves barriers ([`Bootstrap::barrier`]) until every PE has said
//! goodbye ([`Bootstrap::finish`]).
//!
//! A PE that joins with [`Bootstrap::join_lazy`] gets every rank's
//! [`Locality`] instead ([`Localities`]: runs of consecutive ranks with the
//! same node, switch and tree ids), and fetches the cards it needs with
//! [`Bootstrap::fetch_cards`] (into [`Cards`]) between barriers: at most
//! [`MAX_CARDS_PER_REQUEST`] ranks a request, one request outstanding, each
//! card served at most [`MAX_SERVES_PER_CARD`] times per connection; a
//! request the root refuses is [`BootstrapError::CardRefused`] with a
//! [`CardRefusal`], and the connection stays usable. The root's bytes per
//! lazy PE are O(runs + cards fetched), not O(size).
//!
//! A lazy PE that joins with [`Bootstrap::join_lazy_node`] (the hello's
//! node flag; [`rendezvous_at_lazy_node`], what a context with
//! `cards = lazy` uses) gets only its node's localities (the node
//! localities frame: the runs of the ranks on its node), a
//! [`Localities`] with gaps for the other ranks; an off-node rank's
//! locality comes with its card, which is checked against the frame (a
//! card in a gap must be off this node, one in a run must match it). The
//! root's bytes per such PE are O(1) + O(its node's runs) (38 bytes of
//! frame for a node placed by blocks, whatever the job's size or number
//! of nodes) plus the cards it fetches; the root's total is O(N).
//!
//! Where the PEs meet is [`RankInfo::meeting`]: `SWITCHYARD_ROOT` and the
//! secret from the environment, or, under PMIx, what rank 0 published:
//! it makes the secret (256 bits from the OS generator, unless the
//! environment gives one), binds the root (at `SWITCHYARD_ROOT` when set;
//! else on `127.0.0.1` for a job on one node, or on the first
//! non-loopback address of its host name for a job across nodes), and puts
//! both (`PMIX_GLOBAL`) under `switchyard.root` and `switchyard.secret`,
//! commits, and enters a fence over the namespace that collects the data
//! (bounded by the timeout); the others enter the fence and get both from
//! rank 0. No `SWITCHYARD_ROOT` is needed, and the secret is never on a
//! command line or in an environment. Rank 0 also puts `switchyard.error`:
//! empty, or, when it cannot bind the root, its error (and nothing else);
//! the others read it first and fail with it
//! ([`BootstrapError::PmixRank0Failed`]).
//! [`rendezvous_at`] then joins there.
//!
//! ## Cards and localities under PMIx
//!
//! Under PMIx (a job of more than one PE), [`rendezvous_at`] and
//! [`rendezvous_at_lazy`] take the cards and the localities from PMIx's
//! store, not the root. Every PE joins the root with a card that holds
//! only its locality (no shm object, TCP address or verbs addressing) and
//! the hello's store flag, so the root answers the allgather with the
//! joined frame (the job size and class encoding version: O(1) bytes), not
//! the localities. Each PE then puts its [`Locality`] and `cards` mode (18
//! bytes: format 1, mode `u8` (0 all, 1 lazy), node `u64`, switch `u32`,
//! tree `u32`) under `switchyard.locality`
//! (`PMIX_GLOBAL`), with every card ([`rendezvous_at`]) its full card too
//! (its encoding, job id 0) under `switchyard.card`, commits, and enters a
//! fence over the namespace that collects the data; it reads every rank's
//! locality from its node's copy (`PMIx_Get`, local) and builds the
//! [`Localities`] (runs) from them, then, with every card, reads every
//! rank's card. With lazy cards the card is put after that fence,
//! committed, and a fence that does not collect follows ("direct modex":
//! the cards stay with each PE's PMIx server), and
//! [`Bootstrap::fetch_cards`] reads each card asked for from there, each
//! `PMIx_Get` bounded by the join's timeout. Every locality and card read
//! is input from outside: a locality must be 18 bytes of format 1 with
//! this PE's `cards` mode (and this PE's must be what it put), a card must decode and be the rank
//! asked, with job id 0, the class encoding version and the rank's stored
//! locality ([`BootstrapError::BadCard`], [`BootstrapError::Protocol`],
//! [`BootstrapError::JobIdMismatch`],
//! [`BootstrapError::ClassVersionMismatch`]). [`Bootstrap::card_source`]
//! says where the cards come from ([`CardSource`]). The root still
//! authenticates the hellos, checks sizes and class versions, serves
//! barriers and goodbyes and reports failures; it serves no card and sends
//! no localities: each PE gets a challenge, a welcome, the joined frame and
//! a release per barrier, the same bytes whatever the job's size or
//! number of nodes ([`Rendezvous::root_stats`]). Each PE's own work is
//! O(size) local reads from its PMIx server (with lazy cards, plus one
//! remote read per card fetched). Every PE must have the same `cards`
//! setting (the fences that follow the first differ): a PE finds a rank
//! of the other mode in the localities and fails at once, naming it.
//! With every card, the PMIx session is let go after the rendezvous (a
//! later fetch is refused with [`CardRefusal::NotNow`]); with lazy cards
//! the [`Bootstrap`] keeps it until it is dropped or finished, and the
//! process finalizes it at exit if it is still open then (Open MPI's
//! `mpirun` fails a job whose process exits with PMIx initialized).
//!
//! Without PMIx (`switchyard run`'s root, or PMI variables), a lazy PE
//! that joined with [`Bootstrap::join_lazy`] gets the localities frame:
//! O(runs) bytes per PE (O(nodes) for a job placed by blocks), so
//! O(N · nodes) at the root; one that joined with
//! [`Bootstrap::join_lazy_node`] gets the node localities frame: O(1) +
//! O(its node's runs) bytes per PE, O(N) at the root. Under PMIx
//! [`rendezvous_at_lazy_node`] is [`rendezvous_at_lazy`] (every locality
//! from the store, the joined frame from the root).
//!
//! ## Frames
//!
//! TCP, `TCP_NODELAY`; a PE uses a blocking socket with read and write
//! timeouts, the root nonblocking ones on its event loop. Every
//! frame is `len: u32` (little-endian, counting what follows), `kind: u8`, then
//! the payload, all integers little-endian:
//!
//! | kind | frame | payload |
//! |---|---|---|
//! | 7 | challenge (root → PE, first on every connection) | `"SYBS"`, protocol version `u8` (5), root nonce (16 bytes) |
//! | 1 | hello (PE → root) | `"SYBS"`, protocol version `u8`, flags `u8` (bit 0: lazy; bit 1: store, only with lazy; bit 2: node, only with lazy, not with store), rank `u32`, size `u32`, PE nonce (16), proof (32), card length `u16`, card |
//! | 8 | welcome (root → PE) | the root's proof (32) |
//! | 2 | all cards (root → PE) | count `u32`, then per rank: length `u16`, card |
//! | 3 | barrier (PE → root) | barrier number `u64` (1, 2, ...) |
//! | 4 | release (root → PE) | barrier number `u64` |
//! | 5 | goodbye (PE → root) | empty |
//! | 6 | error (root → PE) | rank count `u32`, ranks `u32` each, text length `u32`, UTF-8 text |
//! | 9 | localities (root → lazy PE, instead of all cards) | size `u32`, class encoding version `u8`, run count `u32`, per run: length `u32`, node `u64`, switch `u32`, tree `u32` |
//! | 10 | card request (PE → root) | count `u16` (1 to 1,024), ranks `u32` each |
//! | 11 | card answer (root → PE) | count `u16`, per card in the request's order: length `u16`, card |
//! | 12 | card refusal (root → PE) | reason `u8` (1 unknown rank, 2 too many, 3 asked twice, 4 not now), rank or count `u32` |
//! | 13 | joined (root → store PE, instead of the localities) | size `u32`, class encoding version `u8` |
//! | 14 | node localities (root → node PE, instead of the localities) | size `u32`, class encoding version `u8`, node `u64`, run count `u32` (at least 1), per run of the node's ranks, increasing, not overlapping: first rank `u32`, length `u32`, switch `u32`, tree `u32` |
//!
//! Protocol 5 added the node flag and the node localities frame (4: the
//! store flag and the joined frame; 3: lazy cards).
//! Another protocol version is refused: the root answers an older hello
//! with an error frame naming its version (counted as
//! [`Refusal::Malformed`]); a PE facing a root of another version fails with
//! [`BootstrapError::ProtocolVersion`].
//!
//! Every length read from a socket is capped before anything is allocated for
//! it ([`MAX_FRAME_LEN`]; the all-cards frame at `size` times
//! [`Card::MAX_ENCODED_LEN`]), and bodies are read in bounded chunks, so
//! hostile bytes cannot exhaust memory. The card format is described at
//! [`Card::encode`].
//!
//! ## Authentication
//!
//! Every job has a secret ([`JobSecret`], at least 128 bits):
//! `SWITCHYARD_JOB_SECRET` (made by `switchyard run` from the OS generator
//! and given only to its PEs, in their environment), else the file named by
//! `SWITCHYARD_JOB_SECRET_FILE` (a regular file of this user, mode `0600`, for
//! jobs started by srun or mpirun), else, under PMIx, rank 0's (see above). A job without either may only use a root
//! on a loopback address, where the key is derived from the job id alone
//! (that keeps out only those who cannot guess the job id); with the root on
//! another address it fails with [`BootstrapError::NoSecret`]
//! ([`RankInfo::job_secret`]).
//!
//! The hello proves the secret: its proof is HMAC-SHA256, under a key
//! derived from the secret for the bootstrap and this job
//! ([`JobSecret::derive_key`]), of the job id, rank, size, the flags, the
//! root's nonce, the PE's nonce and the card (the welcome's covers the
//! flags too). Localities (both frames) and card requests, answers and refusals travel
//! only on a connection whose hello and welcome proved the secret. The root's welcome proves the same
//! back (another label, no card), and the PE checks it before it trusts the
//! cards. Proofs are compared in constant time. Neither the secret nor the
//! job id crosses the wire (cards travel with a job id of 0), and no error
//! frame says what the peer should have sent.
//!
//! ## Validation
//!
//! A connection that does not speak this protocol, or whose hello does not
//! prove the secret, is refused (with an error frame that describes only its
//! own bytes, or says that it proved nothing), counted
//! ([`RootStats::unauthenticated`], by [`Refusal`]) and does not harm the job. A second
//! authenticated claim of a rank is refused with
//! [`BootstrapError::DuplicateRank`] and counted ([`RootStats::refused`]);
//! the first claimant keeps the rank. Any other connection that proved the
//! secret is part of the job, so what it says wrongly fails the whole job,
//! and the root tells every PE why in an error frame: a rank not below the
//! size, a size that differs from the root's, a card that does not decode or
//! whose rank differs from the hello, a path-class encoding version that
//! differs from another PE's. Each PE checks the all-cards frame again
//! (count, job id, rank order, class encoding version).
//!
//! ## Timeouts
//!
//! Every wait is bounded:
//!
//! * The root gives the allgather `timeout` from [`RootServer::serve`] (or
//!   [`RootServer::spawn`]); then it fails with
//!   [`BootstrapError::Timeout`] naming the ranks that never arrived.
//! * A barrier has `timeout` from the moment its first PE enters it; then the
//!   root fails naming the ranks that never entered.
//! * Once a PE has said goodbye, the others have `timeout` to say it too.
//! * Between barriers the root waits as long as the job runs, but a PE whose
//!   connection closes without a goodbye fails the job at once
//!   ([`BootstrapError::Disconnected`]): the others learn it from the error
//!   frame, in their current or next barrier, without waiting out a deadline.
//! * A connection has a quarter of the timeout (1 to 5 s) to answer the
//!   root's challenge; then it is refused and counted. Before it has proved
//!   the secret the root reads at most one hello's worth of bytes from it
//!   (under 1 KiB; a longer announced frame is refused at once).
//! * The root serves every connection from one event loop on its own thread
//!   (`poll(2)`), so connections cost no threads and connect/close churn
//!   leaves its memory flat. It keeps at most the job's size plus 64
//!   connections: beyond that (or out of file descriptors) it first forgets
//!   the unidentified connections that have ended, else closes the oldest
//!   one that has not said its hello, so a flood cannot keep the PEs out (a
//!   PE answers at once, and one closed before its challenge connects
//!   again, until its timeout). A frame the root sends that makes no
//!   progress for `timeout` ends its connection.
//! * A PE retries connecting until its own `timeout`, and waits for the
//!   root's answer (all cards, a release) for its `timeout` plus a grace of
//!   half of it (at most 2 s), so that the root's verdict naming the missing
//!   ranks arrives before the PE gives up on its own.
//! * When the root fails it sends the error frame to every PE it knows and
//!   lingers up to 1 s (answering late connections with the same error) so
//!   the frame is read before the sockets close.
//!
//! # Modules
//!
//! The crate's modules are private; everything public is re-exported here.
//!
//! | module | what |
//! |---|---|
//! | `auth` | [`JobSecret`]: where it comes from, the keys derived from it; the MACs |
//! | `env` | rank, size and job id from the launcher, Open MPI, Slurm or PMI ([`RankInfo`], [`vars`]); node ids ([`node_id_here`]) |
//! | `card` | [`Card`], its encoding, [`CardError`] |
//! | `lazy` | lazy cards: [`Localities`], [`Cards`], [`CardRefusal`] and the localities and card frames' codec |
//! | `store` | cards and localities from a key-value store (PMIx's): [`CardSource`], the checks each stored card passes, the stored locality's encoding and the [`Localities`] built from every rank's, the locality-only card the root gets |
//! | `cursor` | the bounded byte reader the decoders share |
//! | `frame` | the frames above as bytes: encoding and decoding, no I/O |
//! | `stream` | frames on a TCP stream: reads with deadlines and length caps, writes with timeouts |
//! | `root` | [`RootServer`]: accepts, gathers, serves barriers and goodbyes; `root::conn`: its connections' buffers and the `poll(2)` wait |
//! | `client` | [`Bootstrap`] (a PE's connection: join, card fetches, barriers, goodbye) |
//! | `meet` | [`Meeting`] (where to meet), [`rendezvous`], [`rendezvous_at`] and [`rendezvous_at_lazy`] (join, hosting the root on rank 0 when asked) |
//! | `pmix` | (the `pmix` feature) the PMIx session and the meeting through its store; `pmix::cards`, the cards and localities through its store; `pmix::sys`, its calls over bindgen's bindings of `pmix.h` |
//! | `error` | [`BootstrapError`] |
//!
//! # Example
//!
//! ```
//! use std::{thread, time::Duration};
//! use switchyard_bootstrap::{Bootstrap, Card, JobSecret, RootServer};
//!
//! let timeout = Duration::from_secs(5);
//! let job_id = 0x5eed;
//! let secret = JobSecret::generate()?;
//! let root = RootServer::bind("127.0.0.1:0".parse()?, job_id, 2, timeout, &secret)?;
//! let addr = root.local_addr();
//! let served = root.spawn()?;
//! let pes: Vec<_> = (0..2u32)
//!     .map(|rank| {
//!         let secret = secret.clone();
//!         thread::spawn(move || {
//!             let card = Card::new(job_id, rank, 42);
//!             let (mut boot, cards) =
//!                 Bootstrap::join(addr, rank, 2, job_id, card, timeout, &secret)?;
//!             assert_eq!(cards.len(), 2);
//!             boot.barrier(timeout)?;
//!             boot.finish()
//!         })
//!     })
//!     .collect();
//! for pe in pes {
//!     pe.join().expect("PE thread")?;
//! }
//! served.join().expect("root thread")?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]
#![deny(unsafe_code)]

mod auth;
mod card;
mod client;
mod cursor;
mod env;
mod error;
mod frame;
mod lazy;
mod meet;
#[cfg(feature = "pmix")]
mod pmix;
mod root;
mod store;
mod stream;
#[cfg(any(test, feature = "fuzz"))]
pub mod wire;

pub use crate::{
    auth::{
        JobSecret, MAC_LEN, MAX_SECRET_BYTES, MIN_SECRET_BYTES, NONCE_LEN, PURPOSE_BOOTSTRAP,
        PURPOSE_TCP, SecretOrigin,
    },
    card::{CARD_FORMAT_VERSION, Card, CardError, MAX_TCP_RAILS, SWITCH_UNKNOWN},
    client::Bootstrap,
    env::{
        EnvSource, JobIdSource, RankInfo, RootHost, node_id_from, node_id_here, pmix_abort, vars,
    },
    error::BootstrapError,
    frame::{MAX_FRAME_LEN, PROTOCOL_VERSION},
    lazy::{CardRefusal, Cards, Localities, Locality, MAX_CARDS_PER_REQUEST, MAX_SERVES_PER_CARD},
    meet::{
        LazyRendezvous, Meeting, Rendezvous, rendezvous, rendezvous_at, rendezvous_at_lazy,
        rendezvous_at_lazy_node,
    },
    root::{MAX_PES, Refusal, RootServer, RootStats},
    store::CardSource,
};
