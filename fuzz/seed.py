#!/usr/bin/env python3
"""Builds fuzz/corpus/<target>/ from what the project ships: the workflows, templates and schemas,
and the test fixtures. Run from the repository root; it replaces the corpus folders it writes.
The inputs are named by a hash of their bytes, so a rerun on the same files changes nothing."""

import glob
import hashlib
import json
import os
import shutil
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")
MAX = 64 * 1024


def files(*patterns):
    out = []
    for pattern in patterns:
        out.extend(sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True)))
    return out


def read(path):
    with open(path, "rb") as f:
        return f.read()


def walk_strings(value, key=None):
    """(key, string) for every string in a TOML document."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from walk_strings(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from walk_strings(v, key)
    elif isinstance(value, str):
        yield key, value


seeds = {name: set() for name in [
    "workflow", "expression", "template", "shell", "schema", "duration", "transcript",
    "markdown", "reply", "config", "registry", "cache", "records"]}

tomls = files("workflows/*.toml", "tests/fixtures/**/*.toml")
for path in tomls:
    data = read(path)
    seeds["workflow"].add(data)
    try:
        doc = tomllib.loads(data.decode())
    except Exception:
        continue
    if "models" in doc:
        seeds["config"].add(data)
    for key, text in walk_strings(doc):
        raw = text.encode()
        if key in ("if", "exit_if", "foreach", "that", "assert", "when"):
            seeds["expression"].add(raw)
        if key in ("timeout", "stale_after", "ttl", "retry_backoff", "debounce", "max_age"):
            seeds["duration"].add(raw)
        if key == "shell":
            seeds["shell"].add(raw)
        if "{{" in text or "{%" in text:
            seeds["template"].add(raw)
            # The inside of each {{ }} is an expression too.
            rest = text
            while "{{" in rest and "}}" in rest.split("{{", 1)[1]:
                inner, rest = rest.split("{{", 1)[1].split("}}", 1)
                seeds["expression"].add(inner.strip().encode())

for path in files("templates/**/*", "tests/fixtures/**/*.j2"):
    if os.path.isfile(path):
        seeds["template"].add(read(path))
for path in files("schemas/**/*.json", "tests/fixtures/**/*.json"):
    data = read(path)
    try:
        doc = json.loads(data)
    except Exception:
        continue
    if isinstance(doc, dict) and ("type" in doc or "$schema" in doc or "properties" in doc):
        seeds["schema"].add(data)
for path in files("tests/fixtures/**/*.jsonl"):
    seeds["transcript"].add(read(path))
    seeds["registry"].add(read(path))
for path in files("tests/fixtures/**/*.json"):
    seeds["registry"].add(read(path))
for path in files("tests/fixtures/**/*.md", "templates/**/*.md"):
    seeds["markdown"].add(read(path))

# Workflows that bring other files (`#%% <path>` starts one, relative to the project folder):
# sub-workflow cycles by path, through two files and back to the input itself, and by name.
seeds["workflow"].update([
    b'[stages.start]\nworkflow = "subflows/ping.toml"\n'
    b'#%% subflows/ping.toml\n[stages.call]\nworkflow = "subflows/pong.toml"\n'
    b'#%% subflows/pong.toml\n[stages.call]\nworkflow = "./subflows/ping.toml"\n',
    b'[stages.me]\nworkflow = "library/workflows/fuzz.toml"\n',
    b'[stages.start]\nworkflow = "ping"\n'
    b'#%% library/workflows/ping.toml\n[stages.call]\nworkflow = "pong"\n'
    b'#%% library/workflows/pong.toml\n[stages.call]\nworkflow = "ping"\n',
    b'[stages.start]\nworkflow = "subflows/missing.toml"\n\n[stages.next]\n'
    b'command = ["echo", "{{ stages.start.output.x }}"]\n',
])

seeds["duration"].update(b"0 300s 10m 1h30m 7d 1w 500ms 2h 90s 1w2d3h4m5s6ms".split())
seeds["reply"].update([
    b'{"update": false, "reason": "nothing new"}',
    b'Here it is:\n```json\n{"a": [1, 2, {"b": null}]}\n```\nDone.',
    b'```\n{"x": "y"}\n```',
    b'Some text {"nested": {"deep": [true, false]}} after',
    b'```json\n{"unterminated": [1, 2\n```',
    b'[1, 2, 3]',
])
seeds["expression"].update([b"}}e", b"%}x", b"inputs.a == 1 and not stages.b.output.c",
                            b"stages.gate.output.items | length > 2", b"range(3) | list"])
seeds["template"].update([b"}}e", b"echo {{ }}e }}", b"{% for x in inputs.list %}{{ x }}{% endfor %}"])
seeds["shell"].update([b"cat <<EOF\n{{ inputs.unsafe }}\nEOF\n", b"printf '%s' '{{ inputs.word }}'",
                       b"cat <<'EOF'\n{{ inputs.word }}\nEOF\n", b"echo \"$(echo {{ inputs.unsafe }})\""])
seeds["config"].update([
    b'[models.fast]\nprovider = "command"\ncommand = ["cat"]\ntimeout = "30s"\nmax_concurrency = 2\n',
    b'[models.api]\nprovider = "anthropic"\nmodel = "claude-haiku"\nretries = 2\nprompt_cache = true\n'
    b'price = { input = 1.0, output = 5.0 }\n',
    b'[models.local]\nprovider = "openai"\nbase_url = "http://127.0.0.1:8080/v1"\nmodel = "m"\n'
    b'api_key_env = "K"\nmax_tokens = 100\n',
    b'[models.r]\nprovider = "replay"\ndir = "recordings"\n',
    b'[models.haiku]\nprovider = "claude"\nmodel = "haiku"\ntools = ["Read"]\n',
    b'[models.m]\nprovider = "bogus"\n',
])
seeds["cache"].update([
    b'{"id":"a1","fingerprint":"f","sha256":"' + hashlib.sha256(b'{"x":1}').hexdigest().encode()
    + b'","stored_at":"2026-11-30T00:00:00.000Z","output":{"x":1}}\n',
    b'{"id":"a1","fingerprint":"f","sha256":"bad","stored_at":"2026-11-30T00:00:00.000Z","output":1}\n{"id":"a2"',
])
seeds["records"].update([
    json.dumps({"run_id": "r1", "workflow": "w", "status": "running", "inputs": {},
                "started_at": "2026-11-30T00:00:00.000Z", "cwd": ".", "files": [],
                "stages": {"a": {"status": "running", "duration_ms": 0}},
                "holder": {"pid": 1, "started": 1, "host": "elsewhere"}}).encode(),
    b'{"stage":"a","fingerprint":"f","sha256":"s","output":[1,2]}\n{"stage":"a","index":0,"fingerprint":"f","output":"x"}\n',
    b'{"stage":"b","item":3,"pid":1,"started":0,"host":"h"}\n{"stage":"b","pid":"x"}\n',
])

# A real cache file and a real run record, from a run of the built binary when there is one.
binary = os.environ.get("STAGEGRAPH_BIN", os.path.join(ROOT, "target", "debug", "stagegraph"))
if os.path.exists(binary):
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as work:
        with open(os.path.join(work, "w.toml"), "w") as f:
            f.write('[workflow]\ndescription = "d"\n\n'
                    '[stages.a]\nshell = "echo 7"\noutput = { format = "json" }\ncache = true\n\n'
                    '[stages.b]\nforeach = "[1, 2, 3]"\nshell = "echo {{ item }}"\ncache = { ttl = "1h" }\n'
                    'after = ["a"]\n')
        for _ in range(2):
            subprocess.run([binary, "--state-dir", "state", "run", "w.toml", "--quiet"], cwd=work,
                           check=True, capture_output=True)
        state = os.path.join(work, "state")
        seeds["cache"].add(read(os.path.join(state, "cache", "w.jsonl")))
        for run in sorted(os.listdir(os.path.join(state, "runs"))):
            folder = os.path.join(state, "runs", run)
            for name in ["run.json", "events.jsonl", "artifacts/outputs.jsonl",
                         "artifacts/items.jsonl", "artifacts/processes.jsonl"]:
                if os.path.exists(os.path.join(folder, name)):
                    seeds["records"].add(read(os.path.join(folder, name)))

for name, inputs in seeds.items():
    folder = os.path.join(CORPUS, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    for data in sorted(inputs):
        if len(data) > MAX:
            continue
        digest = hashlib.sha256(data).hexdigest()[:16]
        with open(os.path.join(folder, digest), "wb") as f:
            f.write(data)
    print(f"{name}: {len(os.listdir(folder))}")
