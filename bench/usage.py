"""``sessiond usage`` against ccusage on the same tree, warm, in the same run.

The tree is the corpus (``tests/corpus/claude-code``, laid out as Claude Code
writes it) copied ``--copies`` times, each copy's message and request ids made
its own so nothing is merged away: ``--copies 140`` is about 3 GB. Both tools
read the tree once untimed (a warm page cache), then each report is timed
``--runs`` times (median): ``ccusage claude <report> --json --offline`` and
``sessiond usage <report> --all --json`` computed from the files (no daemon),
the same command answered by a daemon serving the tree (its spend book warm:
one answer made before), and the daemon's ``Spend`` request alone (what the
command costs without starting a Python process): repeated (the answer
remembered, the last re-stat standing), more than a second apart (each
first re-stats every transcript), and right after an append through the daemon
(the answer made anew from the sums the daemon keeps: the figure that says a
report is a lookup).

    python bench/usage.py --ccusage PATH [--copies N] [--runs 3] [--out bench/results/usage.json]
"""

from __future__ import annotations

import argparse
import json
import os
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
sys.path.insert(0, str(HERE.parent))

from tests.spend.tree import build  # noqa: E402


def scaled(into: Path, copies: int) -> tuple[int, int]:
    """The corpus tree ``copies`` times under ``into/projects``; (files, bytes)."""
    one = Path(tempfile.mkdtemp(dir=into))
    build(one)
    files = size = 0
    for i in range(copies):
        for src in (one / "projects").rglob("*.jsonl"):
            rel = src.relative_to(one / "projects")
            dest = into / "projects" / f"{rel.parts[0]}-c{i}" / Path(*rel.parts[1:])
            dest.parent.mkdir(parents=True, exist_ok=True)
            data = src.read_bytes().replace(b'"id":"msg_', f'"id":"msg_c{i}_'.encode()) \
                .replace(b'"requestId":"req_', f'"requestId":"req_c{i}_'.encode())
            dest.write_bytes(data)
            files += 1
            size += len(data)
    shutil.rmtree(one)
    return files, size


def rss(pid: int) -> int:
    """A process's resident set, bytes (/proc)."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ccusage", required=True, help="the ccusage executable")
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="usage-bench-"))
    try:
        files, size = scaled(work, args.copies)
        env = {**os.environ, "CLAUDE_CONFIG_DIR": str(work), "TZ": "UTC"}
        results: dict = {"copies": args.copies, "files": files, "bytes": size, "reports": {}}
        print(f"tree: {files} files, {size / 1e6:.0f} MB")
        reports = ("daily", "session", "blocks")

        def run(name: str, report: str, cmd: list[str]) -> None:
            subprocess.run(cmd, env=env, capture_output=True, check=True)  # warm
            results["reports"].setdefault(report, {})[name], _ = benchlib.timed(
                lambda: subprocess.run(cmd, env=env, capture_output=True, check=True), args.runs)

        def cli(report: str, sock: Path) -> list[str]:
            return [sys.executable, "-m", "sessiond.client.cli", "--root", str(work), "--no-autostart",
                    "--socket", str(sock), "usage", report, "--all", "--json"]

        for report in reports:  # no daemon yet: a running one would answer the CLI (it finds the root's daemon)
            run("ccusage", report, [args.ccusage, "claude", report, "--json", "--offline"])
            run("sessiond files", report, cli(report, work / "none.sock"))
        sock = work / "run" / "sessiond.sock"
        daemon = benchlib.start_server(sock, [sys.executable, "-m", "sessiond.client.cli", "--socket", str(sock),
                                              "--root", str(work), "serve", "--log-level", "warning"],
                                       env={**env, "SESSIOND_SEARCH_INDEX": "false"})
        try:
            from sessiond.client import Client
            from sessiond.wire import messages as m

            client = Client(sock, root=work, autostart=False, timeout=600).connect()
            session = "5e551011-0000-4000-8000-000000000001"

            def append(report: str, i: int) -> None:
                entry = {"type": "assistant", "sessionId": session, "cwd": "/bench/usage", "version": "2.1.0",
                         "timestamp": f"2026-11-02T15:{i:02d}:00.000Z", "requestId": f"req_bench_{report}_{i}",
                         "uuid": str(uuid.uuid4()), "parentUuid": None,
                         "message": {"id": f"msg_bench_{report}_{i}", "role": "assistant", "content": [],
                                     "model": "claude-sonnet-4-5-20250929",
                                     "usage": {"input_tokens": 100, "output_tokens": 10}}}
                subprocess.run([sys.executable, "-m", "sessiond.client.cli", "--root", str(work), "--socket", str(sock),
                                "append", "--cwd", "/bench/usage", "--session", session, "--durability", "written"],
                               input=(json.dumps(entry, separators=(",", ":")) + "\n").encode(), env=env, capture_output=True, check=True)

            append("first", 0)  # the session's file made (the book reads a new file at its next re-stat)
            rss_before = rss(daemon.pid)
            first = benchlib.timed(lambda: client.call(m.Spend(id=client.next_id(), report="daily", all=True)), 1)
            responses = first[1].spend.responses  # type: ignore[union-attr]
            results["book"] = {"responses": responses, "first answer s": first[0],
                               "rss before": rss_before, "rss after": rss(daemon.pid)}
            print(f"the daemon's first answer: {first[0]:.1f} s, {responses:,} responses, RSS "
                  f"{rss_before / 1e6:.0f} -> {results['book']['rss after'] / 1e6:.0f} MB "
                  f"({(results['book']['rss after'] - rss_before) / max(responses, 1):.0f} B a response)")
            floor = [sys.executable, "-m", "sessiond.client.cli", "--root", str(work), "--no-autostart",
                     "--socket", str(sock), "status", "--json"]
            subprocess.run(floor, env=env, capture_output=True, check=True)
            results["sessiond status"], _ = benchlib.timed(
                lambda: subprocess.run(floor, env=env, capture_output=True, check=True), max(args.runs, 5))
            print(f"the command's floor (sessiond status --json, the same start-up): {results['sessiond status'] * 1000:.0f} ms")
            for report in reports:
                run("sessiond daemon", report, cli(report, sock))
                runs = results["reports"][report]
                def spend(r: str = report) -> None:
                    client.call(m.Spend(id=client.next_id(), report=r, all=True, timezone="UTC"))

                runs["Spend request"], _ = benchlib.timed(spend, max(args.runs, 5))
                restat = []
                for _ in range(args.runs):  # past RESTAT_AFTER: each answer walks and stats every transcript first
                    time.sleep(1.2)
                    restat.append(benchlib.timed(spend, 1)[0])
                runs["Spend after 1 s (re-stat)"] = statistics.median(restat)
                after_write = []
                for i in range(max(args.runs, 5)):  # each answer made anew: a line was added to the sums
                    before = client.call(m.Spend(id=client.next_id(), report="monthly", all=True)).spend.responses  # type: ignore[union-attr]
                    append(report, i)
                    after_write.append(benchlib.timed(spend, 1)[0])
                    now = client.call(m.Spend(id=client.next_id(), report="monthly", all=True)).spend.responses  # type: ignore[union-attr]
                    assert now == before + 1, (before, now)  # the write is in the answer
                runs["Spend after a write"] = statistics.median(after_write)
                print(f"{report:8} " + "   ".join(f"{k} {v * 1000:7.0f} ms" for k, v in runs.items())
                      + f"   ccusage/files {runs['ccusage'] / runs['sessiond files']:.2f}x"
                      + f"   ccusage/daemon {runs['ccusage'] / runs['sessiond daemon']:.1f}x"
                      + f"   ccusage/request {runs['ccusage'] / runs['Spend request']:.0f}x")
            client.close()
        finally:
            daemon.terminate()
            daemon.wait(timeout=60)
        if args.out:
            benchlib.save(args.out, results)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
