"""An ``rm`` that fails part-way (no room for the trash entry's manifest: a
full disk, here the daemon's RLIMIT_FSIZE) leaves the session as it was:
in place, written to, and not named by the trash."""

from __future__ import annotations

import json
import uuid

import pytest

from sessiond.wire import messages as m
from sessiond.wire.errors import RemoteError
from tests.helpers import line, main_path, read_entries, user

CWD = "/work/project"
LIMIT = 64 * 1024
AGENTS = 600
"""Claude Code 2.0.x's flat agent files beside the session, each an item of its
manifest (over 100 bytes each): a manifest over ``LIMIT``, a transcript under it."""


def _append(c, sid: str, entries: list[dict]) -> m.Response:
    return c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(e) for e in entries],
                           durability="written"))


@pytest.mark.timeout(120)
def test_an_rm_whose_manifest_cannot_be_written_leaves_the_session_writable(daemon_factory):
    """The entry's directory was made, its manifest failed, and the daemon then
    took the session for trashed (the trash named it): every append was refused
    with "is in the trash", and ``restore`` said it was not there, until a restart."""
    d = daemon_factory().start(fsize=LIMIT)
    sid = str(uuid.uuid4())
    path = main_path(d.root, CWD, sid)
    with d.client() as c:
        _append(c, sid, [user("first")])
        for i in range(AGENTS):
            (path.parent / f"agent-a{i:04d}.jsonl").write_bytes(
                json.dumps({"type": "user", "sessionId": sid, "isSidechain": True, "agentId": f"a{i:04d}",
                            "message": {"role": "user", "content": "task"}}).encode() + b"\n")
        c.call(m.Close(id=c.next_id(), session=sid))
        with pytest.raises(RemoteError) as err:
            c.call(m.Trash(id=c.next_id(), session=sid, path=str(path)))
        assert err.value.code == "io_error", err.value
        assert path.is_file() and all((path.parent / f"agent-a{i:04d}.jsonl").is_file() for i in range(AGENTS))
        assert not [p for p in (d.root / ".trash").iterdir() if sid in p.name]
        _append(c, sid, [user("second")])
    assert [e["message"]["content"] for e in read_entries(path)] == ["first", "second"]
