"""Paths in requests cost the daemon a path's worth of work, never more.

Every dir a List, Search, Reindex or Usage names used to be resolved with
``realpath`` (on the event loop for Search, Reindex and Usage), one ``lstat``
per component, each as long as the path so far: 20,000 dirs spelled
``<root>/projects/-x/../-x/...`` held the loop for 68 s, while another client's
``status`` waited. Now the wire bounds how many dirs and how long a path, and
a dir is checked as text first. The same for Trash's path and Import's files."""

from __future__ import annotations

import uuid

import pytest

from sessiond.wire import messages as m
from sessiond.wire.errors import RemoteError
from sessiond.wire.records import MAX_IMPORT_FILES, MAX_PATH_CHARS, ImportFile, SessionSource
from tests.helpers import line, user

CWD = "/work/request-paths"


def deep(d, pairs: int) -> str:
    """The project dir of CWD, spelled with ``pairs`` ``/../<name>`` detours."""
    proj = d.root / "projects" / "-work-request-paths"
    return str(proj) + f"/../{proj.name}" * pairs


@pytest.fixture(scope="module")
def store(shared_daemon):
    sid = str(uuid.uuid4())
    with shared_daemon.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written", entries=[line(user("armadillo words", cwd=CWD))]))
    return shared_daemon, sid


@pytest.mark.timeout(120)
@pytest.mark.parametrize("op", ["list", "search", "usage"])
def test_the_most_dirs_of_the_longest_spelling_are_cheap(store, op):
    d, sid = store
    dirs = [deep(d, (MAX_PATH_CHARS - len(deep(d, 0))) // (len(deep(d, 1)) - len(deep(d, 0))))] * m.MAX_LIST_DIRS
    assert len(dirs[0]) <= MAX_PATH_CHARS
    with d.client(timeout=60) as c, d.client(timeout=10) as victim:
        rid = c.next_id()
        c.send({"list": m.List(id=rid, dirs=dirs), "usage": m.Usage(id=rid, dirs=dirs),
                "search": m.Search(id=rid, query="armadillo", dirs=dirs)}[op])
        assert victim.status().pid  # answered while the other request is checked (it was minutes before)
        r = c.receive(rid)
    if op == "list":
        assert [s.sessionId for s in r.sessions] == [sid]
    elif op == "search":
        assert [h.sessionId for h in r.hits] == [sid]
    else:
        assert isinstance(r, m.UsageResult)


@pytest.mark.parametrize("op", ["list", "search", "usage", "reindex"])
def test_more_dirs_than_the_bound_are_refused(store, op):
    d, _ = store
    dirs = [deep(d, 0)] * (m.MAX_LIST_DIRS + 1)
    with d.client() as c:
        with pytest.raises(RemoteError, match=f"length <= {m.MAX_LIST_DIRS}") as exc:
            c.call({"list": m.List(id=c.next_id(), dirs=dirs), "usage": m.Usage(id=c.next_id(), dirs=dirs),
                    "search": m.Search(id=c.next_id(), query="x", dirs=dirs),
                    "reindex": m.Reindex(id=c.next_id(), dirs=dirs)}[op])
        assert exc.value.code == "bad_request"
        assert c.status().pid  # the connection goes on


def test_a_dir_spelled_through_another_project_or_outside_is_refused(store):
    d, _ = store
    with d.client() as c:
        for bad in (str(d.root / "projects"), str(d.root / "projects" / "-x" / "..") , "/etc", "relative/-x",
                    str(d.root / "projects" / "-x" / "sub")):
            with pytest.raises(RemoteError) as exc:
                c.call(m.Search(id=c.next_id(), query="armadillo", dirs=[bad]))
            assert exc.value.code == "permission_denied", bad


def test_trash_and_import_paths_are_bounded(store):
    d, sid = store
    path = deep(d, 0) + "/.." * 2000 + f"/{sid}.jsonl"
    with d.client() as c:
        with pytest.raises(RemoteError, match=f"length <= {MAX_PATH_CHARS}"):
            c.call(m.Trash(id=c.next_id(), session=sid, path=path))
        files = [ImportFile(src=f"/nonexistent/{i}.jsonl", rel=f"{sid}/subagents/agent-{i}.jsonl") for i in range(MAX_IMPORT_FILES + 1)]
        with pytest.raises(RemoteError, match=f"length <= {MAX_IMPORT_FILES}"):
            c.call(m.Import(id=c.next_id(), source=SessionSource(project="-x", session=sid, files=files)))
        assert c.status().pid
