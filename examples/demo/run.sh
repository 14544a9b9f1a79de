#!/usr/bin/env bash
# The main job, offline: the shipped `context-update` workflow run as a Claude Code Stop hook on a
# real-shaped transcript, with the two model aliases answered by local scripts.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cargo build --quiet --release --manifest-path "$root/Cargo.toml"
bin="$root/target/release/stagegraph"
project="$(mktemp -d "${TMPDIR:-/tmp}/stagegraph-demo.XXXXXX")"
cp -r "$here/CLAUDE.md" "$here/stagegraph.toml" "$here/models" "$here/transcript.jsonl" "$project/"
cd "$project"
payload=$(printf '{"session_id":"demo","transcript_path":"%s/transcript.jsonl","cwd":"%s","hook_event_name":"Stop","stop_hook_active":false}' "$project" "$project")
echo "== first run (the hook fires after a turn)"
printf '%s' "$payload" | "$bin" run context-update --inputs-json -
echo "== .roc/rocket/lexicon.md"
cat .roc/rocket/lexicon.md
echo "== second run on the same transcript"
printf '%s' "$payload" | "$bin" run context-update --inputs-json - --input manual=true
echo "== run history"
"$bin" runs
echo "(project left in $project)"
