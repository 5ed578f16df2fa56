"""Search: building the index, its size, queries through the daemon and the CLI,
against a plain scan of the files, and appends with the indexer on and off.

    python bench/search.py [--sessions 10000] [--size 200000] [--runs 20] [--skip-append | --append-only]

The store: ``--sessions`` generated sessions of about ``--size`` bytes (entries
shaped like Claude Code's: the envelope, prompts, assistant text, tool calls
with commands and paths, tool results of 1-8 KB; words drawn from a
20,000-word Zipf vocabulary; each session carries a unique ticket number) plus
the real corpus (``tests/corpus/claude-code``), all in the page cache. Figures:
- build: the index from scratch in this process (the indexer's code,
  ``Store.catch_up`` over every file), MB of transcript per second; and the
  same through the daemon (``sessiond reindex --all``, its indexer at nice 19);
- size: index file bytes against transcript bytes;
- queries (words, phrases, a prefix; rare to very common): a ``Search`` request
  through a running daemon (p50/p99 over ``--runs`` rounds of every query),
  the whole ``sessiond search --all --json`` process (median of 5), and the
  same query by ``grep -rilF`` and ``rg -ilF`` over the files (the phrase as a
  fixed string: files that contain it; median of 3), and once by the CLI's own
  scan fallback;
- appends: ``bench/append_load.py``'s clients (1 KB entries of words) with the
  index on and off, interleaved runs, medians; entries/s and the daemon's and
  the indexer's CPU per appended entry (``append_on_off``).
Writes bench/results/search.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import benchlib

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CWD = "/home/dev/search-project"


def vocabulary(n: int = 20000) -> list[str]:
    rng = random.Random(7)
    return ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(3, 11))) for _ in range(n)]


def paragraphs(vocab: list[str], count: int, rng: random.Random) -> list[str]:
    weights = [1 / (i + 1) for i in range(len(vocab))]
    out = []
    for _ in range(count):
        out.append(" ".join(rng.choices(vocab, weights=weights, k=rng.randint(20, 120))))
    return out


def generate_one(args: tuple) -> int:
    path, sid, i, size, paras, seed = args
    rng = random.Random(seed)
    lines = []
    parent = None
    total = 0
    n = 0

    def env(kind: str, message: dict) -> dict:
        nonlocal parent, n
        u = str(uuid.UUID(int=rng.getrandbits(128)))
        n += 1
        e = {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": CWD, "sessionId": sid,
             "version": "2.1.17", "gitBranch": "main", "type": kind, "message": message, "uuid": u,
             "timestamp": f"2026-0{1 + i % 9}-{10 + n % 18:02d}T10:{n % 60:02d}:00.000Z"}
        parent = u
        return e

    first = f"Ticket ZX{i:05d}: {rng.choice(paras)}"
    while total < size:
        k = len(lines) % 4
        if k == 0:
            msg = {"role": "user", "content": first if not lines else rng.choice(paras)}
            e = env("user", msg)
        elif k == 1:
            e = env("assistant", {"id": f"msg_{rng.getrandbits(48):x}", "type": "message", "role": "assistant",
                                  "model": "claude-x", "content": [{"type": "text", "text": " ".join(rng.choices(paras, k=3))}],
                                  "usage": {"input_tokens": 10, "output_tokens": 200, "cache_read_input_tokens": 5000}})
        elif k == 2:
            cmd = rng.choice(["git status", "pytest -q tests", "rg parser src", "ls -la", "make build"])
            e = env("assistant", {"id": f"msg_{rng.getrandbits(48):x}", "type": "message", "role": "assistant",
                                  "model": "claude-x", "content": [{"type": "tool_use", "id": f"toolu_{n}", "name": "Bash",
                                                                    "input": {"command": cmd, "description": rng.choice(paras)[:60]}}]})
        else:
            body = "\n".join(rng.choices(paras, k=rng.randint(2, 12)))
            e = env("user", {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n - 1}", "content": body}]})
            e["toolUseResult"] = {"stdout": body, "stderr": "", "interrupted": False}
        line = json.dumps(e, separators=(",", ":"))
        lines.append(line)
        total += len(line) + 1
    lines.append(json.dumps({"type": "custom-title", "customTitle": f"Work item {i}", "sessionId": sid}))
    Path(path).write_text("\n".join(lines) + "\n")
    return total


def generate(root: Path, sessions: int, size: int) -> int:
    from multiprocessing import Pool

    from sessiond.store.paths import sanitize

    project = root / "projects" / sanitize(CWD)
    project.mkdir(parents=True)
    rng = random.Random(1)
    paras = paragraphs(vocabulary(), 3000, rng)
    jobs = []
    for i in range(sessions):
        sid = str(uuid.UUID(int=rng.getrandbits(128)))
        jobs.append((str(project / f"{sid}.jsonl"), sid, i, size, paras, i))
    with Pool(os.cpu_count() or 2) as pool:
        total = sum(pool.imap_unordered(generate_one, jobs, chunksize=64))
    corpus = root / "projects" / "-home-dev-corpus"
    corpus.mkdir()
    for f in sorted((REPO / "tests" / "corpus" / "claude-code").glob("*.jsonl")):
        if "__agent-" not in f.name:
            shutil.copy(f, corpus / f"{uuid.uuid4()}.jsonl")
            total += f.stat().st_size
    return total


def transcript_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in (root / "projects").rglob("*.jsonl"))


def build_in_process(root: Path, index: Path) -> tuple[float, int]:
    sys.path.insert(0, str(REPO))
    from sessiond.daemon.index.store import Store
    from sessiond.search.files import oldest_first, transcripts

    t = time.perf_counter()
    store = Store(root, index)
    n = 0
    for i, tr in enumerate(oldest_first(transcripts(root))):
        n += store.catch_up(tr.path)
        if i % 200 == 199:
            store.commit()
    store.optimize()
    store.close()
    return time.perf_counter() - t, n


def generate_and_build(root: Path, args, out: dict) -> None:
    t = time.perf_counter()
    generate(root, args.sessions, args.size)
    nbytes = transcript_bytes(root)
    out["transcript_bytes"] = nbytes
    print(f"generated {nbytes / 1e9:.2f} GB in {time.perf_counter() - t:.0f}s", flush=True)
    for p in (root / "projects").rglob("*.jsonl"):  # into the page cache, like the listing bench
        with open(p, "rb") as f:
            while f.read(1 << 22):
                pass
    index = root / ".sessiond-search.sqlite3"
    secs, read = build_in_process(root, index)
    size = sum(os.path.getsize(f"{index}{s}") for s in ("", "-wal") if os.path.exists(f"{index}{s}"))
    out["build"] = {"seconds": secs, "mb_per_s": read / secs / 1e6, "index_bytes": size, "index_ratio": size / nbytes,
                    "load_average": os.getloadavg()}
    print(f"build: {secs:.1f}s, {read / secs / 1e6:.1f} MB/s; index {size / 1e6:.0f} MB = {100 * size / nbytes:.1f}% of transcripts", flush=True)


def query_cpu(root: Path, queries: dict[str, str], runs: int = 7) -> dict[str, tuple[float, float]]:
    """CPU milliseconds (median) of each query run in this process on the
    index (what the daemon's worker thread does, without the wire): the figure
    a loaded machine does not blur. Twice: as the query is run again (the hits'
    titles known: ``query.TITLES``), and as if its sessions were shown for the
    first time (each hit's file read for its title)."""
    from sessiond.search import query as q

    conn = q.open_read_only(root / ".sessiond-search.sqlite3")
    out = {}
    for name, text in queries.items():
        again, first = [], []
        for _ in range(runs):
            t = time.process_time()
            q.run(conn, root, text, limit=20)
            again.append(time.process_time() - t)
            q.TITLES.clear()
            t = time.process_time()
            q.run(conn, root, text, limit=20)
            first.append(time.process_time() - t)
        out[name] = (statistics.median(again) * 1000, statistics.median(first) * 1000)
    conn.close()
    return out


def scan_fallback(base: Path, root: Path, sock: Path, cli_env: dict, query: str) -> dict:
    """The CLI's own scan of the files, on the same files (a root without an index)."""
    os.makedirs(base / "noindex", exist_ok=True)
    os.symlink(root / "projects", base / "noindex" / "projects")
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "sessiond.client.cli", "search", "--all", "--json", "--", query],
                       env={**cli_env, "SESSIOND_SOCKET": str(sock) + ".none", "SESSIOND_ROOT": str(base / "noindex")},
                       capture_output=True)
    return {"scan_fallback_s": time.perf_counter() - t, "scan_fallback_note": r.stderr.decode().strip()}


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--size", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--skip-append", action="store_true")
    ap.add_argument("--reindex", action="store_true", help="also time `reindex --all` through the daemon (its indexer runs at nice 19)")
    ap.add_argument("--append-total", type=int, default=48_000, help="entries per append run")
    ap.add_argument("--append-clients", type=int, default=4)
    ap.add_argument("--append-runs", type=int, default=5, help="runs with the index off, and as many on, interleaved")
    ap.add_argument("--append-only", action="store_true", help="only the appends on against off")
    ap.add_argument("--scan-runs", type=int, default=3, help="runs of each scan baseline (median)")
    ap.add_argument("--scan-tools", default="grep,rg", help="which scan baselines (a loaded machine: rg alone)")
    ap.add_argument("--no-scan-fallback", action="store_true", help="skip timing the CLI's own scan of the files")
    ap.add_argument("--reuse", default=None, metavar="ROOT",
                    help="query a root an earlier run generated and indexed (kept; no build figures)")
    ap.add_argument("--keep", default=None, metavar="ROOT",
                    help="generate and index the store in ROOT and keep it, for later --reuse runs")
    ap.add_argument("--out", default=str(HERE / "results" / "search.json"))
    args = ap.parse_args()
    if args.append_only:
        out = {"load_average": os.getloadavg(), "append": append_on_off(args)}
        Path(args.out).parent.mkdir(exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1))
        print(json.dumps({k: v for k, v in out["append"].items() if k != "runs"}, indent=1))
        return

    from sessiond.client.connection import Client
    from sessiond.wire import messages as m

    base = Path(tempfile.mkdtemp(prefix="sds-", dir="/tmp"))
    os.chmod(base, 0o700)
    root = Path(args.reuse or args.keep or base / "root")
    out: dict = {"sessions": args.sessions, "size": args.size}
    try:
        if args.reuse:  # a store this script generated and indexed before: the queries only
            out["reused_store"] = str(root)
            out["transcript_bytes"] = transcript_bytes(root)
        else:
            generate_and_build(root, args, out)
        out["load_average"] = os.getloadavg()

        queries = {
            "distinctive phrase (1 session)": '"ticket zx04242"' if args.sessions > 4242 else '"ticket zx00042"',
            "real-corpus phrase": '"make this project installable"',
            "rare word": vocabulary()[15000],
            "two words": f"{vocabulary()[300]} {vocabulary()[900]}",
            "prefix": vocabulary()[2000][:4] + "*",
            "tool command phrase": '"git status"',
            "very common word": vocabulary()[0],
        }
        out["queries"] = queries
        sock = base / "run" / "s.sock"
        cfg = base / "config.toml"
        cfg.write_text("")
        env = {**os.environ, "SESSIOND_CONFIG": str(cfg)}
        proc = subprocess.Popen([sys.executable, "-m", "sessiond.client.cli", "--socket", str(sock), "--root", str(root),
                                 "serve", "--log-level", "warning"], env=env, stdin=subprocess.DEVNULL)
        sock.parent.mkdir(mode=0o700, exist_ok=True)
        from sessiond.client.autostart import socket_answers

        while not socket_answers(sock):
            time.sleep(0.05)
        rows = {}
        with Client(sock, autostart=False, timeout=600).connect() as c:
            c.call(m.Search(id=c.next_id(), query="warmup", all=True))  # the daemon's start-up re-stat done
            per: dict[str, list[float]] = {k: [] for k in queries}
            hits: dict[str, int] = {}
            for _ in range(args.runs):
                for name, q in queries.items():
                    t = time.perf_counter()
                    r = c.call(m.Search(id=c.next_id(), query=q, all=True, limit=20))
                    per[name].append(time.perf_counter() - t)
                    hits[name] = len(r.hits)
        # the CLI as installed: its modules' bytecode cached (PYTHONDONTWRITEBYTECODE in the environment made
        # every run compile ~20 modules from source, ~100 ms of CPU that no installed copy pays)
        cpu_ms = query_cpu(root, queries)
        cli_env = {**os.environ, "SESSIOND_SOCKET": str(sock), "SESSIOND_ROOT": str(root),
                   "PYTHONPYCACHEPREFIX": str(base / "pycache")}
        cli_env.pop("PYTHONDONTWRITEBYTECODE", None)
        cli_cmd = [sys.executable, "-m", "sessiond.client.cli", "search", "--all", "--json", "--"]
        subprocess.run(cli_cmd + ["warmup"], env=cli_env, check=True, capture_output=True)
        for name, q in queries.items():
            cli, cli_cpu = [], []
            for _ in range(5):
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                t = time.perf_counter()
                subprocess.run(cli_cmd + [q], env=cli_env, check=True, capture_output=True)
                cli.append(time.perf_counter() - t)
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                cli_cpu.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
            needle = q.strip('"').rstrip("*")
            scans = {}
            for tool, cmd in (("grep", ["grep", "-rilF", "--", needle, str(root / "projects")]),
                              ("rg", ["rg", "-ilF", "--no-messages", "--", needle, str(root / "projects")])):
                if shutil.which(cmd[0]) is None or tool not in args.scan_tools.split(","):
                    continue
                ts = []
                for _ in range(args.scan_runs):
                    t = time.perf_counter()
                    subprocess.run(cmd, capture_output=True)
                    ts.append(time.perf_counter() - t)
                scans[tool] = statistics.median(ts)
            d50 = statistics.median(per[name])
            rows[name] = {"query": q, "hits": hits[name], "daemon_p50_ms": d50 * 1000, "daemon_p99_ms": pct(per[name], 0.99) * 1000,
                          "daemon_first_ms": per[name][0] * 1000, "load_average": os.getloadavg()[0],
                          "query_cpu_ms": cpu_ms[name][0], "query_cpu_first_ms": cpu_ms[name][1],
                          "cli_p50_ms": statistics.median(cli) * 1000, "cli_cpu_ms": statistics.median(cli_cpu) * 1000,
                          **{f"{k}_ms": v * 1000 for k, v in scans.items()},
                          **{f"vs_{k}": v / d50 for k, v in scans.items()}}
            print(json.dumps({name: rows[name]}), flush=True)
        if not args.no_scan_fallback:
            out.update(scan_fallback(base, root, sock, cli_env, queries["rare word"]))
        out["queries_table"] = rows
        if args.reindex:
            t = time.perf_counter()
            with Client(sock, autostart=False, timeout=3600).connect() as c:
                done = c.call(m.Reindex(id=c.next_id(), all=True))
            took = time.perf_counter() - t
            out["reindex_daemon"] = {"seconds": took, "mb_per_s": done.bytes / took / 1e6, "files": done.files}
            print(f"reindex through the daemon: {out['reindex_daemon']}", flush=True)
        proc.terminate()
        proc.wait(timeout=120)
    finally:
        subprocess.run(["rm", "-rf", str(base)])  # a reused root is outside it: kept
    if not args.skip_append:
        out["append"] = append_on_off(args)
    Path(args.out).parent.mkdir(exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


def append_on_off(args) -> dict:
    """Appends with the index on and off, interleaved (off, on, off, on, ...),
    ``--append-runs`` of each: ``append_load.py``'s client processes (``--text``
    entries of words, batches of 16, ``written``) against a fresh daemon per
    run. Besides entries/s (noise on a shared machine), the CPU time per
    appended entry, from /proc: the daemon's, and the indexer's until it has
    indexed every entry (a Search waits for that), which is not noise."""
    import argparse as _argparse

    import append_load

    from sessiond.client.connection import Client
    from sessiond.wire import messages as m

    wargs = _argparse.Namespace(size=1024, batch=16, window=1, mix=False, text=True)
    clients = args.append_clients
    per_client = args.append_total // clients
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    for i in range(2 * args.append_runs):
        state = ("off", "on")[i % 2]
        base = Path(tempfile.mkdtemp(prefix="sdc-", dir="/tmp"))
        os.chmod(base, 0o700)
        cfg = base / "config.toml"
        cfg.write_text(f"search_index = {'true' if state == 'on' else 'false'}\n")
        old = os.environ.get("SESSIOND_CONFIG")
        os.environ["SESSIOND_CONFIG"] = str(cfg)
        sock = base / "run" / "s.sock"
        daemon = benchlib.start_daemon(sock, base / "root")
        try:
            with Client(sock, autostart=False, timeout=600).connect() as c:
                indexer = None
                deadline = time.monotonic() + 60
                while state == "on" and not indexer:  # the daemon starts its indexer after it listens
                    indexer = (c.status().index or {}).get("pid")
                    if time.monotonic() > deadline:
                        raise SystemExit("the daemon did not start its indexer in 60 s")
                    time.sleep(0.05)
                if indexer:
                    c.call(m.Search(id=c.next_id(), query="warmup", all=True))  # its start-up done
                procs = append_load.spawn_workers("written", clients, per_client, sock, base, wargs)
                d0 = benchlib.cpu_seconds(daemon.pid)
                i0 = benchlib.cpu_seconds(indexer) if indexer else 0.0
                _, _, wall = append_load.run_workers(procs)
                d1 = benchlib.cpu_seconds(daemon.pid)
                t = time.perf_counter()
                while indexer and not c.call(m.Search(id=c.next_id(), query="warmup", all=True)).caughtUp:
                    if time.perf_counter() - t > 600:  # each Search waits up to 5 s for the indexer
                        raise SystemExit("the indexer did not catch up in 10 minutes")
                caught_up = time.perf_counter() - t
                i1 = benchlib.cpu_seconds(indexer) if indexer else 0.0
        finally:
            daemon.terminate()
            daemon.wait(timeout=60)
            if old is None:
                os.environ.pop("SESSIOND_CONFIG", None)
            else:
                os.environ["SESSIOND_CONFIG"] = old
            shutil.rmtree(base, ignore_errors=True)
        total = clients * per_client
        row = {"entries_per_s": total / wall, "daemon_cpu_us_per_entry": (d1 - d0) / total * 1e6,
               "indexer_cpu_us_per_entry": (i1 - i0) / total * 1e6, "indexer_behind_s": caught_up,
               "load_average": os.getloadavg()[0]}
        runs[state].append(row)
        print(f"append {state}: {json.dumps({k: round(v, 2) for k, v in row.items()})}", flush=True)
    med = {state: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for state, rows in runs.items()}
    return {"clients": clients, "entries_per_run": clients * per_client, "runs": runs, "median": med,
            "throughput_on_vs_off": med["on"]["entries_per_s"] / med["off"]["entries_per_s"],
            "daemon_cpu_on_vs_off": med["on"]["daemon_cpu_us_per_entry"] / med["off"]["daemon_cpu_us_per_entry"]}


if __name__ == "__main__":
    main()
