"""What the search and the spend book remember per scope (the project dirs a
request names) is bounded however many distinct scopes clients name.

A search may name up to ``MAX_LIST_DIRS`` project dirs, and dirs that do not
exist are accepted (a project with no session yet finds nothing). The daemon
remembers, per scope, its last question to the indexer and its last re-stat,
and sends a background re-stat for each new scope; the indexer remembers, per
project, when it last re-stat'ed it. A client naming new dirs in every search
grew the daemon by about 0.5 MB a search up to 1024 scopes of 4,096 names
(some 350 MB), and the indexer without bound: the names it remembered, and
the re-stats queued in it faster than it made them (still working through
them, at full CPU, long after the client had gone). The spend book's
re-stat times and remembered answers, keyed by the names too, grew the daemon
by about 0.6 MB a ``sessiond usage`` request, up to 1024 scopes (some 650 MB).
The catalog behind ``List`` (and ``du``) kept an index of every dir a request
named, existing or not, for the daemon's life: about 5 MB a request of 4,096
(612 MB after 120).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import msgspec
import pytest

from sessiond.wire import messages as m
from sessiond.wire.messages import MAX_LIST_DIRS
from tests.helpers import indexer_started

from .attacks import MiB

SEARCHES = 150
GROWTH_BOUND = 32 * MiB
"""Before the fix either process grew by some 70 to 100 MB over ``SEARCHES``
searches; what both hold for a scope now does not depend on its names."""


def _rss(pid: int) -> int:
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmRSS:"):
            return int(row.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc status")


@pytest.mark.timeout(300)
def test_searches_naming_new_project_dirs_each_time_keep_memory_bounded(daemon_factory) -> None:
    d = daemon_factory().start()
    projects = d.root / "projects"
    with d.client(timeout=60) as c:
        c.call(m.Search(id=c.next_id(), query="okapi", all=True))
        indexer = indexer_started(d)["pid"]

        def search_new_dirs(n: int) -> None:
            for _ in range(n):
                dirs = [str(projects / f"-nowhere-{uuid.uuid4().hex}") for _ in range(MAX_LIST_DIRS)]
                assert isinstance(c.call(m.Search(id=c.next_id(), query="okapi", dirs=dirs)), m.Searched)

        search_new_dirs(10)  # the first searches' buffers and caches
        before = _rss(d.pid), _rss(indexer)
        search_new_dirs(SEARCHES)
        after = _rss(d.pid), _rss(indexer)
    assert after[0] - before[0] < GROWTH_BOUND, (before, after)
    assert after[1] - before[1] < GROWTH_BOUND, (before, after)


@pytest.mark.timeout(300)
def test_usage_reports_naming_new_project_dirs_each_time_keep_memory_bounded(daemon_factory) -> None:
    d = daemon_factory().start()
    projects = d.root / "projects"
    with d.client(timeout=60) as c:
        def usage_of_new_dirs(n: int) -> None:
            for _ in range(n):
                dirs = [str(projects / f"-nowhere-{uuid.uuid4().hex}") for _ in range(MAX_LIST_DIRS)]
                assert isinstance(c.call(m.Spend(id=c.next_id(), dirs=dirs)), m.Spent)

        usage_of_new_dirs(10)
        before = _rss(d.pid)
        usage_of_new_dirs(SEARCHES)
        after = _rss(d.pid)
    assert after - before < GROWTH_BOUND, (before, after)


@pytest.mark.timeout(300)
def test_listings_naming_new_project_dirs_each_time_keep_memory_bounded(daemon_factory) -> None:
    d = daemon_factory().start()
    projects = d.root / "projects"
    sid = str(uuid.uuid4())
    with d.client(timeout=60) as c:
        def list_new_dirs(n: int, *extra: str) -> list[str]:
            listed: list[str] = []
            for _ in range(n):
                dirs = [str(projects / f"-nowhere-{uuid.uuid4().hex}") for _ in range(MAX_LIST_DIRS - len(extra))]
                for req in (m.List(id=c.next_id(), dirs=[*dirs, *extra]), m.Usage(id=c.next_id(), dirs=dirs)):
                    answer = c.call(req)
                    assert isinstance(answer, (m.Listed, m.UsageResult)), answer
                    if isinstance(answer, m.Listed):
                        listed = [s.sessionId for s in answer.sessions]
            return listed

        later = projects / "-w-later"
        assert list_new_dirs(10, str(later)) == []  # the first requests' buffers and caches; a dir with no session yet
        before = _rss(d.pid)
        list_new_dirs(40)  # some 400 MB before the fix
        after = _rss(d.pid)
        entry = msgspec.json.encode({"type": "user", "uuid": str(uuid.uuid4()), "message": {"role": "user", "content": "hi"}})
        assert isinstance(c.call(m.Append(id=c.next_id(), session=sid, cwd="/w/later", entries=[entry],
                                          durability="written")), m.Appended)
        assert list_new_dirs(1, str(later)) == [sid]  # the dir named before it had a session lists it now
    assert after - before < GROWTH_BOUND, (before, after)
