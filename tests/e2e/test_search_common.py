"""A term in more entries than the ranking window (``rank.WINDOW``): the hits
come from the newest matching entries, the densest first, the answer says it
was windowed, a scope still finds its own older matches, and a narrower query
gets the exact ranking back.

What is asserted is the index's ranking, so the fixture first waits until a
search is answered from an index that has every line written: the indexer runs
at the lowest CPU priority (SCHED_IDLE), and beside a test run that keeps both
cores busy it can be starved for longer than the 5 s a search waits for it; the
answer then scans the files (``caughtUp: false``, ``scanned``), which rank
without the newest-first window, and put the oldest, densest session first."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from sessiond.search.rank import WINDOW
from sessiond.wire import messages as m
from tests.conftest import DaemonProc
from tests.helpers import assistant, line, user

CWD = "/work/common-term"
SMALL = "/work/small-project"
INDEXED_TIMEOUT = 120.0
"""Seconds the fixture waits for the starved indexer (a bound, not a time asserted)."""
pytestmark = pytest.mark.timeout(INDEXED_TIMEOUT + 60)  # the module's fixture is set up in the time of whichever test runs first

FILLER = "an ordinary remark about the build that mentions quokka once among many other words of a longish entry"


def write(d, sid: str, texts: list[str], cwd: str = CWD) -> None:
    with d.client() as c:
        for i in range(0, len(texts), 500):
            c.call(m.Append(id=c.next_id(), session=sid, cwd=cwd, durability="written",
                            entries=[line(assistant(t, cwd=cwd)) for t in texts[i:i + 500]]))


def indexed(d, query: str) -> None:
    """Return once a search of ``query`` is answered from the index, caught up
    with every write (the indexer takes only the CPU time the rest leave over)."""
    deadline = time.monotonic() + INDEXED_TIMEOUT
    with d.client(timeout=60) as c:
        while True:
            r = c.call(m.Search(id=c.next_id(), query=query, all=True))
            if r.caughtUp and r.scanned is None:
                return
            assert time.monotonic() < deadline, f"the indexer did not catch up: caughtUp={r.caughtUp}, {r.scanned}"
            time.sleep(0.5)  # each answer that scanned the files took CPU time the indexer waits for


def search(d, *args: str) -> tuple[list[str], str]:
    r = d.cli("search", *args, "--json", check=False)  # no match: exit 1, as grep
    return [h["sessionId"] for h in json.loads(r.stdout)], r.stderr.decode()


@pytest.fixture(scope="module")
def store():
    base = Path(tempfile.mkdtemp(prefix="sd-", dir="/tmp"))
    os.chmod(base, 0o700)
    d = DaemonProc(base).start()
    old, small, filler, sparse, dense = (str(uuid.uuid4()) for _ in range(5))
    # oldest: the densest entries of all (a full BM25 ranking would put this first)
    write(d, old, ["quokka quokka quokka marmalade"] * 3)
    write(d, small, ["quokka in the small project"], cwd=SMALL)
    # then more matching entries than the window, newer than both
    write(d, filler, [f"{FILLER} {i}" for i in range(WINDOW + 100)])
    # newest: one sparse and one dense match
    write(d, sparse, [f"{FILLER} and the newest sparse one"])
    write(d, dense, ["quokka quokka at last"])
    indexed(d, "quokka")
    yield d, {"old": old, "small": small, "filler": filler, "sparse": sparse, "dense": dense}
    d.stop()
    shutil.rmtree(base, ignore_errors=True)


def test_a_very_common_term_ranks_the_newest_matches_densest_first(store):
    d, s = store
    hits, note = search(d, "quokka", "--all")
    assert hits[0] == s["dense"]  # the newest sessions, the densest match first
    assert set(hits) >= {s["dense"], s["sparse"], s["filler"]}
    assert s["old"] not in hits and s["small"] not in hits  # older than the newest WINDOW matches
    assert f"ranked among the newest {WINDOW}" in note
    with d.client() as c:
        r = c.call(m.Search(id=c.next_id(), query="quokka", all=True))
    assert r.window == WINDOW and r.hits[0].sessionId == s["dense"]


def test_a_narrower_query_gets_the_exact_ranking(store):
    d, s = store
    hits, note = search(d, "quokka", "marmalade", "--all")
    assert hits == [s["old"]] and "ranked among" not in note
    with d.client() as c:
        r = c.call(m.Search(id=c.next_id(), query='"quokka quokka"', all=True))
    assert r.window is None  # 6 entries: ranked by BM25 over all of them
    assert [h.sessionId for h in r.hits] == [s["old"], s["dense"]]


def test_a_scope_finds_its_own_matches_however_many_newer_ones_elsewhere(store):
    d, s = store
    hits, note = search(d, "quokka", "--cwd", SMALL)
    assert hits == [s["small"]] and "ranked among" not in note
    hits, _ = search(d, "quokka", "--cwd", CWD, "--role", "assistant")
    assert hits[0] == s["dense"] and s["small"] not in hits


def test_a_reindex_keeps_the_newest_first_order_of_files_written_by_others(store):
    """A rebuild takes files least recently modified first, whatever their
    project's name: a foreign file last modified long ago stays out of the
    newest window after ``reindex --all`` (its project sorts after every other)."""
    d, s = store
    sid = str(uuid.uuid4())
    project = d.root / "projects" / "-zz-foreign-old"
    project.mkdir(parents=True)
    path = project / f"{sid}.jsonl"
    path.write_bytes(b"".join(line(user(t, cwd="/zz/foreign/old")) + b"\n" for t in ["quokka quokka quokka"] * 3))
    os.utime(path, (1_600_000_000, 1_600_000_000))
    d.cli("reindex", "--all")
    hits, _ = search(d, "quokka", "--all")
    assert hits[0] == s["dense"] and sid not in hits
    assert search(d, "quokka", "--cwd", "/zz/foreign/old")[0] == [sid]
