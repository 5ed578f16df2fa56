"""Fairness: a victim client's durable appends while another client floods the
daemon with expensive requests, against the same victim unflooded, same run.

    python bench/fairness.py [--runs 5] [--appends 300] [--kinds list,resend,scan,search]
                             [--sessions 3000] [--scan-files 48] [--scan-mb 5] [--baseline main] [--candidate HEAD]

Each measurement starts a fresh daemon on a fresh copy-free root (the files are
generated once). The victim is one connection appending one ~1 KB entry at a
time with ``durability="durable"`` to its own session and timing each ack. A
flood is one other connection keeping ``--window`` requests in flight:

- ``list``: ``List(all=True)`` over ``--sessions`` sessions;
- ``resend``: ``Append(resend=True)`` of an entry without a uuid to a session
  whose file is 2 MB (each needs its file's 1 MiB tail read);
- ``scan``: ``Open`` of existing ``--scan-mb`` MB transcripts never opened
  before (each needs its uuids scanned);
- ``search``: ``Search(all=True, limit=100)`` of a word every listed session
  holds (each ranks thousands of entries), once the index has caught up.

Per run: the victim's p50 and p99 unflooded (``none``) and under each flood; the
table gives the median over runs of each figure and of the flooded/unflooded
p99 ratio, and the daemon's CPU time (user+sys) over the flood divided by the
flood requests answered meanwhile (the daemon's cost of one, which the
machine's load does not blur the way it does latencies). ``--baseline REV``: the daemon of that revision (``git archive``)
is measured too, interleaved with this one in every run (each against its own
unflooded figure), so a before/after shares the machine's load;
``--candidate REV`` measures that revision as "this" instead of the working
tree (which may then change while it runs). ``--list-cpu``: instead, the
daemon's CPU time per warm List of every session, one write into the listed
project before each (what the flood costs the daemon, free of the latencies'
noise), to bench/results/fairness-list-cpu.json by default. Writes
bench/results/fairness.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import benchlib

from sessiond.client.connection import Client
from sessiond.store.paths import project_dir, session_file
from sessiond.wire import messages as m

HERE = Path(__file__).resolve().parent
CWD = "/home/dev/fair"
FLOOD_CWD = "/home/dev/flood"
FILLER = "x" * 900
SEARCHED = "x*"
"""The flood's query: the word of every entry's text."""


def entry(session: str, **extra) -> bytes:
    body = {"type": "user", "uuid": str(uuid.uuid4()), "parentUuid": None, "sessionId": session, "cwd": CWD,
            "timestamp": "2026-01-01T00:00:00.000Z", "message": {"role": "user", "content": FILLER}, **extra}
    return json.dumps(body, separators=(",", ":")).encode()


def write_session(path: Path, session: str, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    line = entry(session) + b"\n"
    with open(path, "wb") as f:
        for _ in range(max(1, size // len(line))):
            f.write(entry(session) + b"\n")


def generate(root: Path, sessions: int, scan_files: int, scan_mb: float) -> dict:
    """The listing sessions, the resend target and the big files to scan."""
    listed = project_dir(root, CWD)
    for _ in range(sessions):
        sid = str(uuid.uuid4())
        write_session(session_file(listed, sid), sid, 2000)
    flood = project_dir(root, FLOOD_CWD)
    resend = str(uuid.uuid4())
    write_session(session_file(flood, resend), resend, 2 * 1024 * 1024)
    big = []
    for _ in range(scan_files):
        sid = str(uuid.uuid4())
        write_session(session_file(flood, sid), sid, int(scan_mb * 1024 * 1024))
        big.append(sid)
    return {"resend": resend, "big": big}


FLOODER = r"""
import socket, sys, json, os
from sessiond.wire import messages as m
from sessiond.wire.framing import FrameBuffer, encode, decode_response
sock_path, kind, window, spec = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
s = socket.socket(socket.AF_UNIX); s.connect(sock_path)
frames = FrameBuffer(1 << 30)
s.sendall(encode(m.Hello(id=0, protocol_version=m.PROTOCOL_VERSION, client="flooder")))
rid = 0
line = json.dumps({"type": "summary", "summary": "again", "leafUuid": None}).encode()
big = iter(spec["big"])
def request():
    global rid
    rid += 1
    if kind == "list":
        return m.List(id=rid, all=True)
    if kind == "resend":
        return m.Append(id=rid, session=spec["resend"], cwd=spec["cwd"], entries=[line], resend=True)
    if kind == "search":
        return m.Search(id=rid, query=spec["query"], all=True, limit=100)
    sid = next(big, None)
    return None if sid is None else m.Open(id=rid, session=sid, cwd=spec["cwd"])
def ask(req):
    s.sendall(encode(req))
    got = []
    while not got:
        got = frames.feed(s.recv(1 << 22))
    return decode_response(got[0])
outstanding = 1  # the Hello
sent = 0
if kind == "list":  # the flood is of warm Lists (the first one reads every session)
    ask(m.List(id=10**9, all=True))
if kind == "search":  # the flood is of searches of a caught-up index
    while not getattr(ask(m.Search(id=10**9, query=spec["query"], all=True, limit=1)), "caughtUp", False):
        pass
answered = 0
def report(*_):
    print("answered", answered, flush=True)
    os._exit(0)
import signal
signal.signal(signal.SIGTERM, report)
print("ready", flush=True)
while True:
    while outstanding < window + 1:
        req = request()
        if req is None:
            break
        s.sendall(encode(req)); outstanding += 1; sent += 1
    if outstanding == 0:
        break
    data = s.recv(1 << 22)
    if not data:
        break
    for body in frames.feed(data):
        decode_response(body)
        outstanding -= 1
        answered += 1
    if kind == "scan" and outstanding == 0:
        break
s.close()
open(spec["done_file"], "w").close()  # the flood is over (the victim stops)
signal.pause()  # until measured: the count goes out on SIGTERM
"""


def victim(sock: Path, n: int, flooder: subprocess.Popen | None, done: Path) -> list[float]:
    """Latency (ms) of each of ``n`` durable single-entry appends, stopping
    early (after 30) when the flood is over."""
    sid = str(uuid.uuid4())
    out = []
    with Client(sock, autostart=False, timeout=60) as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[entry(sid)], durability="durable"))
        for i in range(n):
            if i >= 30 and flooder is not None and (flooder.poll() is not None or done.exists()):
                break
            req = m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[entry(sid)], durability="durable")
            t = time.perf_counter()
            c.call(req)
            out.append((time.perf_counter() - t) * 1000)
    return out


def measure(root: Path, base: Path, kind: str, spec: dict, appends: int, window: int, source: Path | None) -> dict:
    sock = base / f"run-{kind}" / "s.sock"
    daemon = benchlib.start_daemon(sock, root, source=source)
    done = sock.parent / "flood-done"
    flooder = None
    try:
        if kind != "none":
            flooder = subprocess.Popen(
                [sys.executable, "-c", FLOODER, str(sock), kind, str(window),
                 json.dumps({**spec, "cwd": FLOOD_CWD, "query": SEARCHED, "done_file": str(done)})],
                stdout=subprocess.PIPE, text=True)
            assert flooder.stdout is not None and flooder.stdout.readline().strip() == "ready"
            time.sleep(0.2)  # the flood is under way before the victim starts
        cpu = benchlib.cpu_seconds(daemon.pid)
        lat = victim(sock, appends, flooder, done)
        cpu = benchlib.cpu_seconds(daemon.pid) - cpu
        still_flooding = flooder is None or not done.exists()
        answered = 0
        if flooder is not None:
            flooder.terminate()
            answered = int(flooder.stdout.readline().split()[1])
    finally:
        if flooder is not None:
            flooder.kill()
            flooder.wait()
        with Client(sock, autostart=False) as c:
            c.shutdown()
        daemon.wait(timeout=60)
    return {"p50": benchlib.pct(lat, 50), "p99": benchlib.pct(lat, 99), "max": max(lat), "samples": len(lat),
            "flooded_throughout": still_flooding, "flood_answered": answered, "daemon_cpu_s": cpu}


def list_cpu(root: Path, base: Path, codes: dict[str, Path | None], runs: int, lists: int = 100) -> dict[str, list[float]]:
    """The daemon's CPU ms per warm ``List(all)``, alone on the machine's
    clock: ``lists`` rounds of a ``written`` append into the listed project then
    a List, less the same appends without Lists; per code, per run."""
    out: dict[str, list[float]] = {code: [] for code in codes}
    for r in range(runs):
        for code, source in codes.items():
            sock = base / f"cpu-{code}-{r}" / "s.sock"
            daemon = benchlib.start_daemon(sock, root, source=source)
            try:
                with Client(sock, autostart=False, timeout=120) as c:
                    c.call(m.List(id=c.next_id(), all=True))
                    sid = str(uuid.uuid4())

                    def append() -> None:
                        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[entry(sid)], durability="written"))  # noqa: B023 (called within this iteration)

                    t0 = benchlib.cpu_seconds(daemon.pid)
                    for _ in range(lists):
                        append()
                        c.call(m.List(id=c.next_id(), all=True))
                    t1 = benchlib.cpu_seconds(daemon.pid)
                    for _ in range(lists):
                        append()
                    t2 = benchlib.cpu_seconds(daemon.pid)
                    c.shutdown()
            finally:
                daemon.wait(timeout=60)
            out[code].append(((t1 - t0) - (t2 - t1)) * 1000 / lists)
            print(f"run {r + 1} {code:6s} daemon CPU per List {out[code][-1]:.2f} ms", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--appends", type=int, default=300)
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--kinds", default="list,resend,scan,search")
    ap.add_argument("--sessions", type=int, default=3000)
    ap.add_argument("--scan-files", type=int, default=64)
    ap.add_argument("--scan-mb", type=float, default=5.0)
    ap.add_argument("--baseline", default=None, help="a git revision whose daemon is measured too, interleaved")
    ap.add_argument("--candidate", default=None, help="a git revision measured as 'this' instead of the working tree")
    ap.add_argument("--list-cpu", action="store_true", help="only the daemon's CPU per List, per code")
    ap.add_argument("--out", default=str(HERE / "results" / "fairness.json"))
    args = ap.parse_args()
    if args.list_cpu and args.out == ap.get_default("out"):
        args.out = str(HERE / "results" / "fairness-list-cpu.json")
    kinds = ["none", *[k for k in args.kinds.split(",") if k]]
    base = Path(tempfile.mkdtemp(prefix="sdfair-", dir="/tmp"))
    os.chmod(base, 0o700)
    try:
        codes: dict[str, Path | None] = {"this": None}
        if args.candidate:
            codes = {"this": benchlib.baseline_tree(args.candidate, base / "candidate")}
        if args.baseline:
            codes = {args.baseline: benchlib.baseline_tree(args.baseline, base / "baseline"), **codes}
        root = base / "root"
        if args.list_cpu:
            generate(root, args.sessions, 0, 0)
            cpu = list_cpu(root, base, codes, args.runs)
            print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")
            for code, ms in cpu.items():
                print(f"| {code} | {statistics.median(ms):.2f} ms |")
            benchlib.save(args.out, {"args": vars(args), "list_cpu_ms": cpu, "loadavg": os.getloadavg()})
            return
        spec = generate(root, args.sessions, args.scan_files if "scan" in kinds else 0, args.scan_mb)
        runs: dict[str, dict[str, list[dict]]] = {code: {k: [] for k in kinds} for code in codes}
        for r in range(args.runs):
            for kind in kinds:
                for code, source in codes.items():
                    if kind == "scan" and (r or code != next(iter(codes))):  # each scan needs files never opened
                        flood = project_dir(root, FLOOD_CWD)
                        fresh = []
                        for sid in spec["big"]:
                            new = str(uuid.uuid4())
                            os.rename(session_file(flood, sid), session_file(flood, new))
                            fresh.append(new)
                        spec["big"] = fresh
                    res = measure(root, base, kind, spec, args.appends, args.window, source)
                    runs[code][kind].append(res)
                    print(f"run {r + 1} {code:6s} {kind:7s} p50 {res['p50']:7.2f} ms  p99 {res['p99']:8.2f} ms"
                          f"  max {res['max']:8.2f} ms  {res['samples']} samples", flush=True)
        table = []
        for kind in kinds:
            for code in codes:
                rs, none = runs[code][kind], runs[code]["none"]
                ratio = [rs[i]["p99"] / none[i]["p99"] for i in range(len(rs))]
                table.append({"kind": kind, "code": code, "p50": statistics.median(r["p50"] for r in rs),
                              "p99": statistics.median(r["p99"] for r in rs),
                              "max": statistics.median(r["max"] for r in rs),
                              "p99_ratio": statistics.median(ratio),
                              "cpu_ms_per_answer": statistics.median(
                                  r["daemon_cpu_s"] * 1000 / r["flood_answered"] if r["flood_answered"] else 0 for r in rs),
                              "answers_per_s_cpu": statistics.median(r["flood_answered"] / max(r["daemon_cpu_s"], 1e-3)
                                                                     for r in rs)})
        print(f"\nload average at the end: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
        print("| flood | daemon | victim p50 ms | victim p99 ms | worst ms | p99 vs unflooded | daemon CPU ms per flood answer |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for t in table:
            print(f"| {t['kind']} | {t['code']} | {t['p50']:.2f} | {t['p99']:.2f} | {t['max']:.1f}"
                  f" | {t['p99_ratio']:.2f}x | {t['cpu_ms_per_answer']:.2f} |")
        benchlib.save(args.out, {"args": vars(args), "runs": runs, "table": table, "loadavg": os.getloadavg()})
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
