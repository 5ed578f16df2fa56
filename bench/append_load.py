"""Append throughput: N client processes appending ~1 KB entries to their own sessions.

Each client process pre-builds its entries, connects, waits for a common start,
then sends Append requests of ``--batch`` entries keeping ``--window`` requests in
flight (as an agent pipelines its recording), and measures each request's ack
latency. Baselines in the same run:
- ``direct``: the same processes appending the same lines straight into their own
  files (open O_APPEND, one write(2) per entry), what agents do today;
- ``redis``: Redis with an append-only file (appendonly yes, appendfsync everysec)
  on a Unix socket, RPUSH of the same payloads, the batch as pipeline depth, driven
  by a lean raw-socket RESP client built like our own client (Redis writes the AOF
  before it replies, so compare it with sessiond's ``written``);
- ``redis-py``: the same through the redis-py library;
- ``disk``: the raw write bandwidth for the same bytes (one big sequential write
  and an fdatasync);
- ``floor``: ``floor_server.py``, the least a Python uvloop server on sessiond's
  wire can do per Append (decode, one write, answer; no checks): where Python
  itself stands against Redis, and how far sessiond is from it.

    python bench/append_load.py                 # full matrix, 3 runs each
    python bench/append_load.py --clients 4 --runs 1 --levels written
    python bench/append_load.py --levels written,written@main,floor,redis   # and main's daemon

The clock starts with the clients connected; the direct writers have opened
(created) their files by then, sessiond's clients make their sessions with their
first Append inside it. ``--warm`` makes those before the clock too (one entry
each, and Redis's keys): the steady state, without the sessions' start.

Each round runs every level once, in turn (interleaved), so every ratio compares
runs made on the same machine state; ``LEVEL@REV`` is that git revision's daemon
(``git archive``) driven by this tree's clients.

Prints a table (median of runs) and writes bench/results/append_load.json.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import benchlib
from benchlib import cpu_seconds_fine as cpu_seconds

HERE = Path(__file__).resolve().parent


_VOCAB = ["".join(random.Random(i).choices("abcdefghijklmnopqrstuvwxyz", k=3 + i % 8)) for i in range(5000)]


def words(rng: random.Random, n: int) -> str:
    """About ``n`` characters of words (``--text``: entries a search index has to read)."""
    out, size = [], 0
    while size < n:
        w = _VOCAB[min(int(rng.paretovariate(1.1)) - 1, len(_VOCAB) - 1)] if rng.random() < 0.7 else rng.choice(_VOCAB)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def build_lines(n: int, size: int, sid: str, mix: bool = False, text: bool = False) -> list[bytes]:
    """``n`` entries of about ``size`` bytes; with ``mix``, every fifth one is a
    tool result of 10-50 KB instead (as an agent's transcript has); with ``text``
    the payload is words instead of one long run of ``x``."""
    rng = random.Random(sid)
    out = []
    for i in range(n):
        big = mix and i % 5 == 4
        n_pad = rng.randint(10_000, 50_000) if big else max(0, size - 200)
        pad = words(rng, n_pad) if text else "x" * n_pad
        content = [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": pad}] if big else pad
        out.append(json.dumps({"type": "user", "uuid": str(uuid.uuid4()), "sessionId": sid,
                               "message": {"role": "user", "content": content}}).encode())
    return out


# --------------------------------------------------------------------- worker side


def worker(args: argparse.Namespace) -> None:
    sid = str(uuid.uuid4())
    lines = build_lines(args.entries, args.size, sid, args.mix, args.text)
    lat: list[float] = []
    if args.mode in ("direct", "direct-durable"):
        path = Path(args.dir) / f"{sid}.jsonl"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        sync = args.mode == "direct-durable"  # one fdatasync per entry: the durable baseline
        print("ready", flush=True)
        sys.stdin.readline()
        for line in lines:
            t = time.perf_counter()
            os.write(fd, line + b"\n")
            if sync:
                os.fdatasync(fd)
            lat.append(time.perf_counter() - t)
        os.close(fd)
    elif args.mode in ("redis", "redis-py"):
        key = f"session:{sid}"
        batches = [lines[i : i + args.batch] for i in range(0, len(lines), args.batch)]
        if args.mode == "redis-py":
            import redis

            r = redis.Redis(unix_socket_path=args.socket)
            r.ping()
            if args.warm:
                r.rpush(key, build_lines(1, args.size, sid + "-warm")[0])
            print("ready", flush=True)
            sys.stdin.readline()
            for batch in batches:
                t = time.perf_counter()
                pipe = r.pipeline(transaction=False)
                for line in batch:
                    pipe.rpush(key, line)
                pipe.execute()
                lat.append(time.perf_counter() - t)
        else:
            import socket as socketlib

            sock = socketlib.socket(socketlib.AF_UNIX)
            sock.connect(args.socket)
            kb = key.encode()
            head = b"*3\r\n$5\r\nRPUSH\r\n$%d\r\n%s\r\n" % (len(kb), kb)
            if args.warm:  # the key made before the clock, as the direct writers' files are
                warm = build_lines(1, args.size, sid + "-warm")[0]
                sock.sendall(head + b"$%d\r\n%s\r\n" % (len(warm), warm))
                assert sock.recv(64).startswith(b":")
            print("ready", flush=True)
            sys.stdin.readline()
            buf = b""
            for batch in batches:
                t = time.perf_counter()
                sock.sendall(b"".join(head + b"$%d\r\n%s\r\n" % (len(x), x) for x in batch))
                want = len(batch)
                while want:  # each reply is one ":<n>\r\n" line
                    while b"\r\n" not in buf:
                        buf += sock.recv(65536)
                    n = buf.count(b"\r\n")
                    take = min(n, want)
                    for _ in range(take):
                        i = buf.index(b"\r\n")
                        assert buf[:1] == b":", buf[:40]
                        buf = buf[i + 2 :]
                    want -= take
                lat.append(time.perf_counter() - t)
            sock.close()
    else:
        from sessiond.client import Client
        from sessiond.wire import messages as m

        c = Client(args.socket, autostart=False, timeout=120).connect()
        cwd = f"/bench/{sid}"
        batches = [lines[i : i + args.batch] for i in range(0, len(lines), args.batch)]
        durability = "written" if args.mode == "floor" else args.mode  # the floor server writes before it answers
        if args.warm:  # the session (its file, its project dir) made before the clock, as the direct writers' files are
            warm = m.Append(id=c.next_id(), session=sid, cwd=cwd, entries=build_lines(1, args.size, sid),
                            durability="durable" if durability == "durable" else "written")
            c.send(warm)
            assert isinstance(c.receive(warm.id), m.Appended)
        print("ready", flush=True)
        sys.stdin.readline()
        inflight: list[tuple[int, float]] = []
        for batch in batches:
            rid = c.next_id()
            c.send(m.Append(id=rid, session=sid, cwd=cwd, entries=batch, durability=durability))
            inflight.append((rid, time.perf_counter()))
            if len(inflight) >= args.window:
                r, t = inflight.pop(0)
                resp = c.receive(r)
                assert isinstance(resp, m.Appended), resp
                lat.append(time.perf_counter() - t)
        for r, t in inflight:
            resp = c.receive(r)
            assert isinstance(resp, m.Appended), resp
            lat.append(time.perf_counter() - t)
        c.close()
    lat.sort()
    print(json.dumps({"p50": lat[len(lat) // 2], "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
                      "bytes": sum(len(x) + 1 for x in lines)}), flush=True)


# --------------------------------------------------------------------- driver side


_TREES: dict[str, Path] = {}


def baseline_source(rev: str) -> Path:
    """The unpacked tree of revision ``rev`` (once per run), for a level ``LEVEL@REV``."""
    if rev not in _TREES:
        into = Path(tempfile.mkdtemp(prefix="sdb-rev-"))
        atexit.register(shutil.rmtree, into, True)  # not left in /tmp by every run with a baseline
        _TREES[rev] = benchlib.baseline_tree(rev, into)
    return _TREES[rev]


def start_daemon(base: Path, flush_ms: float, extra: list[str] | None = None, rev: str | None = None,
                 wrap: Sequence[str] = (), timeout: float = 20.0) -> subprocess.Popen:
    return benchlib.start_daemon(base / "run" / "s.sock", base / "root", "--flush-interval", str(flush_ms), *(extra or []),
                                 source=baseline_source(rev) if rev else None, wrap=wrap, timeout=timeout)


def start_floor(sock: Path, root: Path, wrap: Sequence[str] = (), timeout: float = 20.0) -> subprocess.Popen:
    return benchlib.start_server(sock, [*wrap, sys.executable, str(HERE / "floor_server.py"), str(sock), str(root)], timeout)


def start_redis(base: Path) -> tuple[subprocess.Popen, Path]:
    sock = base / "redis.sock"
    proc = subprocess.Popen(
        ["redis-server", "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700", "--dir", str(base),
         "--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--daemonize", "no", "--loglevel", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 15
    while not sock.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("redis-server did not start")
        time.sleep(0.01)
    time.sleep(0.05)
    return proc, sock


def spawn_workers(mode: str, clients: int, per_client: int, sock: Path, workdir: Path,
                  args: argparse.Namespace) -> list[subprocess.Popen]:
    """``clients`` worker processes of this script, each built and connected,
    waiting for the word to start."""
    cmd = [sys.executable, __file__, "--worker", "--mode", mode, "--entries", str(per_client), "--size", str(args.size),
           "--batch", str(args.batch), "--window", str(args.window), "--socket", str(sock),
           "--dir", str(workdir)] + (["--mix"] if getattr(args, "mix", False) else []) + (["--text"] if getattr(args, "text", False) else []) \
        + (["--warm"] if getattr(args, "warm", False) else [])
    procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(clients)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    return procs


def run_workers(procs: list[subprocess.Popen]) -> tuple[list[dict], float, float]:
    """Start every worker at once; their results, the start time, and the wall
    time until the last one finished."""
    t0 = time.perf_counter()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    results = [json.loads(p.stdout.readline()) for p in procs]
    wall = time.perf_counter() - t0
    for p in procs:
        p.wait(timeout=60)
    return results, t0, wall


def disk_run(total: int, args: argparse.Namespace) -> dict:
    """Baseline (c): the same bytes as one big sequential write, then fdatasync:
    what the disk takes when nobody frames, routes or acknowledges anything."""
    base = Path(tempfile.mkdtemp(prefix="sdb-", dir="/tmp"))
    data = b"".join(x + b"\n" for x in build_lines(total, args.size, str(uuid.uuid4()), args.mix))
    fd = os.open(base / "disk.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        t0 = time.perf_counter()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view[: 64 << 20]) :]
        os.fdatasync(fd)
        wall = time.perf_counter() - t0
    finally:
        os.close(fd)
        subprocess.run(["rm", "-rf", str(base)])
    return {"entries_per_s": total / wall, "mb_per_s": len(data) / wall / 1e6, "p50_ms": None, "p99_ms": None,
            "server_cpu_us_per_entry": None}


SLOW_START = 180.0
"""Seconds a server run under a ``wrap`` (valgrind: imports some 30x slower) gets to start and to exit."""


def one_run(mode: str, clients: int, per_client: int, args: argparse.Namespace, wrap: Sequence[str] = ()) -> dict:
    """One configuration: the server of ``mode`` (run under ``wrap`` if given,
    the floor's and sessiond's only), ``clients`` worker processes of
    ``per_client`` entries each; its throughput, latencies and server CPU."""
    mode, _, rev = mode.partition("@")  # "written@REV": that revision's daemon (the clients are this one's)
    wait = SLOW_START if wrap else 20.0
    if mode == "disk":
        return disk_run(clients * per_client, args)
    base = Path(tempfile.mkdtemp(prefix="sdb-", dir="/tmp"))
    os.chmod(base, 0o700)
    sock = base / "run" / "s.sock"
    if mode in ("redis", "redis-py"):
        daemon, sock = start_redis(base)
    elif mode == "floor":
        daemon = start_floor(sock, base / "floor", wrap, wait)
    elif mode not in ("direct", "direct-durable"):
        daemon = start_daemon(base, args.flush_interval, args.daemon_arg, rev or None, wrap, wait)
    else:
        daemon = None
    (base / "direct").mkdir()
    try:
        procs = spawn_workers(mode, clients, per_client, sock, base / "direct", args)
        cpu0 = cpu_seconds(daemon.pid) if daemon else 0.0
        results, _, wall = run_workers(procs)
        cpu = (cpu_seconds(daemon.pid) - cpu0) if daemon else 0.0
    finally:
        if daemon:
            daemon.terminate()  # sessiond exits cleanly, the floor dies of it: valgrind writes its counts either way
            daemon.wait(timeout=max(60.0, wait))
        subprocess.run(["rm", "-rf", str(base)])
    total = clients * per_client
    nbytes = sum(r["bytes"] for r in results)
    return {
        "entries_per_s": total / wall,
        "mb_per_s": nbytes / wall / 1e6,
        "p50_ms": statistics.median(r["p50"] for r in results) * 1000,
        "p99_ms": max(r["p99"] for r in results) * 1000,
        "server_cpu_us_per_entry": cpu / total * 1e6 if daemon else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="queued")
    ap.add_argument("--socket", default="")
    ap.add_argument("--dir", default="")
    ap.add_argument("--entries", type=int, default=0)
    ap.add_argument("--clients", default="1,4,16,50")
    ap.add_argument("--levels", default="queued,written,durable,floor,redis,redis-py,direct,disk")
    ap.add_argument("--daemon-arg", action="append", default=[], help="extra argument for sessiond serve")
    ap.add_argument("--chart", default=str(HERE / "results" / "append_load.png"))
    ap.add_argument("--total", type=int, default=48_000, help="entries per configuration (split across clients)")
    ap.add_argument("--durable-total", type=int, default=16_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--mix", action="store_true", help="every fifth entry a 10-50 KB tool result")
    ap.add_argument("--text", action="store_true", help="payloads of words, not one run of x (work for the search index)")
    ap.add_argument("--warm", action="store_true",
                    help="each client's session (Redis: key) made before the clock starts, as the direct "
                         "writers' files are: throughput without the sessions' start")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--window", type=int, default=1)
    ap.add_argument("--flush-interval", type=float, default=100.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "append_load.json"))
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    rows = []
    print(f"{'level':8} {'clients':>7} {'entries/s':>10} {'MB/s':>7} {'p50 ms':>8} {'p99 ms':>8} {'cpu us/e':>9}"
          f"   (median of {args.runs})", flush=True)
    levels = args.levels.split(",")
    load: list[float] = []
    for clients in [int(x) for x in args.clients.split(",")]:
        by_level: dict[str, list[dict]] = {level: [] for level in levels}
        for _ in range(args.runs):  # interleaved: each round runs every level once, on the same machine state
            load.append(os.getloadavg()[0])
            for level in levels:
                total = args.durable_total if level.partition("@")[0] in ("durable", "direct-durable") else args.total
                by_level[level].append(one_run(level, clients, max(args.batch, total // clients), args))
        for level in levels:
            runs = by_level[level]
            med = {k: (statistics.median(r[k] for r in runs) if runs[0][k] is not None else None) for k in runs[0]}
            row = {"level": level, "clients": clients, "batch": args.batch, "window": args.window, "size": args.size,
                   "mix": args.mix, "runs": args.runs, **med,
                   "all_entries_per_s": [round(r["entries_per_s"]) for r in runs]}
            rows.append(row)
            num = lambda k, w, p: f"{med[k]:{w}.{p}f}" if med[k] is not None else f"{'-':>{w}}"  # noqa: E731, B023 (used in this iteration)
            print(f"{level:8} {clients:>7} {med['entries_per_s']:>10.0f} {med['mb_per_s']:>7.1f} {num('p50_ms', 8, 2)}"
                  f" {num('p99_ms', 8, 2)} {num('server_cpu_us_per_entry', 9, 1)}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    if args.chart:
        chart(rows, Path(args.chart))
    print(f"load average (1 min) at each round: {', '.join(f'{x:.1f}' for x in load)}")
    Path(args.out).write_text(json.dumps({"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
                                          "load_avg": load, "rows": rows,
                                          "command": " ".join(["python", "bench/append_load.py", *sys.argv[1:]])}, indent=1))


def chart(rows: list[dict], path: Path) -> None:
    """Entries/s against client count, one line per system (bench extra: matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no chart (pip install '.[bench]')", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(9.5, 4.2), dpi=120)
    for level in dict.fromkeys(r["level"] for r in rows):
        pts = sorted((r["clients"], r["entries_per_s"]) for r in rows if r["level"] == level)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=benchlib.LEVEL_NAMES.get(level, level),
                linestyle="--" if level.startswith(("redis", "direct", "disk", "floor")) else "-")
    ax.set_xscale("log")
    ax.set_xticks(sorted({r["clients"] for r in rows}))
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("client processes")
    ax.set_ylabel("entries/s (1 KB, batches of 16)")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title("Append throughput, same machine, same run (median of runs)")
    fig.tight_layout()
    fig.savefig(path)


if __name__ == "__main__":
    main()
