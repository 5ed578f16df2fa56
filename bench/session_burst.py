"""A burst of new files: how long until every one of them has its first entry.

    python bench/session_burst.py [--files 16] [--runs 7] [--baseline HEAD~1]

Agents start together (a team of terminals, a CI fan-out), and a turn's
parallel subagents each get a file of their own at once: every such file and
its missing directories must be made, and their entries synced in their
directories, before the first entry is written. Two shapes:

- ``projects``: ``--files`` client processes, connected and waiting, each
  send the first Append of a new session in a project of its own at the same
  moment;
- ``agents``: one connection sends a session's first entry and one entry for
  each of ``--files`` new agents of it, before reading any answer (a turn
  starting its subagents).

Each at ``written`` and ``durable``. A run is a fresh daemon on a fresh store;
the figure is the time from the go to the last acknowledgement (the burst), and
the median acknowledgement. ``--baseline REV``: that revision's daemon
(``git archive``) in every round too, interleaved, so the ratio compares runs
made on the same machine state. Medians over ``--runs``; writes
``bench/results/session_burst.json``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import benchlib
from append_load import baseline_source, build_lines

from sessiond.client import Client
from sessiond.wire import messages as m

HERE = Path(__file__).resolve().parent


def one_session(sock: str, durability: str, ready: mp.Barrier, go: mp.Event, out: mp.Queue) -> None:
    """A client process: connect, wait for the go, append a new session's first entry."""
    sid = str(uuid.uuid4())
    with Client(sock, autostart=False, timeout=60) as c:
        req = m.Append(id=c.next_id(), session=sid, cwd=f"/burst/{sid}", entries=build_lines(1, 1024, sid),
                       durability=durability)
        ready.wait()
        go.wait()
        c.send(req)
        assert isinstance(c.receive(req.id), m.Appended)
        out.put(time.perf_counter())


def projects_burst(sock: str, durability: str, files: int) -> list[float]:
    ctx = mp.get_context("fork")
    ready, go, out = ctx.Barrier(files + 1), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=one_session, args=(sock, durability, ready, go, out)) for _ in range(files)]
    for p in procs:
        p.start()
    ready.wait()
    time.sleep(0.05)
    t0 = time.perf_counter()
    go.set()
    acks = [out.get(timeout=60) - t0 for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return acks


def agents_burst(sock: str, durability: str, files: int) -> list[float]:
    sid = str(uuid.uuid4())
    with Client(sock, autostart=False, timeout=60) as c:
        reqs = [m.Append(id=c.next_id(), session=sid, cwd="/burst/agents", durability=durability, entries=[one],
                         agent=None if k == 0 else f"a{k}") for k, one in enumerate(build_lines(files + 1, 1024, sid))]
        t0 = time.perf_counter()
        for r in reqs:
            c.send(r)
        acks = []
        for r in reqs:
            assert isinstance(c.receive(r.id), m.Appended)
            acks.append(time.perf_counter() - t0)
    return acks


SHAPES = {"projects": projects_burst, "agents": agents_burst}


def one_run(shape: str, durability: str, files: int, rev: str | None) -> list[float]:
    base = Path(tempfile.mkdtemp(prefix="sdb-burst-", dir="/tmp"))
    os.chmod(base, 0o700)
    sock = base / "run" / "s.sock"
    daemon = benchlib.start_daemon(sock, base / "root", source=baseline_source(rev) if rev else None)
    try:
        return SHAPES[shape](str(sock), durability, files)
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--shapes", default="projects,agents")
    ap.add_argument("--durability", default="written,durable")
    ap.add_argument("--baseline", default="", help="a git revision whose daemon is measured too")
    ap.add_argument("--out", default=str(HERE / "results" / "session_burst.json"))
    args = ap.parse_args()
    daemons = ["this"] + ([f"@{args.baseline}"] if args.baseline else [])
    configs = [(s, d) for s in args.shapes.split(",") for d in args.durability.split(",")]
    samples: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    loads = []
    for run in range(args.runs):
        for shape, durability in configs:
            for name in daemons:
                acks = one_run(shape, durability, args.files, None if name == "this" else name[1:])
                samples.setdefault((shape, durability, name), []).append((max(acks), statistics.median(acks)))
        loads.append(os.getloadavg()[0])
        print(f"round {run + 1}/{args.runs} done, load {loads[-1]:.1f}", flush=True)
    rows = []
    print(f"\n{'shape':9} {'level':8} {'daemon':14} {'burst ms':>9} {'median ack ms':>14} {'burst / baseline':>17}")
    for shape, durability in configs:
        base_burst = None
        for name in reversed(daemons):
            got = samples[(shape, durability, name)]
            burst = statistics.median(b for b, _ in got)
            med = statistics.median(a for _, a in got)
            ratio = burst / base_burst if base_burst and name == "this" else None
            base_burst = burst if name != "this" else base_burst
            rows.append({"shape": shape, "durability": durability, "daemon": name, "files": args.files,
                         "burst_ms": burst * 1e3, "median_ack_ms": med * 1e3, "burst_ratio": ratio,
                         "all_burst_ms": [round(b * 1e3, 2) for b, _ in got]})
            print(f"{shape:9} {durability:8} {name:14} {burst * 1e3:9.2f} {med * 1e3:14.2f} "
                  f"{'' if ratio is None else f'{ratio:.2f}x':>17}")
    print(f"load average (1 min) after each round: {', '.join(f'{x:.1f}' for x in loads)}")
    benchlib.save(args.out, {"machine": {"cpus": os.cpu_count()}, "files": args.files, "runs": args.runs,
                             "baseline": args.baseline or None, "load_avg": loads, "rows": rows})


if __name__ == "__main__":
    main()
