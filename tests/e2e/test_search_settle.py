"""The indexer works in the writers' pauses (``sessiond/daemon/index/link.py``): noted
files go to it once the writes pause, but an unbroken stream of writes still
gets indexed every ``LOOK_MAX_DELAY``, and a search never waits on the pause.
Read from the index file itself (read-only, as the CLI does without a daemon),
so nothing here asks the indexer to catch up."""

from __future__ import annotations

import sqlite3
import time
import uuid

import pytest

from sessiond.search import query
from sessiond.wire import messages as m
from tests.conftest import DaemonProc
from tests.helpers import assistant, line

CWD = "/work/settle"


def indexed(root, word: str) -> bool:
    index = root / ".sessiond-search.sqlite3"
    if not index.exists():
        return False
    conn = query.open_read_only(index)
    try:
        return bool(query.run(conn, root, word).hits)
    except sqlite3.OperationalError as exc:  # the indexer has made the file, not yet its tables
        if "no such table" in str(exc):
            return False
        raise
    finally:
        conn.close()


@pytest.mark.timeout(120)
def test_an_unbroken_stream_of_writes_is_indexed_while_it_lasts(short_tmp):
    d = DaemonProc(short_tmp).start()
    try:
        with d.client(timeout=30) as c:
            session = str(uuid.uuid4())
            started = time.monotonic()
            seen_during = False
            i = 0
            # A write every 20 ms, never a 100 ms pause, until the index shows the
            # first (due within LOOK_MAX_DELAY) or for 8 s at most.
            while not seen_during and time.monotonic() - started < 8:
                c.call(m.Append(id=c.next_id(), session=session, cwd=CWD, durability="written",
                                entries=[line(assistant(f"streamword{i:05d}", cwd=CWD))]))
                i += 1
                if not seen_during and i % 10 == 0:
                    seen_during = indexed(d.root, "streamword00000")
                time.sleep(0.02)
            assert seen_during, "nothing was indexed while the writes went on"
            last = f"streamword{i - 1:05d}"
            deadline = time.monotonic() + 30
            while not indexed(d.root, last):  # the stream's end, after its pause, without a search
                assert time.monotonic() < deadline, "the end of the stream was never indexed"
                time.sleep(0.1)
            # a search right after a write finds it: it asks for what was noted, pause or not
            c.call(m.Append(id=c.next_id(), session=session, cwd=CWD, durability="written",
                            entries=[line(assistant("justwrittenword", cwd=CWD))]))
            r = c.call(m.Search(id=c.next_id(), query="justwrittenword", all=True))
            assert r.caughtUp and len(r.hits) == 1
    finally:
        d.stop()
