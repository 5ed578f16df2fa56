"""Lazy materialization, the pending buffer, dedup and routing, on a real daemon."""

import json
import os
import stat
import uuid

import pytest

from sessiond.wire import messages as m
from sessiond.wire.errors import RemoteError
from tests.conftest import DaemonProc
from tests.helpers import assistant, line, main_path, read_entries, user

CWD = "/work/project"


@pytest.fixture
def daemon(shared_daemon: DaemonProc) -> DaemonProc:
    """One daemon for the module: these tests write sessions of their own; the
    ones that look at the whole root or restart the daemon start their own."""
    return shared_daemon


def append(c, sid, entries, **kw):
    return c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(e) for e in entries], **kw))


def test_session_without_a_message_leaves_no_file(daemon_factory):
    daemon = daemon_factory().start()
    sid = str(uuid.uuid4())
    with daemon.client() as c:
        append(c, sid, [{"type": "custom-title", "customTitle": "x"}, {"type": "tag", "tag": "t"}], durability="written")
        c.call(m.Close(id=c.next_id(), session=sid))
        c.flush(durable=True)
    assert not main_path(daemon.root, CWD, sid).exists()
    assert not (daemon.root / "projects").exists() or not any((daemon.root / "projects").rglob("*.jsonl"))


def test_first_message_writes_pending_entries_in_arrival_order(daemon):
    sid = str(uuid.uuid4())
    pre = [
        {"type": "mode", "mode": "normal"},
        {"type": "attachment", "uuid": str(uuid.uuid4()), "attachment": {"type": "hook"}},
        {"type": "custom-title", "customTitle": "first"},
        {"type": "custom-title", "customTitle": "second"},
    ]
    msg = user("hello")
    with daemon.client() as c:
        append(c, sid, pre[:2])
        append(c, sid, pre[2:], durability="written")
        path = main_path(daemon.root, CWD, sid)
        assert not path.exists()
        opened = c.call(m.Open(id=c.next_id(), session=sid, cwd=CWD))
        assert not opened.materialized
        append(c, sid, [msg], durability="written")
        assert read_entries(path) == [*pre, msg]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_duplicate_uuids_are_dropped_but_sidechains_may_share_them(daemon):
    sid = str(uuid.uuid4())
    a = user("one")
    shared = assistant("two")
    side = {**shared, "isSidechain": True, "agentId": "agent7"}
    with daemon.client() as c:
        r1 = append(c, sid, [a, shared], durability="written")
        r2 = append(c, sid, [a, shared, side], durability="written")
        r3 = append(c, sid, [side], durability="written")
    assert (r1.accepted, r1.duplicates) == (2, 0)
    assert (r2.accepted, r2.duplicates) == (1, 2)
    assert (r3.accepted, r3.duplicates) == (0, 1)
    assert read_entries(main_path(daemon.root, CWD, sid)) == [a, shared]
    agent_file = main_path(daemon.root, CWD, sid).with_suffix("") / "subagents" / "agent-agent7.jsonl"
    assert read_entries(agent_file) == [side]


def test_dedup_survives_a_daemon_restart(daemon_factory):
    daemon = daemon_factory().start()
    sid = str(uuid.uuid4())
    a, b = user("one"), assistant("two")
    with daemon.client() as c:
        append(c, sid, [a, b], durability="written")
    assert daemon.stop() == 0
    daemon.start()
    with daemon.client() as c:
        r = append(c, sid, [a, b, user("three")], durability="written")
    assert (r.accepted, r.duplicates) == (1, 2)
    assert [e["message"]["content"] for e in read_entries(main_path(daemon.root, CWD, sid))] == ["one", [{"type": "text", "text": "two"}], "three"]


def test_sidechains_route_to_agent_and_workflow_files_without_creating_the_main_file(daemon):
    sid = str(uuid.uuid4())
    s1 = {**user("task"), "isSidechain": True, "agentId": "a1"}
    s2 = {**assistant("done"), "isSidechain": True, "agentId": "a1"}
    w1 = {**user("wf"), "isSidechain": True, "agentId": "a2"}
    with daemon.client() as c:
        append(c, sid, [s1, s2], durability="written")
        append(c, sid, [w1], durability="written", run="run_1")
        append(c, sid, [{"type": "user", "uuid": str(uuid.uuid4()), "message": {"content": "forced"}}], durability="written", agent="a3")
        c.call(m.SetAgentMeta(id=c.next_id(), session=sid, cwd=CWD, agent="a1", meta=b'{"agentType":"general-purpose","worktreePath":"/w"}'))
    base = main_path(daemon.root, CWD, sid)
    sub = base.with_suffix("") / "subagents"
    assert not base.exists()
    assert read_entries(sub / "agent-a1.jsonl") == [s1, s2]
    assert read_entries(sub / "workflows" / "run_1" / "agent-a2.jsonl") == [w1]
    assert read_entries(sub / "agent-a3.jsonl")[0]["message"]["content"] == "forced"
    assert json.loads((sub / "agent-a1.meta.json").read_text()) == {"agentType": "general-purpose", "worktreePath": "/w"}
    assert stat.S_IMODE((sub / "agent-a1.meta.json").stat().st_mode) == 0o600


def test_a_bad_entry_refuses_the_whole_batch_and_the_daemon_goes_on(daemon_factory):
    daemon = daemon_factory().start()
    sid = str(uuid.uuid4())
    good = user("fine")
    with daemon.client() as c:
        for bad in (b"[1]", b'{"type":"user"}\n{"x":1}', b'{"type":"user","x":"\xff"}', b"{",
                    b'{"type":"user","isSidechain":true,"agentId":"../../etc"}'):
            with pytest.raises(RemoteError) as err:
                c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(good), bad], durability="written"))
            assert err.value.code == "bad_request"
        for bad_sid, bad_cwd in (("../x", CWD), (sid, "relative"), (sid, "/a\x00b")):
            with pytest.raises(RemoteError) as err:
                c.call(m.Append(id=c.next_id(), session=bad_sid, cwd=bad_cwd, entries=[line(good)]))
            assert err.value.code == "bad_request"
        r = append(c, sid, [good], durability="written")
    assert r.accepted == 1
    assert read_entries(main_path(daemon.root, CWD, sid)) == [good]
    assert not any(p for p in daemon.root.rglob("*") if "etc" in p.name)


def test_pending_buffer_is_bounded(daemon_factory):
    d = daemon_factory().start()
    sid = str(uuid.uuid4())
    big = {"type": "attachment", "attachment": {"content": "x" * (1024 * 1024)}}
    with d.client() as c:
        with pytest.raises(RemoteError) as err:
            for _ in range(20):
                append(c, sid, [big])
        assert err.value.code == "too_large"
        append(c, sid, [user("still works")], durability="written")
    assert read_entries(main_path(d.root, CWD, sid))[-1]["message"]["content"] == "still works"


def test_files_are_private_whatever_the_umask(daemon_factory):
    old = os.umask(0)
    try:
        d = daemon_factory().start()
    finally:
        os.umask(old)
    sid = str(uuid.uuid4())
    with d.client() as c:
        append(c, sid, [user("x"), {**user("y"), "isSidechain": True, "agentId": "q"}], durability="written")
    for p in d.root.rglob("*"):
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode == (0o700 if p.is_dir() else 0o600), (p, oct(mode))
