#!/usr/bin/env python3
"""A kill -9 campaign over resume: a chain of 60 stages with a sub-workflow of 6 stages in the
middle; each trial runs it, kills the engine (SIGKILL) at random points, resumes (and resumes
the resume), sometimes starts two resumes at once, until a run completes. A stage is
*recorded* once a killed run's record says it finished (run.json `succeeded`, or a line of its
items.jsonl for an inner stage); a start of a recorded stage afterwards is a re-run. Prints
kills, resumes, concurrent resumes refused and re-runs of recorded stages (the target is 0).

  python3 benches/kill_campaign.py [BINARY] [TRIALS]
"""
import json, os, random, signal, subprocess, sys, tempfile, time

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/debug/stagegraph")
TRIALS = int(sys.argv[2]) if len(sys.argv) > 2 else 5

def workflows(root):
    os.makedirs(f"{root}/lib/workflows")
    inner = ['[workflow]\ndescription = "inner"\n']
    for i in range(6):
        after = f'after = ["i{i-1}"]\n' if i else ""
        inner.append(f"[stages.i{i}]\n{after}shell = \"echo start s30/i{i} >> ran.txt; sleep 0.05; printf i{i}\"\n")
    open(f"{root}/lib/workflows/inner.toml", "w").write("\n".join(inner))
    outer = ['[workflow]\ndescription = "chain"\n']
    for n in range(60):
        after = f'after = ["s{n-1}"]\n' if n else ""
        if n == 30:
            outer.append(f"[stages.s{n}]\n{after}workflow = \"inner\"\n")
        else:
            outer.append(f"[stages.s{n}]\n{after}shell = \"echo start s{n} >> ran.txt; sleep 0.05; printf s{n}\"\n")
    open(f"{root}/lib/workflows/chain.toml", "w").write("\n".join(outer))

def starts(root):
    try:
        return [l.split(" ", 1)[1] for l in open(f"{root}/ran.txt").read().splitlines() if l.startswith("start ")]
    except FileNotFoundError:
        return []

def recorded(root):
    done = set()
    runs = f"{root}/state/runs"
    for run in os.listdir(runs) if os.path.isdir(runs) else []:
        try:
            record = json.load(open(f"{runs}/{run}/run.json"))
            done |= {s for s, v in record["stages"].items() if v.get("status") == "succeeded" and s != "s30"}
        except (OSError, ValueError, KeyError):
            pass
        try:
            for line in open(f"{runs}/{run}/artifacts/items.jsonl"):
                try:
                    entry = json.loads(line)
                    if entry.get("whole"):
                        done.add(entry["stage"])
                except ValueError:
                    pass
        except OSError:
            pass
    return done

def main():
    totals = dict(kills=0, resumes=0, refused=0, reruns=0, completed=0)
    for trial in range(TRIALS):
        root = tempfile.mkdtemp(prefix="killcamp-")
        workflows(root)
        args = [BIN, "-L", "lib", "--state-dir", "state"]
        command = args + ["run", "chain"]
        for attempt in range(40):
            before = recorded(root)
            seen = len(starts(root))
            concurrent = attempt > 0 and random.random() < 0.3
            p = subprocess.Popen(command, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            q = subprocess.Popen(command, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) if concurrent else None
            time.sleep(random.uniform(0.2, 2.5))
            ended = p.poll() is not None
            if not ended:
                p.send_signal(signal.SIGKILL)
                totals["kills"] += 1
            p.wait()
            if q is not None:
                _, err = q.communicate(timeout=600) if q.poll() is not None else (None, None)
                if q.poll() is None:
                    q.send_signal(signal.SIGKILL); q.wait(); totals["kills"] += 1
                elif err and b"being resumed by another engine" in err or (err and b"still running" in err):
                    totals["refused"] += 1
            later = starts(root)[seen:]
            totals["reruns"] += sum(1 for s in later if s in before)
            if ended and p.returncode == 0:
                totals["completed"] += 1
                break
            command = args + ["resume", "last"]
            totals["resumes"] += 1
        print(f"trial {trial}: {json.dumps(totals)}", flush=True)
    print(json.dumps(totals))

main()
