"""A daemon's whole life, short and long: its CPU from start to exit, its
search indexer's included.

    python bench/daemon_life.py [--runs 9] [--live 0.3,3] [--rev HEAD]

Each run starts a daemon on a fresh store, appends one entry (``written``),
asks ``status``, lives ``--live`` seconds, and is stopped with SIGTERM; its
cost is the CPU (user + system) of the daemon and of every process it started
and reaped (the indexer), and the wall time from spawn to its socket
answering. Three daemons, interleaved run by run so a noisy stretch hits
them alike: this tree's, ``--rev``'s (a checkout of the repository's
revision, run from it: the baseline), and this tree's with no search index
(``search_index = false``: the floor). Medians over ``--runs``; writes
``bench/results/daemon_life.json``.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import benchlib

HERE = Path(__file__).resolve().parent


def one_life(base: Path, live: float, source: Path | None, index: bool) -> tuple[float, float]:
    """(seconds from spawn to the socket answering, CPU seconds of the whole life)."""
    from sessiond.client.connection import Client
    from sessiond.wire import messages as m

    config = base / "config.toml"
    config.write_text(f"search_index = {'true' if index else 'false'}\n")
    sock, root = base / "run" / "s.sock", base / "root"
    cpu0 = benchlib.children_cpu()
    t0 = time.perf_counter()
    proc = benchlib.start_daemon(sock, root, "--config", str(config), source=source)
    up = time.perf_counter() - t0
    line = b'{"type":"user","uuid":"%s","message":{"role":"user","content":"hello"}}' % str(uuid.uuid4()).encode()
    with Client(sock, root=root, autostart=False, timeout=20).connect() as c:
        c.call(m.Append(id=c.next_id(), session=str(uuid.uuid4()), cwd="/work/life", durability="written",
                        entries=[line]))
        c.status()
    time.sleep(live)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    return up, benchlib.children_cpu() - cpu0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--live", default="0.3,3", help="seconds each daemon lives after its first answers")
    ap.add_argument("--rev", default="HEAD", help="the baseline: a revision of this repository")
    ap.add_argument("--out", default=str(HERE / "results" / "daemon_life.json"))
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="sd-life-", dir="/tmp") as tmp:
        baseline = benchlib.baseline_tree(args.rev, Path(tmp) / "baseline")
        kinds = {"this tree": (None, True), f"{args.rev} (baseline)": (baseline, True), "no index (floor)": (None, False)}
        n = 0
        for live in (float(s) for s in args.live.split(",")):
            got: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
            for _ in range(args.runs):
                for kind, (source, index) in kinds.items():
                    n += 1
                    base = Path(tmp) / str(n)
                    base.mkdir()
                    got[kind].append(one_life(base, live, source, index))
            for kind, runs in got.items():
                rows.append({"live": live, "daemon": kind, "upMs": statistics.median(r[0] for r in runs) * 1000,
                             "cpuMs": statistics.median(r[1] for r in runs) * 1000})
            print(f"lives {live:g} s after its first answers ({args.runs} runs):", file=sys.stderr)
            for row in rows[-len(kinds):]:
                print(f"  {row['daemon']:<22} up {row['upMs']:6.0f} ms   CPU {row['cpuMs']:6.0f} ms", file=sys.stderr)
    benchlib.save(args.out, {"runs": args.runs, "rev": args.rev, "rows": rows})


if __name__ == "__main__":
    main()
