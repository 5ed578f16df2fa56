"""The picker on 10,000 sessions: time to first paint and per keystroke, driven
through Textual's headless pilot, with the listing it needs, all in one run.

    python bench/picker.py [--sessions 10000] [--runs 3]

Figures (median of runs), the picker opened as ``pick`` opens it with a
daemon running (warm catalog):
- ``list from the daemon`` / ``list from the files``: ``find_sessions`` of every
  session of the project (the whole listing, read behind the first screen),
  through the daemon's catalog and without one; ``first page``: the newest
  sessions read from the files (``pick_cmds.first_page``: what the first
  screen shows);
- ``open``: from the start to the first screen rendered (the first page read,
  the app started headless, its first refresh done: ``call_after_refresh``
  from ``on_mount``);
  ``whole listing shown``: until every session is in the list;
- ``keystroke``: one character typed into the filter (``pilot.press``: the
  filter, the list's screen rendered), median and worst over the characters of
  a 24-character query, each run;
- ``no-op key``: the baseline for a keystroke, measured in the same app: a key
  that changes nothing (Home in the filter), the pilot's and the screen's own
  cost;
- ``search after rest``: from the query's last key until the conversations'
  search (the daemon's) has answered and the list shows its sessions, the
  debounce (``SEARCH_DELAY``) included;
- ``filter alone``: ``Matcher.filter`` per prefix of that query as the picker
  runs it (one matcher, the query growing: each key filters what the last
  kept), from scratch per prefix, and the baseline measured in the same run:
  a plain case-insensitive substring scan of the titles (no typo tolerance,
  no index) over the same sessions; ``wide vocabulary``: the filter as typed
  over titles drawn from 20,000 distinct words (the generated store's titles
  share 30, so each typo check there compares few words).
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
from sessiond.client.cli.pick_cmds import StoreActions, first_page, whole_listing
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


async def drive(obj: Context) -> dict:
    """Open the picker as ``pick`` does (the first page from the files, the
    whole listing read behind it), then no-op keys, then each character of
    QUERY typed, then the typing rests until the conversations' search
    answers: the times (s) of each step, and the rows left."""
    t = time.perf_counter()
    actions = StoreActions(obj, CWD)
    first = first_page(obj, CWD, False)
    painted: list[float] = []

    class Timed(PickerApp):
        def on_mount(self) -> None:  # Textual calls PickerApp's too, after this one
            self.call_after_refresh(lambda: painted.append(time.perf_counter()))

    app = Timed(first.rows, actions, show_project=first.show_project, scope=first.scope,
                more=lambda: whole_listing(obj, CWD, False, actions))
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        opened = painted[0] - t
        while app._loading:
            await pilot.pause(0.01)
        await pilot.pause()
        whole = time.perf_counter() - t
        assert len(app.rows) >= 10_000 or len(app.rows) == len(app.listing), len(app.rows)
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
        k = time.perf_counter()
        await pilot.press("backspace", QUERY[-1])  # the last key again, then rest: the search is asked and answers
        while (app._search_timer is not None or app._searching) and time.perf_counter() - k < 30:
            await pilot.pause(0.01)
        searched = time.perf_counter() - k
        await pilot.press("escape")
    return {"open": opened, "whole": whole, "keys": keys, "noops": noops, "left": left, "search": searched,
            "rows": len(app.rows)}


def caught_up(obj: Context, limit: float = 300.0) -> None:
    """Wait until the daemon's search index holds every session (its first
    indexing of the generated store), so the search measured is the steady one."""
    from sessiond.client.cli.search_cmds import find_hits

    deadline = time.monotonic() + limit
    while (note := find_hits(obj, "zzzunlikelyword", None, 1)[1]) is not None:
        if time.monotonic() > deadline:
            raise SystemExit(f"the daemon's index never caught up: {note}")
        time.sleep(0.5)


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
        page_s, _ = benchlib.timed(lambda: first_page(offline, CWD, False), args.runs)
        daemon = benchlib.start_daemon(sock, root)
        try:
            online = Context(root=root, socket=sock, autostart=False)
            find_sessions(online, CWD, False)  # the catalog's first scan
            daemon_s, listed = benchlib.timed(lambda: find_sessions(online, CWD, False), args.runs)
            assert len(listed) == args.sessions
            caught_up(online)
            drives = [asyncio.run(drive(online)) for _ in range(args.runs)]
        finally:
            daemon.terminate()
            daemon.wait(timeout=60)
        titles = [s.title or "" for s in sessions]
        prefixes = [QUERY[:i] for i in range(1, len(QUERY) + 1)]

        def typed() -> list[list[int]]:  # as the picker filters: one matcher, the query growing
            matcher = Matcher(titles, [s.sessionId for s in sessions])
            return [matcher.filter(p) for p in prefixes]

        index_s, _ = benchlib.timed(lambda: Matcher(titles, [s.sessionId for s in sessions]), args.runs)
        filter_s, _ = benchlib.timed(typed, args.runs)
        fresh = Matcher(titles, [s.sessionId for s in sessions])

        def from_scratch() -> None:  # each prefix filtered over every session, nothing kept from the last
            for p in prefixes:
                fresh._term.cache_clear()
                fresh._near.cache_clear()
                fresh._terms_seen.clear()
                fresh._near_seen.clear()
                fresh.filter(p)

        fresh_s, _ = benchlib.timed(from_scratch, args.runs)
        scan_s, _ = benchlib.timed(lambda: [substring_scan(titles, p) for p in prefixes], args.runs)
        rnd = random.Random(11)  # titles of a person's many topics: 20,000 distinct words
        vocabulary = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(4, 10)))
                      for _ in range(20_000)] + WORDS
        wide = [" ".join(rnd.choice(vocabulary) for _ in range(rnd.randint(3, 12))) for _ in sessions]

        def typed_wide() -> None:
            matcher = Matcher(wide, [s.sessionId for s in sessions])
            for p in prefixes:
                matcher.filter(p)

        wide_index_s, _ = benchlib.timed(lambda: Matcher(wide, [s.sessionId for s in sessions]), args.runs)
        wide_s, _ = benchlib.timed(typed_wide, args.runs)
        med = statistics.median
        result = {
            "sessions": args.sessions, "runs": args.runs, "query": QUERY, "rows_left": drives[-1]["left"],
            "list_files_ms": files_s * 1e3, "list_daemon_ms": daemon_s * 1e3, "first_page_ms": page_s * 1e3,
            "open_ms": med(d["open"] for d in drives) * 1e3,
            "whole_listing_shown_ms": med(d["whole"] for d in drives) * 1e3,
            "keystroke_median_ms": med(med(d["keys"]) for d in drives) * 1e3,
            "keystroke_worst_ms": med(max(d["keys"]) for d in drives) * 1e3,
            "noop_key_ms": med(med(d["noops"]) for d in drives) * 1e3,
            "search_after_rest_ms": med(d["search"] for d in drives) * 1e3,
            "filter_per_key_ms": (filter_s - index_s) / len(prefixes) * 1e3,
            "filter_from_scratch_per_key_ms": fresh_s / len(prefixes) * 1e3,
            "substring_scan_per_key_ms": scan_s / len(prefixes) * 1e3,
            "filter_wide_vocabulary_per_key_ms": (wide_s - wide_index_s) / len(prefixes) * 1e3,
            "wide_index_build_ms": wide_index_s * 1e3,
            "index_build_ms": index_s * 1e3,
        }
        benchlib.save(args.out, result)
        for k, v in result.items():
            print(f"{k:32} {v:,.1f}" if isinstance(v, float) else f"{k:32} {v}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
