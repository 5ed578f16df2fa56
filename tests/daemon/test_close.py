"""``Close`` answers only once the session's queued entries are in its files.

A client drops every batch it was told ``queued`` once its Close is answered:
nothing is left to resend. So ``Done`` must mean written, for the main
transcript and every agent file of the session alike, whether or not this was
the last client and whether or not the exit cleanup re-appended anything: a
daemon SIGKILLed right after ``Done`` loses nothing.
"""

from __future__ import annotations

import json
import uuid

import pytest

from sessiond.store import paths
from sessiond.wire import messages as m
from tests.conftest import DaemonProc
from tests.helpers import assistant, line, main_path, read_entries, user

CWD = "/work/project"
ROUNDS = 20
BATCH = 200


def batch(n: int, **extra) -> list[bytes]:
    return [line({**(user if i % 2 == 0 else assistant)(f"m{i}"), **extra}) for i in range(n)]


def uuids(path) -> list[str]:
    return [e["uuid"] for e in read_entries(path)] if path.exists() else []


def agent_path(root, sid: str, agent: str):
    return paths.agent_file(paths.project_dir(root, CWD), sid, agent, None)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("others", [0, 1], ids=["last-client", "another-client-stays"])
def test_done_means_the_queued_entries_are_written(daemon_factory, others: int):
    """A long coalescing window (the drain would wait 5 s) makes a Done that
    does not wait for the queue plainly visible: the file is read the moment
    Done arrives, before any timer could have written it."""
    daemon: DaemonProc = daemon_factory().start("--flush-interval", "5000")
    with daemon.client() as c, daemon.client() as other:
        for _ in range(ROUNDS):
            sid = str(uuid.uuid4())
            for _ in range(others):
                other.call(m.Open(id=other.next_id(), session=sid, cwd=CWD))
            main, side = batch(BATCH), batch(BATCH)
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=main, durability="queued"))
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=side, durability="queued", agent="a1"))
            assert isinstance(c.call(m.Close(id=c.next_id(), session=sid)), m.Done)
            expect = [e["uuid"] for e in map(json.loads, main)]
            assert uuids(main_path(daemon.root, CWD, sid)) == expect
            expect_side = [e["uuid"] for e in map(json.loads, side)]
            assert uuids(agent_path(daemon.root, sid, "a1")) == expect_side


@pytest.mark.timeout(300)
def test_nothing_acknowledged_is_lost_to_a_kill_right_after_done(daemon_factory):
    """The client keeps nothing after Done: a SIGKILL the instant it arrives
    must find every entry in the file (page cache is enough: the process dies,
    not the machine)."""
    daemon: DaemonProc = daemon_factory()
    for _ in range(5):
        daemon.start("--flush-interval", "5000")
        sid = str(uuid.uuid4())
        entries = batch(BATCH)
        with daemon.client() as c:
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=entries, durability="queued"))
            assert isinstance(c.call(m.Close(id=c.next_id(), session=sid)), m.Done)
            daemon.kill()
        assert len(uuids(main_path(daemon.root, CWD, sid))) == BATCH
