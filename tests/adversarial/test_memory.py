"""Attacks on the daemon's memory: each one bounded by a setting, none fatal."""

from __future__ import annotations

import json
import select
import socket
import struct
import threading
import time
import uuid

import pytest

from sessiond.protocol.wire import messages as m
from sessiond.protocol.wire.errors import RemoteError
from sessiond.protocol.wire.framing import FrameBuffer, encode
from tests.helpers import line, main_path, read_entries, user, wait_until

from .conftest import BUDGETS, CWD, MiB, Bounded, frame, msgpack, raw_conn, read_answers


def send_until_blocked(s: socket.socket, data: bytes, cap: int, patience: float = 1.0) -> int:
    """Send ``data`` over and over without reading, until the peer stops taking
    it for ``patience`` seconds or ``cap`` bytes went out; the bytes sent."""
    s.setblocking(False)
    sent = 0
    stuck_since = None
    view = memoryview(data)
    while sent < cap:
        offset = sent % len(data)
        try:
            sent += s.send(view[offset : offset + cap - sent])
            stuck_since = None
        except BlockingIOError:
            now = time.monotonic()
            stuck_since = stuck_since or now
            if now - stuck_since > patience:
                break
            time.sleep(0.01)
        except (BrokenPipeError, ConnectionResetError):  # refused: the answer says why
            break
    s.setblocking(True)
    return sent


def test_a_client_that_pipelines_and_never_reads_stops_being_read(bounded: Bounded):
    s = raw_conn(bounded.d)
    burst = b"".join(encode(m.Status(id=i + 1)) for i in range(2000))  # each answer ~40x its request
    cap = 16 * MiB  # ~1.4M requests: some 900 MB of answers if nothing stopped reading
    sent = send_until_blocked(s, burst, cap)
    assert sent < cap, "the daemon kept reading a client that never reads its answers"
    st = bounded.check()
    assert st.budgets["outputBytes"]["used"] >= BUDGETS["max_output_bytes"] // 4  # the non-reader's answers wait
    # Reading resumes once the client reads: every whole request it sent is answered.
    owed = sent // len(burst) * 2000
    frames = FrameBuffer(64 * MiB)
    answered = 0
    while answered < owed:
        data = s.recv(1 << 20)
        assert data, f"closed after {answered} of {owed} answers"
        answered += len(frames.feed(data))
    s.close()


def test_a_malformed_frame_just_under_the_cap_costs_what_it_weighs(bounded: Bounded):
    cap = BUDGETS["max_frame_bytes"]
    n = cap - 16
    arrays = b"\xdd" + struct.pack(">I", n) + b"\x90" * n  # an array of ~4M empty arrays
    s = raw_conn(bounded.d)
    s.sendall(frame(arrays))
    (err,) = read_answers(s, 1)
    assert isinstance(err, m.Error) and err.code == "bad_request" and err.id == 0
    # The same weight inside a map that does carry an id: the answer echoes it.
    head = b"\x83\xa2op\xa6Append\xa2id\xcd\x1e\x61\xa1x"  # {"op": "Append", "id": 7777, "x": [...]}
    n = cap - len(head) - 16
    s.sendall(frame(head + b"\xdd" + struct.pack(">I", n) + b"\x90" * n))
    (err,) = read_answers(s, 1)
    assert isinstance(err, m.Error) and err.code == "bad_request" and err.id == 7777
    s.sendall(encode(m.Status(id=5)))
    assert isinstance(read_answers(s, 1)[0], m.StatusResult)  # the connection lives on
    s.close()
    bounded.check()


@pytest.mark.parametrize("where", ["unknown field", "id", "entries", "top level"])
def test_a_body_nested_very_deep_is_a_bad_request(bounded: Bounded, where: str):
    depth = 200_000
    deep = b"\x91" * depth + b"\xc0"  # [[[...[nil]...]]]
    body = {
        "unknown field": b"\x83\xa2op\xa6Status\xa2id\x09\xa1x" + deep,
        "id": b"\x82\xa2op\xa6Status\xa2id" + deep,
        "entries": b"\x85\xa2op\xa6Append\xa2id\x09\xa7session" + msgpack(str(uuid.uuid4()))
        + b"\xa3cwd" + msgpack(CWD) + b"\xa7entries\x91" + deep,
        "top level": deep,
    }[where]
    s = raw_conn(bounded.d)
    s.sendall(frame(body) + encode(m.Status(id=10)))
    err, after = read_answers(s, 2)
    assert isinstance(err, m.Error) and err.code == "bad_request", err
    assert isinstance(after, m.StatusResult) and after.id == 10
    s.close()
    bounded.check()


def test_an_entry_nested_very_deep_is_a_bad_request_too(bounded: Bounded):
    deep = b'{"type":"user","uuid":"u1","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with bounded.d.client() as c:
        with pytest.raises(RemoteError) as err:
            c.call(m.Append(id=c.next_id(), session=str(uuid.uuid4()), cwd=CWD, entries=[deep]))
    assert err.value.code == "bad_request"
    bounded.check()


def test_fifty_clients_stalled_inside_big_frames_wait_for_the_budget(bounded: Bounded):
    cap = BUDGETS["max_frame_bytes"]
    body = b"\xc4" * (cap - 64)  # most of a frame announced at the cap, never finished
    head = struct.pack(">I", cap)
    stalled = []
    for _ in range(50):
        s = raw_conn(bounded.d)
        send_until_blocked(s, head + body, len(head) + len(body), patience=0.05)
        stalled.append(s)
    # A few are admitted; then newcomers wait, unread, while what they hold
    # fits in the budget; past that they are refused with `busy`.
    readable, _, _ = select.select(stalled, [], [], 5.0)
    for s in readable:
        (err,) = read_answers(s, 1)
        assert isinstance(err, m.Error) and err.code == "busy", err
    st = bounded.check()  # small frames of a well-behaved client still go through
    partial = st.budgets["partialBytes"]
    assert partial["used"] <= partial["limit"] and partial["waiting"] >= 5 and len(readable) >= 20, (partial, len(readable))
    for s in stalled:
        s.close()
    wait_until(lambda: bounded.status().budgets["partialBytes"]["used"] == 0, "the budget to be given back")
    assert bounded.status().budgets["partialBytes"]["waiting"] == 0


def test_a_waiting_big_frame_is_admitted_once_others_finish(bounded: Bounded):
    """A big frame held back by the budget is served, not dropped, when it fits."""
    cap = BUDGETS["max_frame_bytes"]
    holders = []
    for _ in range(BUDGETS["max_partial_bytes"] // cap):  # three fit, the fourth waits
        s = raw_conn(bounded.d)
        s.sendall(struct.pack(">I", cap) + b"\xc4" * 1024)
        holders.append(s)
    sid = str(uuid.uuid4())
    entries = [user("big " + "x" * 100_000, uid=str(uuid.uuid4())) for _ in range(20)]  # ~2 MB: a big frame
    s = raw_conn(bounded.d)
    request = encode(m.Append(id=3, session=sid, cwd=CWD, entries=[line(e) for e in entries], durability="written"))
    sender = threading.Thread(target=s.sendall, args=(request,), daemon=True)  # blocks while the frame waits
    sender.start()
    wait_until(lambda: bounded.status().budgets["partialBytes"]["waiting"] == 2, "the big frame to wait")
    for h in holders:
        h.close()
    (ack,) = read_answers(s, 1)
    sender.join(timeout=20)
    assert isinstance(ack, m.Appended) and ack.accepted == 20
    assert read_entries(main_path(bounded.d.root, CWD, sid)) == entries
    s.close()
    bounded.check()


def test_many_sessions_filling_their_pending_buffers_hit_the_global_budget(bounded: Bounded):
    title = b'{"type":"custom-title","customTitle":"' + b"t" * (64 * 1024) + b'","sessionId":"%s"}'
    accepted: dict[str, int] = {}
    refused = None
    with bounded.d.client() as c:
        for _ in range(40):  # 40 sessions x 1 MiB of titles: 5x the 8 MiB budget
            sid = str(uuid.uuid4())
            try:
                for _ in range(15):
                    c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[title % sid.encode()]))
                    accepted[sid] = accepted.get(sid, 0) + 1
            except RemoteError as exc:
                refused = exc
                break
        assert refused is not None and refused.code == "busy", refused
        st = bounded.check()
        assert BUDGETS["max_pending_total_bytes"] - 2 * MiB < st.budgets["pendingBytes"]["used"] <= BUDGETS["max_pending_total_bytes"]
        assert st.pendingBytes == st.budgets["pendingBytes"]["used"]
        # Nothing acknowledged is dropped: a session's first message writes its pending entries.
        sid = next(iter(accepted))
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(user("now a file"))], durability="written"))
        lines = read_entries(main_path(bounded.d.root, CWD, sid))
    assert [e["type"] for e in lines] == ["custom-title"] * accepted[sid] + ["user"]


def test_thousands_of_idle_connections_cost_little_and_block_nobody(bounded: Bounded):
    idle = []
    for i in range(2000):
        s = socket.socket(socket.AF_UNIX)
        s.connect(str(bounded.d.socket))
        if i % 2:  # half of them said hello, half never did
            s.sendall(encode(m.Hello(id=0, protocol_version=m.PROTOCOL_VERSION)))
        idle.append(s)
    wait_until(lambda: bounded.status().clients >= 2000, "every connection to be accepted")
    bounded.check()
    for s in idle:
        s.close()
    wait_until(lambda: bounded.status().clients == 1, "the connections to be gone")


def test_connections_past_max_clients_get_busy(daemon_factory, short_tmp):
    cfg = short_tmp / "c.toml"
    cfg.write_text("max_clients = 20\n")
    d = daemon_factory().start("--config", str(cfg))
    held = [raw_conn(d) for _ in range(20)]
    s = raw_conn(d, hello=False)
    (err,) = read_answers(s, 1)
    assert isinstance(err, m.Error) and err.code == "busy" and "20 connections" in err.message
    assert s.recv(10) == b""
    s.close()
    held.pop().close()
    wait_until(lambda: _answers(d), "a slot to free up")
    for h in held:
        h.close()


def _answers(d) -> bool:
    try:
        with d.client() as c:
            return c.status().pid == d.pid
    except RemoteError:
        return False


def test_a_flood_of_owed_answers_stops_reading_and_resumes(bounded: Bounded):
    """Pipelined written appends past max_inflight_requests: the client is read
    again as answers go out, and every one of them is answered and written."""
    sid = str(uuid.uuid4())
    entries = [user(f"e{i}") for i in range(3000)]
    s = raw_conn(bounded.d)
    s.sendall(b"".join(encode(m.Append(id=i + 1, session=sid, cwd=CWD, entries=[line(e)], durability="written"))
                       for i, e in enumerate(entries)))
    answers = read_answers(s, len(entries))
    assert sorted(a.id for a in answers if isinstance(a, m.Appended)) == list(range(1, len(entries) + 1))
    assert read_entries(main_path(bounded.d.root, CWD, sid)) == entries
    s.close()
    bounded.check()
    assert json.loads(bounded.d.cli("status", "--json").stdout)["budgets"]["inflightRequests"]["limit"] == 1024
