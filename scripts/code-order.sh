#!/usr/bin/env bash
# The order to link a binary's functions in, for lld's --symbol-ordering-file: code used
# together placed together (scripts/pgo-build.sh, step 4).
#
#   bash scripts/code-order.sh COMMON TRAINED SYMBOLS > ORDER
#
# COMMON and TRAINED list mangled function names, one a line: what the common commands ran
# and what all of training ran (`llvm-profdata show --covered`). SYMBOLS is `nm
# --defined-only --numeric-sort` of the binary as linked. The order names the binary's own
# symbols: ThinLTO gives a function it shares between modules a `.llvm.<n>` suffix after the
# profile was taken, and lld matches names exactly, so a profiled name stands for its symbol
# with or without one. Printed, each group in address order:
#   1. the functions the common commands ran;
#   2. the code no profile names (not `_ZN`-mangled: the precompiled standard library, C), small
#      and otherwise spread over the whole text;
#   3. the rest of what training ran.
# Functions nothing ran are left out: the linker places them after.
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: code-order.sh COMMON TRAINED SYMBOLS" >&2
  exit 2
fi
awk -v common="$1" -v trained="$2" '
  FILENAME == common { first[$0] = 1; next }
  FILENAME == trained { ran[$0] = 1; next }
  $2 ~ /^[tTwW]$/ {
    name = $3; base = name; sub(/\.llvm\.[0-9]+$/, "", base)
    if (base in first) a[na++] = name
    else if (name !~ /^_ZN/) b[nb++] = name
    else if (base in ran) c[nc++] = name
  }
  END {
    for (i = 0; i < na; i++) print a[i]
    for (i = 0; i < nb; i++) print b[i]
    for (i = 0; i < nc; i++) print c[i]
  }' "$1" "$2" "$3"
