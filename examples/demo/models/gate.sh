#!/bin/sh
# A stand-in for `claude -p --model haiku`: reads the prompt on stdin, answers like the gate would.
cat >/dev/null
printf '%s\n' '{"update": true, "candidates": ["Backoff policy", "Sync worker"]}'
