"""Queues, coalescing, durability levels, the flush barrier and shutdown."""

import signal
import socket
import uuid

from sessiond.wire import messages as m
from sessiond.wire.framing import encode
from tests.helpers import assistant, line, main_path, read_entries, user

CWD = "/work/project"


def req_append(c, sid, entries, **kw):
    return m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(e) for e in entries], **kw)


def test_many_queued_appends_are_coalesced_into_one_write(daemon_factory):
    """300 queued appends wait in their file's queue and go out in one write.
    The window never fires here: with a short one, how many windows the
    pipelining spans (and so how many writes) depends on the machine's speed."""
    d = daemon_factory("--flush-interval", "60000").start()
    sid = str(uuid.uuid4())
    msgs = [user(f"m{i}") for i in range(300)]
    with d.client() as c:
        before = c.status().writes
        c.pipeline([req_append(c, sid, [e]) for e in msgs], window=300)
        c.flush()
        st = c.status()
    assert read_entries(main_path(d.root, CWD, sid)) == msgs
    writes = st.writes - before
    assert writes == 1, f"300 appends took {writes} writes"


def test_written_ack_means_the_line_is_in_the_file(daemon_factory):
    d = daemon_factory("--flush-interval", "60000").start()  # the window never fires
    sid = str(uuid.uuid4())
    path = main_path(d.root, CWD, sid)
    with d.client() as c:
        c.call(req_append(c, sid, [user("queued only")]))
        assert not path.exists() or path.read_bytes() == b""
        c.call(req_append(c, sid, [assistant("written")], durability="written"))
        assert [e["type"] for e in read_entries(path)] == ["user", "assistant"]
        syncs = c.status().fsyncs
        c.call(req_append(c, sid, [user("durable")], durability="durable"))
        assert len(read_entries(path)) == 3
        assert c.status().fsyncs > syncs


def test_flush_is_a_barrier_across_connections(daemon_factory):
    d = daemon_factory("--flush-interval", "60000").start()
    sids = [str(uuid.uuid4()) for _ in range(3)]
    with d.client() as writer, d.client() as other:
        for i, sid in enumerate(sids):
            writer.call(req_append(writer, sid, [user(f"s{i}"), {**assistant("side"), "isSidechain": True, "agentId": "ag"}]))
        assert other.status().queuedEntries == 6
        res = other.flush(durable=True)
        assert res.files == 6
        for sid in sids:
            assert len(read_entries(main_path(d.root, CWD, sid))) == 1
        assert other.status().queuedEntries == 0
        # A session-scoped flush with nothing queued returns at once.
        assert other.flush(sids[0]).files == 0


def test_dropped_client_gets_exit_cleanup_with_metadata_reappended(daemon):
    sid = str(uuid.uuid4())
    meta = [{"type": "custom-title", "customTitle": "My title"}, {"type": "tag", "tag": "t1"}, {"type": "ai-title", "aiTitle": "ignored"}]
    body = [user("q"), assistant("a")]
    c = daemon.client()
    c.call(req_append(c, sid, meta + body, durability="written"))
    c._sock.close()  # vanish without Close
    with daemon.client() as other:
        other.flush()
        entries = read_entries(main_path(daemon.root, CWD, sid))
        # pending metadata first (arrival order), the messages, then the re-append
        assert entries[:5] == meta + body
        assert entries[5:] == [meta[0], meta[1]]  # custom-title then tag; never ai-title
        # Closing again with nothing new written does not append the metadata again.
        other.call(req_append(other, sid, []))
        other.call(m.Close(id=other.next_id(), session=sid))
        other.flush()
        assert len(read_entries(main_path(daemon.root, CWD, sid))) == 7


def test_metadata_no_listing_could_see_is_not_reappended_at_every_close(daemon):
    """A 100 KB title (any client may append one) is past what a listing reads
    from a file's tail (``lite.METADATA_MAX`` of its 64 KB): re-appending it
    at each client's exit would grow the file by 100 KB a close, to no reader's
    use. It is written once, where it was sent; a tag of normal size beside it
    is re-appended as before."""
    sid = str(uuid.uuid4())
    huge = {"type": "custom-title", "customTitle": "T" * 100_000}
    for i in range(4):  # four clients, each writing a message and closing
        with daemon.client() as c:
            first = [huge, {"type": "tag", "tag": "t1"}] if i == 0 else []
            c.call(req_append(c, sid, first + [user(f"q{i}")], durability="written"))
            c.call(m.Close(id=c.next_id(), session=sid))
    with daemon.client() as c:
        c.flush()
    entries = read_entries(main_path(daemon.root, CWD, sid))
    assert [e for e in entries if e["type"] == "custom-title"] == [huge]
    assert [e["type"] for e in entries].count("tag") == 5  # sent once, then re-appended at each close
    assert entries[-1] == {"type": "tag", "tag": "t1"}


def test_sigterm_drains_queued_data_and_exits_zero(daemon_factory):
    d = daemon_factory("--flush-interval", "60000").start()
    sid = str(uuid.uuid4())
    msgs = [user(f"m{i}") for i in range(50)]
    c = d.client()
    c.call(req_append(c, sid, [{"type": "custom-title", "customTitle": "keep"}] + msgs))
    assert c.status().queuedEntries == 51
    d.signal(signal.SIGTERM)
    assert d.wait() == 0
    c.close()
    entries = read_entries(main_path(d.root, CWD, sid))
    assert entries[1:51] == msgs
    assert entries[-1] == {"type": "custom-title", "customTitle": "keep"}
    assert not d.socket.exists()
    assert "shutting down (SIGTERM)" in d.log_text()


def test_sessiond_stop_drains_and_removes_the_socket(daemon_factory):
    d = daemon_factory("--flush-interval", "60000").start()
    sid = str(uuid.uuid4())
    with d.client() as c:
        c.call(req_append(c, sid, [user("before stop")]))
    out = d.cli("stop")
    assert b"stopped" in out.stdout
    assert d.wait() == 0
    assert read_entries(main_path(d.root, CWD, sid))[0]["message"]["content"] == "before stop"
    assert not d.socket.exists()


def test_appends_during_shutdown_are_refused_not_lost(daemon_factory):
    d = daemon_factory().start()
    sid = str(uuid.uuid4())
    with d.client() as c:
        rid = c.next_id()
        # Both frames in one write, so the daemon reads the append after the
        # shutdown began but before it closed the connection.
        c._sock.sendall(encode(m.Shutdown(id=rid)) + encode(req_append(c, sid, [user("late")])))
        assert isinstance(c.receive(rid), m.Done)
        late = c.receive(rid + 1)
    assert isinstance(late, m.Error) and late.code == "shutting_down"
    assert d.wait() == 0


def test_a_second_daemon_never_steals_a_live_socket(daemon):
    second = daemon.cli("serve", check=False, timeout=20)
    assert second.returncode == 3
    assert b"another sessiond" in second.stderr
    with daemon.client() as c:
        assert c.status().pid == daemon.pid


def test_a_stale_socket_is_replaced(daemon_factory):
    d = daemon_factory()
    d.socket.parent.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(d.socket))
    stale.close()  # a socket file with nobody behind it
    d.start()
    with d.client() as c:
        assert c.status().pid == d.pid


def test_handshake_is_required_and_version_checked(daemon):
    for first, code in ((m.Status(id=5), "bad_request"), (m.Hello(id=1, protocol_version=99), "version_mismatch")):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(10)
        s.connect(str(daemon.socket))
        s.sendall(encode(first))
        data = s.recv(65536)
        assert code.encode() in data
        assert s.recv(65536) == b""  # and the daemon closed the connection
        s.close()
    with daemon.client() as c:
        assert c.status().pid == daemon.pid
