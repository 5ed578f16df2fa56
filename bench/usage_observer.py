"""What the spend book's write observer costs the event loop per append, here
and at another revision, in the same run.

The observer runs on the loop for every write (the daemon's own appends and
the follower's lines). Every line of ``tests/corpus/claude-code`` is "written"
to a transcript the book has read, 4 lines an append (a burst's batch), and
each call to ``SpendBook.written`` is timed: the median and the 99th percentile
of the calls, the median of ``--runs`` runs. The other revision's
``sessiond/daemon/spend.py`` is loaded from git (``--rev``, default ``main``).
Where the observer only queues, the queue is drained untimed every 256
appends (a worker's part, off the loop), so it stays below its bound.

    python bench/usage_observer.py [--rev main] [--runs 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from sessiond.daemon import spend as here  # noqa: E402
from tests.spend.tree import CORPUS  # noqa: E402


def other(rev: str):
    source = subprocess.run(["git", "-C", str(HERE.parent), "show", f"{rev}:sessiond/daemon/spend.py"],
                            capture_output=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "spend_at_rev.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("spend_at_rev", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_run(module, lines: list[bytes]) -> tuple[float, float]:
    root = Path(tempfile.mkdtemp())
    path = root / "projects" / "p" / "s.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    book = module.SpendBook(root)
    book.refresh()  # the file read (empty): written lines continue it
    if hasattr(book, "schedule"):
        book.schedule = lambda: None  # no worker here: the queue is only filled
    end, times = 0, []
    for i in range(0, len(lines), 4):
        batch = lines[i:i + 4]
        end += sum(map(len, batch)) + len(batch)
        t = time.perf_counter()
        book.written(path, batch, end)
        times.append(time.perf_counter() - t)
        if hasattr(book, "drain") and len(times) % 256 == 0:
            book.drain()  # (untimed: a worker's part) the queue stays below its bound, as it does in the daemon
    times.sort()
    return times[len(times) // 2], times[int(len(times) * 0.99)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rev", default="main")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    lines = [line for f in sorted(CORPUS.glob("*.jsonl")) for line in f.read_bytes().split(b"\n") if line]
    marked = sum(1 for line in lines if here.rules.MARKER in line)
    print(f"{len(lines):,} lines, {sum(map(len, lines)) / 1e6:.1f} MB, {marked:,} with usage, 4 lines an append")
    for name, module in ((args.rev, other(args.rev)), ("this tree", here)):
        runs = [one_run(module, lines) for _ in range(args.runs)]
        print(f"{name:>10}: the observer per append: median {statistics.median(r[0] for r in runs) * 1e6:.1f} us, "
              f"p99 {statistics.median(r[1] for r in runs) * 1e6:.1f} us")


if __name__ == "__main__":
    main()
