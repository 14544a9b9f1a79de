#!/usr/bin/env bash
# Build the release binary with profile-guided optimization (PGO), for the host.
#
#   bash scripts/pgo-build.sh            # -> target/pgo/release/stagegraph
#
# Three steps, all from this checkout:
#   1. an instrumented release build (`-Cprofile-generate`) in target/pgo-train;
#   2. training: the overhead benchmark at 1,000 stages (check, plan, dry-runs, full runs,
#      no-op reruns of the three shapes, the template stages, `check` of the shipped
#      workflows) and the shipped workflows' test cases, all run by the instrumented binary;
#   3. the profiles merged by llvm-profdata, and the release build (`-Cprofile-use`) in
#      target/pgo.
# A profile never leaves target/: it is made from the code it optimizes, each time.
#
# Needs llvm-profdata of the toolchain's own LLVM: `rustup component add llvm-tools`. Without
# it the script says so and exits 3, building nothing (the caller builds without a profile).
# Release binaries for Linux x86_64 are built this way (.github/workflows/release.yml); the
# overhead benchmark measures this binary when it can build it (benches/overhead.rs).
#
# Environment: CARGO (the cargo to run), PGO_TRAIN_SIZE (stages a training workflow has;
# default 1000), PGO_BENCH_EXE (the overhead benchmark's executable, already built; default
# `cargo bench` builds it).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo="${CARGO:-cargo}"
say() { printf 'pgo-build: %s\n' "$*" >&2; }

sysroot="$(rustc --print sysroot)"
host="$(rustc -vV | sed -n 's/^host: //p')"
profdata="$sysroot/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
  profdata="$(command -v llvm-profdata || true)"
fi
if [ -z "$profdata" ] || [ ! -x "$profdata" ]; then
  say "llvm-profdata not found (rustup component add llvm-tools); no profile-guided build"
  exit 3
fi
# The profile's format is LLVM's: the merger must be the compiler's own LLVM major version.
llvm_of_rustc="$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')"
# (An llvm-profdata of LLVM 14 and older answers `merge --version`, not `--version`.)
llvm_of_profdata="$({ "$profdata" --version 2>/dev/null || "$profdata" merge --version 2>/dev/null || true; } \
  | sed -n 's/.*LLVM version \([0-9]*\).*/\1/p' | head -1)"
if [ "$llvm_of_rustc" != "$llvm_of_profdata" ]; then
  say "$profdata is LLVM ${llvm_of_profdata:-of unknown version}, rustc LLVM $llvm_of_rustc; no profile-guided build"
  exit 3
fi

root="$PWD/target"
raw="$root/pgo-train/profiles"
rm -rf "$raw"
mkdir -p "$raw"

say "1/3 instrumented build (target/pgo-train)"
RUSTFLAGS="-Cprofile-generate=$raw" "$cargo" build --release --locked --bin stagegraph \
  --target-dir "$root/pgo-train"
trained="$root/pgo-train/release/stagegraph"

say "2/3 training: the overhead benchmark at ${PGO_TRAIN_SIZE:-1000} stages, the shipped workflows' tests"
train=(--sizes "${PGO_TRAIN_SIZE:-1000}" --runs 1)
if [ -n "${PGO_BENCH_EXE:-}" ]; then
  STAGEGRAPH_BIN="$trained" "$PGO_BENCH_EXE" "${train[@]}" >/dev/null
else
  STAGEGRAPH_BIN="$trained" "$cargo" bench --locked --bench overhead -- "${train[@]}" >/dev/null
fi
"$trained" test workflows/ >/dev/null

profile="$root/pgo/stagegraph.profdata"
mkdir -p "$root/pgo"
"$profdata" merge -o "$profile.new" "$raw"
# The profile's hash in the flags: a new profile is a new build, never a stale one reused.
digest="$(sha256sum "$profile.new" | cut -c1-16)"
mv "$profile.new" "$root/pgo/stagegraph-$digest.profdata"
find "$root/pgo" -maxdepth 1 -name 'stagegraph-*.profdata' ! -name "stagegraph-$digest.profdata" -delete

say "3/3 release build with the profile (target/pgo)"
RUSTFLAGS="-Cprofile-use=$root/pgo/stagegraph-$digest.profdata" "$cargo" build --release --locked \
  --bin stagegraph --target-dir "$root/pgo"
say "built $root/pgo/release/stagegraph"
