#!/usr/bin/env python3
"""`stagegraph test` replaying 100 cases of a 10-stage workflow (5 templates, 5 prompts).

    cargo build --release && python3 benches/test_runner.py [--cases 100] [--runs 5]

Records the cases once through a command model (`tr a-z A-Z`), then times the offline replay of
all of them (`--jobs 2`) and prints the median wall time, the time per case and the CPU time
(user + sys, which moves less than wall time on a shared machine). It asserts that
every case passes and that the replay asked the model nothing.
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("STAGEGRAPH_BIN", os.path.join(ROOT, "target", "release", "stagegraph"))


def workflow():
    lines = ['[inputs.name]\ntype = "string"\n']
    previous = None
    for i in range(10):
        reads = f"{{{{ stages.s{i - 1}.output | trim }}}}" if previous else "{{ inputs.name }}"
        if i % 2 == 0:
            lines.append(f'[stages.s{i}]\ntemplate = {{ inline = "step {i}: {reads}" }}\n')
        else:
            lines.append(f'[stages.s{i}]\nprompt = {{ inline = "step {i} of {reads}" }}\nmodel = "shout"\n')
        previous = i
    lines.append('[outputs]\nlast = "{{ stages.s9.output | trim }}"\n')
    return "\n".join(lines)


def tests(cases):
    out = ['workflow = "ten.toml"\n']
    for i in range(cases):
        out.append(f'[[case]]\nname = "case {i}"\ninputs = {{ name = "n{i}" }}\n'
                   f'[case.expect]\nassert = ["\'N{i}\' in outputs.last"]\n')
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="stagegraph-bench-") as dir:
        os.makedirs(os.path.join(dir, "models"))
        with open(os.path.join(dir, "models", "shout.sh"), "w") as f:
            f.write("tr a-z A-Z\n")
        with open(os.path.join(dir, "stagegraph.toml"), "w") as f:
            f.write('[models.shout]\nprovider = "command"\ncommand = ["sh", "models/shout.sh"]\n')
        with open(os.path.join(dir, "ten.toml"), "w") as f:
            f.write(workflow())
        with open(os.path.join(dir, "ten.test.toml"), "w") as f:
            f.write(tests(args.cases))
        env = dict(os.environ, NO_COLOR="1")
        recorded = subprocess.run([BIN, "test", "--record", "--jobs", "2"], cwd=dir, env=env,
                                  capture_output=True, text=True)
        if recorded.returncode != 0:
            sys.exit(f"recording failed:\n{recorded.stdout}{recorded.stderr}")
        times = []
        cpu = []
        for _ in range(args.runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            out = subprocess.run([BIN, "test", "--jobs", "2"], cwd=dir, env=env,
                                 capture_output=True, text=True)
            times.append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            last = out.stdout.strip().splitlines()[-1]
            if out.returncode != 0 or f"{args.cases} passed, 0 failed" not in last \
                    or "model calls made: 0" not in last:
                sys.exit(f"the replay did not pass:\n{out.stdout}{out.stderr}")
        median = statistics.median(times)
        print(f"{args.cases} cases x 10 stages (5 prompts replayed), --jobs 2: "
              f"median {median:.3f} s of {args.runs} runs ({min(times):.3f}-{max(times):.3f} s), "
              f"{median / args.cases * 1000:.1f} ms per case; CPU (user + sys) median "
              f"{statistics.median(cpu):.3f} s, {statistics.median(cpu) / args.cases * 1000:.1f} ms per case")


if __name__ == "__main__":
    main()
