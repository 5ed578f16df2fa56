"""A query's CPU budget (``protocol/search/budget.py``) on a real index: a
prefix that merges thousands of terms is stopped with a typed error, and the
connection answers the next query as if nothing happened."""

from __future__ import annotations

import pytest

from sessiond.daemon.index.store import Store
from sessiond.protocol.search import query
from sessiond.protocol.search.schema import index_path
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
