"""Pieces every benchmark script uses: start a real daemon, time a function,
read a process's CPU time. Scripts run as ``python bench/<name>.py``, so this
directory is on ``sys.path`` and they ``import benchlib``."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

LEVEL_NAMES = {
    "queued": "sessiond queued", "written": "sessiond written", "durable": "sessiond durable",
    "floor": "Python floor (floor_server.py)", "redis": "Redis AOF (RESP)", "redis-py": "Redis AOF (redis-py)",
    "direct": "direct writes", "disk": "one sequential write + fdatasync",
    "direct-durable": "write + fdatasync per entry",
}
"""What each level of append_load is called in its tables and its chart."""


def start_daemon(sock: Path, root: Path, *serve_args: str, timeout: float = 20.0,
                 source: Path | None = None, wrap: Sequence[str] = ()) -> subprocess.Popen:
    """A ``sessiond serve`` on ``sock`` (its dir made 0700) and ``root``, once it answers.
    ``source``: a directory holding another ``sessiond`` package (a checkout of
    the baseline, see ``baseline_tree``) whose daemon runs instead of this one.
    ``wrap``: a command the daemon runs under (``valgrind ...``)."""
    env = None if source is None else {**os.environ, "PYTHONPATH": str(source)}
    # -P: ``-m`` would put the working directory first on the path, and from a
    # checkout that is this tree's ``sessiond``, not ``source``'s
    isolate = ["-P"] if source is not None else []
    return start_server(sock, [*wrap, sys.executable, *isolate, "-m", "sessiond.client.cli", "--socket", str(sock), "--root", str(root),
                               "serve", "--log-level", "warning", *serve_args], timeout, env=env)


def baseline_tree(rev: str, into: Path) -> Path:
    """The directory to put on ``PYTHONPATH`` for the repository's ``rev`` (for
    ``start_daemon(source=)``: a before/after comparison measured in the same
    run). The tree is unpacked as ``into/sessiond``: that is the package in
    revisions whose root was it, and holds the package ``sessiond/`` in those
    of today's layout (then it is the directory returned: put ``into`` on the
    path instead and Python would take the checkout's root for a namespace
    package and import the installed ``sessiond``, not the baseline).

    A ``git archive`` holds no built extension: each of this checkout's (the
    compiled dedup set) is copied in where the revision's C source is the same
    bytes, so both sides of a comparison run the same compiled code."""
    pkg = into / "sessiond"
    pkg.mkdir(parents=True)
    here = str(Path(__file__).resolve().parent)
    top = subprocess.run(["git", "-C", here, "rev-parse", "--show-toplevel"], check=True, capture_output=True,
                         text=True).stdout.strip()
    archive = subprocess.run(["git", "-C", top, "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(pkg)], input=archive, check=True)
    source = pkg if (pkg / "sessiond" / "__init__.py").is_file() else into
    for built in Path(top, "sessiond").rglob("*.so"):
        rel = built.relative_to(top)
        c_source = Path(top, rel.parent, built.name.split(".")[0] + ".c")
        theirs = source / rel.parent / c_source.name
        if c_source.is_file() and theirs.is_file() and theirs.read_bytes() == c_source.read_bytes():
            shutil.copy2(built, source / rel)
    return source


def start_server(sock: Path, cmd: list[str], timeout: float = 20.0, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Run ``cmd``, a server of sessiond's wire on ``sock``, until it accepts connections."""
    from sessiond.client.autostart import socket_answers

    sock.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + timeout
    while not socket_answers(sock):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise SystemExit(f"{' '.join(cmd[:4])} ... did not start (exit {proc.poll()})")
        time.sleep(0.01)
    return proc


def timed(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    """Median wall time of ``runs`` calls, and the last result."""
    times, result = [], None
    for _ in range(runs):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def pct(xs: list[float], p: float) -> float:
    """The ``p``-th percentile of ``xs`` (nearest rank)."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    """User + system CPU seconds of every child process reaped so far (and what
    they reaped in turn): taken before and after a child's run, its cost."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def cpu_seconds_fine(pid: int) -> float:
    """User + system CPU seconds of a process's live threads, to the nanosecond
    (``/proc/<pid>/task/*/schedstat``): ``cpu_seconds`` counts in clock ticks
    (10 ms), too coarse for a run of a fraction of a second. Threads that
    exited are not counted; falls back to ``cpu_seconds`` without schedstat."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, IndexError, ValueError):
                continue
    except OSError:
        return cpu_seconds(pid)
    return total / 1e9 if total else cpu_seconds(pid)


def save(out: str | Path, data: dict) -> None:
    """Write a benchmark's results as indented JSON (its directory made)."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


def has_redis() -> bool:
    """Whether ``redis-server`` is on PATH (the Redis baselines need it)."""
    import shutil

    return shutil.which("redis-server") is not None
