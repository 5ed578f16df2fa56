"""Entries held before a session's first message are acknowledged like any
other: ``written``/``durable`` mean in (synced to) the session's spool file, a
daemon SIGKILL loses none of them, the session's transcript gets them first and
the spool goes away; a session that never materializes leaves no transcript."""

import os
import stat
import uuid

import pytest

from sessiond.client import Client, Session
from sessiond.store.spoolfile import header_line, spool_dir, spool_path
from sessiond.wire import messages as m
from tests.helpers import line, main_path, read_entries, user, wait_until

CWD = "/work/project"


def test_held_entries_survive_a_daemon_sigkill(daemon_factory):
    d = daemon_factory().start()
    sid = str(uuid.uuid4())
    attachment = {"type": "attachment", "uuid": str(uuid.uuid4()), "attachment": {"type": "hook", "content": "ctx"}}
    with d.client() as c:
        s = Session(c, sid, CWD, lease=False)  # a holder would keep the session from the CLI below for the grace period
        s.set_title("Kept title")
        s.set_tag("kept-tag")
        s.set_mode("coordinator")
        s.append(attachment, durability="durable")
        assert s.outbox.empty  # acknowledged as written: the client let go of them
        assert spool_path(d.root, sid).exists()
        d.kill()
    assert not main_path(d.root, CWD, sid).exists()
    d.start()
    d.cli("record", "--cwd", CWD, "--session", sid, "--durability", "written", input=line(user("first")) + b"\n")
    entries = read_entries(main_path(d.root, CWD, sid))
    assert [e["type"] for e in entries[:5]] == ["custom-title", "tag", "mode", "attachment", "user"]
    assert entries[0]["customTitle"] == "Kept title" and entries[3]["uuid"] == attachment["uuid"]
    assert [e["type"] for e in entries[5:]] in ([], ["custom-title", "tag", "mode"])  # the exit re-append at most
    d.cli("flush", "--durable")
    wait_until(lambda: not spool_path(d.root, sid).exists(), "the spool to go once the transcript holds its entries")


def test_a_session_that_never_materializes_leaves_no_transcript_and_no_spool(daemon_factory):
    d = daemon_factory().start()
    closed, replayed = str(uuid.uuid4()), str(uuid.uuid4())
    with d.client() as c:
        for sid in (closed, replayed):
            r = c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="durable",
                                entries=[line({"type": "custom-title", "customTitle": "t"})]))
            assert r.accepted == 1
        c.call(m.Close(id=c.next_id(), session=closed))
        d.cli("flush")
        wait_until(lambda: not spool_path(d.root, closed).exists(), "the closed session's spool to go")
        assert spool_path(d.root, replayed).exists()
        d.kill()
    d.start()  # replays the held title; nobody comes back for it
    with d.client() as c:
        status = c.status()
    assert status.pendingEntries == 1 and status.spooledBytes > 0
    assert d.stop() == 0  # exit cleanup: no message, no file
    assert not main_path(d.root, CWD, replayed).exists()
    assert list(spool_dir(d.root).iterdir()) == []


def test_a_resend_after_the_restart_is_not_held_twice(daemon_factory):
    d = daemon_factory().start()
    sid = str(uuid.uuid4())
    title = line({"type": "custom-title", "customTitle": "once"})
    with d.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[title], durability="written"))
        d.kill()
    d.start()
    with d.client() as c:  # a client that kept the entry (acked only "queued") resends it
        r = c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[title], resend=True))
        assert (r.accepted, r.duplicates) == (0, 1)
        c.call(m.Record(id=c.next_id(), session=sid, cwd=CWD, messages=[line(user("q"))], durability="written"))
    entries = read_entries(main_path(d.root, CWD, sid))
    assert [e["type"] for e in entries[:2]] == ["custom-title", "user"]
    assert sum(e["type"] == "custom-title" for e in entries) <= 2  # the one held, and the exit re-append at most


def test_a_crash_between_materializing_and_deleting_the_spool_writes_nothing_twice(daemon_factory):
    d = daemon_factory()
    sid = str(uuid.uuid4())
    title = line({"type": "custom-title", "customTitle": "t"})
    hook = line({"type": "attachment", "uuid": str(uuid.uuid4()), "attachment": {"type": "hook"}})
    tag = line({"type": "tag", "tag": "x"})
    first = line(user("q"))
    transcript = main_path(d.root, CWD, sid)
    transcript.parent.mkdir(parents=True)
    transcript.write_bytes(title + b"\n" + hook + b"\n" + first + b"\n")  # the tag's line never made it
    spool = spool_path(d.root, sid)
    spool.parent.mkdir(mode=0o700)
    spool.write_bytes(b"\n".join([header_line(d.root, transcript.parent, CWD), title, hook, tag]) + b"\n")
    d.start()
    wait_until(lambda: not spool.exists(), "the reconciled spool to go")
    assert transcript.read_bytes() == b"\n".join([title, hook, first, tag]) + b"\n"
    assert d.stop() == 0


def test_the_fallback_writes_what_a_dead_daemon_held_first(daemon_factory):
    d = daemon_factory().start()
    sid = str(uuid.uuid4())
    title = {"type": "custom-title", "customTitle": "from the spool"}
    with d.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(title)], durability="durable"))
        d.kill()
    msg = user("direct")
    d.cli("--no-autostart", "append", "--cwd", CWD, "--session", sid, input=line(msg) + b"\n")
    assert read_entries(main_path(d.root, CWD, sid)) == [title, msg]
    assert not spool_path(d.root, sid).exists()
    d.start()  # nothing left to replay
    assert "replayed" not in d.log_text()
    assert read_entries(main_path(d.root, CWD, sid)) == [title, msg]


def test_a_dropped_connection_does_not_discard_what_was_acknowledged(daemon):
    """A client that gave up on its connection (a stalled daemon, a timeout)
    reconnects and carries on: the entries acknowledged as written before the
    session's first message are still held for it."""
    sid = str(uuid.uuid4())
    title = {"type": "custom-title", "customTitle": "said written"}
    first = Client(daemon.socket, root=daemon.root, autostart=False, timeout=10).connect()
    first.call(m.Append(id=first.next_id(), session=sid, cwd=CWD, entries=[line(title)], durability="written"))
    first.close()  # dropped, no Close
    with daemon.client() as c:
        wait_until(lambda: c.status().clients == 1, "the daemon to see the drop")
        s = Session(c, sid, CWD)
        s.record([user("carry on")], durability="written")
        s.close()
    assert [e["type"] for e in read_entries(main_path(daemon.root, CWD, sid))][:2] == ["custom-title", "user"]


@pytest.mark.timeout(120)
def test_held_entries_of_a_client_that_never_comes_back_are_discarded(daemon_factory, short_tmp, monkeypatch):
    """The grace after a dropped connection is bounded (``idle_evict``, 30 s by
    default, 1 s here, seen by the sweep every half of it): then the session ends
    without a message, no transcript, no spool."""
    cfg = short_tmp / "config.toml"
    cfg.write_text("idle_evict_s = 1\n")
    monkeypatch.setenv("SESSIOND_CONFIG", str(cfg))
    daemon = daemon_factory().start()
    sid = str(uuid.uuid4())
    c = Client(daemon.socket, root=daemon.root, autostart=False, timeout=10).connect()
    c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written",
                    entries=[line({"type": "custom-title", "customTitle": "abandoned"})]))
    c.close()  # dropped, and never back
    wait_until(lambda: not spool_path(daemon.root, sid).exists(), "the abandoned spool to go", timeout=90, every=0.1)
    with daemon.client() as other:
        assert other.status().pendingEntries == 0
        other.call(m.Record(id=other.next_id(), session=sid, cwd=CWD, messages=[line(user("later"))], durability="written"))
    assert [e["type"] for e in read_entries(main_path(daemon.root, CWD, sid))] == ["user"]


def test_a_planted_spool_symlink_is_refused_and_changes_nothing(daemon, short_tmp):
    from sessiond.wire.errors import RemoteError

    outside = short_tmp / "outside"
    outside.mkdir()
    daemon.root.mkdir(exist_ok=True)
    spool_dir(daemon.root).symlink_to(outside)
    sid = str(uuid.uuid4())
    with daemon.client() as c:
        with pytest.raises(RemoteError) as err:
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line({"type": "tag", "tag": "t"})]))
        assert err.value.code == "permission_denied"
        assert c.status().pendingEntries == 0  # all or nothing
        c.call(m.Record(id=c.next_id(), session=sid, cwd=CWD, messages=[line(user("q"))], durability="written"))
    assert [e["type"] for e in read_entries(main_path(daemon.root, CWD, sid))] == ["user"]
    assert list(outside.iterdir()) == []


def test_a_fifo_in_the_spool_directory_does_not_wedge_the_start(daemon_factory):
    """Replay opened what ``read_spool`` refused with a plain blocking open to
    see whether it was ever written: a FIFO named ``<uuid>.jsonl`` there kept
    the daemon from serving and from honouring SIGTERM."""
    d = daemon_factory()
    spool_dir(d.root).mkdir(parents=True, mode=0o700)
    fifo = spool_path(d.root, str(uuid.uuid4()))
    os.mkfifo(fifo, 0o600)
    d.start()
    sid = str(uuid.uuid4())
    with d.client(timeout=10.0) as c:
        assert c.status().pendingEntries == 0
        c.call(m.Record(id=c.next_id(), session=sid, cwd=CWD, messages=[line(user("q"))], durability="written"))
    assert d.stop() == 0
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # skipped and left alone
    assert "not a regular file" in d.log_text()


def test_a_spool_directory_symlinked_out_of_the_root_is_not_replayed(daemon_factory, short_tmp):
    """Replay read (and deleted) spool files through a planted symlink: entries
    from outside the root went into a transcript, and a file there was removed."""
    d = daemon_factory()
    outside = short_tmp / "outside"
    outside.mkdir()
    sid = str(uuid.uuid4())
    project = main_path(d.root, CWD, sid).parent
    planted = outside / f"{sid}.jsonl"
    planted.write_bytes(header_line(d.root, project, CWD) + b"\n" + line({"type": "custom-title", "customTitle": "planted"}) + b"\n")
    torn = outside / f"{uuid.uuid4()}.jsonl"
    torn.write_bytes(b"not a line of anything")  # what a kill before the first write leaves: replay deletes those
    d.root.mkdir(parents=True)
    spool_dir(d.root).symlink_to(outside)
    d.start()
    with d.client() as c:
        assert c.status().pendingEntries == 0
        c.call(m.Record(id=c.next_id(), session=sid, cwd=CWD, messages=[line(user("q"))], durability="written"))
    assert d.stop() == 0
    assert [e["type"] for e in read_entries(main_path(d.root, CWD, sid))] == ["user"]
    assert planted.exists() and torn.exists()
    assert "outside the store root" in d.log_text()


def test_the_fallback_neither_reads_nor_deletes_a_spool_outside_the_root(daemon_factory, short_tmp):
    """The direct writer read the spool through a symlinked spool directory
    (entries from outside the root put into the transcript) and then unlinked
    the file out there."""
    d = daemon_factory()
    outside = short_tmp / "outside"
    outside.mkdir()
    sid = str(uuid.uuid4())
    planted = outside / f"{sid}.jsonl"
    planted.write_bytes(header_line(d.root, main_path(d.root, CWD, sid).parent, CWD) + b"\n"
                        + line({"type": "custom-title", "customTitle": "planted"}) + b"\n")
    d.root.mkdir(parents=True)
    spool_dir(d.root).symlink_to(outside)
    msg = user("direct")
    d.cli("--no-autostart", "append", "--cwd", CWD, "--session", sid, input=line(msg) + b"\n",
          env={"SESSIOND_SOCKET": str(short_tmp / "none" / "s.sock")})
    assert read_entries(main_path(d.root, CWD, sid)) == [msg]
    assert planted.exists()
