"""The write path's ratios against a checked-in baseline: ``make bench-check``.

    python bench/check.py                 # measure, compare, exit 1 on a regression
    python bench/check.py --record        # measure and write the baseline file

What it guards: the figures of issue 34, as ratios measured in the same run
(never times, which this shared machine moves by a third between runs):

- ``written / floor`` and ``written / redis``: sessiond's ``written`` appends
  (1 KB entries, batches of 16, through the real client) against the Python
  floor (``floor_server.py``) and Redis (AOF, ``appendfsync everysec``), with 1
  and 4 client processes (``append_load.one_run``); and with one entry a
  request, 1 client (``@1/b1``), where a request's own cost is all of it: a new
  cost per request, a sixteenth of each entry's at batch 16, shows there whole;
- ``cpu / floor cpu``: the daemon's CPU per entry over the floor's (lower is
  better: the figure a new per-entry cost moves first);
- ``watchers 1 / 0`` and ``watchers 10 / 0``: a writer's entries/s with 1 and
  10 watcher processes subscribed, over none (``watch.one_run``);
- ``watch cpu 10 / 0``: the CPU per entry of the writer, the daemon and the
  watchers together with 10 watchers, over the writer's and the daemon's with
  none (lower is better: what watching costs in CPU, which the load of a
  shared machine moves far less than it moves throughput);
- ``instr read / floor`` and ``instr / floor``: the instructions the daemon
  executes per request over the floor's, counted by callgrind at batch 1 and
  16 (``instructions.py``; lower is better), after the rounds, three counts
  each (the median). ``read`` is what runs inside uvloop's socket-read
  callback: a request's framing, decoding, admission, routing and queueing,
  about half of it. The load does not move that count (under 1 % between
  runs), so its margin is 3 % and a cost of a fraction of a microsecond a
  request fails the check, where the CPU ratios only catch one of a fifth. The
  whole count adds the drain, the answers, the observers and the follower,
  whose timers under valgrind move it up to a tenth: a coarse margin there.
  Skipped, with a message, where valgrind is not installed.

Each round runs every configuration once, interleaved (sessiond, floor, Redis;
0, 1, 10 watchers), so a ratio compares runs made a second apart; a ratio is
the median over the rounds of its per-round value. A ratio fails when it is
worse than the baseline's by more than its margin (``MARGIN``: relative, chosen
from the spread of repeated runs of this script, see docs/benchmarks.md): the
message names the figure, both values and the margin. The load average is
printed beside the figures; with ``--max-load``, a run whose median load is
over it is not judged (exit 2) rather than failed on a busy machine's noise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import append_load
import benchlib
import instructions
import watch

HERE = Path(__file__).resolve().parent
BASELINE = HERE / "results" / "check-baseline.json"

MARGIN = {
    "written/floor": 0.40,
    "written/redis": 0.25,
    "cpu/floor": 0.20,
    "watchers1/0": 0.35,
    "watchers10/0": 0.40,
    "watch cpu10/0": 0.35,
    "instr read/floor": 0.03,
    "instr/floor": 0.20,
}
"""How much worse than the baseline a ratio may come out before the check
fails, relative (0.25: a quarter). Chosen from repeated runs of this script
on the same code on the shared 2-core machine (docs/benchmarks.md, "The write
path's check"): each margin is above the largest shortfall of one run's
median from the baseline seen there (and in earlier runs), so a busy machine
does not fail it. The daemon's CPU per entry against the floor's moved under
10 % between runs: a new cost of a fifth of it is caught. Throughput ratios
move more (entries/s against the floor's 0.24-0.44 in three runs, 10 watchers
against none 0.20-0.33): only a loss of a third or more is told from noise.
What watching costs in CPU (``watch cpu10/0``) moved 2.0-3.9 between rounds at
load 10-12 (medians of 6 rounds 2.9 with watch coalescing, 4.6 without): a
margin of 35 % catches coalescing lost, not one busy round. The read path's
instruction count moved under 0.6 % across eight runs: 3 % is well clear of that. The whole
count's medians of three moved 7.1-7.7x the floor's at batch 1 and 8.3-9.3x at
batch 16 over one day's runs: 20 % above the worst of them."""

LOWER_IS_BETTER = {"cpu/floor", "watch cpu10/0", "instr read/floor", "instr/floor"}


def append_ratios(clients: int, total: int, has_redis: bool, batch: int = 16) -> dict[str, float]:
    """One round of sessiond ``written`` against the floor (and Redis) with
    ``clients`` processes, ``batch`` entries a request. The figures' names end
    in ``@<clients>``, and ``/b<batch>`` when the batch is not 16."""
    args = argparse.Namespace(size=1024, batch=batch, window=1, mix=False, text=False, flush_interval=100.0,
                              daemon_arg=[])
    per = total // clients
    runs = {level: append_load.one_run(level, clients, per, args)
            for level in ("written", "floor", *(["redis"] if has_redis else []))}
    at = f"@{clients}" if batch == 16 else f"@{clients}/b{batch}"
    out = {
        f"written/floor{at}": runs["written"]["entries_per_s"] / runs["floor"]["entries_per_s"],
        f"cpu/floor{at}": runs["written"]["server_cpu_us_per_entry"] / runs["floor"]["server_cpu_us_per_entry"],
        f"written{at}": runs["written"]["entries_per_s"],
        f"written cpu{at}": runs["written"]["server_cpu_us_per_entry"],
        f"floor{at}": runs["floor"]["entries_per_s"],
        f"floor cpu{at}": runs["floor"]["server_cpu_us_per_entry"],
    }
    if has_redis:
        out[f"written/redis{at}"] = runs["written"]["entries_per_s"] / runs["redis"]["entries_per_s"]
        out[f"redis{at}"] = runs["redis"]["entries_per_s"]
    return out


def watch_ratios(entries: int) -> dict[str, float]:
    """One round of a writer with 0, 1 and 10 watchers."""
    runs = {}
    for n in (0, 1, 10):
        with tempfile.TemporaryDirectory(prefix="sdc-", dir="/tmp") as tmp:
            runs[n] = watch.one_run(Path(tmp), n, entries, 16)
    return {
        "watchers1/0": runs[1]["entries_per_s"] / runs[0]["entries_per_s"],
        "watchers10/0": runs[10]["entries_per_s"] / runs[0]["entries_per_s"],
        "watch cpu10/0": _cpu(runs[10]) / _cpu(runs[0]),
        "watchers p99 ms@10": runs[10]["p99_ms"] or 0.0,
        "watch0": runs[0]["entries_per_s"],
    }


def _cpu(run: dict) -> float:
    """Every process's CPU per entry in one ``watch.one_run``: writer, daemon, watchers."""
    return run["writer_cpu_us_per_entry"] + run["cpu_us_per_entry"] + (run["watchers_cpu_us_per_entry"] or 0.0)


def measure(rounds: int, clients: list[int], total: int, watch_entries: int, has_redis: bool,
            batch1_total: int = 0) -> tuple[dict, list]:
    per_round: dict[str, list[float]] = {}
    load = []
    for r in range(rounds):
        load.append(os.getloadavg()[0])
        values: dict[str, float] = {}
        for c in clients:
            values.update(append_ratios(c, total, has_redis))
        if batch1_total:
            values.update(append_ratios(1, batch1_total, has_redis, batch=1))
        values.update(watch_ratios(watch_entries))
        for k, v in values.items():
            per_round.setdefault(k, []).append(v)
        print(f"round {r + 1}/{rounds} (load {load[-1]:.1f}): "
              + ", ".join(f"{k} {v:.2f}" for k, v in values.items() if "/" in k), flush=True)
    return {k: statistics.median(v) for k, v in per_round.items()}, load


def judge(figures: dict[str, float], baseline: dict[str, float]) -> list[str]:
    """The regressions: every checked ratio worse than the baseline's by more than its margin."""
    failures = []
    for key, base in baseline.items():
        name = key.split("@")[0]
        if name not in MARGIN or key not in figures:
            continue
        now, margin = figures[key], MARGIN[name]
        if name in LOWER_IS_BETTER:
            bad = now > base * (1 + margin)
        else:
            bad = now < base * (1 - margin)
        if bad:
            failures.append(f"{key}: {now:.2f} against the baseline's {base:.2f} (margin {margin:.0%})")
    return failures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--clients", default="1,4")
    ap.add_argument("--total", type=int, default=64_000, help="entries per append configuration")
    ap.add_argument("--watch-entries", type=int, default=8_000)
    ap.add_argument("--batch1-total", type=int, default=6_000,
                    help="entries of the one-entry-a-request configuration (1 client; 0: not measured)")
    ap.add_argument("--instr-requests", type=int, default=300,
                    help="R of the instruction counts (runs of R and 3R requests; 0: not counted)")
    ap.add_argument("--instr-runs", type=int, default=3, help="counts per figure, the median taken")
    ap.add_argument("--baseline", default=str(BASELINE))
    ap.add_argument("--record", action="store_true", help="write the figures as the new baseline")
    ap.add_argument("--max-load", type=float, default=None,
                    help="a 1-minute load average above which the check does not judge (exit 2); default: always judge")
    ap.add_argument("--out", default=None, help="also write this run's figures here (JSON)")
    args = ap.parse_args()
    has_redis = benchlib.has_redis()
    if not has_redis:
        print("redis-server not found: the ratios against Redis are not measured", file=sys.stderr)
    clients = [int(x) for x in args.clients.split(",")]
    started = time.monotonic()
    figures, load = measure(args.rounds, clients, args.total, args.watch_entries, has_redis, args.batch1_total)
    if args.instr_requests and instructions.has_valgrind():
        print("instruction counts (callgrind):", flush=True)
        figures.update(instructions.measure(["written", "floor"], [1, 16], args.instr_requests, args.instr_runs))
        if "instr read/floor@b1" not in figures:
            print(f"uvloop's read callback ({instructions.READ_PATH}) was not found in the counts: "
                  "the read path's ratios are not measured", file=sys.stderr)
    elif args.instr_requests:
        print("valgrind not found: the instruction counts are not measured", file=sys.stderr)
    took = time.monotonic() - started
    checked = {k: round(v, 3) for k, v in figures.items() if k.split("@")[0] in MARGIN}
    print(f"\nmedians of {args.rounds} rounds ({took:.0f} s; load average {min(load):.1f}-{max(load):.1f}):")
    for k, v in figures.items():
        print(f"  {k:22} {v:12,.2f}")
    result = {"rounds": args.rounds, "clients": clients, "total": args.total, "watch_entries": args.watch_entries,
              "batch1_total": args.batch1_total, "instr_requests": args.instr_requests,
              "load_avg": [round(x, 2) for x in load], "ratios": checked,
              "figures": {k: round(v, 3) for k, v in figures.items()}}
    if args.out:
        benchlib.save(args.out, result)
    if args.record:
        benchlib.save(args.baseline, result)
        print(f"baseline written: {args.baseline}")
        return
    baseline = json.loads(Path(args.baseline).read_text())["ratios"]
    if args.max_load is not None and statistics.median(load) > args.max_load:
        print(f"\nNOT JUDGED: the load average ({statistics.median(load):.1f}) is over {args.max_load:.1f}; "
              "run it again on a quieter machine", file=sys.stderr)
        sys.exit(2)
    failures = judge(figures, baseline)
    if failures:
        print("\n" + "!" * 72, file=sys.stderr)
        print("WRITE PATH REGRESSION: ratios worse than bench/results/check-baseline.json by more than the noise:",
              file=sys.stderr)
        for f in failures:
            print(f"  {f}", file=sys.stderr)
        print("!" * 72, file=sys.stderr)
        sys.exit(1)
    print("\nbench-check: every ratio within its margin of the baseline")


if __name__ == "__main__":
    main()
