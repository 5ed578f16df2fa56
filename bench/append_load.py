"""Append throughput: N client processes appending ~1 KB entries to their own sessions.

Each client process pre-builds its entries, connects, waits for a common start,
then sends Append requests of ``--batch`` entries keeping ``--window`` requests in
flight (as an agent pipelines its recording), and measures each request's ack
latency. Baseline in the same run: the same processes appending the same lines
straight into their own files (open O_APPEND, one write(2) per entry), which is
what every agent does today without a daemon.

    python bench/append_load.py                 # full matrix, 3 runs each
    python bench/append_load.py --clients 4 --runs 1 --levels written

Prints a table (median of runs) and writes bench/results/append_load.json.
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

HERE = Path(__file__).resolve().parent


def build_lines(n: int, size: int, sid: str) -> list[bytes]:
    pad = "x" * max(0, size - 200)
    return [
        json.dumps({"type": "user", "uuid": str(uuid.uuid4()), "sessionId": sid, "message": {"role": "user", "content": pad}}).encode()
        for _ in range(n)
    ]


# --------------------------------------------------------------------- worker side


def worker(args: argparse.Namespace) -> None:
    sid = str(uuid.uuid4())
    lines = build_lines(args.entries, args.size, sid)
    lat: list[float] = []
    if args.mode == "direct":
        path = Path(args.dir) / f"{sid}.jsonl"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        print("ready", flush=True)
        sys.stdin.readline()
        for line in lines:
            t = time.perf_counter()
            os.write(fd, line + b"\n")
            lat.append(time.perf_counter() - t)
        os.close(fd)
    else:
        from sessiond.client import Client
        from sessiond.protocol.wire import messages as m

        c = Client(args.socket, autostart=False, timeout=120).connect()
        cwd = f"/bench/{sid}"
        batches = [lines[i : i + args.batch] for i in range(0, len(lines), args.batch)]
        print("ready", flush=True)
        sys.stdin.readline()
        inflight: list[tuple[int, float]] = []
        for batch in batches:
            rid = c.next_id()
            c.send(m.Append(id=rid, session=sid, cwd=cwd, entries=batch, durability=args.mode))
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
    print(json.dumps({"p50": lat[len(lat) // 2], "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))]}), flush=True)


# --------------------------------------------------------------------- driver side


def start_daemon(base: Path, flush_ms: float) -> subprocess.Popen:
    sock = base / "run" / "s.sock"
    (base / "run").mkdir(mode=0o700)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sessiond.client.cli", "--socket", str(sock), "--root", str(base / "root"),
         "serve", "--flush-interval", str(flush_ms), "--log-level", "warning"],
        stdin=subprocess.DEVNULL,
    )
    from sessiond.client.autostart import socket_answers

    deadline = time.monotonic() + 15
    while not socket_answers(sock):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("daemon did not start")
        time.sleep(0.01)
    return proc


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_run(mode: str, clients: int, per_client: int, args: argparse.Namespace) -> dict:
    base = Path(tempfile.mkdtemp(prefix="sdb-", dir="/tmp"))
    os.chmod(base, 0o700)
    daemon = start_daemon(base, args.flush_interval) if mode != "direct" else None
    (base / "direct").mkdir()
    cmd = [sys.executable, __file__, "--worker", "--mode", mode, "--entries", str(per_client), "--size", str(args.size),
           "--batch", str(args.batch), "--window", str(args.window), "--socket", str(base / "run" / "s.sock"),
           "--dir", str(base / "direct")]
    procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(clients)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready"
        cpu0 = cpu_seconds(daemon.pid) if daemon else 0.0
        t0 = time.perf_counter()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = [json.loads(p.stdout.readline()) for p in procs]
        wall = time.perf_counter() - t0
        cpu = (cpu_seconds(daemon.pid) - cpu0) if daemon else 0.0
        for p in procs:
            p.wait(timeout=60)
    finally:
        if daemon:
            daemon.terminate()
            daemon.wait(timeout=60)
        subprocess.run(["rm", "-rf", str(base)])
    total = clients * per_client
    return {
        "entries_per_s": total / wall,
        "mb_per_s": total * args.size / wall / 1e6,
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
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--levels", default="queued,written,durable,direct")
    ap.add_argument("--total", type=int, default=48_000, help="entries per configuration (split across clients)")
    ap.add_argument("--durable-total", type=int, default=16_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--window", type=int, default=4)
    ap.add_argument("--flush-interval", type=float, default=100.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "append_load.json"))
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    rows = []
    print(f"{'level':8} {'clients':>7} {'entries/s':>10} {'MB/s':>7} {'p50 ms':>8} {'p99 ms':>8} {'cpu us/e':>9}   (median of {args.runs})", flush=True)
    for clients in [int(x) for x in args.clients.split(",")]:
        for level in args.levels.split(","):
            total = args.durable_total if level == "durable" else args.total
            per = max(args.batch, total // clients)
            runs = [one_run(level, clients, per, args) for _ in range(args.runs)]
            med = {k: (statistics.median(r[k] for r in runs) if runs[0][k] is not None else None) for k in runs[0]}
            row = {"level": level, "clients": clients, "batch": args.batch, "window": args.window, "size": args.size, "runs": args.runs, **med,
                   "all_entries_per_s": [round(r["entries_per_s"]) for r in runs]}
            rows.append(row)
            cpu = f"{med['server_cpu_us_per_entry']:9.1f}" if med["server_cpu_us_per_entry"] is not None else f"{'-':>9}"
            print(f"{level:8} {clients:>7} {med['entries_per_s']:>10.0f} {med['mb_per_s']:>7.1f} {med['p50_ms']:>8.2f} {med['p99_ms']:>8.2f} {cpu}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
                                          "command": " ".join(["python", "bench/append_load.py", *sys.argv[1:]]), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
