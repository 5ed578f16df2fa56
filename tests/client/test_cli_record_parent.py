"""``record --parent UUID`` chains after a message of the session, and refuses a
uuid that is none (a dangling parent) in one line, writing nothing."""

from __future__ import annotations

import uuid as uuidlib

import pytest

from sessiond.client import Session
from sessiond.store.paths import agent_file, project_dir
from tests.client.test_cli_input import one_error_line
from tests.conftest import DaemonProc
from tests.helpers import assistant, line, main_path, read_entries, user

CWD = "/work/parent-project"


@pytest.fixture
def recorded(shared_daemon: DaemonProc) -> tuple[str, str]:
    """A session holding u1 <- a1 (main) and an agent transcript, acknowledged
    only as queued: ``--parent`` must find them all the same."""
    sid = str(uuidlib.uuid4())
    with shared_daemon.client() as c:  # no lease: the CLI after it must never find the session held
        s = Session(c, sid, CWD, lease=False)
        s.record([user("question", "u1"), assistant("answer", "a1")])
        side = Session(c, sid, CWD, agent="helper", lease=False)
        side.record([user("sub task", "s1"), assistant("sub answer", "s2")])
        s.close(timeout=30.0)
        side.close(timeout=30.0)
    return sid, "a1"


def _flushed(d: DaemonProc, sid: str) -> None:
    with d.client() as c:
        c.flush(sid)


def _record(d: DaemonProc, sid: str, parent: str, *extra: str, text: str = "more"):
    return d.cli("record", "--cwd", CWD, "--session", sid, "--parent", parent, *extra,
                 input=line(user(text)) + b"\n", check=False)


def test_a_parent_of_the_session_is_chained_after(shared_daemon, recorded):
    sid, parent = recorded
    r = _record(shared_daemon, sid, "u1", text="a branch off the question")
    assert r.returncode == 0, r.stderr
    _flushed(shared_daemon, sid)
    entries = read_entries(main_path(shared_daemon.root, CWD, sid))
    assert [e.get("parentUuid") for e in entries if e.get("type") == "user"][-1] == "u1"


# a fixed id: every xdist worker collects the same tests
@pytest.mark.parametrize("parent", ["6d1f3c2e-9a4b-4c7d-8e2f-0b5a7c9d1e3f", "not-a-uuid", "s1"])
def test_a_dangling_parent_is_refused_and_nothing_written(shared_daemon, recorded, parent):
    """A uuid never written, a string that is no uuid, and a uuid of the agent's
    transcript (not a message of the main conversation)."""
    sid, _ = recorded
    _flushed(shared_daemon, sid)
    path = main_path(shared_daemon.root, CWD, sid)
    before = path.read_bytes()
    msg = one_error_line(_record(shared_daemon, sid, parent))
    assert f"--parent {parent} is not a message of session {sid}" in msg
    assert path.read_bytes() == before


def test_with_agent_the_parent_must_be_in_the_agent_transcript(shared_daemon, recorded):
    sid, main_uuid = recorded
    _flushed(shared_daemon, sid)
    side = agent_file(project_dir(shared_daemon.root, CWD), sid, "helper")
    before = side.read_bytes()
    msg = one_error_line(_record(shared_daemon, sid, main_uuid, "--agent", "helper"))
    assert f"is not a message of agent helper of session {sid}" in msg
    assert side.read_bytes() == before
    r = _record(shared_daemon, sid, "s2", "--agent", "helper", text="sub follow-up")
    assert r.returncode == 0, r.stderr
    _flushed(shared_daemon, sid)  # record answers once accepted (queued): written after a flush
    assert read_entries(side)[-1]["parentUuid"] == "s2"


def test_a_parent_in_a_session_without_a_transcript_is_refused(shared_daemon):
    sid = str(uuidlib.uuid4())
    msg = one_error_line(_record(shared_daemon, sid, str(uuidlib.uuid4())))
    assert f"is not a message of session {sid}" in msg
    assert not main_path(shared_daemon.root, CWD, sid).exists()
