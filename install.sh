#!/bin/sh
# Install a prebuilt stagegraph binary from its release.
#
#   curl -fsSL https://github.com/stagegraph/stagegraph/releases/latest/download/install.sh | sh
#   sh install.sh [--to DIR] [--version VERSION] [--target TARGET]
#
# Picks the archive for this OS and CPU (uname), downloads it and its .sha256 with curl or
# wget, refuses it unless the checksum matches (sha256sum or shasum -a 256), and puts the
# binary in ~/.local/bin (or --to DIR).
#
# Environment:
#   STAGEGRAPH_INSTALL_BASE_URL  the folder holding the archives (a mirror); default the
#                                GitHub release of the version
#   STAGEGRAPH_VERSION           the version to install (as --version)
#   STAGEGRAPH_INSTALL_DIR       where to install (as --to)
#
# Exit status: 0 installed; 3 no archive for this platform or version (build from source:
# cargo install --locked stagegraph); 1 any other failure (a checksum mismatch, a failed
# download, a bad argument). Nothing is installed unless everything succeeded.
set -eu

# The version this script installs by default: the release it is published with.
version="${STAGEGRAPH_VERSION:-0.1.0}"
repository="https://github.com/stagegraph/stagegraph"
dir="${STAGEGRAPH_INSTALL_DIR:-${HOME:-}/.local/bin}"
target=""

say() {
  printf 'stagegraph install: %s\n' "$*" >&2
}

fail() {
  say "$*"
  exit 1
}

usage() {
  cat <<'USAGE'
Install a prebuilt stagegraph binary.

Usage: install.sh [--to DIR] [--version VERSION] [--target TARGET]

  --to DIR           install into DIR (default ~/.local/bin, or $STAGEGRAPH_INSTALL_DIR)
  --version VERSION  the release to install (default the script's own, or $STAGEGRAPH_VERSION)
  --target TARGET    the archive's target triple, instead of this machine's
                     (e.g. x86_64-unknown-linux-musl, a static binary for any x86_64 Linux)

$STAGEGRAPH_INSTALL_BASE_URL names a mirror: the folder holding the archives.
USAGE
}

while [ "$#" -gt 0 ]; do
  case "$1" in
    --to | --version | --target)
      [ "$#" -ge 2 ] || fail "$1 needs a value (see --help)"
      case "$1" in
        --to) dir="$2" ;;
        --version) version="$2" ;;
        --target) target="$2" ;;
      esac
      shift 2
      ;;
    --to=*) dir="${1#--to=}"; shift ;;
    --version=*) version="${1#--version=}"; shift ;;
    --target=*) target="${1#--target=}"; shift ;;
    -h | --help) usage; exit 0 ;;
    *) fail "unknown argument '$1' (see --help)" ;;
  esac
done
version="${version#v}"
[ -n "$version" ] || fail "an empty --version"
[ -n "$dir" ] || fail "no folder to install into: HOME is not set; give --to DIR"

# Whether the C library here is musl (Alpine and the like), where the glibc build cannot run.
is_musl() {
  if command -v ldd >/dev/null 2>&1 && ldd --version 2>&1 | grep -qi musl; then
    return 0
  fi
  for loader in /lib/ld-musl-*; do
    [ -e "$loader" ] && return 0
  done
  return 1
}

# The target triple of the archive for this machine, or exit 3 naming what is not covered.
detect_target() {
  os=$(uname -s 2>/dev/null || echo unknown)
  arch=$(uname -m 2>/dev/null || echo unknown)
  case "$arch" in
    x86_64 | amd64) cpu=x86_64 ;;
    aarch64 | arm64) cpu=aarch64 ;;
    *) cpu="" ;;
  esac
  found=""
  case "$os" in
    Linux)
      if [ "$cpu" = x86_64 ]; then
        if is_musl; then found=x86_64-unknown-linux-musl; else found=x86_64-unknown-linux-gnu; fi
      elif [ "$cpu" = aarch64 ] && ! is_musl; then
        found=aarch64-unknown-linux-gnu
      fi
      ;;
    Darwin)
      # A shell under Rosetta says x86_64 on Apple silicon: the native build is the better one.
      if [ "$cpu" = x86_64 ] && [ "$(sysctl -n sysctl.proc_translated 2>/dev/null || echo 0)" = 1 ]; then
        cpu=aarch64
      fi
      [ -n "$cpu" ] && found="$cpu-apple-darwin"
      ;;
  esac
  if [ -z "$found" ]; then
    libc=""
    [ "$os" = Linux ] && is_musl && libc=" (musl)"
    say "no prebuilt stagegraph for $os $arch$libc."
    say "Prebuilt binaries cover Linux x86_64 (glibc or musl), Linux aarch64 (glibc) and macOS x86_64 and arm64."
    say "Build it from source instead: cargo install --locked stagegraph"
    exit 3
  fi
  echo "$found"
}

if [ -z "$target" ]; then
  target=$(detect_target) || exit "$?"
fi
case "$target" in
  x86_64-unknown-linux-gnu | aarch64-unknown-linux-gnu | x86_64-unknown-linux-musl | x86_64-apple-darwin | aarch64-apple-darwin) ;;
  *)
    say "no prebuilt stagegraph for the target '$target'; the archives are for x86_64-unknown-linux-gnu, aarch64-unknown-linux-gnu, x86_64-unknown-linux-musl, x86_64-apple-darwin and aarch64-apple-darwin."
    say "Build it from source instead: cargo install --locked stagegraph"
    exit 3
    ;;
esac

base="${STAGEGRAPH_INSTALL_BASE_URL:-$repository/releases/download/v$version}"
base="${base%/}"
name="stagegraph-$version-$target"
archive="$name.tar.gz"

if command -v curl >/dev/null 2>&1; then
  downloader=curl
elif command -v wget >/dev/null 2>&1; then
  downloader=wget
else
  fail "neither curl nor wget is installed; install one of them and run this again"
fi
if command -v sha256sum >/dev/null 2>&1; then
  hasher="sha256sum"
elif command -v shasum >/dev/null 2>&1; then
  hasher="shasum -a 256"
else
  fail "neither sha256sum nor shasum is installed, so the download cannot be verified"
fi
command -v tar >/dev/null 2>&1 || fail "tar is not installed"

work=$(mktemp -d 2>/dev/null || mktemp -d -t stagegraph-install)
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Download $1 into $2. An HTTP error (no such release or archive) exits 3, anything else 1.
download() {
  if [ "$downloader" = curl ]; then
    status=0
    curl --fail --silent --show-error --location --retry 3 --output "$2" "$1" || status=$?
    [ "$status" = 0 ] && return 0
    [ "$status" = 22 ] && missing "$1"
  else
    status=0
    wget --quiet --tries=3 --output-document="$2" "$1" || status=$?
    [ "$status" = 0 ] && return 0
    [ "$status" = 8 ] && missing "$1"
  fi
  fail "could not download $1 ($downloader exited $status)"
}

missing() {
  say "no stagegraph $version for $target at $1 (is there a release $version with this archive?)"
  say "Build it from source instead: cargo install --locked stagegraph"
  exit 3
}

say "downloading stagegraph $version for $target from $base"
download "$base/$archive" "$work/$archive"
download "$base/$archive.sha256" "$work/$archive.sha256"

expected=$(cut -d ' ' -f 1 < "$work/$archive.sha256" | tr 'A-F' 'a-f')
case "$expected" in
  *[!0-9a-f]* | "") fail "$archive.sha256 holds no SHA-256 checksum; nothing was installed" ;;
esac
[ "${#expected}" = 64 ] || fail "$archive.sha256 holds no SHA-256 checksum; nothing was installed"
actual=$(cd "$work" && $hasher "$archive" | cut -d ' ' -f 1)
if [ "$actual" != "$expected" ]; then
  say "checksum mismatch for $archive: expected $expected, got $actual."
  say "The download is corrupt or was tampered with; nothing was installed."
  exit 1
fi

tar -C "$work" -xzf "$work/$archive" || fail "$archive is not a gzip tar archive; nothing was installed"
binary="$work/$name/stagegraph"
[ -f "$binary" ] || fail "$archive holds no $name/stagegraph; nothing was installed"

mkdir -p "$dir" || fail "cannot create $dir"
# Copied beside its place, then renamed over it: a running stagegraph is never half-written.
cp "$binary" "$dir/.stagegraph.install.$$" || fail "cannot write into $dir"
chmod 755 "$dir/.stagegraph.install.$$"
mv -f "$dir/.stagegraph.install.$$" "$dir/stagegraph" || {
  rm -f "$dir/.stagegraph.install.$$"
  fail "cannot write $dir/stagegraph"
}
say "installed stagegraph $version to $dir/stagegraph"

case ":${PATH:-}:" in
  *":$dir:"*) ;;
  *)
    say "$dir is not on your PATH. Add it, in your shell's startup file (~/.bashrc, ~/.zshrc or ~/.profile):"
    # shellcheck disable=SC2016 # the line to paste names $PATH itself
    printf '\n  export PATH="%s:$PATH"\n\n' "$dir" >&2
    ;;
esac
