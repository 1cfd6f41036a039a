//! Who this PE is: rank, size and job id from the launcher, Open MPI, Slurm
//! or PMI ([`RankInfo`], the variables in [`vars`]), and the node id of this
//! host ([`node_id_here`]).

use std::{
    ffi::OsString,
    fmt, io,
    net::{SocketAddr, ToSocketAddrs},
    path::Path,
    time::{SystemTime, UNIX_EPOCH},
};

use crate::{auth::JobSecret, error::BootstrapError};

/// The environment variables this crate reads (and the launcher sets).
pub mod vars {
    /// Rank set by `switchyard run`.
    pub const RANK: &str = "SWITCHYARD_RANK";
    /// Job size set by `switchyard run`.
    pub const SIZE: &str = "SWITCHYARD_SIZE";
    /// Rank on this node, set by `switchyard run`.
    pub const LOCAL_RANK: &str = "SWITCHYARD_LOCAL_RANK";
    /// PEs on this node, set by `switchyard run`.
    pub const LOCAL_SIZE: &str = "SWITCHYARD_LOCAL_SIZE";
    /// Job id, 16 hex digits, set by `switchyard run`.
    pub const JOB_ID: &str = "SWITCHYARD_JOB_ID";
    /// The job secret, 32 to 128 hex digits, set by `switchyard run` for its
    /// PEs only (never on a command line).
    pub const JOB_SECRET: &str = "SWITCHYARD_JOB_SECRET";
    /// A file holding the job secret (as [`JOB_SECRET`]), for jobs started
    /// by another launcher: a regular file of this user, mode `0600`.
    pub const JOB_SECRET_FILE: &str = "SWITCHYARD_JOB_SECRET_FILE";
    /// Rendezvous address, `host:port`.
    pub const ROOT: &str = "SWITCHYARD_ROOT";
    /// Who hosts the root: `launcher` or `rank0` (the default).
    pub const ROOT_HOST: &str = "SWITCHYARD_ROOT_HOST";
    /// Open MPI rank.
    pub const OMPI_RANK: &str = "OMPI_COMM_WORLD_RANK";
    /// Open MPI size.
    pub const OMPI_SIZE: &str = "OMPI_COMM_WORLD_SIZE";
    /// Open MPI rank on this node.
    pub const OMPI_LOCAL_RANK: &str = "OMPI_COMM_WORLD_LOCAL_RANK";
    /// Open MPI PEs on this node.
    pub const OMPI_LOCAL_SIZE: &str = "OMPI_COMM_WORLD_LOCAL_SIZE";
    /// Open MPI job id.
    pub const OMPI_JOB_ID: &str = "OMPI_MCA_ess_base_jobid";
    /// Slurm rank.
    pub const SLURM_RANK: &str = "SLURM_PROCID";
    /// Slurm size.
    pub const SLURM_SIZE: &str = "SLURM_NTASKS";
    /// Slurm rank on this node.
    pub const SLURM_LOCAL_RANK: &str = "SLURM_LOCALID";
    /// Slurm tasks per node (only with `--ntasks-per-node`).
    pub const SLURM_LOCAL_SIZE: &str = "SLURM_NTASKS_PER_NODE";
    /// Slurm job id.
    pub const SLURM_JOB_ID: &str = "SLURM_JOB_ID";
    /// Slurm step id.
    pub const SLURM_STEP_ID: &str = "SLURM_STEP_ID";
    /// PMI rank.
    pub const PMI_RANK: &str = "PMI_RANK";
    /// PMI size.
    pub const PMI_SIZE: &str = "PMI_SIZE";
    /// PMIx rank (with [`PMIX_NAMESPACE`], the sign of a PMIx server).
    pub const PMIX_RANK: &str = "PMIX_RANK";
    /// PMIx namespace.
    pub const PMIX_NAMESPACE: &str = "PMIX_NAMESPACE";
    /// Whether to use PMIx where its server is there (the `pmix` feature):
    /// `auto` (the default) or `off` (rank and size from the environment).
    pub const PMIX: &str = "SWITCHYARD_PMIX";
}

/// Where rank and size came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EnvSource {
    /// `switchyard run` (`SWITCHYARD_RANK`).
    Launcher,
    /// Open MPI (`OMPI_COMM_WORLD_RANK`).
    OpenMpi,
    /// Slurm (`SLURM_PROCID`).
    Slurm,
    /// PMI (`PMI_RANK`).
    Pmi,
    /// A PMIx server (`PMIx_Init`; the `pmix` feature).
    Pmix,
    /// None: a lone process, rank 0 of 1.
    Singleton,
}

impl fmt::Display for EnvSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EnvSource::Launcher => "switchyard launcher",
            EnvSource::OpenMpi => "Open MPI",
            EnvSource::Slurm => "Slurm",
            EnvSource::Pmi => "PMI",
            EnvSource::Pmix => "PMIx",
            EnvSource::Singleton => "singleton",
        })
    }
}

/// Where the job id came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JobIdSource {
    /// `SWITCHYARD_JOB_ID`.
    Launcher,
    /// A hash of `SLURM_JOB_ID` and `SLURM_STEP_ID`.
    Slurm,
    /// A hash of `OMPI_MCA_ess_base_jobid`.
    OpenMpi,
    /// A hash of the PMIx namespace.
    Pmix,
    /// A hash of `SWITCHYARD_ROOT`.
    Root,
    /// A singleton's own (pid and time).
    Process,
}

/// Who hosts the [`RootServer`](crate::RootServer) (`SWITCHYARD_ROOT_HOST`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RootHost {
    /// The launcher (`launcher`): every PE only connects.
    Launcher,
    /// Rank 0, on a thread (`rank0`, the default).
    #[default]
    Rank0,
}

/// Who this PE is: rank, size, job, and where the rendezvous is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RankInfo {
    /// This PE's rank, below `size`.
    pub rank: u32,
    /// PEs in the job, at least 1.
    pub size: u32,
    /// Rank on this node, where the source gives it.
    pub local_rank: Option<u32>,
    /// PEs on this node, where the source gives it.
    pub local_size: Option<u32>,
    /// Where rank and size came from.
    pub source: EnvSource,
    /// The job id.
    pub job_id: u64,
    /// Where the job id came from.
    pub job_id_source: JobIdSource,
    /// `SWITCHYARD_ROOT` as given (`host:port`, checked for form, not resolved).
    pub root: Option<String>,
    /// `SWITCHYARD_ROOT_HOST`.
    pub root_host: RootHost,
    /// The job secret (`SWITCHYARD_JOB_SECRET`, else the file named by
    /// `SWITCHYARD_JOB_SECRET_FILE`); `None` when neither is set. Its
    /// `Debug` shows only where it came from.
    pub secret: Option<JobSecret>,
    /// The PMIx session rank and size came from (finalized when the last
    /// clone of this is dropped).
    #[cfg(feature = "pmix")]
    pub(crate) pmix: Option<crate::pmix::Handle>,
}

/// What PMIx says about this process and its job (the `pmix` feature).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(not(feature = "pmix"), allow(dead_code))]
pub(crate) struct PmixIdentity {
    /// `PMIx_Init`'s rank.
    pub(crate) rank: u32,
    /// `PMIX_JOB_SIZE`.
    pub(crate) size: u32,
    /// `PMIX_LOCAL_RANK`, where the server gives it.
    pub(crate) local_rank: Option<u32>,
    /// `PMIX_LOCAL_SIZE`, where the server gives it.
    pub(crate) local_size: Option<u32>,
    /// The namespace (the job's name for PMIx).
    pub(crate) nspace: String,
}

struct Env<F> {
    lookup: F,
}

impl<F: FnMut(&str) -> Option<OsString>> Env<F> {
    fn get(&mut self, var: &'static str) -> Result<Option<String>, BootstrapError> {
        match (self.lookup)(var) {
            None => Ok(None),
            Some(v) => v
                .into_string()
                .map(Some)
                .map_err(|v| BootstrapError::EnvBadValue {
                    var,
                    value: v.to_string_lossy().into_owned(),
                    expected: "valid UTF-8",
                }),
        }
    }

    /// A secret's variable: like [`Env::get`], but a value that is not
    /// UTF-8 is refused without showing it.
    fn get_secret(&mut self, var: &'static str) -> Result<Option<String>, BootstrapError> {
        match (self.lookup)(var) {
            None => Ok(None),
            Some(v) => v
                .into_string()
                .map(Some)
                .map_err(|_| BootstrapError::SecretInvalid {
                    from: var.to_owned(),
                    reason: "not valid UTF-8".into(),
                }),
        }
    }

    fn number(&mut self, var: &'static str) -> Result<Option<u32>, BootstrapError> {
        self.get(var)?.map(|v| parse_u32(var, &v)).transpose()
    }

    /// A (rank, size) pair: both or neither.
    fn pair(
        &mut self,
        rank_var: &'static str,
        size_var: &'static str,
    ) -> Result<Option<(u32, u32)>, BootstrapError> {
        let rank = self.get(rank_var)?;
        let size = self.get(size_var)?;
        match (rank, size) {
            (None, None) => Ok(None),
            (Some(value), None) => Err(BootstrapError::EnvHalfPair {
                set: rank_var,
                value,
                unset: size_var,
            }),
            (None, Some(value)) => Err(BootstrapError::EnvHalfPair {
                set: size_var,
                value,
                unset: rank_var,
            }),
            (Some(r), Some(s)) => {
                let rank = parse_u32(rank_var, &r)?;
                let size = parse_size(size_var, &s)?;
                check_below(rank_var, rank, size_var, size)?;
                Ok(Some((rank, size)))
            }
        }
    }
}

fn parse_u32(var: &'static str, value: &str) -> Result<u32, BootstrapError> {
    let bad = || BootstrapError::EnvBadValue {
        var,
        value: value.to_owned(),
        expected: "a decimal integer below 2^32",
    };
    if value.is_empty() || value.len() > 10 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    value
        .parse::<u64>()
        .ok()
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(bad)
}

fn parse_size(var: &'static str, value: &str) -> Result<u32, BootstrapError> {
    match parse_u32(var, value)? {
        0 => Err(BootstrapError::EnvZeroSize { var }),
        n => Ok(n),
    }
}

fn check_below(
    var: &'static str,
    value: u32,
    limit_var: &'static str,
    limit: u32,
) -> Result<(), BootstrapError> {
    if value < limit {
        Ok(())
    } else {
        Err(BootstrapError::EnvNotBelow {
            var,
            value,
            limit_var,
            limit,
        })
    }
}

fn parse_job_id_hex(value: &str) -> Result<u64, BootstrapError> {
    if value.len() != 16 || !value.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(BootstrapError::EnvBadValue {
            var: vars::JOB_ID,
            value: value.to_owned(),
            expected: "16 hex digits",
        });
    }
    u64::from_str_radix(value, 16).map_err(|_| BootstrapError::EnvBadValue {
        var: vars::JOB_ID,
        value: value.to_owned(),
        expected: "16 hex digits",
    })
}

/// Checks the form `host:port` (IPv6 in brackets, port 1-65535).
fn check_root_form(value: &str) -> Result<(), BootstrapError> {
    let bad = || BootstrapError::EnvBadValue {
        var: vars::ROOT,
        value: value.to_owned(),
        expected: "host:port (port 1-65535, an IPv6 address in brackets)",
    };
    let (host, port) = value.rsplit_once(':').ok_or_else(bad)?;
    let port_ok = !port.is_empty()
        && port.len() <= 5
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u16>().is_ok_and(|p| p != 0);
    let host_ok = if let Some(inner) = host.strip_prefix('[') {
        inner
            .strip_suffix(']')
            .is_some_and(|h| !h.is_empty() && !h.contains(['[', ']']))
    } else {
        !host.is_empty() && host.len() <= 253 && !host.contains([':', '[', ']', '/', ' '])
    };
    if port_ok && host_ok {
        Ok(())
    } else {
        Err(bad())
    }
}

fn non_empty(var: &'static str, value: String) -> Result<String, BootstrapError> {
    if value.is_empty() {
        Err(BootstrapError::EnvBadValue {
            var,
            value,
            expected: "a non-empty job id",
        })
    } else {
        Ok(value)
    }
}

/// FNV-1a, 64 bits, over parts separated by a byte no part contains as a
/// separator marker (0xff). Stable across builds and platforms.
pub(crate) fn fnv1a(parts: &[&[u8]]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(PRIME);
        }
        h ^= 0xff;
        h = h.wrapping_mul(PRIME);
    }
    h
}

impl RankInfo {
    /// Reads rank, size, local rank and size, job id and root from the
    /// process environment.
    ///
    /// # Errors
    /// As [`RankInfo::from_lookup`]; a value that is not UTF-8 is
    /// [`BootstrapError::EnvBadValue`].
    pub fn from_env() -> Result<RankInfo, BootstrapError> {
        Self::from_os_lookup(|k| std::env::var_os(k), true)
    }

    /// Reads the same as [`RankInfo::from_env`] through `lookup`, which
    /// returns a variable's value or `None` when it is unset.
    ///
    /// ```
    /// use switchyard_bootstrap::{EnvSource, RankInfo};
    ///
    /// let env = [("SLURM_PROCID", "3"), ("SLURM_NTASKS", "8"), ("SLURM_JOB_ID", "77")];
    /// let info = RankInfo::from_lookup(|k| {
    ///     env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    /// })?;
    /// assert_eq!((info.rank, info.size, info.source), (3, 8, EnvSource::Slurm));
    ///
    /// let bad = RankInfo::from_lookup(|k| match k {
    ///     "SWITCHYARD_RANK" => Some("7".into()),
    ///     "SWITCHYARD_SIZE" => Some("4".into()),
    ///     _ => None,
    /// });
    /// assert_eq!(bad.unwrap_err().to_string(), "SWITCHYARD_RANK=7 is not below SWITCHYARD_SIZE=4");
    /// # Ok::<(), switchyard_bootstrap::BootstrapError>(())
    /// ```
    ///
    /// # Errors
    /// [`BootstrapError::EnvBadValue`] (not a number, a bad job id, root or
    /// root host), [`BootstrapError::EnvZeroSize`],
    /// [`BootstrapError::EnvNotBelow`] (a rank not below its size),
    /// [`BootstrapError::EnvAbove`] (a local size above the size),
    /// [`BootstrapError::EnvHalfPair`], or [`BootstrapError::EnvNoJobId`]
    /// for a job of several PEs with no job id and no root. Each names the
    /// variable and its value.
    pub fn from_lookup<F>(mut lookup: F) -> Result<RankInfo, BootstrapError>
    where
        F: FnMut(&str) -> Option<String>,
    {
        Self::from_os_lookup(|k| lookup(k).map(OsString::from), false)
    }

    /// `with_pmix`: whether a PMIx server may be asked (only for the
    /// process's own environment).
    fn from_os_lookup<F>(lookup: F, with_pmix: bool) -> Result<RankInfo, BootstrapError>
    where
        F: FnMut(&str) -> Option<OsString>,
    {
        let mut env = Env { lookup };
        let pmix = if with_pmix && Self::pmix_wanted(&mut env)? {
            Self::pmix_init()?
        } else {
            None
        };
        let (source, rank, size, local_rank, local_size) = match &pmix {
            Some((_, id)) => (
                EnvSource::Pmix,
                id.rank,
                id.size,
                id.local_rank,
                id.local_size,
            ),
            None => Self::rank_and_size(&mut env)?,
        };
        let root = env.get(vars::ROOT)?;
        if let Some(r) = &root {
            check_root_form(r)?;
        }
        let root_host = match env.get(vars::ROOT_HOST)?.as_deref() {
            None | Some("rank0") => RootHost::Rank0,
            Some("launcher") => RootHost::Launcher,
            Some(other) => {
                return Err(BootstrapError::EnvBadValue {
                    var: vars::ROOT_HOST,
                    value: other.to_owned(),
                    expected: "`launcher` or `rank0`",
                });
            }
        };
        let nspace = pmix.as_ref().map(|(_, id)| id.nspace.as_str());
        let (job_id, job_id_source) =
            Self::job_id(&mut env, source, size, root.as_deref(), nspace)?;
        let secret = match env.get_secret(vars::JOB_SECRET)? {
            Some(hex) => Some(JobSecret::from_hex(vars::JOB_SECRET, &hex)?),
            None => match env.get(vars::JOB_SECRET_FILE)? {
                Some(path) if !path.is_empty() => Some(JobSecret::from_file(Path::new(&path))?),
                _ => None,
            },
        };
        Ok(RankInfo {
            rank,
            size,
            local_rank,
            local_size,
            source,
            job_id,
            job_id_source,
            root,
            root_host,
            secret,
            #[cfg(feature = "pmix")]
            pmix: pmix.map(|(h, _)| h),
        })
    }

    /// Whether to take rank and size from PMIx: built with the `pmix`
    /// feature, `PMIX_RANK` and `PMIX_NAMESPACE` set (a PMIx server started
    /// this process), not started by `switchyard run` (`SWITCHYARD_RANK`),
    /// and `SWITCHYARD_PMIX` is not `off`.
    fn pmix_wanted<F: FnMut(&str) -> Option<OsString>>(
        env: &mut Env<F>,
    ) -> Result<bool, BootstrapError> {
        let on = match env.get(vars::PMIX)?.as_deref() {
            None | Some("auto") => true,
            Some("off") => false,
            Some(other) => {
                return Err(BootstrapError::EnvBadValue {
                    var: vars::PMIX,
                    value: other.to_owned(),
                    expected: "`auto` or `off`",
                });
            }
        };
        Ok(cfg!(feature = "pmix")
            && on
            && env.get(vars::RANK)?.is_none()
            && env.get(vars::PMIX_RANK)?.is_some()
            && env.get(vars::PMIX_NAMESPACE)?.is_some())
    }

    #[cfg(feature = "pmix")]
    fn pmix_init() -> Result<Option<(crate::pmix::Handle, PmixIdentity)>, BootstrapError> {
        crate::pmix::Handle::init().map(Some)
    }

    #[cfg(not(feature = "pmix"))]
    fn pmix_init() -> Result<Option<((), PmixIdentity)>, BootstrapError> {
        Ok(None)
    }

    /// The secret the job's PEs authenticate with, for a rendezvous at
    /// `root`: [`RankInfo::secret`] when there is one. Without one, a root
    /// on a loopback address gets [`JobSecret::from_job_id`], which keeps
    /// out strangers that do not know the job id but not a local user who
    /// can guess it (give such jobs a `SWITCHYARD_JOB_SECRET_FILE`); a job
    /// of one PE needs none.
    ///
    /// # Errors
    /// [`BootstrapError::NoSecret`] for a job of several PEs with no secret
    /// and a root on a non-loopback address.
    pub fn job_secret(&self, root: SocketAddr) -> Result<JobSecret, BootstrapError> {
        match &self.secret {
            Some(s) => Ok(s.clone()),
            None if self.size == 1 || crate::auth::is_loopback(root) => {
                Ok(JobSecret::from_job_id(self.job_id))
            }
            None => Err(BootstrapError::NoSecret {
                size: self.size,
                root,
            }),
        }
    }

    #[allow(clippy::type_complexity)]
    fn rank_and_size<F: FnMut(&str) -> Option<OsString>>(
        env: &mut Env<F>,
    ) -> Result<(EnvSource, u32, u32, Option<u32>, Option<u32>), BootstrapError> {
        type Pair = (&'static str, &'static str);
        const PAIRED: [(EnvSource, Pair, Option<Pair>); 2] = [
            (
                EnvSource::Launcher,
                (vars::RANK, vars::SIZE),
                Some((vars::LOCAL_RANK, vars::LOCAL_SIZE)),
            ),
            (
                EnvSource::OpenMpi,
                (vars::OMPI_RANK, vars::OMPI_SIZE),
                Some((vars::OMPI_LOCAL_RANK, vars::OMPI_LOCAL_SIZE)),
            ),
        ];
        for (source, (rv, sv), local) in PAIRED {
            if let Some((rank, size)) = env.pair(rv, sv)? {
                let (mut lr, mut ls) = (None, None);
                if let Some((lrv, lsv)) = local
                    && let Some((r, s)) = env.pair(lrv, lsv)?
                {
                    if s > size {
                        return Err(BootstrapError::EnvAbove {
                            var: lsv,
                            value: s,
                            limit_var: sv,
                            limit: size,
                        });
                    }
                    (lr, ls) = (Some(r), Some(s));
                }
                return Ok((source, rank, size, lr, ls));
            }
        }
        // Slurm: the step is there when SLURM_PROCID is; an salloc shell has
        // SLURM_NTASKS alone.
        if let Some(r) = env.get(vars::SLURM_RANK)? {
            let rank = parse_u32(vars::SLURM_RANK, &r)?;
            let size = match env.get(vars::SLURM_SIZE)? {
                Some(s) => parse_size(vars::SLURM_SIZE, &s)?,
                None => {
                    return Err(BootstrapError::EnvHalfPair {
                        set: vars::SLURM_RANK,
                        value: r,
                        unset: vars::SLURM_SIZE,
                    });
                }
            };
            check_below(vars::SLURM_RANK, rank, vars::SLURM_SIZE, size)?;
            let lr = env.number(vars::SLURM_LOCAL_RANK)?;
            let ls = match env.get(vars::SLURM_LOCAL_SIZE)? {
                Some(s) => Some(parse_size(vars::SLURM_LOCAL_SIZE, &s)?),
                None => None,
            };
            if let Some(ls) = ls {
                if ls > size {
                    return Err(BootstrapError::EnvAbove {
                        var: vars::SLURM_LOCAL_SIZE,
                        value: ls,
                        limit_var: vars::SLURM_SIZE,
                        limit: size,
                    });
                }
                if let Some(lr) = lr {
                    check_below(vars::SLURM_LOCAL_RANK, lr, vars::SLURM_LOCAL_SIZE, ls)?;
                }
            }
            return Ok((EnvSource::Slurm, rank, size, lr, ls));
        }
        if let Some((rank, size)) = env.pair(vars::PMI_RANK, vars::PMI_SIZE)? {
            return Ok((EnvSource::Pmi, rank, size, None, None));
        }
        Ok((EnvSource::Singleton, 0, 1, Some(0), Some(1)))
    }

    fn job_id<F: FnMut(&str) -> Option<OsString>>(
        env: &mut Env<F>,
        source: EnvSource,
        size: u32,
        root: Option<&str>,
        pmix_nspace: Option<&str>,
    ) -> Result<(u64, JobIdSource), BootstrapError> {
        if let Some(v) = env.get(vars::JOB_ID)? {
            return Ok((parse_job_id_hex(&v)?, JobIdSource::Launcher));
        }
        if let Some(ns) = pmix_nspace {
            return Ok((fnv1a(&[b"pmix", ns.as_bytes()]), JobIdSource::Pmix));
        }
        let order = if source == EnvSource::OpenMpi {
            [JobIdSource::OpenMpi, JobIdSource::Slurm]
        } else {
            [JobIdSource::Slurm, JobIdSource::OpenMpi]
        };
        for which in order {
            match which {
                JobIdSource::Slurm => {
                    if let Some(job) = env.get(vars::SLURM_JOB_ID)? {
                        let job = non_empty(vars::SLURM_JOB_ID, job)?;
                        let step = match env.get(vars::SLURM_STEP_ID)? {
                            Some(s) => non_empty(vars::SLURM_STEP_ID, s)?,
                            None => String::new(),
                        };
                        let id = fnv1a(&[b"slurm", job.as_bytes(), step.as_bytes()]);
                        return Ok((id, JobIdSource::Slurm));
                    }
                }
                _ => {
                    if let Some(job) = env.get(vars::OMPI_JOB_ID)? {
                        let job = non_empty(vars::OMPI_JOB_ID, job)?;
                        return Ok((fnv1a(&[b"ompi", job.as_bytes()]), JobIdSource::OpenMpi));
                    }
                }
            }
        }
        if let Some(root) = root {
            return Ok((fnv1a(&[b"root", root.as_bytes()]), JobIdSource::Root));
        }
        if size == 1 {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let id = fnv1a(&[
                b"process",
                &std::process::id().to_le_bytes(),
                &nanos.to_le_bytes(),
            ]);
            return Ok((id, JobIdSource::Process));
        }
        Err(BootstrapError::EnvNoJobId { size })
    }

    /// The job id as `SWITCHYARD_JOB_ID` spells it: 16 lowercase hex digits.
    pub fn job_id_hex(&self) -> String {
        format!("{:016x}", self.job_id)
    }

    /// Whether this PE hosts the root: rank 0 when `SWITCHYARD_ROOT_HOST` is
    /// `rank0` (the default).
    pub fn hosts_root(&self) -> bool {
        self.rank == 0 && self.root_host == RootHost::Rank0
    }

    /// Resolves `SWITCHYARD_ROOT` to an address (the first the resolver
    /// gives).
    ///
    /// # Errors
    /// [`BootstrapError::NoRoot`] when it is not set,
    /// [`BootstrapError::ResolveRoot`] when the host does not resolve.
    pub fn root_addr(&self) -> Result<SocketAddr, BootstrapError> {
        let root = self.root.as_deref().ok_or(BootstrapError::NoRoot)?;
        let resolve_err = |source| BootstrapError::ResolveRoot {
            root: root.to_owned(),
            source,
        };
        root.to_socket_addrs()
            .map_err(resolve_err)?
            .next()
            .ok_or_else(|| {
                resolve_err(io::Error::new(
                    io::ErrorKind::NotFound,
                    "the resolver gave no address",
                ))
            })
    }
}

/// Ends the whole job through PMIx when this process was started by a PMIx
/// server and takes rank and size from it (as [`RankInfo::from_env`]
/// decides; the `pmix` feature): `PMIx_Abort` with `status` and `message`.
/// Returns whether it did; `false` without PMIx, where the caller ends the
/// job its own way. The caller still exits with `status`.
///
/// # Errors
/// [`BootstrapError::Pmix`] when PMIx cannot be reached or refuses;
/// [`BootstrapError::EnvBadValue`] for a bad `SWITCHYARD_PMIX`.
pub fn pmix_abort(status: i32, message: &str) -> Result<bool, BootstrapError> {
    let mut env = Env {
        lookup: |k: &str| std::env::var_os(k),
    };
    if !RankInfo::pmix_wanted(&mut env)? {
        return Ok(false);
    }
    #[cfg(feature = "pmix")]
    crate::pmix::abort(status, message)?;
    let _ = (status, message);
    Ok(true)
}

/// The node id of a host: a hash of its hostname and boot id. PEs with the
/// same node id can share memory.
pub fn node_id_from(hostname: &str, boot_id: &str) -> u64 {
    fnv1a(&[
        b"node",
        hostname.trim().as_bytes(),
        boot_id.trim().as_bytes(),
    ])
}

/// This host's node id: [`node_id_from`] the hostname
/// (`/proc/sys/kernel/hostname`, else `/etc/hostname`) and
/// `/proc/sys/kernel/random/boot_id` (empty where it cannot be read).
///
/// # Errors
/// [`BootstrapError::NodeId`] when no hostname can be read.
pub fn node_id_here() -> Result<u64, BootstrapError> {
    const HOSTNAME: &str = "/proc/sys/kernel/hostname";
    let hostname = match std::fs::read_to_string(HOSTNAME) {
        Ok(h) if !h.trim().is_empty() => h,
        first => match std::fs::read_to_string("/etc/hostname") {
            Ok(h) if !h.trim().is_empty() => h,
            _ => {
                return Err(BootstrapError::NodeId {
                    path: HOSTNAME,
                    source: first.err().unwrap_or_else(|| {
                        io::Error::new(io::ErrorKind::InvalidData, "the hostname is empty")
                    }),
                });
            }
        },
    };
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    Ok(node_id_from(&hostname, &boot_id))
}

#[cfg(test)]
mod test;
