"""The Agent SDK's SessionStore: ``SessiondSessionStore`` against the SDK's own
``InMemorySessionStore`` and a Redis-backed store, all driven the same way.

    python bench/agentsdk_store.py                      # 3 runs, 10k entries, 10k sessions
    python bench/agentsdk_store.py --runs 1 --entries 2000 --sessions 1000
    python bench/agentsdk_store.py --stores sessiond,sessiond@<rev>,inmemory,redis   # before/after

Each run starts each store fresh (a real daemon on a temp root and socket; a
redis-server on a temp Unix socket with ``appendonly yes``, ``appendfsync
everysec``; the in-memory store needs no server) and drives it from a worker
process of this script through the SDK's ``SessionStore`` methods:

- **long session**: 10,000 entries of a real Claude Code transcript
  (``tests/corpus/claude-code``, copied with fresh uuids until there are enough),
  appended in the batches the SDK would hand the store: ``eager`` (the CLI's
  mirror frames, entries written within the same 100 ms: 1 to 13 entries, the
  ``session_store_flush="eager"`` mode) or ``turn`` (one batch a turn, up to the
  SDK batcher's 500 entries: its default ``"batched"`` mode); the latency of
  each ``append`` call and entries/s over the whole session, one call at a time
  (the SDK's batcher never has two appends in flight);
- **load** of that session, every entry, ``--calls`` times;
- **listing**: ``list_sessions`` (and ``list_session_summaries`` where the store
  has it) of a project of 10,000 sessions, each written by one ``append`` of a
  first turn, ``--calls`` times.

The Redis store is the design of the SDK's reference Redis adapter (the
``RedisSessionStore`` of the SDK's ``examples/session_stores``, mirroring the
TypeScript SDK's): a list per key (``RPUSH`` of one JSON string per entry, with
a ``ZADD`` of the session's mtime to a sorted set per project in the same
``MULTI``), ``LRANGE 0 -1`` to load, ``ZRANGE ... WITHSCORES`` to list; redis-py's
asyncio client with ``decode_responses=True``, as that adapter asks. It keeps no
summaries (the reference adapter has no ``list_session_summaries``).

``sessiond@REV``: the adapter as it was at git revision REV (its tree unpacked
and put first on the worker's ``PYTHONPATH``), on today's daemon, in the same run.

Prints the tables (medians over runs of each run's p50/p99) and writes
bench/results/agentsdk_store.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import benchlib
from benchlib import cpu_seconds, pct

HERE = Path(__file__).resolve().parent
CORPUS = HERE.parent / "tests" / "corpus" / "claude-code"
TRANSCRIPT = "blackgirlbytes__planetfall-seed-signalkit__84-da75cf4015-2-full.jsonl"
"""The real transcript the entries come from: the corpus file with the most
entry types (assistant, user, attachment, system, titles, modes, snapshots...)."""
PROJECT = "-home-dev-big-project"
SDK_MAX_BATCH = 500
"""The SDK batcher's eager-flush threshold (``MAX_PENDING_ENTRIES``)."""
STORE_NAMES = {"sessiond": "sessiond (SessiondSessionStore)", "inmemory": "SDK InMemorySessionStore",
               "redis": "Redis (reference adapter design)"}


# --------------------------------------------------------------------- workload


def _when(entry: dict[str, Any]) -> float | None:
    stamp = entry.get("timestamp")
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _is_prompt(entry: dict[str, Any]) -> bool:
    """A user's typed prompt (a turn starts there), not a tool result."""
    if entry.get("type") != "user" or entry.get("isMeta"):
        return False
    content = entry.get("message", {}).get("content")
    return isinstance(content, str) or (isinstance(content, list) and not any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content))


def batch_sizes(entries: list[dict[str, Any]], batching: str) -> list[int]:
    """How the SDK would have handed ``entries`` to its store: ``eager``, one
    batch per 100 ms of the transcript's timestamps (the CLI's mirror frames);
    ``turn``, one batch per turn (prompt to prompt), at most ``SDK_MAX_BATCH``."""
    sizes: list[int] = []
    count, start = 0, None
    for e in entries:
        t = _when(e)
        new = (start is not None and t is not None and t - start > 0.1) if batching == "eager" else (
            _is_prompt(e) or count >= SDK_MAX_BATCH)
        if count and new:
            sizes.append(count)
            count, start = 0, None
        count += 1
        if start is None:
            start = t
    if count:
        sizes.append(count)
    return sizes


def session_entries(source: list[dict[str, Any]], n: int, sid: str) -> list[dict[str, Any]]:
    """``n`` entries: copies of ``source`` with fresh uuids (parents following),
    all of session ``sid``."""
    out: list[dict[str, Any]] = []
    while len(out) < n:
        renamed: dict[str, str] = {}
        for e in source:
            if len(out) == n:
                break
            e = dict(e)
            if isinstance(e.get("uuid"), str):
                renamed[e["uuid"]] = e["uuid"] = str(uuid.uuid4())
            if isinstance(e.get("parentUuid"), str):
                e["parentUuid"] = renamed.get(e["parentUuid"], e["parentUuid"])
            if "sessionId" in e:
                e["sessionId"] = sid
            out.append(e)
    return out


def load_source() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (CORPUS / TRANSCRIPT).read_bytes().splitlines() if line.strip()]


def first_turn(source: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The transcript's entries up to its first prompt's answer: what one short
    session of the listing holds."""
    first = next(i for i, e in enumerate(source) if _is_prompt(e))
    answer = next(i for i in range(first, len(source)) if source[i].get("type") == "assistant")
    return source[: answer + 1]


# --------------------------------------------------------------------- stores


class RedisSessionStore:
    """A SessionStore on Redis after the SDK's reference Redis adapter (see the
    module doc): a list per key, a sorted set of sessions per project."""

    def __init__(self, client: Any) -> None:
        self.r = client

    async def append(self, key: dict[str, Any], entries: list[dict[str, Any]]) -> None:
        if not entries:
            return
        name = f"{key['project_key']}:{key['session_id']}"
        pipe = self.r.pipeline(transaction=True)
        pipe.rpush(name, *(json.dumps(e) for e in entries))
        pipe.zadd(f"{key['project_key']}:__sessions", {key["session_id"]: int(time.time() * 1000)})
        await pipe.execute()

    async def load(self, key: dict[str, Any]) -> list[dict[str, Any]] | None:
        raw = await self.r.lrange(f"{key['project_key']}:{key['session_id']}", 0, -1)
        return [json.loads(x) for x in raw] if raw else None

    async def list_sessions(self, project_key: str) -> list[dict[str, Any]]:
        pairs = await self.r.zrange(f"{project_key}:__sessions", 0, -1, withscores=True)
        return [{"session_id": s, "mtime": int(score)} for s, score in pairs]


def make_store(kind: str, sock: str, root: str) -> Any:
    if kind == "inmemory":
        from claude_agent_sdk import InMemorySessionStore

        return InMemorySessionStore()
    if kind == "redis":
        import redis.asyncio as aioredis

        return RedisSessionStore(aioredis.Redis(unix_socket_path=sock, decode_responses=True))
    from sessiond.client.agentsdk import SessiondSessionStore

    return SessiondSessionStore(socket=sock, root=root, autostart=False)


# --------------------------------------------------------------------- worker side


async def drive(args: argparse.Namespace) -> dict[str, Any]:
    store = make_store(args.kind, args.socket, args.root)
    source = load_source()
    out: dict[str, Any] = {}
    sid = str(uuid.uuid4())
    long = session_entries(source, args.entries, sid)
    sizes = batch_sizes(source, args.batching)
    key = {"project_key": PROJECT, "session_id": sid}
    lat: list[float] = []
    i, b = 0, 0
    print("ready", flush=True)
    sys.stdin.readline()  # the orchestrator's word: its CPU reading of the server is taken
    t0 = time.perf_counter()
    while i < len(long):
        batch = long[i : i + sizes[b % len(sizes)]]
        t = time.perf_counter()
        await store.append(key, batch)
        lat.append(time.perf_counter() - t)
        i += len(batch)
        b += 1
    elapsed = time.perf_counter() - t0
    print("appended", flush=True)
    sys.stdin.readline()
    out["append"] = {"batches": len(lat), "entries": len(long), "entries_per_s": len(long) / elapsed,
                     "p50_ms": pct(lat, 50) * 1000, "p99_ms": pct(lat, 99) * 1000}

    lat = []
    for _ in range(args.calls):
        t = time.perf_counter()
        got = await store.load(key)
        lat.append(time.perf_counter() - t)
        assert got is not None and len(got) == len(long), (len(got or []), len(long))
    out["load"] = {"calls": len(lat), "p50_ms": pct(lat, 50) * 1000, "p99_ms": pct(lat, 99) * 1000,
                   "entries_per_s": len(long) / statistics.median(lat)}

    turn = first_turn(source)
    t0 = time.perf_counter()
    for _ in range(args.sessions - 1):  # the long session is one of them
        s = str(uuid.uuid4())
        await store.append({"project_key": PROJECT, "session_id": s}, session_entries(turn, len(turn), s))
    out["fill_s"] = time.perf_counter() - t0
    for method in ("list_sessions", "list_session_summaries"):
        if args.kind == "redis" and method == "list_session_summaries":
            continue  # the reference adapter has none (the SDK then folds summaries from loads)
        lat = []
        for _ in range(args.calls):
            t = time.perf_counter()
            listed = await getattr(store, method)(PROJECT)
            lat.append(time.perf_counter() - t)
            assert len(listed) == args.sessions, (method, len(listed), args.sessions)
        out[method] = {"calls": len(lat), "p50_ms": pct(lat, 50) * 1000, "p99_ms": pct(lat, 99) * 1000}
    return out


def worker(args: argparse.Namespace) -> None:
    print(json.dumps(asyncio.run(drive(args))), flush=True)


# --------------------------------------------------------------------- orchestrator side


def start_redis(base: Path) -> tuple[subprocess.Popen, Path]:
    from append_load import start_redis as start

    return start(base)


def one_run(store: str, args: argparse.Namespace, baselines: dict[str, Path]) -> dict[str, Any]:
    """One fresh store (its server started here and stopped after) through the
    three scenarios in a worker process; the server's CPU seconds per entry of
    the append phase."""
    base = Path(tempfile.mkdtemp(prefix="sda-", dir="/tmp"))
    kind, _, rev = store.partition("@")
    server, sock, root = None, base / "run" / "s.sock", base / "root"
    env = dict(os.environ)
    try:
        if kind == "sessiond":
            server = benchlib.start_daemon(sock, root)
            if rev:
                env["PYTHONPATH"] = str(baselines[rev])
        elif kind == "redis":
            server, sock = start_redis(base)
        cmd = [sys.executable, __file__, "--worker", "--kind", kind, "--socket", str(sock), "--root", str(root),
               "--entries", str(args.entries), "--sessions", str(args.sessions), "--calls", str(args.calls),
               "--batching", args.batching]
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert proc.stdin is not None and proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        cpu0 = cpu_seconds(server.pid) if server else 0.0
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "appended"
        cpu = (cpu_seconds(server.pid) - cpu0) if server else None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        result = json.loads(proc.stdout.readline())
        if proc.wait(timeout=600):
            raise SystemExit(f"the {store} worker failed")
        result["append"]["server_cpu_us_per_entry"] = None if cpu is None else cpu / args.entries * 1e6
        return result
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)
        shutil.rmtree(base, ignore_errors=True)


def median_of(runs: list[dict[str, Any]], scenario: str, field: str) -> float | None:
    values = [r[scenario][field] for r in runs if scenario in r and r[scenario].get(field) is not None]
    return statistics.median(values) if values else None


def render(results: dict[str, Any]) -> str:
    """The markdown tables of docs/benchmarks.md: one row per store, median of
    runs, ratios to sessiond (the first sessiond store of the run)."""
    stores = results["stores"]
    ref = next(s for s in stores if s.startswith("sessiond"))
    med = {s: results["runs"][s] for s in stores}

    def name(s: str) -> str:
        kind, _, rev = s.partition("@")
        return STORE_NAMES[kind] + (f" at {rev[:9]}" if rev else "")

    def num(v: float | None, places: int) -> str:
        if v is None:
            return "—"
        return f"{v:,.{places}f}" if v >= 1 or v == 0 else f"{v:.2g}"  # an in-memory call: its digits, not 0.0

    def times(v: float) -> str:
        return f"{v:.2f}x" if v >= 0.01 else f"{v:.1g}x"

    out = [f"Long session ({results['entries']:,} entries, {results['batching']} batches of "
           f"{results['mean_batch']:.1f} entries on average):", "",
           "| store | append p50 ms | append p99 ms | entries/s | server CPU µs/entry | load p50 ms | load p99 ms | "
           "entries/s vs sessiond | load time vs sessiond |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    eps_ref, load_ref = median_of(med[ref], "append", "entries_per_s"), median_of(med[ref], "load", "p50_ms")
    for s in stores:
        eps, load = median_of(med[s], "append", "entries_per_s"), median_of(med[s], "load", "p50_ms")
        ratio = times(eps / eps_ref) if eps and eps_ref else "—"
        load_ratio = times(load / load_ref) if load and load_ref else "—"
        out.append(f"| {name(s)} | {num(median_of(med[s], 'append', 'p50_ms'), 3)} | "
                   f"{num(median_of(med[s], 'append', 'p99_ms'), 3)} | {num(eps, 0)} | "
                   f"{num(median_of(med[s], 'append', 'server_cpu_us_per_entry'), 1)} | {num(load, 1)} | "
                   f"{num(median_of(med[s], 'load', 'p99_ms'), 1)} | {ratio} | {load_ratio} |")
    out += ["", f"Listing a project of {results['sessions']:,} sessions:", "",
            "| store | list_sessions p50 ms | p99 ms | list_session_summaries p50 ms | p99 ms |",
            "|---|---:|---:|---:|---:|"]
    for s in stores:
        out.append(f"| {name(s)} | {num(median_of(med[s], 'list_sessions', 'p50_ms'), 2)} | "
                   f"{num(median_of(med[s], 'list_sessions', 'p99_ms'), 2)} | "
                   f"{num(median_of(med[s], 'list_session_summaries', 'p50_ms'), 2)} | "
                   f"{num(median_of(med[s], 'list_session_summaries', 'p99_ms'), 2)} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stores", default="sessiond,inmemory,redis",
                    help="comma-separated: sessiond, sessiond@<git rev>, inmemory, redis")
    ap.add_argument("--entries", type=int, default=10_000, help="entries of the long session")
    ap.add_argument("--sessions", type=int, default=10_000, help="sessions of the listed project")
    ap.add_argument("--calls", type=int, default=20, help="load and list calls per run")
    ap.add_argument("--batching", choices=("eager", "turn"), default="eager")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "agentsdk_store.json"))
    ap.add_argument("--render", metavar="JSON", help="print the tables of a results file and exit")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--kind", help=argparse.SUPPRESS)
    ap.add_argument("--socket", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    if args.render:
        print(render(json.loads(Path(args.render).read_text())))
        return
    stores = args.stores.split(",")
    for s in stores:
        if s.partition("@")[0] not in STORE_NAMES:
            raise SystemExit(f"unknown store {s!r}: sessiond, sessiond@<rev>, inmemory or redis")
    if any(s.startswith("redis") for s in stores) and not shutil.which("redis-server"):
        raise SystemExit("redis-server is not installed (apt-get install -y redis-server)")
    trees = Path(tempfile.mkdtemp(prefix="sda-trees-", dir="/tmp"))
    try:
        baselines = {rev: benchlib.baseline_tree(rev, trees / rev) for s in stores
                     for rev in [s.partition("@")[2]] if rev}
        sizes = batch_sizes(load_source(), args.batching)
        results: dict[str, Any] = {"entries": args.entries, "sessions": args.sessions, "calls": args.calls,
                                   "batching": args.batching, "mean_batch": statistics.mean(sizes),
                                   "transcript": TRANSCRIPT, "stores": stores, "runs": {s: [] for s in stores}}
        for run in range(args.runs):
            for s in stores:  # interleaved, so the machine's noise falls on every store alike
                print(f"run {run + 1}/{args.runs}: {s} ...", file=sys.stderr, flush=True)
                results["runs"][s].append(one_run(s, args, baselines))
    finally:
        shutil.rmtree(trees, ignore_errors=True)
    benchlib.save(args.out, results)
    print(render(results))


if __name__ == "__main__":
    main()
