"""Footprint: the daemon's RSS fresh, idle, loaded with 1M entries in 200
sessions, and after those sessions were evicted; bytes per uuid held.

    python bench/footprint.py [--sessions 200] [--entries 5000] [--batch 250] [--runs 3]

Each run starts a fresh daemon (``idle_evict_s = 2``), measures its RSS
(VmRSS) right after start (``fresh``) and after 3 s of doing nothing
(``idle``), then one client appends ``--entries`` small entries (each with its
own uuid) to each of ``--sessions`` sessions in batches (``queued``), flushes,
and the RSS is taken with every session still open (``just loaded``), and again once the background
packing of the quiet sessions' dedup sets is done (``loaded``). The client
then closes them and leaves; once ``status`` shows no session in memory and
the RSS has settled, ``evicted`` is taken. ``bytes/uuid`` is (loaded - idle) /
entries appended: everything a held entry costs, its dedup uuid mostly.
``CPU/entry`` is the daemon's user+sys CPU from the first append until the
background packing is done, per entry appended (what an entry costs in all,
packing included). The table gives the median over runs. Writes
bench/results/footprint.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import benchlib

from sessiond.client.connection import Client
from sessiond.wire import messages as m

HERE = Path(__file__).resolve().parent
CWD = "/home/dev/footprint"


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for row in f:
            if row.startswith("VmRSS:"):
                return int(row.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def settled_rss(pid: int, timeout: float = 60.0) -> int:
    """RSS once it stops falling (two readings 1 s apart within 1 %)."""
    last = rss(pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = rss(pid)
        if abs(now - last) <= last // 100:
            return now
        last = now
    return last


def one_run(base: Path, sessions: int, entries: int, batch: int) -> dict:
    run = Path(tempfile.mkdtemp(prefix="run-", dir=base))
    cfg = run / "config.toml"
    cfg.write_text("idle_evict_s = 2\n")
    sock = run / "s" / "s.sock"
    daemon = benchlib.start_daemon(sock, run / "root", "--config", str(cfg))
    try:
        fresh = rss(daemon.pid)
        time.sleep(3)
        idle = rss(daemon.pid)
        ids = [str(uuid.uuid4()) for _ in range(sessions)]
        t = time.perf_counter()
        cpu_before = benchlib.cpu_seconds(daemon.pid)
        with Client(sock, autostart=False, timeout=120) as c:
            def appends():
                for sid in ids:
                    for start in range(0, entries, batch):
                        lines = [json.dumps({"type": "user", "uuid": str(uuid.uuid4()), "parentUuid": None,
                                             "sessionId": sid, "message": {"role": "user", "content": f"m{start + i}"}},
                                            separators=(",", ":")).encode() for i in range(min(batch, entries - start))]
                        yield m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=lines)

            answers = c.pipeline(appends(), window=16)
            assert sum(a.accepted for a in answers if isinstance(a, m.Appended)) == sessions * entries
            loaded_after = time.perf_counter() - t
            c.flush()
            just_loaded = rss(daemon.pid)
            deadline = time.monotonic() + 60  # quiet sessions' dedup sets are packed in the background
            while time.monotonic() < deadline:
                mem = c.status().memory
                if mem is None or mem["uuidsUnpacked"] <= mem["uuids"] // 100:
                    break
                time.sleep(0.5)
            cpu_used = benchlib.cpu_seconds(daemon.pid) - cpu_before
            loaded = settled_rss(daemon.pid)
            held = c.status().memory
            for sid in ids:
                c.call(m.Close(id=c.next_id(), session=sid))
        deadline = time.monotonic() + 120
        with Client(sock, autostart=False) as c:
            while c.status().sessions and time.monotonic() < deadline:
                time.sleep(0.5)
            left = c.status().sessions
        evicted = settled_rss(daemon.pid)
    finally:
        with Client(sock, autostart=False) as c:
            c.shutdown()
        daemon.wait(timeout=60)
        shutil.rmtree(run, ignore_errors=True)
    n = sessions * entries
    return {"fresh": fresh, "idle": idle, "just_loaded": just_loaded, "loaded": loaded, "evicted": evicted, "sessions_left": left,
            "bytes_per_uuid": (loaded - idle) / n, "memory_reported": held, "load_s": loaded_after,
            "cpu_us_per_entry": cpu_used / n * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--entries", type=int, default=5000)
    ap.add_argument("--batch", type=int, default=250)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "footprint.json"))
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sdfoot-", dir="/tmp"))
    os.chmod(base, 0o700)
    try:
        runs = []
        for r in range(args.runs):
            res = one_run(base, args.sessions, args.entries, args.batch)
            runs.append(res)
            print(f"run {r + 1}: fresh {res['fresh'] / 2**20:.1f} MB, idle {res['idle'] / 2**20:.1f} MB, "
                  f"loaded {res['just_loaded'] / 2**20:.1f} MB -> {res['loaded'] / 2**20:.1f} MB packed, evicted {res['evicted'] / 2**20:.1f} MB "
                  f"({res['sessions_left']} sessions left), {res['bytes_per_uuid']:.1f} bytes/uuid, "
                  f"load {res['load_s']:.1f} s, CPU {res['cpu_us_per_entry']:.1f} us/entry", flush=True)
        med = {k: statistics.median(r[k] for r in runs)
               for k in ("fresh", "idle", "just_loaded", "loaded", "evicted", "bytes_per_uuid", "cpu_us_per_entry")}
        print("\n| RSS fresh | idle | just loaded (1M uuids) | loaded, packed | after eviction | eviction vs fresh"
              " | bytes per uuid | CPU per entry |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        print(f"| {med['fresh'] / 2**20:.1f} MB | {med['idle'] / 2**20:.1f} MB | {med['just_loaded'] / 2**20:.1f} MB | "
              f"{med['loaded'] / 2**20:.1f} MB | "
              f"{med['evicted'] / 2**20:.1f} MB | {med['evicted'] / med['fresh']:.2f}x | {med['bytes_per_uuid']:.1f} | "
              f"{med['cpu_us_per_entry']:.1f} us |")
        benchlib.save(args.out, {"args": vars(args), "runs": runs, "median": med})
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
