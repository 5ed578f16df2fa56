"""How long one client's file-system-heavy requests stall everybody else.

A victim thread sends ``Status`` requests back to back (the cheapest request: its
latency is the event loop's responsiveness) while an attacker, in turn:

- ``idle``: does nothing (the baseline of the same run);
- ``normal-cwd``: opens new sessions in new projects with an ordinary cwd (first
  append ``written``: directories and file created, synced);
- ``deep-cwd``: the same with a 4096-byte cwd of ~2,000 existing levels;
- ``agent-scan``: appends to a subagent whose existing file is ``--agent-mb`` MB
  (its uuids are scanned first);
- ``agent-meta``: sends SetAgentMeta (each one a write, fsync, rename, fsync).

For each phase: the victim's median and worst Status latency, and the attacker's
median request time. Run it against another checkout (``--pythonpath`` puts a
tree with ``sessiond/{protocol,daemon,client}`` first on the daemon's path) for a
before/after in the same run.

    python bench/hostile_paths.py [--runs 3] [--agent-mb 64] [--pythonpath DIR]

Prints a table (median of runs) and writes bench/results/hostile_paths.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import benchlib

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sessiond.client import Client  # noqa: E402
from sessiond.wire import messages as m  # noqa: E402
from tests.helpers import make_deep, remove_deep  # noqa: E402

HERE = Path(__file__).resolve().parent
PHASES = ("idle", "normal-cwd", "deep-cwd", "agent-scan", "agent-meta")


def entry(text: str, **extra) -> bytes:
    return json.dumps({"type": "user", "uuid": str(uuid.uuid4()), "message": {"role": "user", "content": text},
                       **extra}).encode()


class Victim(threading.Thread):
    def __init__(self, sock: Path) -> None:
        super().__init__(daemon=True)
        self.client = Client(sock, autostart=False, timeout=60).connect()
        self.samples: list[float] = []
        self.running = True
        self.recording = threading.Event()

    def run(self) -> None:
        while self.running:
            t = time.perf_counter()
            self.client.status()
            if self.recording.is_set():
                self.samples.append(time.perf_counter() - t)


def one_run(args: argparse.Namespace, tmp: Path) -> dict[str, dict[str, float]]:
    root, sock = tmp / "root", tmp / "run" / "s.sock"
    (tmp / "deep").mkdir()
    deep = make_deep(tmp / "deep", 4096)
    sid = str(uuid.uuid4())
    agent_cwd = "/work/bench"
    from sessiond.store.paths import project_dir  # where the daemon will look

    agent_file = project_dir(root, agent_cwd) / sid / "subagents" / "agent-big.jsonl"
    agent_file.parent.mkdir(parents=True)
    pad = "x" * 1000
    with open(agent_file, "wb") as f:
        line = b""
        while f.tell() < args.agent_mb * 1024 * 1024:
            line = entry(pad, isSidechain=True, agentId="big")
            f.write(line + b"\n")
    env = os.environ.copy()
    if args.pythonpath:
        os.environ["PYTHONPATH"] = args.pythonpath
    daemon = benchlib.start_daemon(sock, root)
    os.environ.clear()
    os.environ.update(env)
    out: dict[str, dict[str, float]] = {}
    try:
        victim = Victim(sock)
        victim.start()
        attacker = Client(sock, autostart=False, timeout=120).connect()

        def phase(name: str, request) -> None:
            victim.samples = []
            took = []
            victim.recording.set()
            for i in range(args.requests):
                t = time.perf_counter()
                if request is None:
                    time.sleep(0.01)
                else:
                    attacker.call(request(i))
                took.append(time.perf_counter() - t)
            victim.recording.clear()
            s = sorted(victim.samples) or [0.0]
            out[name] = {"victim_p50_ms": 1000 * statistics.median(s), "victim_max_ms": 1000 * s[-1],
                         "request_ms": 1000 * statistics.median(took)}

        phase("idle", None)
        phase("normal-cwd", lambda i: m.Append(id=attacker.next_id(), session=str(uuid.uuid4()), cwd=f"/work/p{i}-{uuid.uuid4().hex[:6]}",
                                               entries=[entry("hi")], durability="written"))
        phase("deep-cwd", lambda i: m.Append(id=attacker.next_id(), session=str(uuid.uuid4()), cwd=deep,
                                             entries=[entry("hi")], durability="written"))
        scans = [str(uuid.uuid4()) for _ in range(args.requests)]
        for other in scans:  # each request scans a copy: a fresh session per request
            dest = project_dir(root, agent_cwd) / other / "subagents"
            dest.mkdir(parents=True)
            os.link(agent_file, dest / "agent-big.jsonl")
        phase("agent-scan", lambda i: m.Append(id=attacker.next_id(), session=scans[i], cwd=agent_cwd, agent="big",
                                               entries=[entry("more", isSidechain=True, agentId="big")],
                                               durability="written"))
        phase("agent-meta", lambda i: m.SetAgentMeta(id=attacker.next_id(), session=sid, cwd=agent_cwd, agent=f"a{i}",
                                                     meta=b'{"agentType":"bench"}'))
        victim.running = False
        victim.join(timeout=60)
        attacker.close()
        victim.client.close()
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        remove_deep(tmp / "deep")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--agent-mb", type=int, default=64)
    ap.add_argument("--pythonpath", default="", help="a tree to run the daemon from (before/after)")
    ap.add_argument("--out", default=str(HERE / "results" / "hostile_paths.json"))
    args = ap.parse_args()
    runs = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="sd-bench-", dir="/tmp") as tmp:
            runs.append(one_run(args, Path(tmp)))
    table = {p: {k: statistics.median(r[p][k] for r in runs) for k in runs[0][p]} for p in PHASES}
    print(f"{'phase':<12} {'victim p50 ms':>14} {'victim max ms':>14} {'request ms':>11}")
    for p in PHASES:
        row = table[p]
        print(f"{p:<12} {row['victim_p50_ms']:>14.2f} {row['victim_max_ms']:>14.1f} {row['request_ms']:>11.1f}")
    Path(args.out).write_text(json.dumps({"runs": args.runs, "requests": args.requests, "agent_mb": args.agent_mb,
                                          "daemon_from": args.pythonpath or "this checkout", "phases": table}, indent=2))


if __name__ == "__main__":
    sys.exit(main())
