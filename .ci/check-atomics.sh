#!/usr/bin/env bash
# Atomics in the core and the drivers go through `switchyard_core::sync` (the loom
# shim). Fails, naming the lines, if anything else names `core::sync::atomic` or
# `std::sync::atomic` there.
set -euo pipefail
cd "$(dirname "$0")/.."
hits=$(grep -rnE '(^|[^_[:alnum:]])(core|std)::sync::atomic' core/src drivers/*/src --include='*.rs' | grep -v '^core/src/sync.rs:' || true)
if [ -n "$hits" ]; then
  echo "raw atomics outside core/src/sync.rs (use switchyard_core::sync::atomic):"
  echo "$hits"
  exit 1
fi
echo "atomics: all through the sync shim"
