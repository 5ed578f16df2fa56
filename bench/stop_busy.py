"""Stopping on a busy machine: from SIGTERM to the daemon's exit (its search
indexer's included), beside CPU-bound processes.

    python bench/stop_busy.py [--busy 2] [--runs 9] [--after 0,0.2]

The indexer runs in SCHED_IDLE, which takes only idle CPU time: beside
``--busy`` processes that spin (one per core by default), it gets almost none.
Each run starts a daemon on a fresh store, waits ``--after`` seconds past the
indexer's start, sends SIGTERM and times the exit (the daemon's stderr closed:
the indexer holds it too), and reads the CPU both used. The baseline, in the
same run and interleaved: the same daemon with no search index (what a stop
costs with nothing beside it to stop). Medians over ``--runs``; writes
``bench/results/stop_busy.json``.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib

HERE = Path(__file__).resolve().parent


def one_stop(base: Path, index: bool, after: float) -> tuple[float, float]:
    """(seconds from SIGTERM to exit, CPU seconds of the daemon and its indexer)."""
    config = base / "config.toml"
    config.write_text(f"search_index = {'true' if index else 'false'}\n")
    (base / "run").mkdir(mode=0o700)
    cpu0 = benchlib.children_cpu()
    proc = subprocess.Popen([sys.executable, "-m", "sessiond.client.cli", "--root", str(base / "root"),
                             "--socket", str(base / "run" / "s.sock"), "serve", "--config", str(config)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    marker = b"search indexer started" if index else b"ready:"
    for line in proc.stderr:
        if marker in line:
            break
    time.sleep(after)
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    proc.stderr.read()  # to EOF: the indexer, which shares it, has exited too
    assert proc.wait(timeout=60) == 0
    return time.perf_counter() - t0, benchlib.children_cpu() - cpu0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--busy", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--after", default="0,0.2", help="seconds past the indexer's start to stop at")
    ap.add_argument("--out", default=str(HERE / "results" / "stop_busy.json"))
    args = ap.parse_args()
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="sd-stop-") as tmp:
            n = 0
            for after in (float(a) for a in args.after.split(",")):
                got: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
                for _ in range(args.runs):
                    for index in (True, False):
                        n += 1
                        base = Path(tmp) / str(n)
                        base.mkdir()
                        got[index].append(one_stop(base, index, after))
                row = {"after": after}
                for index, name in ((True, "index"), (False, "none")):
                    row[f"{name}_stop_s"] = statistics.median(t for t, _ in got[index])
                    row[f"{name}_cpu_s"] = statistics.median(c for _, c in got[index])
                rows.append(row)
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    print(f"beside {args.busy} busy processes, median of {args.runs} stops each")
    print("| stopped after | stop, with the indexer | stop, no index (baseline) | ratio | CPU, with | CPU, no index |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['after']:.1f} s | {r['index_stop_s'] * 1000:.0f} ms | {r['none_stop_s'] * 1000:.0f} ms | "
              f"{r['index_stop_s'] / r['none_stop_s']:.1f}x | {r['index_cpu_s'] * 1000:.0f} ms | {r['none_cpu_s'] * 1000:.0f} ms |")
    benchlib.save(args.out, {"busy": args.busy, "runs": args.runs, "rows": rows, "load": os.getloadavg()})


if __name__ == "__main__":
    main()
