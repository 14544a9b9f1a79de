#!/usr/bin/env bash
# The main job, offline: the shipped `context-update` workflow run as a Claude Code Stop hook on a
# real-shaped transcript, with the two model aliases answered by local scripts.
#
# STAGEGRAPH_BIN names a binary to use instead of building the release one.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if [ -n "${STAGEGRAPH_BIN:-}" ]; then
  bin="$STAGEGRAPH_BIN"
else
  echo "== building stagegraph (release; the first build takes several minutes, cargo shows its progress)"
  cargo build --release --manifest-path "$root/Cargo.toml"
  bin="$root/target/release/stagegraph"
fi
project="$(mktemp -d "${TMPDIR:-/tmp}/stagegraph-demo.XXXXXX")"
# The hook keeps its run records out of the project, under $XDG_STATE_HOME/stagegraph/: here a
# folder beside the project, so the demo leaves nothing in your own state folder.
export XDG_STATE_HOME="$project.state"
export CLAUDE_PROJECT_DIR="$project"
cp -r "$here/CLAUDE.md" "$here/stagegraph.toml" "$here/models" "$here/transcript.jsonl" "$project/"
# The model scripts by absolute path: the hook runs wherever the session is.
sed -i.orig "s#\"models/#\"$project/models/#" "$project/stagegraph.toml" && rm -f "$project/stagegraph.toml.orig"
mkdir -p "$project/src"
cd "$project/src"
payload=$(printf '{"session_id":"demo","transcript_path":"%s/transcript.jsonl","cwd":"%s/src","hook_event_name":"Stop","stop_hook_active":false}' "$project" "$project")
echo "== first run (the hook fires after a turn; the session is in src/, the project root is \$CLAUDE_PROJECT_DIR)"
printf '%s' "$payload" | "$bin" run context-update --inputs-json -
echo "== .roc/rocket/lexicon.md"
cat "$project/.roc/rocket/lexicon.md"
echo "== .roc/rocket/context-gate-state.json (one cursor per transcript)"
cat "$project/.roc/rocket/context-gate-state.json"
echo "== second run on the same transcript, by hand (the writer restates what the lexicon says)"
"$bin" run context-update --input "transcript_path=$project/transcript.jsonl" --input manual=true
echo "== what the project holds (the records are in $XDG_STATE_HOME/stagegraph/)"
(cd "$project" && find . -type f | sort)
echo "== run history"
"$bin" runs
echo "(project left in $project)"
