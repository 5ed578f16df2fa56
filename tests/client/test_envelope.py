"""Issue 16 item 5: timestamps a reader can order by, and the agent's own ``version``."""

from __future__ import annotations

import json
import uuid as uuidlib

import pytest

from sessiond.client import Session
from sessiond.client.envelope import Clock, stamp
from tests.conftest import DaemonProc
from tests.helpers import main_path, read_entries

CWD = "/tmp/envelope-test"


@pytest.fixture
def daemon(shared_daemon: DaemonProc) -> DaemonProc:
    """One daemon for the module: every test here writes sessions of its own
    and leaves the daemon as it found it."""
    return shared_daemon


def _messages(n: int) -> list[dict]:
    return [{"type": "assistant", "message": {"id": "m1", "role": "assistant",
             "content": [{"type": "tool_use", "id": f"toolu_{i}", "name": "Bash", "input": {}}]}} for i in range(n)]


def test_one_record_call_gets_strictly_increasing_timestamps(daemon):
    """Fifty parallel tool_use blocks recorded in one call, none with a timestamp: a
    viewer that orders (and keys) by time must see fifty distinct, ordered times."""
    sid = str(uuidlib.uuid4())
    with daemon.client() as c:
        s = Session(c, sid, CWD)
        s.record(_messages(50))
        s.record(_messages(3))  # the next call continues after the last stamp
        s.flush()
        s.close()
    stamps = [e["timestamp"] for e in read_entries(main_path(daemon.root, CWD, sid)) if "uuid" in e]
    assert len(stamps) == 53
    assert all(a < b for a, b in zip(stamps, stamps[1:])), stamps
    assert all(len(t) == 24 and t.endswith("Z") for t in stamps)  # 2026-01-01T00:00:00.000Z


def test_stamps_follow_a_timestamp_the_agent_gave():
    clock = Clock()
    given = stamp({"type": "user", "timestamp": "2999-01-01T00:00:00.000Z"}, session_id="s", cwd="/x", clock=clock)
    after = stamp({"type": "user"}, session_id="s", cwd="/x", clock=clock)
    assert given["timestamp"] == "2999-01-01T00:00:00.000Z"
    assert after["timestamp"] == "2999-01-01T00:00:00.001Z"
    # an unreadable timestamp is kept as given and does not move the clock
    odd = stamp({"type": "user", "timestamp": "yesterday"}, session_id="s", cwd="/x", clock=clock)
    assert odd["timestamp"] == "yesterday"
    assert stamp({"type": "user"}, session_id="s", cwd="/x", clock=clock)["timestamp"] == "2999-01-01T00:00:00.002Z"


def test_the_agent_supplies_the_envelope_version(daemon):
    sid = str(uuidlib.uuid4())
    with daemon.client() as c:
        s = Session(c, sid, CWD, version="2.1.170")
        s.record([{"type": "user", "message": {"role": "user", "content": "hi"}},
                  {"type": "user", "version": "9.9.9", "message": {"role": "user", "content": "own"}}])
        s.flush()
        s.close()
    sid2 = str(uuidlib.uuid4())
    line = json.dumps({"type": "user", "message": {"role": "user", "content": "cli"}}).encode() + b"\n"
    daemon.cli("record", "--cwd", CWD, "--session", sid2, "--agent-version", "1.0.98", "-", input=line)
    daemon.cli("flush", "--session", sid2)
    versions = [e["version"] for e in read_entries(main_path(daemon.root, CWD, sid)) if "uuid" in e]
    assert versions == ["2.1.170", "9.9.9"]
    assert [e["version"] for e in read_entries(main_path(daemon.root, CWD, sid2)) if "uuid" in e] == ["1.0.98"]


def test_a_fifo_at_git_head_does_not_hang_record(daemon, tmp_path):
    """The branch for the envelope was read with a plain blocking read: a FIFO
    (or a device) at ``.git/HEAD`` of the cwd hung ``record`` forever."""
    import os

    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    os.mkfifo(repo / ".git" / "HEAD", 0o600)
    sid = str(uuidlib.uuid4())
    msg = {"type": "user", "message": {"role": "user", "content": "hi"}}
    daemon.cli("record", "--cwd", str(repo), "--session", sid, input=json.dumps(msg).encode() + b"\n", timeout=20)
    daemon.cli("flush", timeout=20)
    [entry] = read_entries(main_path(daemon.root, str(repo), sid))
    assert entry["message"] == msg["message"] and "gitBranch" not in entry
