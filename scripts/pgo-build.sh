#!/usr/bin/env bash
# Build the release binary with profile-guided optimization (PGO), for the host.
#
#   bash scripts/pgo-build.sh            # -> target/pgo/release/stagegraph
#
# Four steps, all from this checkout:
#   1. an instrumented release build (`-Cprofile-generate`) in target/pgo-train;
#   2. training: the overhead benchmark at 1,000 stages (check, plan, dry-runs, full runs,
#      no-op reruns of the three shapes, the template stages, `check` of the shipped
#      workflows) and the shipped workflows' test cases, all run by the instrumented binary;
#      and the commands nearly every invocation is (check, plan, a dry-run, a run and its
#      no-op rerun of a workflow of 4,000 stages), which are also profiled apart;
#   3. the profiles merged by llvm-profdata, and the release build (`-Cprofile-use`) in
#      target/pgo;
#   4. the code laid out by use: linked again (the binary's own crate only) with the functions
#      those common commands run first, then the rest of what training ran. A no-op rerun then
#      keeps 3.5-5.5 MB of code resident instead of 7-8 (the kernel maps code 64 KB or more
#      around each page it faults in, so code used together is best placed together). Needs
#      lld, the toolchain's default linker on Linux x86_64; with another the step says so and
#      the binary of step 3 stands.
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
tools="$sysroot/lib/rustlib/$host/bin"
profdata="$tools/llvm-profdata"
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

say "1/4 instrumented build (target/pgo-train)"
RUSTFLAGS="-Cprofile-generate=$raw" "$cargo" build --release --locked --bin stagegraph \
  --target-dir "$root/pgo-train"
trained="$root/pgo-train/release/stagegraph"

# A profile is named by the instrumented binary it came from (and the training size): while
# the code is unchanged, the bench's next run reuses it, and the build with it is the one cargo
# already made. Other code, another name, a new build: never a stale profile reused.
profile="$root/pgo/stagegraph-$(sha256sum "$trained" | cut -c1-16)-$size.profdata"
# The functions the common commands ran, one mangled name a line.
common="${profile%.profdata}.common"

# The functions a profile saw run, by their mangled names, one a line (a local function's name
# comes prefixed with its file and `;`).
covered() {
  "$profdata" show --all-functions --covered "$1" | sed 's/^.*;//'
}

# The commands nearly every invocation is, profiled into $2: check, plan, a dry-run, the run, its
# no-op rerun and a dry-run after it, on a chain of command stages large enough (4,000 stages,
# 330 KB) to be read in parts on several threads, as a large workflow is
# (engine/load/split.rs), which the benchmark's 1,000 stages are not.
common_runs() {
  local bin="$1" out="$2" dir
  rm -rf "$out"
  mkdir -p "$out"
  dir="$(mktemp -d)"
  mkdir "$dir/out"
  {
    printf '[workflow]\ndescription = "layout training"\n'
    for i in $(seq 0 3999); do
      printf '\n[stages.s%d]\nshell = "echo %d > out/%d.txt"\ncache = true\n' "$i" "$i" "$i"
      [ "$i" -gt 0 ] && printf 'after = ["s%d"]\n' "$((i - 1))"
    done
  } >"$dir/chain.toml"
  local runs=(
    "check chain.toml"
    "plan chain.toml"
    "run chain.toml --dry-run --jobs 2"
    "run chain.toml --jobs 2"
    "run chain.toml --jobs 2"
    "run chain.toml --dry-run --jobs 2"
  )
  for args in "${runs[@]}"; do
    # shellcheck disable=SC2086 # each entry is a list of plain words
    (cd "$dir" && LLVM_PROFILE_FILE="$out/%m.profraw" "$bin" $args >/dev/null 2>&1)
  done
  rm -rf "$dir"
}

# The functions the common commands ran ($root/pgo-train/common), listed in $common.
list_common() {
  "$profdata" merge -o "$common.profdata" "$root/pgo-train/common"
  covered "$common.profdata" >"$common.new"
  rm "$common.profdata"
  mv "$common.new" "$common"
}

# A profile without its list of the common commands' functions (made by an earlier version of
# this script) is made again: the common commands are part of its training.
if [ -s "$profile" ] && [ -s "$common" ]; then
  say "2/4 training: done already for this build ($profile)"
else
  say "2/4 training: the overhead benchmark at $size stages, the shipped workflows' tests"
  rm -rf "$raw"
  mkdir -p "$raw" "$root/pgo"
  train=(--sizes "$size" --runs 1)
  if [ -n "${PGO_BENCH_EXE:-}" ]; then
    STAGEGRAPH_BIN="$trained" "$PGO_BENCH_EXE" "${train[@]}" >/dev/null
  else
    STAGEGRAPH_BIN="$trained" "$cargo" bench --locked --bench overhead -- "${train[@]}" >/dev/null
  fi
  "$trained" test workflows/ >/dev/null
  say "2/4 training: the common commands on a large workflow, also profiled apart"
  common_runs "$trained" "$root/pgo-train/common"
  list_common
  "$profdata" merge -o "$profile.new" "$raw" "$root/pgo-train/common"
  mv "$profile.new" "$profile"
  find "$root/pgo" -maxdepth 1 -name 'stagegraph-*' ! -name "${profile##*/}" \
    ! -name "${common##*/}" -delete
fi

flags="-Cprofile-use=$profile"
built="$root/pgo/release/stagegraph"
order="${profile%.profdata}.order"
layout=("-Clink-arg=-Wl,--symbol-ordering-file=$order" "-Clink-arg=-Wl,--no-warn-symbol-ordering")
if [ -s "$order" ]; then
  # Laid out already for this profile: the same build, which cargo has made.
  say "3/4 release build with the profile, 4/4 laid out by use (target/pgo): done already"
  RUSTFLAGS="$flags" "$cargo" rustc --release --locked --bin stagegraph \
    --target-dir "$root/pgo" -- "${layout[@]}"
  say "built $built"
  exit 0
fi

say "3/4 release build with the profile (target/pgo)"
RUSTFLAGS="$flags" "$cargo" build --release --locked --bin stagegraph --target-dir "$root/pgo"

say "4/4 the code laid out by use: linked again in that order"
# The order names the linked symbols themselves, read back from this build (see
# scripts/code-order.sh); the linking again changes nothing before the link, so the names stay.
nm="$tools/llvm-nm"
[ -x "$nm" ] || nm="$(command -v nm || true)"
if [ -z "$nm" ]; then
  say "no llvm-nm or nm: the code stays as linked"
  say "built $built"
  exit 0
fi
"$nm" --defined-only --numeric-sort "$built" >"$order.symbols"
covered "$profile" >"$order.trained"
bash scripts/code-order.sh "$common" "$order.trained" "$order.symbols" >"$order.new"
rm "$order.symbols" "$order.trained"
mv "$order.new" "$order"
if ! RUSTFLAGS="$flags" "$cargo" rustc --release --locked --bin stagegraph \
  --target-dir "$root/pgo" -- "${layout[@]}"; then
  say "linking in that order failed (a linker without --symbol-ordering-file?): the code stays as linked"
  rm -f "$order"
  RUSTFLAGS="$flags" "$cargo" build --release --locked --bin stagegraph --target-dir "$root/pgo"
fi
say "built $built"
