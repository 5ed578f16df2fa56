"""A cleanly stopped daemon leaves the search index as one file: the WAL's
``-wal`` and ``-shm`` side files go with the last connection, which must be the
indexer's writer (a read-only connection cannot remove them), so the daemon
closes its query connections first."""

from __future__ import annotations

import time
import uuid

import pytest

from sessiond.wire import messages as m
from tests.conftest import DaemonProc
from tests.helpers import assistant, line

CWD = "/work/stop"


@pytest.mark.timeout(120)
def test_a_stopped_daemon_leaves_no_wal_beside_the_index(short_tmp):
    d = DaemonProc(short_tmp).start()
    try:
        with d.client(timeout=30) as c:
            c.call(m.Append(id=c.next_id(), session=str(uuid.uuid4()), cwd=CWD, durability="written",
                            entries=[line(assistant(f"walrus number {i}", cwd=CWD)) for i in range(50)]))
            deadline = time.monotonic() + 60
            while True:  # searched through the daemon: its read pool opens its read-only connections
                r = c.call(m.Search(id=c.next_id(), query="walrus", all=True))
                if r.caughtUp and r.hits:
                    break
                assert time.monotonic() < deadline, "the indexer did not catch up"
                time.sleep(0.05)
            for _ in range(8):  # more than one read-pool thread gets a connection
                c.call(m.Search(id=c.next_id(), query="number", all=True))
        index = d.root / ".sessiond-search.sqlite3"
        assert index.exists()
        assert (d.root / ".sessiond-search.sqlite3-wal").exists()  # while serving, WAL mode
    finally:
        assert d.stop() == 0
    left = sorted(p.name for p in d.root.iterdir() if p.name.startswith(".sessiond-search"))
    assert left == [".sessiond-search.sqlite3"], left
    out = d.cli("search", "walrus", "--all", "--json")  # and the index is whole: read without a daemon
    assert b"walrus number" in out.stdout
    left = sorted(p.name for p in d.root.iterdir() if p.name.startswith(".sessiond-search"))
    assert left == [".sessiond-search.sqlite3"], left  # reading it leaves nothing either
