#!/bin/sh
# A stand-in for `claude -p --model sonnet`: reads the scoped prompt on stdin, answers with entries.
cat >/dev/null
cat <<'JSON'
Here are the entries:
```json
{"entries": [
  {"area": "Conventions", "concept": "Backoff policy", "definition": "The shared retry rule for network calls: 3 attempts, 200 ms base, doubling, full jitter.", "aliases": ["retry policy"], "relations": ["Sync worker"], "source": "conversation 2026-11-30"},
  {"area": "Architecture", "concept": "Sync worker", "definition": "Background job that mirrors uploads to cold storage every night.", "aliases": [], "relations": ["Backoff policy"], "source": "conversation 2026-11-30"}
]}
```
JSON
