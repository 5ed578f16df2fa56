"""Watching: what watchers cost the writer, and how soon they see an entry.

    python bench/watch.py [--entries 16000] [--batch 16] [--watchers 0,1,10] [--runs 3] [--baseline REV] [--raw]

One writer appends 1 KB entries to one session in batches, each acknowledged
``written``, through the real client library; 0, 1 or 10 watcher processes
``Subscribe`` to that session (from its end) and read everything. Measured in the
same run for every watcher count: the writer's entries/s, the daemon's CPU per
entry, and, per batch, the time from the writer getting its ``written`` ack to
each watcher receiving the batch's last entry (CLOCK_MONOTONIC is one clock for
every process; a negative figure means the push arrived before the ack), and
how many entries each watcher got and how many bytes watchers skipped (a frame
that starts past where the last one ended; none is expected: a watcher that
reads more slowly than the writer writes is fed from the file at its own pace).
And each watcher's CPU per frame it got (``time.process_time`` from its
subscription to its end: the client receiving and decoding, and this bench's
own bookkeeping of each frame).
Medians over ``--runs`` runs; writes bench/results/watch.json. ``--baseline
REV``: that revision's daemon and watchers' client (``git archive``) are
measured too, each of its runs interleaved with this code's, and every ratio is
against the same code's 0 watchers in the same run (the writer is this code's
client for both). ``--raw``: this code measured a second time, in the same
rounds, with watchers that subscribe through the client and then only read the
socket's bytes, decoding nothing (no latency for them): what is left of the
drop is what the daemon's sends and the watchers' wake-ups cost, the rest of it
is the watching clients' own receiving and decoding.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import benchlib

from sessiond.client.connection import Client
from sessiond.client.watch import subscribe
from sessiond.wire import messages as m

HERE = Path(__file__).resolve().parent
CWD = "/home/dev/watched"


def _n(line: bytes) -> int | None:
    at = line.rfind(b'"n": ')
    return int(line[at + 5:-1]) if at > 0 else None


def watcher(sock: str, session: str, out: str, raw: bool = False) -> None:
    """A watcher process: when each frame came, as the range of entry ``n``s it
    carried, and the bytes it skipped (a frame starting past where the last one
    ended); it stops at the end offset the bench sends on stdin. Only a frame's
    first and last entries are parsed (the writer's ``n``s are consecutive and
    a frame carries a contiguous run of the file), so what the watcher costs is
    the client's receiving and decoding, not this bench's reading of every line."""
    import threading

    client = Client(sock, autostart=False, name="bench-watcher").connect()
    got: list[tuple[int, int, float]] = []
    skipped = 0
    target: list[int] = []
    stream = subscribe(client, m.Subscribe(id=client.next_id(), session=session, cwd=CWD))
    position = next(stream).offset  # Subscribed: where the stream starts
    threading.Thread(target=lambda: target.append(int(sys.stdin.readline())), daemon=True).start()
    cpu0 = time.process_time()
    print("subscribed", flush=True)
    frames = 0
    if raw:  # the bytes only: a recv_into per wake-up until the file's end has been sent, nothing decoded
        sock_ = client._sock
        assert sock_ is not None
        buf = bytearray(1 << 20)
        received = 0
        while not target or received < target[0] - position:  # a frame has more bytes than its lines
            received += sock_.recv_into(buf)
            frames += 1
        Path(out).write_text(json.dumps({"got": [], "skipped": 0, "cpu": time.process_time() - cpu0,
                                         "frames": frames, "raw": True}))
        return
    for frame in stream:
        if isinstance(frame, m.Entries):
            now = time.monotonic()
            frames += 1
            if not frame.reset:
                skipped += frame.offset - position
            lines = frame.lines
            first = next((n for n in map(_n, lines) if n is not None), None)
            if first is not None:
                last = next(n for n in map(_n, reversed(lines)) if n is not None)
                got.append((first, last, now))
            position = frame.offset + sum(map(len, lines)) + len(lines)
            if target and position >= target[0]:
                break
    cpu = time.process_time() - cpu0
    Path(out).write_text(json.dumps({"got": got, "skipped": skipped, "cpu": cpu, "frames": frames}))


def one_run(base: Path, watchers: int, entries: int, batch: int, source: Path | None = None,
            coalesce_ms: float | None = None, raw: bool = False) -> dict:
    sock, root = base / "run" / "s.sock", base / "root"
    serve_args: list[str] = []
    if coalesce_ms is not None:  # the daemon's watch_coalesce_ms (else its default)
        config = base / "config.toml"
        config.write_text(f"watch_coalesce_ms = {coalesce_ms}\n")
        serve_args = ["--config", str(config)]
    daemon = benchlib.start_daemon(sock, root, *serve_args, source=source)
    try:
        session = str(uuid.uuid4())
        pad = "x" * 900
        lines = [json.dumps({"type": "user", "uuid": str(uuid.uuid4()), "message": {"role": "user", "content": pad},
                             "n": i}).encode() for i in range(entries)]
        with Client(sock, autostart=False) as c:  # the file exists before anyone subscribes
            c.call(m.Append(id=c.next_id(), session=session, cwd=CWD, entries=[b'{"type":"tag","tag":"bench"}'],
                            durability="written"))
        outs = [base / f"w{i}.json" for i in range(watchers)]
        # the watchers run the same revision's client as the daemon (its package first on the path)
        env = None if source is None else {**os.environ, "PYTHONPATH": str(source)}
        procs = [subprocess.Popen([sys.executable, __file__, "--watcher", str(sock), session, str(o),
                                   *(["--raw-watcher"] if raw else [])],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env) for o in outs]
        for p in procs:
            assert p.stdout.readline().strip() == "subscribed"
        acks: list[float] = []
        with Client(sock, autostart=False) as c:
            cpu0 = benchlib.cpu_seconds_fine(daemon.pid)
            writer0 = time.process_time()
            t0 = time.perf_counter()
            for i in range(0, entries, batch):
                c.call(m.Append(id=c.next_id(), session=session, cwd=CWD, entries=lines[i:i + batch], durability="written"))
                acks.append(time.monotonic())
            elapsed = time.perf_counter() - t0
            cpu = benchlib.cpu_seconds_fine(daemon.pid) - cpu0
            writer_cpu = time.process_time() - writer0
        end = next((root / "projects").rglob(f"{session}.jsonl")).stat().st_size
        lat: list[float] = []
        skipped = received = 0
        watcher_cpu = watcher_frames = 0.0
        for p in procs:
            p.stdin.write(f"{end}\n")
            p.stdin.flush()
        if procs:  # one more line, so a watcher that had everything already wakes up and sees where it is
            time.sleep(0.2)
            with Client(sock, autostart=False) as c:
                c.call(m.Append(id=c.next_id(), session=session, cwd=CWD, entries=[b'{"type":"tag","tag":"end"}'],
                                durability="written"))
        for p, o in zip(procs, outs):
            p.wait(timeout=300)
            result = json.loads(o.read_text())
            got = {n: at for first, last, at in result["got"] for n in range(first, last + 1)}
            skipped += result["skipped"]
            watcher_cpu += result["cpu"]
            watcher_frames += result["frames"]
            received += len(got)
            for k, ack in enumerate(acks):
                last = min(k * batch + batch, entries) - 1
                if last in got:
                    lat.append((got[last] - ack) * 1000)
        return {"entries_per_s": entries / elapsed, "cpu_us_per_entry": cpu / entries * 1e6,
                "received": received / watchers if watchers and not raw else None, "skipped_bytes": skipped,
                "watcher_cpu_us_per_frame": watcher_cpu / watcher_frames * 1e6 if watcher_frames else None,
                "writer_cpu_us_per_entry": writer_cpu / entries * 1e6,
                "watchers_cpu_us_per_entry": watcher_cpu / entries * 1e6 if watchers else None,
                "entries_per_frame": entries * watchers / watcher_frames if watcher_frames and not raw else None,
                "busy_cores": (cpu + writer_cpu + watcher_cpu) / elapsed,
                "p50_ms": statistics.median(lat) if lat else None,
                "p99_ms": statistics.quantiles(lat, n=100)[98] if len(lat) >= 100 else None}
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=16000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--watchers", default="0,1,10")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "watch.json"))
    ap.add_argument("--baseline", default=None, metavar="REV",
                    help="a git revision whose daemon and watchers are measured too, its runs interleaved with this code's")
    ap.add_argument("--coalesce", default=None, metavar="MS[,MS...]",
                    help="this code's daemon measured with each of these watch_coalesce_ms (else its default)")
    ap.add_argument("--raw", action="store_true",
                    help="this code measured again with watchers that read the bytes and decode nothing")
    ap.add_argument("--watcher", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--raw-watcher", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.watcher:
        sock, session, out = args.watcher
        watcher(sock, session, out, raw=args.raw_watcher)
        return
    levels = [int(x) for x in args.watchers.split(",")]
    codes: dict[str, tuple[Path | None, float | None, bool]] = {"this": (None, None, False)}
    if args.coalesce:
        codes = {f"this@{ms}ms": (None, float(ms), False) for ms in args.coalesce.split(",")}
    if args.baseline:
        tree = benchlib.baseline_tree(args.baseline, Path(tempfile.mkdtemp(prefix="sdw-base-")))
        codes = {args.baseline: (tree, None, False), **codes}
    if args.raw:
        codes["this, raw watchers"] = (None, None, True)
    runs: dict[tuple[str, int], list[dict]] = {(c, n): [] for c in codes for n in levels}
    load = []
    for _ in range(args.runs):
        load.append(os.getloadavg()[0])
        for n in levels:  # interleaved: each round measures every level (and code) on the same machine state
            for code, (source, coalesce_ms, raw) in codes.items():
                with tempfile.TemporaryDirectory(prefix="sdw-", dir="/tmp") as tmp:
                    runs[code, n].append(one_run(Path(tmp), n, args.entries, args.batch, source, coalesce_ms, raw))
    rows = []
    for code in codes:
        base = statistics.median(r["entries_per_s"] for r in runs[code, levels[0]])
        for n in levels:
            row: dict = {"code": code, "watchers": n}
            for key in ("entries_per_s", "cpu_us_per_entry", "p50_ms", "p99_ms", "received", "skipped_bytes",
                        "watcher_cpu_us_per_frame", "writer_cpu_us_per_entry", "watchers_cpu_us_per_entry",
                        "entries_per_frame", "busy_cores"):
                values = [r[key] for r in runs[code, n] if r[key] is not None]
                row[key] = round(statistics.median(values), 3) if values else None
            row["vs_no_watcher"] = round(row["entries_per_s"] / base, 2)
            rows.append(row)
    Path(args.out).write_text(json.dumps({"entries": args.entries, "batch": args.batch, "runs": args.runs,
                                          "load_avg": load, "rows": rows}, indent=1) + "\n")
    print(f"load average (1 min) at each round: {', '.join(f'{x:.1f}' for x in load)}")
    print("| code | watchers | entries/s | vs 0 watchers | daemon CPU µs/entry | ack → watcher p50 ms | p99 ms "
          "| entries each watcher got | bytes skipped | watcher CPU µs/frame |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['code']} | {r['watchers']} | {r['entries_per_s']:,.0f} | {r['vs_no_watcher']:.2f}x | {r['cpu_us_per_entry']:.1f} "
              f"| {cell(r['p50_ms'], '.2f')} | {cell(r['p99_ms'], '.2f')} | {cell(r['received'], ',.0f')} "
              f"| {r['skipped_bytes']:,.0f} | {cell(r['watcher_cpu_us_per_frame'], '.1f')} |")
    print()
    print("| code | watchers | writer CPU µs/entry | daemon CPU µs/entry | all watchers' CPU µs/entry "
          "| entries per frame | cores busy |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['code']} | {r['watchers']} | {r['writer_cpu_us_per_entry']:.1f} | {r['cpu_us_per_entry']:.1f} "
              f"| {cell(r['watchers_cpu_us_per_entry'], '.1f')} | {cell(r['entries_per_frame'], '.1f')} | {r['busy_cores']:.2f} |")


def cell(value: float | None, spec: str) -> str:
    """A table cell: ``value`` formatted, or a dash where there is none (no watcher)."""
    return "—" if value is None else format(value, spec)


if __name__ == "__main__":
    main()
