"""An ``rm`` right after a session's last write, while a sync of its transcript
still waits its turn (the fdatasyncs are made slow by strace): the move must
not leave that sync to reopen the file by a path it has left."""

from __future__ import annotations

import shutil
import threading
import uuid

import pytest

from sessiond.wire import messages as m
from tests.helpers import line, main_path, user, wait_until

CWD = "/work/project"
pytestmark = pytest.mark.skipif(not shutil.which("strace"), reason="strace not installed")

SLOW_SYNCS = ["strace", "-f", "--seccomp-bpf", "-qq", "-o", "/dev/null", "-e", "trace=fdatasync,syncfs",
              "-e", "inject=fdatasync,syncfs:delay_exit=700000"]


def _append(c, sid: str, entries: list[dict], **kw) -> m.Response:
    return c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(e) for e in entries], **kw))


@pytest.mark.timeout(120)
def test_rm_waits_for_the_sync_its_transcript_is_owed(daemon_factory):
    """A session whose title came before its first message (held, spooled) owes
    its transcript a sync: the spool file goes once the transcript holds those
    entries durably. An ``rm`` right after the session's last write, while
    another file's slow sync keeps that one waiting, moved the file and closed
    its descriptor; the sync then reopened it by its old path and failed
    ("fdatasync of ... failed: No such file or directory", an error in
    ``status``), and the spool file was kept for a session that was gone."""
    d = daemon_factory()
    d.start(wrap=SLOW_SYNCS)
    busy, sid = str(uuid.uuid4()), str(uuid.uuid4())
    with d.client() as c, d.client() as other:
        _append(other, busy, [user("busy")], durability="written")
        syncing = threading.Thread(target=_append, args=(other, busy, [user("slow")]), kwargs={"durability": "durable"})
        _append(c, sid, [{"type": "custom-title", "customTitle": "held"}], durability="written")
        syncing.start()
        try:
            _append(c, sid, [user("first")], durability="written")  # its spool now waits on the transcript's sync
            c.call(m.Close(id=c.next_id(), session=sid))
            path = main_path(d.root, CWD, sid)
            c.call(m.Trash(id=c.next_id(), session=sid, path=str(path)))
        finally:
            syncing.join(timeout=60)
        spool = d.root / ".sessiond-spool" / f"{sid}.jsonl"
        wait_until(lambda: not spool.exists(), "the spool file deleted once the transcript was synced")
        assert c.status().errors == 0, d.log.read_text()[-3000:]
    assert "failed" not in d.log.read_text()
