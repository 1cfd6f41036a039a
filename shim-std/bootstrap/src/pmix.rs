//! PMIx (the `pmix` feature): rank and size from the PMIx server of the
//! resource manager (`srun --mpi=pmix`, Open MPI's `mpirun`/`prterun`), and
//! the rendezvous's root and secret through its key-value store.
//!
//! Rank 0 makes the job secret (256 bits from the OS generator, unless the
//! environment gives one), binds the root, and puts both under
//! [`KEY_SECRET`] and [`KEY_ROOT`] (`PMIX_GLOBAL`), commits, and enters a
//! fence over the whole namespace that collects the data; every other PE
//! enters the same fence, then gets both from rank 0. The secret never
//! appears on a command line or in an environment; PMIx keeps it for the
//! job's processes. Rank 0 also puts [`KEY_ERROR`]: empty, or, when it
//! cannot bind the root, its error (and nothing else), so the others fail at
//! once with its reason ([`BootstrapError::PmixRank0Failed`]) rather than at
//! a timeout.
//!
//! The cards and localities go through the same store ([`cards`]): each PE
//! puts its locality under [`KEY_LOCALITY`] and its card under
//! [`KEY_CARD`] after joining the root with its locality only (the root
//! then sends it neither), builds the localities from every rank's after a
//! fence that collects them, and reads the cards with `PMIx_Get` (all of
//! them from that fence's data, or, with lazy cards, those it asks for,
//! fetched from their PMIx servers on demand). The session stays open as long as a
//! [`Handle`] does: with lazy cards the [`Bootstrap`](crate::Bootstrap)
//! holds one, and an `atexit(3)` handler finalizes what is still open
//! when the process exits.

mod cards;
mod sys;

use std::{
    ffi::CStr,
    fmt,
    net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs},
    sync::{Arc, Mutex, MutexGuard, Once, PoisonError},
    time::Duration,
};

use self::sys::{Value, keys};
pub(crate) use self::{
    cards::{Asker, CardStore, rendezvous_all, rendezvous_lazy, store_of},
    sys::Key,
};
use crate::{
    auth::{JobSecret, SecretOrigin},
    env::{PmixIdentity, RankInfo},
    error::BootstrapError,
    meet::Meeting,
    root::RootServer,
};

/// The key rank 0 publishes the root's address under (`ip:port`, UTF-8).
pub(crate) const KEY_ROOT: &CStr = c"switchyard.root";
/// The key rank 0 publishes the job secret under (its bytes).
pub(crate) const KEY_SECRET: &CStr = c"switchyard.secret";
/// The key rank 0 publishes its failure under (empty when there is none).
pub(crate) const KEY_ERROR: &CStr = c"switchyard.error";
/// The key every PE publishes its [`Card`](crate::Card) under (its
/// encoding, with job id 0).
pub(crate) const KEY_CARD: &CStr = c"switchyard.card";
/// The key every PE publishes its [`Locality`](crate::Locality) under
/// and its `cards` mode (18 bytes: format 1, mode `u8`, node `u64`,
/// switch `u32`, tree `u32`).
pub(crate) const KEY_LOCALITY: &CStr = c"switchyard.locality";

fn failed(call: impl Into<String>, status: sys::Status) -> BootstrapError {
    BootstrapError::Pmix {
        call: call.into(),
        status,
        status_name: sys::error_string(status),
    }
}

fn key_name(key: Key) -> String {
    key.to_string_lossy().into_owned()
}

/// A timeout as PMIx's `PMIX_TIMEOUT` wants it: whole seconds, at least 1.
fn timeout_s(timeout: Duration) -> i32 {
    i32::try_from(timeout.as_secs().max(1)).unwrap_or(i32::MAX)
}

/// How many sessions are open (`PMIx_Init` done, `PMIx_Finalize` not
/// yet): PMIx counts its inits, and each takes one finalize.
static OPEN: Mutex<u32> = Mutex::new(0);

fn open_sessions() -> MutexGuard<'static, u32> {
    OPEN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A PMIx client session: `PMIx_Init` when made, `PMIx_Finalize` when the
/// last [`Handle`] to it is dropped, or at the process's exit
/// ([`Handle::finalize_at_exit`]), whichever comes first.
struct Session {
    me: sys::Proc,
}

impl Session {
    fn open() -> Result<Session, BootstrapError> {
        let me = sys::init().map_err(|s| failed("PMIx_Init", s))?;
        *open_sessions() += 1;
        Ok(Session { me })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let mut open = open_sessions();
        // Not when the exit handler finalized it already.
        if *open > 0 {
            *open -= 1;
            // Nothing to do about a failure here: the job's data is in the
            // server already, and the process is done with PMIx.
            let _ = sys::finalize();
        }
    }
}

/// Finalizes every session still open (registered with `atexit(3)` by
/// [`Handle::finalize_at_exit`]).
extern "C" fn finalize_open_sessions() {
    let mut open = open_sessions();
    while *open > 0 {
        *open -= 1;
        let _ = sys::finalize();
    }
}

/// A shared PMIx session, held by [`RankInfo`]: finalized when the last
/// clone is dropped. Clones compare equal when they share the session.
#[derive(Clone)]
pub(crate) struct Handle(Arc<Session>);

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pmix")
            .field("nspace", &self.0.me.nspace())
            .field("rank", &self.0.me.rank())
            .finish()
    }
}

impl PartialEq for Handle {
    fn eq(&self, other: &Handle) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Handle {}

impl Handle {
    /// `PMIx_Init`, then this process's rank, size and locality.
    ///
    /// # Errors
    /// [`BootstrapError::Pmix`] when a call fails, [`BootstrapError::PmixValue`]
    /// for a size of 0, a rank not below it, or a value of another type.
    pub(crate) fn init() -> Result<(Handle, PmixIdentity), BootstrapError> {
        let session = Session::open()?;
        let me = session.me;
        let h = Handle(Arc::new(session));
        let all = me.wildcard();
        let size = h.get_u32(&all, keys::JOB_SIZE)?.ok_or_else(|| {
            failed(
                format!("PMIx_Get({})", key_name(keys::JOB_SIZE)),
                keys::ERR_NOT_FOUND,
            )
        })?;
        let rank = me.rank();
        if size == 0 || rank >= size {
            return Err(BootstrapError::PmixValue {
                key: format!("the job size (rank {rank})"),
                found: size.to_string(),
                expected: "a size above this process's rank",
            });
        }
        let local_rank = h.get_u32(&me, keys::LOCAL_RANK)?;
        let local_size = h
            .get_u32(&all, keys::LOCAL_SIZE)?
            .filter(|&ls| ls > 0 && ls <= size && local_rank.is_none_or(|lr| lr < ls));
        let local_rank = local_rank.filter(|_| local_size.is_some());
        let id = PmixIdentity {
            rank,
            size,
            local_rank,
            local_size,
            nspace: me.nspace(),
        };
        Ok((h, id))
    }

    /// Makes sure the session is finalized when the process exits
    /// normally, for a session kept past the bootstrap (lazy cards are
    /// fetched from the store as long as the job runs): a process that
    /// ends with PMIx initialized "exited improperly" to Open MPI's
    /// `mpirun`, which then fails the job. Registers an `atexit(3)` handler
    /// once per process (when that fails, the session ends only with its
    /// last handle).
    pub(crate) fn finalize_at_exit(&self) {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            let _ = sys::at_exit(finalize_open_sessions);
        });
    }

    /// `key` of `proc`, `None` when the server does not have it; a value
    /// that `take` does not accept is [`BootstrapError::PmixValue`].
    fn get<T>(
        &self,
        proc: &sys::Proc,
        key: Key,
        timeout: Option<Duration>,
        expected: &'static str,
        take: impl FnOnce(Value) -> Result<T, Value>,
    ) -> Result<Option<T>, BootstrapError> {
        let value = match sys::get(proc, key, timeout.map(timeout_s)) {
            Ok(v) => v,
            Err(keys::ERR_NOT_FOUND) => return Ok(None),
            Err(s) => {
                let call = format!("PMIx_Get({}, rank {})", key_name(key), proc.rank());
                return Err(failed(call, s));
            }
        };
        take(value)
            .map(Some)
            .map_err(|other| BootstrapError::PmixValue {
                key: key_name(key),
                found: format!("{other:?}"),
                expected,
            })
    }

    /// A number, `None` when the server does not have it.
    fn get_u32(&self, proc: &sys::Proc, key: Key) -> Result<Option<u32>, BootstrapError> {
        self.get(proc, key, None, "an unsigned integer", |v| match v {
            Value::U32(v) => Ok(v),
            Value::U16(v) => Ok(u32::from(v)),
            other => Err(other),
        })
    }

    /// Bytes rank 0 published under `key`, `None` when it did not.
    fn get_published(&self, key: Key) -> Result<Option<Vec<u8>>, BootstrapError> {
        let rank0 = self.0.me.with_rank(0);
        self.get(&rank0, key, None, "a byte object", |v| match v {
            Value::Bytes(b) => Ok(b),
            Value::Str(s) => Ok(s.into_bytes()),
            other => Err(other),
        })
    }

    fn put(&self, key: Key, bytes: &[u8]) -> Result<(), BootstrapError> {
        sys::put_bytes(key, bytes).map_err(|s| failed(format!("PMIx_Put({})", key_name(key)), s))
    }

    /// Where this job's PEs meet, agreed through PMIx (collective: every PE
    /// of the namespace calls it). Rank 0 binds the root (at
    /// `SWITCHYARD_ROOT` when set, else on [`bind_address`]) and publishes
    /// it with the secret; the others read both after the fence, which
    /// waits at most `timeout`.
    ///
    /// # Errors
    /// Rank 0: as [`RootServer::bind`], [`JobSecret::generate`],
    /// [`RankInfo::root_addr`] or [`bind_address`]; every PE:
    /// [`BootstrapError::Pmix`] when a call fails (the fence after
    /// `timeout`), [`BootstrapError::PmixRank0Failed`] with rank 0's reason,
    /// [`BootstrapError::PmixValue`] or [`BootstrapError::SecretInvalid`]
    /// for what rank 0 published that cannot be used.
    pub(crate) fn meet(
        &self,
        info: &RankInfo,
        timeout: Duration,
    ) -> Result<Meeting, BootstrapError> {
        let me = self.0.me;
        let prepared = if me.rank() == 0 {
            let prepared = self.host_root(info, timeout);
            match &prepared {
                Ok((secret, server)) => {
                    self.put(KEY_SECRET, secret.as_bytes())?;
                    self.put(KEY_ROOT, server.local_addr().to_string().as_bytes())?;
                    self.put(KEY_ERROR, b"")?;
                }
                Err(e) => self.put(KEY_ERROR, e.to_string().as_bytes())?,
            }
            sys::commit().map_err(|s| failed("PMIx_Commit", s))?;
            Some(prepared)
        } else {
            None
        };
        sys::fence_all(&me, timeout_s(timeout), true).map_err(|s| failed("PMIx_Fence", s))?;
        if let Some(prepared) = prepared {
            let (secret, server) = prepared?;
            return Ok(Meeting {
                root: server.local_addr(),
                secret,
                server: Some(server),
            });
        }
        // The error first: a key rank 0 never put is waited for (until
        // PMIx's own timeout), and on failure it put only this one.
        match self.get_published(KEY_ERROR)? {
            Some(r) if r.is_empty() => {}
            Some(r) => {
                let reason = String::from_utf8_lossy(&r).into_owned();
                return Err(BootstrapError::PmixRank0Failed { reason });
            }
            None => {
                let reason = "it published neither the root nor an error".into();
                return Err(BootstrapError::PmixRank0Failed { reason });
            }
        }
        let root = self.get_published(KEY_ROOT)?.unwrap_or_default();
        let text = String::from_utf8_lossy(&root).into_owned();
        let root: SocketAddr = text.parse().map_err(|_| BootstrapError::PmixValue {
            key: key_name(KEY_ROOT),
            found: format!("{text:?}"),
            expected: "an ip:port address",
        })?;
        let bytes = self.get_published(KEY_SECRET)?.unwrap_or_default();
        let secret = JobSecret::from_bytes("PMIx (rank 0's)", bytes, SecretOrigin::Pmix)?;
        Ok(Meeting {
            root,
            secret,
            server: None,
        })
    }

    /// Rank 0's part: the secret and the bound root.
    fn host_root(
        &self,
        info: &RankInfo,
        timeout: Duration,
    ) -> Result<(JobSecret, RootServer), BootstrapError> {
        let secret = match &info.secret {
            Some(s) => s.clone(),
            None => JobSecret::generate()?,
        };
        let addr = if info.root.is_some() {
            info.root_addr()?
        } else {
            bind_address(self.nodes(info)?, self.hostname()?)?
        };
        let server = RootServer::bind(addr, info.job_id, info.size, timeout, &secret)?;
        Ok((secret, server))
    }

    /// The nodes of the job: `PMIX_NUM_NODES`, else 1 when every PE is on
    /// this node, else 2 (several: the root must be reachable from others).
    fn nodes(&self, info: &RankInfo) -> Result<u32, BootstrapError> {
        Ok(
            match self.get_u32(&self.0.me.wildcard(), keys::NUM_NODES)? {
                Some(n) if n > 0 => n,
                _ if info.local_size == Some(info.size) => 1,
                _ => 2,
            },
        )
    }

    /// This host's name: `PMIX_HOSTNAME`, else the kernel's.
    fn hostname(&self) -> Result<String, BootstrapError> {
        if let Ok(Value::Str(h)) = sys::get(&self.0.me, keys::HOSTNAME, None)
            && !h.is_empty()
        {
            return Ok(h);
        }
        const HOSTNAME: &str = "/proc/sys/kernel/hostname";
        std::fs::read_to_string(HOSTNAME)
            .map(|h| h.trim().to_owned())
            .map_err(|source| BootstrapError::NodeId {
                path: HOSTNAME,
                source,
            })
    }
}

/// Asks the PMIx server to end this process's whole job with `status`
/// (`PMIx_Abort`, in a session of its own: the bootstrap's is over).
/// The caller still exits with `status` itself: a server may return
/// before it has killed anyone.
///
/// # Errors
/// [`BootstrapError::Pmix`] naming the call that failed.
pub(crate) fn abort(status: i32, message: &str) -> Result<(), BootstrapError> {
    let _session = Session::open()?;
    let text = std::ffi::CString::new(message.replace('\0', " ")).unwrap_or_default();
    sys::abort(status, &text).map_err(|s| failed("PMIx_Abort", s))
}

/// Where rank 0 binds the root when `SWITCHYARD_ROOT` is not set: the
/// loopback address for a job on one node (nothing off the node can reach
/// it); for a job across `nodes` nodes, the first address `host` resolves
/// to that is not loopback (IPv4 first). The port is the system's choice.
///
/// # Errors
/// [`BootstrapError::NoRootAddress`] when `host` has no such address.
pub(crate) fn bind_address(nodes: u32, host: String) -> Result<SocketAddr, BootstrapError> {
    if nodes <= 1 {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0));
    }
    let mut addrs: Vec<SocketAddr> = (host.as_str(), 0)
        .to_socket_addrs()
        .map(|a| {
            a.filter(|a| !a.ip().is_loopback() && !a.ip().is_unspecified())
                .collect()
        })
        .unwrap_or_default();
    addrs.sort_by_key(|a| a.is_ipv6());
    addrs
        .first()
        .copied()
        .ok_or(BootstrapError::NoRootAddress { host, nodes })
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn one_node_binds_loopback_others_need_a_routable_address() {
        let a = bind_address(1, "anything".into()).expect("loopback");
        assert!(a.ip().is_loopback() && a.port() == 0);
        // `localhost` resolves only to loopback addresses.
        let e = bind_address(2, "localhost".into()).expect_err("loopback only");
        assert!(e.to_string().contains("SWITCHYARD_ROOT=host:port"), "{e}");
    }

    #[test]
    fn published_keys_are_distinct_and_short() {
        let keys = [KEY_ROOT, KEY_SECRET, KEY_ERROR, KEY_CARD, KEY_LOCALITY];
        for (i, a) in keys.iter().enumerate() {
            assert!(a.to_bytes().len() < 64);
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }
}
