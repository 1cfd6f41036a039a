//! The job secret ([`JobSecret`]: where it comes from, the keys derived from
//! it) and the HMAC-SHA256 challenge-response the rendezvous uses.
//!
//! The secret itself never leaves the process: every use goes through a key
//! derived for one purpose and one job ([`JobSecret::derive_key`]), and every
//! proof is a MAC over both sides' fresh nonces, so a recorded proof is worth
//! nothing on another connection.

use std::{
    fmt,
    fs::File,
    io::{self, Read},
    net::SocketAddr,
    os::unix::fs::{MetadataExt, OpenOptionsExt},
    path::{Path, PathBuf},
};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::{env::vars, error::BootstrapError};

/// Bytes of a challenge nonce.
pub const NONCE_LEN: usize = 16;
/// Bytes of a MAC (HMAC-SHA256).
pub const MAC_LEN: usize = 32;
/// The fewest secret bytes accepted (128 bits).
pub const MIN_SECRET_BYTES: usize = 16;
/// The most secret bytes accepted.
pub const MAX_SECRET_BYTES: usize = 64;
/// Bytes of a secret the launcher makes (256 bits).
const GENERATED_BYTES: usize = 32;
/// The most bytes read from a secret file.
const MAX_SECRET_FILE: u64 = 4096;

/// The purpose string of the bootstrap's key ([`JobSecret::derive_key`]).
pub const PURPOSE_BOOTSTRAP: &str = "bootstrap";
/// The purpose string of the TCP rails' key.
pub const PURPOSE_TCP: &str = "tcp rail";

/// Where a [`JobSecret`] came from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SecretOrigin {
    /// Made here from the OS generator ([`JobSecret::generate`]).
    Generated,
    /// `SWITCHYARD_JOB_SECRET`, set by `switchyard run`.
    Env,
    /// The file named by `SWITCHYARD_JOB_SECRET_FILE`.
    File(PathBuf),
    /// Rank 0's, from the PMIx key-value store (the `pmix` feature).
    Pmix,
    /// No secret: derived from the job id alone, which anyone who can guess
    /// the job id can do. Only taken for a root on a loopback address
    /// ([`crate::RankInfo::job_secret`]).
    JobIdOnly,
}

/// The job's shared secret (at least 128 bits). Its bytes are shown nowhere:
/// `Debug` prints only where it came from.
#[derive(Clone, PartialEq, Eq)]
pub struct JobSecret {
    bytes: Vec<u8>,
    origin: SecretOrigin,
}

impl fmt::Debug for JobSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobSecret")
            .field("origin", &self.origin)
            .field("bytes", &"<redacted>")
            .finish()
    }
}

fn invalid(from: impl Into<String>, reason: impl Into<String>) -> BootstrapError {
    BootstrapError::SecretInvalid {
        from: from.into(),
        reason: reason.into(),
    }
}

impl JobSecret {
    /// A fresh secret of 256 bits from the operating system's generator.
    ///
    /// # Errors
    /// [`BootstrapError::SecretInvalid`] when the generator fails.
    pub fn generate() -> Result<JobSecret, BootstrapError> {
        let mut bytes = vec![0u8; GENERATED_BYTES];
        getrandom::fill(&mut bytes)
            .map_err(|e| invalid("the OS random generator", e.to_string()))?;
        Ok(JobSecret {
            bytes,
            origin: SecretOrigin::Generated,
        })
    }

    /// The secret as hex digits, for a child's environment
    /// (`SWITCHYARD_JOB_SECRET`). Never print it.
    pub fn to_env_value(&self) -> String {
        let mut s = String::with_capacity(2 * self.bytes.len());
        for b in &self.bytes {
            s.push(char::from(HEX[usize::from(b >> 4)]));
            s.push(char::from(HEX[usize::from(b & 15)]));
        }
        s
    }

    /// Parses `SWITCHYARD_JOB_SECRET`'s form: 32 to 128 hex digits, an even
    /// count. `from` names where the text came from in errors, which never
    /// contain the text.
    ///
    /// # Errors
    /// [`BootstrapError::SecretInvalid`].
    pub fn from_hex(from: &str, text: &str) -> Result<JobSecret, BootstrapError> {
        let t = text.trim();
        let (min, max) = (2 * MIN_SECRET_BYTES, 2 * MAX_SECRET_BYTES);
        if t.len() < min || t.len() > max || !t.len().is_multiple_of(2) {
            return Err(invalid(
                from,
                format!(
                    "{} characters, expected an even count of {min} to {max} hex digits",
                    t.len()
                ),
            ));
        }
        let digit = |c: u8| char::from(c).to_digit(16);
        let mut bytes = Vec::with_capacity(t.len() / 2);
        for pair in t.as_bytes().chunks_exact(2) {
            match (digit(pair[0]), digit(pair[1])) {
                // Both below 16: the byte fits.
                (Some(h), Some(l)) => bytes.push(u8::try_from(h * 16 + l).unwrap_or(0)),
                _ => return Err(invalid(from, "not hex digits")),
            }
        }
        Ok(JobSecret {
            bytes,
            origin: SecretOrigin::Env,
        })
    }

    /// Reads a secret file (as [`JobSecret::from_hex`]). The file must be a
    /// regular file owned by this user and readable by nobody else (mode
    /// `0600` or `0400`); it is opened without blocking, checked on the open
    /// descriptor, and read up to 4 KiB.
    ///
    /// # Errors
    /// [`BootstrapError::SecretInvalid`] naming the path and what is wrong.
    pub fn from_file(path: &Path) -> Result<JobSecret, BootstrapError> {
        let from = || format!("{}={}", vars::JOB_SECRET_FILE, path.display());
        let io_err = |e: io::Error| invalid(from(), e.to_string());
        let file = File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
            .map_err(io_err)?;
        let meta = file.metadata().map_err(io_err)?;
        if !meta.file_type().is_file() {
            return Err(invalid(from(), "not a regular file"));
        }
        if meta.uid() != euid() {
            return Err(invalid(
                from(),
                format!("owned by uid {}, not by this user", meta.uid()),
            ));
        }
        if meta.mode() & 0o077 != 0 {
            return Err(invalid(
                from(),
                format!(
                    "mode {:04o}: group or others may access it (chmod 600)",
                    meta.mode() & 0o7777
                ),
            ));
        }
        let mut text = String::new();
        file.take(MAX_SECRET_FILE)
            .read_to_string(&mut text)
            .map_err(io_err)?;
        let mut s = JobSecret::from_hex(&from(), &text)?;
        s.origin = SecretOrigin::File(path.to_owned());
        Ok(s)
    }

    /// The weak stand-in for a job without a secret: derived from the job
    /// id, which is no secret. See [`crate::RankInfo::job_secret`] for when
    /// it is taken.
    pub fn from_job_id(job_id: u64) -> JobSecret {
        JobSecret {
            bytes: mac(b"switchyard job id only", &[&job_id.to_le_bytes()]).to_vec(),
            origin: SecretOrigin::JobIdOnly,
        }
    }

    /// A secret received as bytes (rank 0's, from PMIx), checked for
    /// length. `from` names where it came from in errors.
    #[cfg_attr(not(feature = "pmix"), allow(dead_code))]
    pub(crate) fn from_bytes(
        from: &str,
        bytes: Vec<u8>,
        origin: SecretOrigin,
    ) -> Result<JobSecret, BootstrapError> {
        if bytes.len() < MIN_SECRET_BYTES || bytes.len() > MAX_SECRET_BYTES {
            return Err(invalid(
                from,
                format!(
                    "{} bytes, expected {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES}",
                    bytes.len()
                ),
            ));
        }
        Ok(JobSecret { bytes, origin })
    }

    /// The secret's bytes, for a store that keeps them from others (PMIx's).
    /// Never print them.
    #[cfg_attr(not(feature = "pmix"), allow(dead_code))]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Where the secret came from.
    pub fn origin(&self) -> &SecretOrigin {
        &self.origin
    }

    /// The key for one `purpose` (e.g. [`PURPOSE_TCP`]) of job `job_id`:
    /// HMAC-SHA256 under the secret of the purpose and the job id. A key
    /// found out for one purpose or job says nothing of the others.
    pub fn derive_key(&self, job_id: u64, purpose: &str) -> [u8; MAC_LEN] {
        mac(
            &self.bytes,
            &[
                b"switchyard key 1",
                purpose.as_bytes(),
                &job_id.to_le_bytes(),
            ],
        )
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[allow(unsafe_code)]
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn mac_over(key: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    // HMAC takes a key of any length.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
    for p in parts {
        // Each part with its length: no two part lists give the same bytes.
        m.update(&u64::try_from(p.len()).unwrap_or(u64::MAX).to_le_bytes());
        m.update(p);
    }
    m
}

/// HMAC-SHA256 under `key` over `parts`, each preceded by its length.
pub(crate) fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; MAC_LEN] {
    mac_over(key, parts).finalize().into_bytes().into()
}

/// Whether `tag` is the MAC of `parts` under `key`, compared in constant
/// time.
pub(crate) fn verify(key: &[u8], parts: &[&[u8]], tag: &[u8]) -> bool {
    mac_over(key, parts).verify_slice(tag).is_ok()
}

/// A fresh nonce from the OS generator.
pub(crate) fn nonce() -> Result<[u8; NONCE_LEN], BootstrapError> {
    let mut n = [0u8; NONCE_LEN];
    getrandom::fill(&mut n).map_err(|e| invalid("the OS random generator", e.to_string()))?;
    Ok(n)
}

/// Whether a root at `addr` is reachable only from this host.
pub(crate) fn is_loopback(addr: SocketAddr) -> bool {
    addr.ip().is_loopback()
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn hex_round_trip_and_refusals_never_echo_the_text() {
        let s = JobSecret::generate().unwrap();
        let hex = s.to_env_value();
        assert_eq!(hex.len(), 64);
        let back = JobSecret::from_hex("X", &hex).unwrap();
        assert_eq!(back.derive_key(1, "a"), s.derive_key(1, "a"));
        assert_ne!(s.derive_key(1, "a"), s.derive_key(2, "a"));
        assert_ne!(s.derive_key(1, "a"), s.derive_key(1, "b"));
        let short = "ab".repeat(15);
        let e = JobSecret::from_hex("X", &short).unwrap_err().to_string();
        assert!(!e.contains(&short), "{e}");
        let bad = "zz".repeat(16);
        let e = JobSecret::from_hex("X", &bad).unwrap_err().to_string();
        assert!(!e.contains(&bad) && e.contains("hex"), "{e}");
        assert!(!format!("{s:?}").contains(&hex));
        assert!(format!("{s:?}").contains("redacted"));
    }

    #[test]
    fn macs_bind_every_part_and_compare() {
        let k = [7u8; 32];
        let t = mac(&k, &[b"ab", b"c"]);
        assert!(verify(&k, &[b"ab", b"c"], &t));
        assert!(!verify(&k, &[b"a", b"bc"], &t));
        assert!(!verify(&[8u8; 32], &[b"ab", b"c"], &t));
        assert!(!verify(&k, &[b"ab", b"c"], &t[..31]));
    }

    #[test]
    fn secret_file_must_be_private_and_regular() {
        use std::{fs, os::unix::fs::PermissionsExt};
        let dir = std::env::temp_dir().join(format!("sy-secret-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let f = dir.join("secret");
        fs::write(&f, format!("{}\n", "5a".repeat(16))).unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o644)).unwrap();
        let e = JobSecret::from_file(&f).unwrap_err().to_string();
        assert!(e.contains("0644"), "{e}");
        fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
        let s = JobSecret::from_file(&f).unwrap();
        assert_eq!(s.origin(), &SecretOrigin::File(f.clone()));
        let e = JobSecret::from_file(&dir).unwrap_err().to_string();
        assert!(
            e.contains("not a regular file") || e.contains("directory"),
            "{e}"
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
