"""The blocking client's resend rules, which it now shares with the async
client (``sessiond/client/core.py``), against real daemons."""

from __future__ import annotations

import uuid

import pytest

from sessiond.client import Client, Session
from sessiond.wire.errors import RemoteError
from tests.helpers import assistant, main_path, read_entries, user

CWD = "/work/project"


def test_a_session_resends_what_the_daemon_lost_after_another_session_reconnected(daemon_factory):
    """Two sessions on one blocking client: B's call reconnects the client after
    a daemon kill; A's entries that daemon held queued are resent all the same
    (before, A only resent after a failure of its own, and its next written
    ack then let go of entries nobody had written)."""
    d = daemon_factory("--flush-interval", "60000").start()
    a_id, b_id = str(uuid.uuid4()), str(uuid.uuid4())
    with Client(d.socket, root=d.root, autostart=False, timeout=10) as c:
        a, b = Session(c, a_id, CWD), Session(c, b_id, CWD)
        held = user("held by the daemon")
        assert a.append(held) is not None  # queued
        d.kill()
        d.start()
        b.append(user("b"), "written")  # the client reconnects here
        later = assistant("later")
        a.append(later, "written")
        a.close()
        b.close()
    assert [e["uuid"] for e in read_entries(main_path(d.root, CWD, a_id))] == [held["uuid"], later["uuid"]]


def test_a_batch_the_daemon_refuses_is_not_sent_again_with_the_next_one(daemon):
    """An error answer (here ``bad_request``) is the caller's: the batch is
    dropped, not resent in front of every later call of the session."""
    sid = str(uuid.uuid4())
    with daemon.client() as c:
        s = Session(c, sid, CWD)
        with pytest.raises(RemoteError) as refused:
            s.append(b'{"type": "user", "message": not json}')
        assert refused.value.code == "bad_request"
        good = user("fine")
        assert s.append(good, "written").accepted == 1
        s.close()
    assert [e["uuid"] for e in read_entries(main_path(daemon.root, CWD, sid))] == [good["uuid"]]
