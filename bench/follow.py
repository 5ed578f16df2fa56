"""Following a foreign writer: lag to JetStream, CPU per MB, watch cost.

A stand-in for Claude Code (this process, plain O_APPEND writes of ~1 KB whole
lines, round-robin over N session files of one project dir) writes into the
root of a daemon mirroring to a local nats-server. Every line carries the
``time.time()`` it was written at; a JetStream subscriber on the stream's
subjects takes each stored message and records, per line in it, the delay from
the write to its delivery from the stream (a stream delivers only what it has
stored, so this includes the publish acknowledgement). CPU is the daemon's
user + system time over the run, per MB followed.

Then the watch cost: a tree of 10,000 sessions (100 project dirs, every tenth
session with a subagent file), a fresh daemon on it: inotify watches held
(status ``follow``), the daemon's RSS, and the time from its start until it
follows every file.

    python bench/follow.py                     # 1, 100, 1000 files; 3 runs each
    python bench/follow.py --files 100 --runs 1 --seconds 3
    mkdir -p /tmp/base/sessiond && git archive main | tar -x -C /tmp/base/sessiond
    python bench/follow.py --baseline /tmp/base  # each run beside one of that code's daemon

With ``--baseline DIR`` (a directory holding a ``sessiond`` package) every run
of this code's daemon is interleaved with one of the baseline's, under the same
load, and both medians are reported.

Prints a table (median of runs) and writes bench/results/follow.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchlib import cpu_seconds, start_daemon  # noqa: E402
from mirror import start_nats  # noqa: E402


def status(sock: Path):
    from sessiond.client import Client

    with Client(sock, autostart=False, timeout=30) as c:
        return c.status()


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for x in f:
            if x.startswith("VmRSS:"):
                return int(x.split()[1]) / 1024
    return 0.0


def write_load(project: Path, files: int, seconds: float, rate: int, stop: threading.Event) -> int:
    """Whole lines, ~1 KB each, ``rate`` lines/s over ``files`` files."""
    paths = [project / f"{uuid.uuid4()}.jsonl" for _ in range(files)]
    fds = [os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600) for p in paths]
    pad = "x" * 900
    written, i, t0 = 0, 0, time.perf_counter()
    try:
        while not stop.is_set() and time.perf_counter() - t0 < seconds:
            due = t0 + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            data = json.dumps({"type": "user", "uuid": str(uuid.uuid4()), "t": time.time(), "pad": pad}).encode() + b"\n"
            written += os.write(fds[i % files], data)
            i += 1
    finally:
        for fd in fds:
            os.close(fd)
    return written


async def collect(url: str, stream: str, prefix: str, lags: list[float], ready: threading.Event, done: asyncio.Event) -> None:
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    while True:
        try:
            await js.stream_info(stream)
            break
        except Exception:
            await asyncio.sleep(0.05)

    async def on_msg(msg) -> None:
        now = time.time()
        for raw in msg.data.splitlines():
            try:
                lags.append(now - json.loads(raw)["t"])
            except (ValueError, KeyError):
                pass

    sub = await js.subscribe(f"{prefix}.>", stream=stream, cb=on_msg, ordered_consumer=True)
    ready.set()
    await done.wait()
    await asyncio.sleep(2.0)  # the tail of the run arrives
    await sub.unsubscribe()
    await nc.close()


def one_run(files: int, seconds: float, rate: int, port: int, code: str | None = None) -> dict:
    """One run; ``code``: a directory whose ``sessiond`` the daemon runs instead of this one."""
    base = Path(tempfile.mkdtemp(prefix="sdf-", dir="/tmp"))
    os.chmod(base, 0o700)
    tag = base.name.replace("-", "").replace("_", "")
    stream, prefix = f"BF_{tag}", f"bf{tag}"
    cfg = base / "config.toml"
    cfg.write_text(f'[mirror]\nservers = ["nats://127.0.0.1:{port}"]\nstream = "{stream}"\nsubject_prefix = "{prefix}"\n')
    sock, root = base / "run" / "s.sock", base / "root"
    project = root / "projects" / "-bench-follow"
    project.mkdir(parents=True)
    saved = os.environ.get("PYTHONPATH")
    if code is not None:
        os.environ["PYTHONPATH"] = code
    try:
        daemon = start_daemon(sock, root, "--config", str(cfg))
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    lags: list[float] = []
    try:
        deadline = time.monotonic() + 15
        while not status(sock).mirror["connected"]:
            if time.monotonic() > deadline:
                raise SystemExit("the mirror did not connect")
            time.sleep(0.02)
        ready, stop = threading.Event(), threading.Event()
        loop = asyncio.new_event_loop()
        done = asyncio.Event()

        def subscriber() -> None:
            loop.run_until_complete(collect(f"nats://127.0.0.1:{port}", stream, prefix, lags, ready, done))

        t = threading.Thread(target=subscriber)
        t.start()
        ready.wait(30)
        cpu0 = cpu_seconds(daemon.pid)
        written = write_load(project, files, seconds, rate, stop)
        deadline = time.monotonic() + 60
        while True:
            st = status(sock)
            if st.follow["bytes"] >= written and st.mirror["lagBytes"] == 0 and st.mirror["queuedBytes"] == 0:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"the mirror did not catch up: {st.follow} {st.mirror}")
            time.sleep(0.01)
        cpu = cpu_seconds(daemon.pid) - cpu0
        loop.call_soon_threadsafe(done.set)
        t.join(30)
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        shutil.rmtree(base, ignore_errors=True)
    lags.sort()
    n = len(lags)
    return {
        "lines": n, "mb": written / 1e6,
        "p50_ms": lags[n // 2] * 1000 if n else None,
        "p99_ms": lags[min(n - 1, int(n * 0.99))] * 1000 if n else None,
        "cpu_s_per_mb": cpu / (written / 1e6),
    }


def idle_rss() -> float:
    """RSS of a daemon on an empty root: the baseline of the watch cost."""
    base = Path(tempfile.mkdtemp(prefix="sdw-", dir="/tmp"))
    os.chmod(base, 0o700)
    daemon = start_daemon(base / "run" / "s.sock", base / "root")
    try:
        status(base / "run" / "s.sock")
        return rss_mb(daemon.pid)
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        shutil.rmtree(base, ignore_errors=True)


def watch_cost(sessions: int = 10_000, projects: int = 100, code: str | None = None, idle_s: float = 10.0) -> dict:
    """A fresh daemon on a tree of ``sessions``: the watches it holds, its RSS,
    how soon it follows every file, and its CPU per second once idle (what
    following costs when nothing is written)."""
    empty = idle_rss()
    base = Path(tempfile.mkdtemp(prefix="sdw-", dir="/tmp"))
    os.chmod(base, 0o700)
    sock, root = base / "run" / "s.sock", base / "root"
    line = json.dumps({"type": "user", "message": {"role": "user", "content": "hi"}}).encode() + b"\n"
    for k in range(sessions):
        project = root / "projects" / f"-p{k % projects}"
        project.mkdir(parents=True, exist_ok=True)
        sid = str(uuid.uuid4())
        (project / f"{sid}.jsonl").write_bytes(line * 3)
        if k % 10 == 0:
            (project / sid / "subagents").mkdir(parents=True)
            (project / sid / "subagents" / "agent-a1.jsonl").write_bytes(line)
    expected = sessions + (sessions + 9) // 10
    t0 = time.perf_counter()
    daemon = start_daemon(sock, root, timeout=120, source=Path(code) if code else None)
    try:
        deadline = time.monotonic() + 300
        while (st := status(sock)).follow["files"] < expected:  # the start walk runs after the socket answers
            if time.monotonic() > deadline:
                raise SystemExit(f"the follower did not find the tree: {st.follow}")
            time.sleep(0.05)
        ready = time.perf_counter() - t0
        time.sleep(2)  # the start-up's stragglers (catalog, index re-stat) done
        cpu0 = cpu_seconds(daemon.pid)
        time.sleep(idle_s)
        idle = (cpu_seconds(daemon.pid) - cpu0) / idle_s
        out = {"sessions": sessions, "files": st.follow["files"], "watches": st.follow["watches"],
               "rss_mb": rss_mb(daemon.pid), "rss_empty_root_mb": empty, "ready_s": ready,
               "idle_cpu_ms_per_s": idle * 1000}
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        shutil.rmtree(base, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, nargs="*", default=[1, 100, 1000])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rate", type=int, default=1000, help="lines per second, over all files (~1 KB each)")
    ap.add_argument("--no-watch-cost", action="store_true")
    ap.add_argument("--watch-only", action="store_true", help="only the watch cost (with --baseline: both codes, interleaved)")
    ap.add_argument("--sessions", type=int, default=10_000, help="sessions of the watch-cost tree")
    ap.add_argument("--out", default=str(HERE / "results" / "follow.json"))
    ap.add_argument("--baseline", help="a directory holding a sessiond package: its runs interleaved with these")
    args = ap.parse_args()
    nats_base = Path(tempfile.mkdtemp(prefix="sdfn-", dir="/tmp"))
    nats, port = start_nats(nats_base)
    results: dict = {"rate_lines_per_s": args.rate, "seconds": args.seconds, "runs": args.runs, "files": {},
                     "load_average": os.getloadavg()}
    if args.baseline:
        results["baseline"] = {}
    try:
        for files in ([] if args.watch_only else args.files):
            runs, base = [], []
            for _ in range(args.runs):
                if args.baseline:
                    base.append(one_run(files, args.seconds, args.rate, port, code=args.baseline))
                runs.append(one_run(files, args.seconds, args.rate, port))
            for name, got, into in (("baseline", base, results.get("baseline")), ("this", runs, results["files"])):
                if not got:
                    continue
                med = {k: statistics.median(r[k] for r in got) for k in ("p50_ms", "p99_ms", "cpu_s_per_mb")}
                into[str(files)] = {"median": med, "runs": got}
                print(f"{files:>5} files ({name}): lag p50 {med['p50_ms']:.1f} ms  p99 {med['p99_ms']:.1f} ms  "
                      f"daemon CPU {med['cpu_s_per_mb'] * 1000:.0f} ms/MB", flush=True)
    finally:
        nats.terminate()
        nats.wait(timeout=30)
        shutil.rmtree(nats_base, ignore_errors=True)
    if not args.no_watch_cost:
        for _ in range(args.runs if args.watch_only else 1):
            for name, code in ((("baseline", args.baseline),) if args.baseline else ()) + (("this", None),):
                wc = watch_cost(args.sessions, code=code)
                results.setdefault("watch_cost_runs", {}).setdefault(name, []).append(wc)
                print(f"watch cost ({name}): {wc['sessions']} sessions, {wc['files']} files followed, {wc['watches']} inotify "
                      f"watches, RSS {wc['rss_mb']:.0f} MB (empty root: {wc['rss_empty_root_mb']:.0f} MB), all followed "
                      f"{wc['ready_s']:.1f} s after start, idle CPU {wc['idle_cpu_ms_per_s']:.1f} ms/s", flush=True)
        results["watch_cost"] = {name: {k: statistics.median(r[k] for r in got) for k in got[0]}
                                 for name, got in results["watch_cost_runs"].items()}
    results["load_average_after"] = os.getloadavg()
    out = Path(args.out)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
