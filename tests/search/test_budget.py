"""A query's CPU budget (``sessiond/search/budget.py``) on a real index: a
prefix that merges thousands of terms is stopped with a typed error, and the
connection answers the next query as if nothing happened."""

from __future__ import annotations

import threading

import pytest

from sessiond.daemon.index.store import Store
from sessiond.search import query
from sessiond.search.schema import index_path
from tests.helpers import assistant, line

TERMS = 20_000


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("budget-root")
    project = root / "projects" / "-work-budget"
    project.mkdir(parents=True)
    path = project / "0b6e8c5e-1f0a-4c4e-9a55-6d3c2b1a0f99.jsonl"
    path.write_bytes(b"".join(line(assistant(f"w{i:05d} and a few more words", cwd="/work/budget")) + b"\n"
                             for i in range(TERMS)))
    store = Store(root, index_path(root))
    store.catch_up(str(path))
    store.commit()
    store.close()
    conn = query.open_read_only(index_path(root))
    yield root, conn
    conn.close()


def test_a_query_past_its_budget_is_stopped_and_the_connection_stays_usable(index):
    root, conn = index
    with pytest.raises(query.QueryTooCostly, match="stopped after 0.001 s of CPU"):
        query.run(conn, root, "w*", cpu_seconds=0.001)  # 20,000 terms' doclists merged
    found = query.run(conn, root, "w00042")
    assert [h.snippet.split()[0] for h in found.hits] == ["w00042"]
    assert len(query.run(conn, root, "w*").hits) == 1  # with the default budget it completes: one session


def test_a_query_within_its_budget_is_not_touched(index):
    root, conn = index
    for _ in range(50):  # the watcher thread of each query ends with it, and never interrupts a later one
        assert len(query.run(conn, root, "w01234", cpu_seconds=5).hits) == 1


def test_a_query_whose_asker_went_away_is_stopped_not_run_to_its_budget():
    """The daemon sets ``stop`` when the client that asked is gone: a statement
    running then is interrupted (this one counts for seconds of CPU), and a query
    not started yet is not started."""
    import sqlite3

    from sessiond.search.budget import Budget

    conn = sqlite3.connect(":memory:", check_same_thread=False)
    stop = threading.Event()
    threading.Timer(0.05, stop.set).start()
    budget = Budget(conn, 600.0, stop)
    with pytest.raises(sqlite3.OperationalError):
        with budget:
            conn.execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10000000) "
                         "SELECT count(*) FROM c").fetchall()
    assert budget.stopped and budget.expired
    assert conn.execute("SELECT 1").fetchall() == [(1,)]  # the connection answers the next statement
    conn.close()


def test_a_query_is_not_started_once_its_asker_went_away(index):
    root, conn = index
    stop = threading.Event()
    stop.set()
    with pytest.raises(query.QueryStopped):
        query.run(conn, root, "w00042", stop=stop)
    assert len(query.run(conn, root, "w00042").hits) == 1
