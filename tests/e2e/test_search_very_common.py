"""A term in more entries than ``rank.COUNT_LIMIT`` of the whole index: its
window is scored without FTS5's ``bm25()`` (whose count of every match would be
the query's whole cost), by BM25 with every term counted once, so the shortest
matching entry ranks first where ``bm25()`` would put the entry that repeats
the term most; the answer still says it was windowed."""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from sessiond.search.rank import COUNT_LIMIT, WINDOW, tokens
from sessiond.wire import messages as m
from tests.conftest import DaemonProc
from tests.helpers import assistant, line

CWD = "/work/very-common"
WORD = "zebu"


def write(c, sid: str, texts: list[str]) -> None:
    for i in range(0, len(texts), 2000):
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written",
                        entries=[line(assistant(t, cwd=CWD)) for t in texts[i:i + 2000]]))


def search(c, query: str) -> m.Searched:
    deadline = time.monotonic() + 120  # the indexer runs at nice 19: wait for it to catch up, not for a time
    while True:
        r = c.call(m.Search(id=c.next_id(), query=query, all=True))
        if r.caughtUp or time.monotonic() > deadline:
            return r


@pytest.fixture(scope="module")
def store():
    base = Path(tempfile.mkdtemp(prefix="sd-", dir="/tmp"))
    os.chmod(base, 0o700)
    d = DaemonProc(base).start()
    filler, repeats, short = (str(uuid.uuid4()) for _ in range(3))
    with d.client(timeout=120) as c:
        write(c, filler, [f"{WORD} filler entry number {i} of a few words" for i in range(COUNT_LIMIT + 2000)])
        # newest: one entry that repeats the word (what bm25() puts first), one short entry that has it once
        write(c, repeats, [" ".join([WORD, "and", "more", "words"] * 20)])
        write(c, short, [f"{WORD} here"])
    yield d, {"filler": filler, "repeats": repeats, "short": short}
    d.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.timeout(300)
def test_a_term_in_most_of_the_index_ranks_its_window_by_length(store):
    d, s = store
    with d.client(timeout=120) as c:
        r = search(c, WORD)
        assert r.caughtUp and r.window == WINDOW
        ids = [h.sessionId for h in r.hits]
        # the shortest entry first, then the filler's (9 words), the one that repeats the word last
        assert ids == [s["short"], s["filler"], s["repeats"]]
        assert [h.score for h in r.hits] == sorted((h.score for h in r.hits), reverse=True)
        # a narrower query is not windowed: FTS5's own BM25, where repeating the word counts
        r = search(c, f"{WORD} more")
        assert r.window is None and [h.sessionId for h in r.hits] == [s["repeats"]]


def test_an_entrys_length_is_read_from_fts5s_own_record():
    """``tokens`` against FTS5's docsize rows for lengths of one, two and three varint bytes."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(text)")
    counts = [1, 5, 127, 128, 300, 16383, 16384, 40000]
    for n in counts:
        conn.execute("INSERT INTO t(text) VALUES (?)", (" ".join(["w"] * n),))
    assert [tokens(sz) for (sz,) in conn.execute("SELECT sz FROM t_docsize ORDER BY id")] == counts
