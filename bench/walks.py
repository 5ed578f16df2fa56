"""Hostile files in the followed root: another client's durable appends, and
what the daemon reads, while a file makes the follower work.

    python bench/walks.py [--seconds 5] [--baseline main]

Each attack runs against a fresh daemon on a fresh root, beside a victim: for ``--seconds``, one
connection appending one ~1 KB entry at a time with ``durability="durable"``
to its own session, timing each ack. The attacks (a foreign writer in this
process, on a thread, for as long as the victim appends):

- ``none``: nothing (the victim's baseline, same daemon code, same run);
- ``growing``: a 2 MiB line without a newline, then one byte more every 2 ms;
- ``bigline``: a 1 GiB file without a newline (sparse), one byte more every 50 ms;
- ``bigdir``: a session dir of 200,000 entries (made once, outside the root)
  moved into the project dir, and its ``subagents`` a symlink to ``/``.

Per attack: the victim's p50/p99 (ms), the daemon's ``rchar`` (bytes its
threads read by syscalls) over the attack, and its peak RSS (VmHWM).
``--baseline REV``: the daemon of that revision is measured too, interleaved.
Writes bench/results/walks.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import benchlib

from sessiond.client.connection import Client
from sessiond.store.paths import project_dir
from sessiond.wire import messages as m

HERE = Path(__file__).resolve().parent
CWD = "/home/dev/victim"
HOSTILE_CWD = "/home/dev/hostile"
FILLER = "x" * 900
MiB = 1024 * 1024


def entry(sid: str) -> bytes:
    return json.dumps({"type": "user", "uuid": str(uuid.uuid4()), "parentUuid": None, "sessionId": sid, "cwd": CWD,
                       "timestamp": "2026-01-01T00:00:00.000Z", "message": {"role": "user", "content": FILLER}},
                      separators=(",", ":")).encode()


def proc_value(pid: int, name: str, key: str) -> int:
    for row in Path(f"/proc/{pid}/{name}").read_text().splitlines():
        if row.startswith(key):
            return int(row.split()[1])
    raise KeyError(key)


def victim(sock: Path, seconds: float) -> list[float]:
    sid = str(uuid.uuid4())
    out = []
    with Client(sock, autostart=False, timeout=120) as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[entry(sid)], durability="durable"))
        stop = time.monotonic() + seconds
        while time.monotonic() < stop:
            req = m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[entry(sid)], durability="durable")
            t = time.perf_counter()
            c.call(req)
            out.append((time.perf_counter() - t) * 1000)
    return out


def attack(kind: str, root: Path, bigdir: Path, stop: threading.Event) -> None:
    project = project_dir(root, HOSTILE_CWD)
    project.mkdir(parents=True, exist_ok=True)
    path = project / f"{uuid.uuid4()}.jsonl"
    if kind == "growing":
        with open(path, "ab", buffering=0) as f:
            f.write(b'{"type":"user","message":{"content":"' + b"x" * (2 * MiB))
            while not stop.is_set():
                f.write(b"y")
                time.sleep(0.002)
    elif kind == "bigline":
        with open(path, "wb", buffering=0) as f:
            f.truncate(1024 * MiB)
            f.seek(0, os.SEEK_END)
            while not stop.is_set():
                f.write(b"y")
                time.sleep(0.05)
    elif kind == "bigdir":
        bigdir.rename(path.with_suffix(""))


def make_bigdir(base: Path, entries: int) -> Path:
    d = base / "bigdir"
    d.mkdir()
    for i in range(entries):
        os.close(os.open(d / f"e{i}", os.O_CREAT | os.O_WRONLY, 0o600))
    os.symlink("/", d / "subagents")
    return d


def run(code: str, source: Path | None, kind: str, seconds: float, entries: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="walks-", dir="/tmp"))
    try:
        bigdir = make_bigdir(tmp, entries) if kind == "bigdir" else tmp / "none"
        sock, root = tmp / "run" / "s.sock", tmp / "root"
        d = benchlib.start_daemon(sock, root, source=source)
        try:
            time.sleep(0.5)
            read0 = proc_value(d.pid, "io", "rchar:")
            stop = threading.Event()
            t = threading.Thread(target=attack, args=(kind, root, bigdir, stop))
            t.start()
            lat = victim(sock, seconds)
            stop.set()
            t.join()
            with Client(sock, autostart=False, timeout=60) as c:
                follow = c.status().follow
            return {"rehashed_mib": follow.get("rehashed_bytes", 0) / MiB, "code": code, "kind": kind, "appends": len(lat),
                    "p50": statistics.median(lat),
                    "p99": sorted(lat)[int(0.99 * (len(lat) - 1))],
                    "read_mib": (proc_value(d.pid, "io", "rchar:") - read0) / MiB,
                    "peak_rss_mib": proc_value(d.pid, "status", "VmHWM:") / 1024}
        finally:
            d.terminate()
            d.wait(timeout=30)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--entries", type=int, default=200_000)
    ap.add_argument("--kinds", default="none,growing,bigline,bigdir")
    ap.add_argument("--baseline", default=None)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="walks-base-"))
    codes: list[tuple[str, Path | None]] = [("this", None)]
    if args.baseline:
        codes.append((args.baseline, benchlib.baseline_tree(args.baseline, base)))
    rows = []
    for kind in args.kinds.split(","):
        for code, source in codes:
            row = run(code, source, kind, args.seconds, args.entries)
            rows.append(row)
            print(f"{row['kind']:8} {row['code']:6} {row['appends']:6} appends  p50 {row['p50']:7.2f} ms  p99 {row['p99']:8.2f} ms  "
                  f"read {row['read_mib']:9.1f} MiB (rehash {row['rehashed_mib']:6.1f})  peak RSS {row['peak_rss_mib']:6.1f} MiB", flush=True)
    shutil.rmtree(base, ignore_errors=True)
    benchlib.save(HERE / "results" / "walks.json", {"rows": rows, "argv": sys.argv[1:]})


if __name__ == "__main__":
    main()
