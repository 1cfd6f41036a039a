#!/usr/bin/env bash
# Installs what switchyard needs on a fresh Debian machine (run as root, or with
# sudo available). Idempotent: what is already there is skipped.
#
#   system packages   build tools, pkg-config, git, curl (apt-get); for the verbs
#                     driver libibverbs-dev, cmake, libclang-dev, libnl-3-dev,
#                     libnl-route-3-dev; for the PMIx bootstrap and the launcher
#                     tests libpmix-dev, openmpi-bin, slurmd, slurmctld,
#                     slurm-client, munge
#   Rust              stable with rustfmt and clippy (rustup; installed if absent)
#   optional          the thumbv7em-none-eabihf target (no_std build check), the
#                     MSRV toolchain (rust-version in Cargo.toml), a nightly
#                     toolchain with miri (cargo-fuzz, miri), cargo-fuzz
#
# Optional parts that cannot be installed are reported and skipped; the test
# script says which checks it skipped because of them.
set -uo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup] %s\n' "$*"; }
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi

# apt_need WHAT PACKAGE...: installs those of the packages that are missing
# (WHAT says what for), or exits saying so.
apt_need() {
  command -v apt-get >/dev/null 2>&1 || return 0
  local what=$1 need=() p
  shift
  for p in "$@"; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
  done
  [ ${#need[@]} -eq 0 ] && return 0
  log "apt-get install ${need[*]}${what:+ ($what)}"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null \
    || { log "apt-get failed${what:+ ($what)}"; exit 1; }
}

apt_need "" build-essential pkg-config git curl ca-certificates iproute2 python3

# The verbs driver: the ibverbs-sys build runs cmake over its vendored
# rdma-core and bindgen (libclang) over verbs.h, and links Debian's
# libibverbs; without libibverbs-dev it fails looking for
# infiniband/verbs_api.h.
apt_need "RDMA verbs build dependencies" libibverbs-dev cmake libclang-dev libnl-3-dev libnl-route-3-dev pkg-config

# Real launchers: the PMIx bootstrap (the `pmix` feature: bindgen over
# pmix.h, linked to libpmix; built by clippy --all-features), Open MPI's
# mpirun (.ci/launchers.sh) and a single-node Slurm with munge
# (.ci/slurm.sh) to run the C tests under.
apt_need "PMIx bootstrap, mpirun, Slurm" libpmix-dev openmpi-bin slurmd slurmctld slurm-client munge

if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  log "installing Rust (rustup, stable)"
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c rustfmt,clippy || { log "rustup failed"; exit 1; }
  export PATH="$HOME/.cargo/bin:$PATH"
fi

if command -v rustup >/dev/null 2>&1; then
  rustup component add rustfmt clippy >/dev/null 2>&1 || log "could not add rustfmt/clippy components"
  rustup target list --installed 2>/dev/null | grep -q thumbv7em-none-eabihf \
    || rustup target add thumbv7em-none-eabihf >/dev/null 2>&1 \
    || log "thumbv7em-none-eabihf target unavailable: the bare-metal no_std build will be skipped"
  msrv=$(grep -m1 '^rust-version' Cargo.toml 2>/dev/null | cut -d'"' -f2)
  if [ -n "$msrv" ] && ! rustup toolchain list | grep -q "^$msrv"; then
    rustup toolchain install "$msrv" --profile minimal >/dev/null 2>&1 \
      || log "could not install the MSRV toolchain $msrv: the MSRV check will be skipped"
  fi
  if rustup toolchain list | grep -q '^nightly'; then
    rustup component add --toolchain nightly miri rust-src >/dev/null 2>&1 || log "miri unavailable on nightly"
  else
    rustup toolchain install nightly --profile minimal -c miri,rust-src >/dev/null 2>&1 \
      || log "no nightly toolchain: fuzzing uses RUSTC_BOOTSTRAP=1 on stable, miri is skipped"
  fi
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
  log "cargo install cargo-fuzz"
  cargo install cargo-fuzz --locked -q >/dev/null 2>&1 || log "cargo-fuzz could not be installed: the fuzz smoke will be skipped"
fi
log "done"
