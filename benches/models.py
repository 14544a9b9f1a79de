#!/usr/bin/env python3
"""A foreach of 1,000 prompt stages against a loopback OpenAI-compatible server that answers
each request after 100 ms: stagegraph at max_concurrency 16 beside the floor (1,000 x 0.1 s / 16)
and beside the script a user would write instead (asyncio, the official `openai` SDK, a
semaphore of 16); then the same with the server answering 5% of requests with 429 and
`retry-after: 1`. Prints a Markdown table.

    cargo build --release
    pip install openai          # for the script; its row is left out without it
    python3 benches/models.py [--items 1000] [--delay 0.1] [--concurrency 16] [--bin PATH]

Every request's body is checked for the model and the item's prompt, so a row cannot pass by
answering nothing.
"""

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Stub:
    """The OpenAI-compatible server: /v1/chat/completions after `delay` seconds; with
    `limit_every` N, every Nth request is answered 429 with retry-after: 1 instead."""

    def __init__(self, delay, limit_every=0):
        self.delay = delay
        self.limit_every = limit_every
        self.lock = threading.Lock()
        self.requests = 0
        self.limited = 0
        self.bad = 0
        self.prompts = set()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with stub.lock:
                    stub.requests += 1
                    n = stub.requests
                    limited = stub.limit_every and n % stub.limit_every == 0
                    if limited:
                        stub.limited += 1
                    prompt = (body.get("messages") or [{}])[-1].get("content", "")
                    if body.get("model") != "bench" or not prompt.startswith("item "):
                        stub.bad += 1
                if limited:
                    out = b'{"error": {"type": "rate_limit_error", "message": "slow down"}}'
                    self.send_response(429)
                    self.send_header("retry-after", "1")
                else:
                    time.sleep(stub.delay)
                    with stub.lock:
                        stub.prompts.add(prompt)
                    out = json.dumps({
                        "id": "c", "object": "chat.completion", "created": 0, "model": "bench",
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": "ok " + prompt}}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
                    }).encode()
                    self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        ThreadingHTTPServer.daemon_threads = True
        ThreadingHTTPServer.request_queue_size = 256
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/v1" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def run_stagegraph(binary, stub, items, concurrency, retries):
    work = tempfile.mkdtemp(prefix="stagegraph-bench-")
    try:
        with open(os.path.join(work, "stagegraph.toml"), "w") as f:
            f.write(
                '[models.bench]\nprovider = "openai"\nbase_url = "%s"\nmodel = "bench"\n'
                "max_concurrency = %d\nretries = %d\n" % (stub.url, concurrency, retries)
            )
        with open(os.path.join(work, "bench.toml"), "w") as f:
            f.write(
                "[inputs.n]\ntype = \"integer\"\ndefault = %d\n\n"
                "[stages.each]\nforeach = \"range(inputs.n)\"\n"
                'prompt = { inline = "item {{ item }}" }\nmodel = "bench"\n' % items
            )
        env = dict(os.environ, HOME=work, XDG_CONFIG_HOME=os.path.join(work, "config"))
        env.pop("STAGEGRAPH_CONFIG", None)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(
            [binary, "--state-dir", os.path.join(work, "state"), "run", "bench.toml", "--quiet"],
            cwd=work, env=env, capture_output=True, text=True,
        )
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        shown = subprocess.run(
            [binary, "--state-dir", os.path.join(work, "state"), "runs", "show", "last", "--json"],
            cwd=work, env=env, capture_output=True, text=True,
        )
        record = json.loads(shown.stdout)
        stage = record["stages"]["each"]
        failed = stage.get("failed_items", 0) + (0 if stage["status"] == "succeeded" else 1)
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
        return {
            "wall": wall,
            "cpu": cpu,
            "failed": failed if done.returncode == 0 else max(failed, 1),
            "calls": record["usage"]["model_calls"],
            "retries": record["usage"].get("retries", 0),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def sdk_script(url, items, concurrency):
    """What a user would write instead: the official SDK, a semaphore, gather."""
    import openai

    client = openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=5)
    semaphore = asyncio.Semaphore(concurrency)
    failed = 0

    async def one(i):
        nonlocal failed
        async with semaphore:
            try:
                reply = await client.chat.completions.create(
                    model="bench", messages=[{"role": "user", "content": "item %d" % i}]
                )
                assert reply.choices[0].message.content == "ok item %d" % i
            except Exception as error:  # noqa: BLE001 - counted, not hidden
                failed += 1
                print("sdk call %d failed: %s" % (i, error), file=sys.stderr)

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(items)))
    wall = time.perf_counter() - started
    await client.close()
    return {"wall": wall, "failed": failed}


def run_sdk(stub, items, concurrency):
    """The script in a process of its own, as a user would run it (not sharing the stub's
    interpreter lock)."""
    try:
        import openai  # noqa: F401
    except ImportError:
        return None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--sdk-client", stub.url,
         "--items", str(items), "--concurrency", str(concurrency)],
        capture_output=True, text=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        return {"wall": float("nan"), "cpu": float("nan"), "failed": items}
    result = json.loads(done.stdout)
    result["cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--delay", type=float, default=0.1)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "stagegraph"))
    parser.add_argument("--sdk-client", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sdk_client:
        print(json.dumps(asyncio.run(sdk_script(args.sdk_client, args.items, args.concurrency))))
        return
    args.bin = os.path.abspath(args.bin)
    if not os.path.exists(args.bin):
        sys.exit("no %s: run `cargo build --release` first" % args.bin)
    floor = args.items * args.delay / args.concurrency
    rows = []

    def check(stub, expected):
        if stub.bad:
            sys.exit("the stub saw %d request(s) without the model or an item's prompt" % stub.bad)
        if len(stub.prompts) != expected:
            sys.exit("the stub answered %d distinct prompts, not %d" % (len(stub.prompts), expected))

    stub = Stub(args.delay)
    result = run_stagegraph(args.bin, stub, args.items, args.concurrency, retries=3)
    check(stub, args.items)
    rows.append(("stagegraph, max_concurrency %d" % args.concurrency, result, stub.requests, 0))
    stub.close()

    stub = Stub(args.delay)
    sdk = run_sdk(stub, args.items, args.concurrency)
    if sdk is not None:
        check(stub, args.items)
        rows.append(("Python asyncio + openai SDK, semaphore %d" % args.concurrency, sdk, stub.requests, 0))
    stub.close()

    stub = Stub(args.delay, limit_every=20)
    result = run_stagegraph(args.bin, stub, args.items, args.concurrency, retries=5)
    check(stub, args.items)
    rows.append(("stagegraph, 5% answered 429 + retry-after: 1", result, stub.requests, stub.limited))
    stub.close()

    stub = Stub(args.delay, limit_every=20)
    sdk = run_sdk(stub, args.items, args.concurrency)
    if sdk is not None:
        check(stub, args.items)
        rows.append(("Python asyncio + openai SDK, 5% answered 429", sdk, stub.requests, stub.limited))
    stub.close()

    print("%d prompt stages, stub answering after %d ms; floor %d x %.2f s / %d = %.2f s\n"
          % (args.items, args.delay * 1000, args.items, args.delay, args.concurrency, floor))
    print("| run | wall | x floor | client CPU | requests | 429s | failed |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, result, requests, limited in rows:
        print("| %s | %.2f s | %.2fx | %.2f s | %d | %d | %d |"
              % (name, result["wall"], result["wall"] / floor, result["cpu"], requests, limited,
                 result["failed"]))
    print("\nload average while measuring: %.1f (%d cores)"
          % (os.getloadavg()[0], os.cpu_count() or 0))


if __name__ == "__main__":
    main()
