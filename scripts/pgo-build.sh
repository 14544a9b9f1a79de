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
size="${PGO_TRAIN_SIZE:-1000}"

say "1/3 instrumented build (target/pgo-train)"
RUSTFLAGS="-Cprofile-generate=$raw" "$cargo" build --release --locked --bin stagegraph \
  --target-dir "$root/pgo-train"
trained="$root/pgo-train/release/stagegraph"

# A profile is named by the instrumented binary it came from (and the training size): while
# the code is unchanged, the bench's next run reuses it, and the build with it is the one cargo
# already made. Other code, another name, a new build: never a stale profile reused.
profile="$root/pgo/stagegraph-$(sha256sum "$trained" | cut -c1-16)-$size.profdata"
if [ -s "$profile" ]; then
  say "2/3 training: done already for this build ($profile)"
else
  say "2/3 training: the overhead benchmark at $size stages, the shipped workflows' tests"
  rm -rf "$raw"
  mkdir -p "$raw" "$root/pgo"
  train=(--sizes "$size" --runs 1)
  if [ -n "${PGO_BENCH_EXE:-}" ]; then
    STAGEGRAPH_BIN="$trained" "$PGO_BENCH_EXE" "${train[@]}" >/dev/null
  else
    STAGEGRAPH_BIN="$trained" "$cargo" bench --locked --bench overhead -- "${train[@]}" >/dev/null
  fi
  "$trained" test workflows/ >/dev/null
  "$profdata" merge -o "$profile.new" "$raw"
  mv "$profile.new" "$profile"
  find "$root/pgo" -maxdepth 1 -name 'stagegraph-*.profdata' ! -name "${profile##*/}" -delete
fi

say "3/3 release build with the profile (target/pgo)"
RUSTFLAGS="-Cprofile-use=$profile" "$cargo" build --release --locked --bin stagegraph \
  --target-dir "$root/pgo"
say "built $root/pgo/release/stagegraph"
