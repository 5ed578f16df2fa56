"""Listing: 10,000 generated sessions of ~200 KB, page of 20 and full, against a
naive full parse, all in one run.

    python bench/listing.py [--sessions 10000] [--size 200000] [--runs 5]

Figures (median of runs):
- ``limit 20``: list_sessions(limit=20) in-process, and the files it read (opens
  counted through the opener hook);
- ``cli limit 20``: the whole ``sessiond list --limit 20 --json`` process;
- ``full``: lite-read listing of every session;
- ``naive``: json.loads of every line of every file, keeping the same fields;
- ``daemon``: a List request answered by a running daemon from its catalog (the
  first, cold, request scans; then medians of warm ones), and the CLI process
  going through that daemon.
Writes bench/results/listing.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import benchlib
from benchlib import timed

from sessiond.store import listing
from sessiond.store.lite import default_opener
from sessiond.store.paths import sanitize

HERE = Path(__file__).resolve().parent
CWD = "/home/dev/big-project"


def generate(root: Path, n: int, size: int) -> None:
    project = root / "projects" / sanitize(CWD)
    project.mkdir(parents=True)
    filler = "x" * 1500
    base = time.time() - n
    for i in range(n):
        sid = str(uuid.uuid4())
        lines = [json.dumps({"type": "user", "uuid": str(uuid.uuid4()), "parentUuid": None, "sessionId": sid, "cwd": CWD,
                             "gitBranch": "main", "timestamp": "2026-01-01T00:00:00.000Z",
                             "message": {"role": "user", "content": f"Session {i}: please look at the parser"}})]
        parent = None
        total = len(lines[0])
        while total < size:
            u = str(uuid.uuid4())
            line = json.dumps({"parentUuid": parent, "type": "assistant", "uuid": u, "sessionId": sid,
                               "message": {"role": "assistant", "content": [{"type": "text", "text": filler}]}})
            parent = u
            lines.append(line)
            total += len(line) + 1
        lines.append(json.dumps({"type": "custom-title", "customTitle": f"Title {i}", "sessionId": sid}))
        path = project / f"{sid}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (base + i, base + i))


def naive(root: Path) -> list[dict]:
    out = []
    for path in (root / "projects").rglob("*.jsonl"):
        info: dict = {"path": str(path), "mtime": path.stat().st_mtime}
        with open(path, "rb") as f:
            for raw in f:
                try:
                    e = json.loads(raw)
                except ValueError:
                    continue
                if e.get("type") == "user" and "firstPrompt" not in info:
                    info["firstPrompt"] = e["message"]["content"]
                if e.get("type") == "custom-title":
                    info["title"] = e["customTitle"]
        out.append(info)
    out.sort(key=lambda x: -x["mtime"])
    return out


def daemon_figures(base: Path, root: Path, dirs: list, runs: int) -> dict:
    from sessiond.client import Client
    from sessiond.wire import messages as m

    sock = base / "run" / "s.sock"
    proc = benchlib.start_daemon(sock, root)
    try:
        with Client(sock, autostart=False, timeout=120) as c:
            ask = lambda limit: c.call(m.List(id=c.next_id(), dirs=[str(d) for d in dirs], limit=limit))  # noqa: E731
            t_cold, _ = timed(lambda: ask(20), 1)
            t_warm, res = timed(lambda: ask(20), runs * 4)
            assert len(res.sessions) == 20
            t_full_cold, _ = timed(lambda: ask(None), 1)
            t_full, res = timed(lambda: ask(None), runs)
            assert len(res.sessions) == len(list(dirs[0].glob("*.jsonl")))
        env = {**os.environ, "SESSIOND_ROOT": str(root), "SESSIOND_SOCKET": str(sock)}
        cli = [sys.executable, "-m", "sessiond.client.cli", "list", "--cwd", CWD, "--limit", "20", "--json"]
        t_cli, _ = timed(lambda: subprocess.run(cli, env=env, check=True, capture_output=True), runs)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return {"daemon_limit20_cold_ms": t_cold * 1000, "daemon_limit20_ms": t_warm * 1000,
            "daemon_full_cold_ms": t_full_cold * 1000, "daemon_full_ms": t_full * 1000, "cli_via_daemon_limit20_ms": t_cli * 1000}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--size", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default=str(HERE / "results" / "listing.json"))
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sdl-", dir="/tmp"))
    root = base / "root"
    try:
        t0 = time.perf_counter()
        generate(root, args.sessions, args.size)
        print(f"generated {args.sessions} sessions of ~{args.size // 1000} KB in {time.perf_counter() - t0:.1f}s", flush=True)
        dirs = listing.project_dirs(root)
        opened = []

        def counting(path: str) -> int:
            opened.append(path)
            return default_opener(path)

        def page() -> list:
            opened.clear()
            return listing.list_sessions(dirs, limit=20, opener=counting)

        t_page, res = timed(page, args.runs)
        files_read = len(opened)
        assert len(res) == 20 and res[0].title == f"Title {args.sessions - 1}", res[0]
        t_full, full = timed(lambda: listing.list_sessions(dirs), max(1, args.runs // 2))
        assert len(full) == args.sessions
        env = {**os.environ, "SESSIOND_ROOT": str(root)}
        cli = [sys.executable, "-m", "sessiond.client.cli", "list", "--cwd", CWD, "--limit", "20", "--json"]
        t_cli, _ = timed(lambda: subprocess.run(cli, env=env, check=True, capture_output=True), args.runs)
        t_daemon = daemon_figures(base, root, dirs, args.runs)
        t_naive, nv = timed(lambda: naive(root), 1)
        assert len(nv) == args.sessions
        rows = {
            "limit20_ms": t_page * 1000, "limit20_files_read": files_read, "cli_limit20_ms": t_cli * 1000,
            "full_ms": t_full * 1000, "naive_full_parse_ms": t_naive * 1000,
            "full_vs_naive": t_naive / t_full, "limit20_vs_naive": t_naive / t_page, **t_daemon,
        }
        for k, v in rows.items():
            print(f"{k:22} {v:10.1f}")
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"sessions": args.sessions, "size": args.size, "runs": args.runs,
                                              "command": "python bench/listing.py " + " ".join(sys.argv[1:]), **rows}, indent=1))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
