"""The picker on 10,000 sessions: time to first paint and per keystroke, driven
through Textual's headless pilot, with the listing it needs, all in one run.

    python bench/picker.py [--sessions 10000] [--runs 3]

Figures (median of runs):
- ``list from the daemon`` / ``list from the files``: ``find_sessions`` of every
  session of the project (what ``pick`` does before painting), through a
  running daemon's catalog (warm) and without one;
- ``first paint``: the rows built, the app started headless and its first
  screen rendered (``run_test`` ready, then ``pilot.pause()``), the listing
  excluded;
- ``keystroke``: one character typed into the filter (``pilot.press``: the
  filter, the table rebuilt, the screen rendered), median and worst over the
  characters of a 24-character query, each run;
- ``no-op key``: the baseline for a keystroke, measured in the same app: a key
  that changes nothing (Home in the filter), the pilot's and the screen's own
  cost;
- ``filter alone``: ``Matcher.filter`` per prefix of that query, against the
  baseline measured in the same run: a plain case-insensitive substring scan
  of the titles (no typo tolerance, no index) over the same sessions.
Writes bench/results/picker.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import benchlib

from sessiond.client.cli import Context
from sessiond.client.cli.pick_cmds import StoreActions, picker_rows
from sessiond.client.cli.session_list import find_sessions
from sessiond.client.picker.app import PickerApp
from sessiond.client.picker.matching import Matcher
from sessiond.store.paths import sanitize

HERE = Path(__file__).resolve().parent
CWD = "/home/dev/big-project"
QUERY = "refactr flaky sockt test"
WORDS = ("fix refactor refactoring parser socket test flaky docs write add remove daemon listing picker search index "
         "export html markdown trash rename tag fork resume session transcript branch merge review deploy build").split()


def generate(root: Path, n: int) -> None:
    """``n`` small sessions in one project, titles of 3-12 common words, dated a minute apart."""
    project = root / "projects" / sanitize(CWD)
    project.mkdir(parents=True)
    rnd = random.Random(7)
    for i in range(n):
        sid = str(uuid.uuid4())
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(1767225600 + 60 * i))
        title = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(3, 12)))
        first = {"type": "user", "uuid": str(uuid.uuid4()), "parentUuid": None, "sessionId": sid, "cwd": CWD,
                 "timestamp": stamp, "message": {"role": "user", "content": title}}
        second = {"type": "assistant", "uuid": str(uuid.uuid4()), "parentUuid": first["uuid"], "sessionId": sid,
                  "cwd": CWD, "timestamp": stamp, "message": {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}}
        (project / f"{sid}.jsonl").write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n")


def substring_scan(titles: list[str], query: str) -> list[int]:
    """The baseline filter: every word a substring of the lower-cased title."""
    terms = query.lower().split()
    return [i for i, t in enumerate(titles) if all(w in t.lower() for w in terms)]


async def drive(obj: Context, sessions: list) -> tuple[float, list[float], list[float], int]:
    """First paint, then no-op keys, then each character of QUERY typed:
    (paint s, keystroke s list, no-op key s list, rows left)."""
    t = time.perf_counter()
    app = PickerApp(picker_rows(sessions, show_project=False), StoreActions(obj, CWD), show_project=False, scope="bench")
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        paint = time.perf_counter() - t
        noops = []
        for _ in range(5):
            k = time.perf_counter()
            await pilot.press("home")
            await pilot.pause()
            noops.append(time.perf_counter() - k)
        keys = []
        for ch in QUERY:
            k = time.perf_counter()
            await pilot.press("space" if ch == " " else ch)
            await pilot.pause()
            keys.append(time.perf_counter() - k)
        left = len(app.shown)
        await pilot.press("escape")
    return paint, keys, noops, left


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "picker.json"))
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sdpick-", dir="/tmp"))
    root, sock = base / "root", base / "run" / "s.sock"
    try:
        generate(root, args.sessions)
        offline = Context(root=root, socket=base / "none.sock", autostart=False)
        files_s, sessions = benchlib.timed(lambda: find_sessions(offline, CWD, False), args.runs)
        assert len(sessions) == args.sessions, len(sessions)
        daemon = benchlib.start_daemon(sock, root)
        try:
            online = Context(root=root, socket=sock, autostart=False)
            find_sessions(online, CWD, False)  # the catalog's first scan
            daemon_s, listed = benchlib.timed(lambda: find_sessions(online, CWD, False), args.runs)
            assert len(listed) == args.sessions
        finally:
            daemon.terminate()
            daemon.wait(timeout=60)
        paints, key_medians, key_worst, noop_medians = [], [], [], []
        for _ in range(args.runs):
            paint, keys, noops, left = asyncio.run(drive(offline, sessions))
            paints.append(paint)
            noop_medians.append(statistics.median(noops))
            key_medians.append(statistics.median(keys))
            key_worst.append(max(keys))
        titles = [s.title or "" for s in sessions]
        prefixes = [QUERY[:i] for i in range(1, len(QUERY) + 1)]
        matcher = Matcher(titles, [s.sessionId for s in sessions])
        filter_s, _ = benchlib.timed(lambda: [matcher.filter(p) for p in prefixes], args.runs)
        matcher_fresh = lambda: [Matcher(titles, [s.sessionId for s in sessions]).filter(p) for p in prefixes[:1]]  # noqa: E731
        index_s, _ = benchlib.timed(matcher_fresh, args.runs)
        scan_s, _ = benchlib.timed(lambda: [substring_scan(titles, p) for p in prefixes], args.runs)
        result = {
            "sessions": args.sessions, "runs": args.runs, "query": QUERY, "rows_left": left,
            "list_files_ms": files_s * 1e3, "list_daemon_ms": daemon_s * 1e3,
            "first_paint_ms": statistics.median(paints) * 1e3,
            "keystroke_median_ms": statistics.median(key_medians) * 1e3,
            "keystroke_worst_ms": statistics.median(key_worst) * 1e3,
            "noop_key_ms": statistics.median(noop_medians) * 1e3,
            "filter_per_key_ms": filter_s / len(prefixes) * 1e3,
            "substring_scan_per_key_ms": scan_s / len(prefixes) * 1e3,
            "index_build_ms": index_s * 1e3,
        }
        benchlib.save(args.out, result)
        for k, v in result.items():
            print(f"{k:28} {v:,.1f}" if isinstance(v, float) else f"{k:28} {v}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
