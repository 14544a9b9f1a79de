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
answering nothing. The first row is the stub's own ceiling: a client with no library at all on
as many kept-alive connections. "turnaround" is measured by the stub on each kept-alive
connection, from an answer sent to the next request read: the client's own time between two
calls, the stub's delay left out. `--only raw|stagegraph|sdk` (repeatable) runs some rows,
`--no-429` leaves out the rows with 429s.
"""

import argparse
import asyncio
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Stub:
    """The OpenAI-compatible server: /v1/chat/completions after `delay` seconds; with
    `limit_every` N, every Nth request is answered 429 with retry-after: 1 instead.

    One asyncio event loop on a thread of its own serves every connection (kept alive), each
    answer written in one send with TCP_NODELAY: it is not what limits the rows (see
    `--raw-client`, which measures its ceiling). A server that writes the head and the body of
    a response in two sends, as http.server does, waits for the client's delayed ACK (40 ms on
    Linux) on every response."""

    def __init__(self, delay, limit_every=0):
        self.delay = delay
        self.limit_every = limit_every
        self.requests = 0
        self.limited = 0
        self.bad = 0
        self.prompts = set()
        # Per kept-alive connection, from one answer sent to the next request read: what the
        # client spends between two calls on one connection, the stub's delay left out.
        self.turnarounds = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self.serve, "127.0.0.1", 0, backlog=512), self.loop
        ).result()
        self.url = "http://127.0.0.1:%d/v1" % self.server.sockets[0].getsockname()[1]

    async def serve(self, reader, writer):
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        answered = None
        try:
            while True:
                request_line = await reader.readline()
                if not request_line:
                    break
                if answered is not None:
                    self.turnarounds.append(time.perf_counter() - answered)
                headers = {}
                while True:
                    line = await reader.readline()
                    if line in (b"\r\n", b"\n", b""):
                        break
                    name, _, value = line.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                status, out = await self.answer(body)
                writer.write(
                    b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n%s\r\n"
                    % (status, b"OK" if status == 200 else b"Too Many Requests", len(out),
                       b"retry-after: 1\r\n" if status == 429 else b"")
                    + out
                )
                await writer.drain()
                answered = time.perf_counter()
                if headers.get("connection", "").lower() == "close":
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def answer(self, raw):
        body = json.loads(raw or b"{}")
        self.requests += 1
        limited = self.limit_every and self.requests % self.limit_every == 0
        prompt = (body.get("messages") or [{}])[-1].get("content", "")
        if body.get("model") != "bench" or not prompt.startswith("item "):
            self.bad += 1
        if limited:
            self.limited += 1
            return 429, b'{"error": {"type": "rate_limit_error", "message": "slow down"}}'
        await asyncio.sleep(self.delay)
        self.prompts.add(prompt)
        return 200, json.dumps({
            "id": "c", "object": "chat.completion", "created": 0, "model": "bench",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "ok " + prompt}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
        }).encode()

    def turnaround(self):
        """Median and 99th percentile of the client's turnaround, in ms."""
        times = sorted(self.turnarounds)
        if not times:
            return float("nan"), float("nan")
        return times[len(times) // 2] * 1000, times[int(len(times) * 0.99)] * 1000

    def close(self):
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()


async def raw_client(url, items, concurrency):
    """The stub's own ceiling: `concurrency` kept-alive connections sending the same requests
    with no client library at all, each answer read and checked."""
    host, port = url.split("//")[1].split("/")[0].split(":")
    path = "/" + url.split("//")[1].split("/", 1)[1] + "/chat/completions"
    counter = iter(range(items))
    failed = 0

    async def worker():
        nonlocal failed
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in counter:
            body = json.dumps({"model": "bench",
                               "messages": [{"role": "user", "content": "item %d" % i}]}).encode()
            writer.write(b"POST %s HTTP/1.1\r\nhost: %s:%s\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n%s"
                         % (path.encode(), host.encode(), port.encode(), len(body), body))
            await writer.drain()
            status = int((await reader.readline()).split()[1])
            length = 0
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            reply = json.loads(await reader.readexactly(length))
            if status != 200 or reply["choices"][0]["message"]["content"] != "ok item %d" % i:
                failed += 1
        writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {"wall": time.perf_counter() - started, "failed": failed}


def run_client(flag, stub, items, concurrency):
    """A Python client (`--raw-client` or `--sdk-client`) in a process of its own, as a user
    would run it (not sharing the stub's interpreter lock)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, os.path.abspath(__file__), flag, stub.url,
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
    try:
        import openai  # noqa: F401
    except ImportError:
        return None
    return run_client("--sdk-client", stub, items, concurrency)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--delay", type=float, default=0.1)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "stagegraph"))
    parser.add_argument("--sdk-client", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--raw-client", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=["raw", "stagegraph", "sdk"], action="append",
                        help="run only these rows (repeatable); default all")
    parser.add_argument("--no-429", action="store_true", help="leave out the rows with 429s")
    args = parser.parse_args()
    if args.sdk_client:
        print(json.dumps(asyncio.run(sdk_script(args.sdk_client, args.items, args.concurrency))))
        return
    if args.raw_client:
        print(json.dumps(asyncio.run(raw_client(args.raw_client, args.items, args.concurrency))))
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

    wanted = set(args.only or ["raw", "stagegraph", "sdk"])
    for limit_every, retries in ((0, 3),) if args.no_429 else ((0, 3), (20, 5)):
        limited_note = ", 5% answered 429 + retry-after: 1" if limit_every else ""
        if "raw" in wanted and not limit_every:
            stub = Stub(args.delay)
            raw = run_client("--raw-client", stub, args.items, args.concurrency)
            check(stub, args.items)
            raw["turnaround"] = stub.turnaround()
            rows.append(("the stub's ceiling: raw HTTP/1.1, %d kept-alive connections"
                         % args.concurrency, raw, stub.requests, 0))
            stub.close()
        if "stagegraph" in wanted:
            stub = Stub(args.delay, limit_every)
            result = run_stagegraph(args.bin, stub, args.items, args.concurrency, retries)
            result["turnaround"] = stub.turnaround()
            check(stub, args.items)
            rows.append(("stagegraph, max_concurrency %d%s" % (args.concurrency, limited_note),
                         result, stub.requests, stub.limited))
            stub.close()
        if "sdk" in wanted:
            stub = Stub(args.delay, limit_every)
            sdk = run_sdk(stub, args.items, args.concurrency)
            if sdk is not None:
                sdk["turnaround"] = stub.turnaround()
                check(stub, args.items)
                rows.append(("Python asyncio + openai SDK, semaphore %d%s"
                             % (args.concurrency, limited_note), sdk, stub.requests, stub.limited))
            stub.close()

    print("%d prompt stages, stub answering after %d ms; floor %d x %.2f s / %d = %.2f s\n"
          % (args.items, args.delay * 1000, args.items, args.delay, args.concurrency, floor))
    print("| run | wall | x floor | client CPU | turnaround p50 / p99 | requests | 429s | failed |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, result, requests, limited in rows:
        print("| %s | %.2f s | %.2fx | %.2f s | %.1f / %.1f ms | %d | %d | %d |"
              % (name, result["wall"], result["wall"] / floor, result["cpu"],
                 result["turnaround"][0], result["turnaround"][1], requests, limited,
                 result["failed"]))
    print("\nload average while measuring: %.1f (%d cores)"
          % (os.getloadavg()[0], os.cpu_count() or 0))


if __name__ == "__main__":
    main()
