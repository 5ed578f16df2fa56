"""Two ``Session`` handles of one session on one ``Client``.

The daemon attaches a session to a connection, not to a handle: a ``Close``
from either handle would detach the connection for both, releasing the lease
and running the exit cleanup (which discards entries held before the first
message) under the handle still open. Only the last handle's close sends
``Close``; an earlier one makes sure its own entries are written (a Flush of
the session) and leaves the session attached.
"""

from __future__ import annotations

import uuid

import pytest

from sessiond.wire.errors import SessionBusy
from tests.helpers import main_path, read_entries, user

CWD = "/work/handles"


@pytest.mark.timeout(60)
def test_closing_one_handle_keeps_the_other_handles_held_entries(daemon):
    """A title held before the first message (no file yet) survives the close
    of the other handle and is written with the first message."""
    sid = str(uuid.uuid4())
    with daemon.client() as c:
        first, second = c.session(sid, CWD), c.session(sid, CWD)
        second.set_title("kept")
        first.close()
        second.record([user("hello")])
        second.close()
    entries = read_entries(main_path(daemon.root, CWD, sid))
    assert [e.get("customTitle") for e in entries if e["type"] == "custom-title"][:1] == ["kept"]
    assert [e["message"]["content"] for e in entries if e["type"] == "user"] == ["hello"]


@pytest.mark.timeout(60)
def test_closing_one_handle_keeps_the_lease_for_the_other(daemon):
    sid = str(uuid.uuid4())
    with daemon.client() as c, daemon.client() as rival_client:
        first, second = c.session(sid, CWD), c.session(sid, CWD)
        first.record([user("one")])
        first.close()
        rival = rival_client.session(sid, CWD, reconnect_timeout=1.0)
        with pytest.raises(SessionBusy):
            rival.record([user("rival")])
        second.record([user("two")])
        second.close()
        rival.record([user("after")])  # the last handle's close released it
        rival.close()
    users = [e["message"]["content"] for e in read_entries(main_path(daemon.root, CWD, sid)) if e["type"] == "user"]
    assert users == ["one", "two", "after"]


@pytest.mark.timeout(120)
def test_an_earlier_handles_queued_entries_are_written_when_it_closes(daemon_factory):
    """Its close still means written, though it sends no Close: the daemon's
    coalescing window is long, and the file is read the moment close returns."""
    daemon = daemon_factory().start("--flush-interval", "5000")
    sid = str(uuid.uuid4())
    with daemon.client() as c:
        first, second = c.session(sid, CWD), c.session(sid, CWD, lease=False)
        first.record([user(f"m{i}") for i in range(100)])
        first.close()
        users = [e for e in read_entries(main_path(daemon.root, CWD, sid)) if e["type"] == "user"]
        assert len(users) == 100
        second.close()
