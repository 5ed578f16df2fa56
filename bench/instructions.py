"""Instructions a server executes per Append, counted by valgrind's callgrind.

    python bench/instructions.py                          # sessiond and the floor, batch 1 and 16
    python bench/instructions.py --baseline 62b20fa       # and that revision's daemon
    python bench/instructions.py --batches 1 --requests 500 --out bench/results/instructions.json

A time or a CPU figure on this shared 2-core machine moves by a third between
runs; an instruction count does not move with the load. Two counts come out of
each run. The read path's (``READ_PATH``: a request's framing, decoding,
admission, routing and queueing) agrees within 0.6 % between runs of the same
code, so a cost of a fraction of a microsecond a request shows there, where
``append_load``'s ratios only tell a loss of a fifth from the noise. The whole
process's adds the drain, the answers and the follower; under valgrind (a
request some 50x slower) the daemon's timers and the follower's passes add
more or less to it, so it moves up to 15 % between runs. ``make bench-check``
uses both.

How: each server (``sessiond serve``, or ``floor_server.py``: decode, write,
answer) runs under ``valgrind --tool=callgrind``, driven by ``append_load``'s
own client (one process, 1 KB entries, one request in flight). It runs twice,
for R requests and for 3R, and the first count is subtracted from the second:
start-up, imports and the first requests' warm-up cancel, and what is left is
2R requests in steady state. Only the server's process is counted, its threads
included (the search indexer's child process is not, as in ``append_load``'s
CPU figures). User-space instructions only: the syscalls' kernel time is not in
it (``append_load`` measures that with the rest).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import append_load
import benchlib

READ_PATH = "__pyx_f_6uvloop_4loop___uv_stream_on_read"
"""uvloop's callback for bytes read from a client socket: everything a request
does from its bytes to its queueing (framing, decoding, admission, routing;
the floor's write and answer too) runs inside it. The drain, the answers and
the follower run from the loop's other handles."""


def callgrind_counts(out: Path) -> tuple[int, int | None]:
    """The instruction total a callgrind output file records, and the part
    inside ``READ_PATH`` (inclusive; None where uvloop's build names it otherwise)."""
    text = out.read_text(errors="replace")
    found = re.search(r"^(?:totals|summary):\s*(\d+)", text, re.MULTILINE)
    if found is None:
        raise SystemExit(f"no instruction total in {out}")
    annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(out)],
                               capture_output=True, text=True).stdout
    read = None
    for line in annotated.splitlines():
        if f":{READ_PATH} " in line or line.rstrip().endswith(f":{READ_PATH}"):
            read = int(line.split()[0].replace(",", ""))
            break
    return int(found.group(1)), read


def count(level: str, batch: int, requests: int) -> tuple[int, int | None]:
    """Instructions of one server process (``written``, ``written@REV`` or
    ``floor``) over its whole life (start-up, ``requests`` Appends of ``batch``
    entries from one client, and its exit), and the part in ``READ_PATH``:
    ``append_load.one_run`` under callgrind."""
    with tempfile.TemporaryDirectory(prefix="sdi-", dir="/tmp") as tmp:
        out = Path(tmp) / "callgrind.out"
        args = argparse.Namespace(size=1024, batch=batch, window=1, flush_interval=100.0, daemon_arg=[])
        append_load.one_run(level, 1, requests * batch, args,
                            wrap=["valgrind", "--tool=callgrind", "--quiet", f"--callgrind-out-file={out}"])
        return callgrind_counts(out)


def per_request(level: str, batch: int, requests: int) -> tuple[float, float | None]:
    """Instructions per Append in steady state, (count of 3R requests - count
    of R) / 2R: in all, and in ``READ_PATH`` (None where it was not found)."""
    (short, short_read), (long, long_read) = count(level, batch, requests), count(level, batch, 3 * requests)
    read = None if short_read is None or long_read is None else (long_read - short_read) / (2 * requests)
    return (long - short) / (2 * requests), read


def measure(levels: list[str], batches: list[int], requests: int, runs: int = 1) -> dict[str, float]:
    """For each level and batch (medians of ``runs``): ``instr <level>/b<batch>``,
    a request's instructions, and ``instr read <level>/b<batch>``, those in
    ``READ_PATH``. When the floor is among the levels, the ratios to the floor's:
    ``instr/floor@b<batch>`` and ``instr read/floor@b<batch>`` for ``written``
    (``instr <level>/floor@b<batch>`` and so on for another level).

    The two are judged apart because they are not equally steady. The read
    path runs once per request whatever the timing: its count moves under 1 %
    between runs. The whole count includes what the loop's timers and the
    follower's passes do, which under valgrind (a request some 50x slower)
    depends on timing: single runs moved up to 15 %, medians of three 3-10 %."""
    figures: dict[str, float] = {}
    for batch in batches:
        for level in levels:
            totals, reads = [], []
            for _ in range(runs):
                t = time.monotonic()
                total, read = per_request(level, batch, requests)
                totals.append(total)
                if read is not None:
                    reads.append(read)
                shown = f", {read:,.0f} in reading" if read is not None else ""
                print(f"  {level} batch {batch}: {total:,.0f} instructions a request{shown} ({time.monotonic() - t:.0f} s)",
                      file=sys.stderr, flush=True)
            figures[f"instr {level}/b{batch}"] = statistics.median(totals)
            if len(reads) == runs:
                figures[f"instr read {level}/b{batch}"] = statistics.median(reads)
        for kind in ("instr", "instr read"):
            floor = figures.get(f"{kind} floor/b{batch}")
            if not floor:
                continue
            for level in levels:
                mine = figures.get(f"{kind} {level}/b{batch}")
                if level != "floor" and mine is not None:
                    name = f"{kind}/floor" if level == "written" else f"{kind} {level}/floor"
                    figures[f"{name}@b{batch}"] = mine / floor
    return figures


def has_valgrind() -> bool:
    """Whether valgrind and its ``callgrind_annotate`` (the read path's count) are installed."""
    return shutil.which("valgrind") is not None and shutil.which("callgrind_annotate") is not None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--requests", type=int, default=1000, help="R: the runs make R and 3R requests")
    ap.add_argument("--runs", type=int, default=1, help="repeat each count, report the median")
    ap.add_argument("--baseline", default=None, help="also count this git revision's daemon (written@REV)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if not has_valgrind():
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    levels = ["written", *([f"written@{args.baseline}"] if args.baseline else []), "floor"]
    batches = [int(b) for b in args.batches.split(",")]
    started, load0 = time.monotonic(), os.getloadavg()[0]
    figures = measure(levels, batches, args.requests, args.runs)
    print(f"\ninstructions per request, callgrind ({time.monotonic() - started:.0f} s; "
          f"{args.requests} and {3 * args.requests} requests subtracted):")
    print("| level | batch | per request | per entry | vs floor | reading, per request | vs floor |\n"
          "|---|---:|---:|---:|---:|---:|---:|")
    for batch in batches:
        floor, floor_read = figures[f"instr floor/b{batch}"], figures.get(f"instr read floor/b{batch}")
        for level in levels:
            n, read = figures[f"instr {level}/b{batch}"], figures.get(f"instr read {level}/b{batch}")
            reading = f"{read:,.0f} | {read / floor_read:.2f}x" if read is not None and floor_read else "- | -"
            print(f"| {level} | {batch} | {n:,.0f} | {n / batch:,.0f} | {n / floor:.2f}x | {reading} |")
    if args.out:
        benchlib.save(args.out, {"command": " ".join(sys.argv), "requests": args.requests, "runs": args.runs,
                                 "load_avg": [round(load0, 2), round(os.getloadavg()[0], 2)],
                                 "figures": {k: round(v, 3) for k, v in figures.items()}})


if __name__ == "__main__":
    main()
