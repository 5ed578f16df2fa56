"""Attacks on the daemon's memory: each one bounded by a setting, none fatal."""

from __future__ import annotations

import json
import struct
import threading
import uuid

import pytest

from sessiond.wire import messages as m
from sessiond.wire.errors import RemoteError
from sessiond.wire.framing import encode
from tests.helpers import line, main_path, read_entries, user, wait_until

from . import attacks
from .attacks import MiB, raw_conn, read_answers
from .conftest import BUDGETS, CWD, Bounded, settled_non_readers


def test_a_client_that_pipelines_and_never_reads_stops_being_read(bounded: Bounded):
    cap = 16 * MiB  # ~1.4M requests: some 900 MB of answers if nothing stopped reading
    s, sent = attacks.pipeline_without_reading(bounded.d.socket, cap)
    assert sent < cap, "the daemon kept reading a client that never reads its answers"
    st = bounded.check()
    assert st.budgets["outputBytes"]["used"] >= BUDGETS["max_output_bytes"] // 4  # the non-reader's answers wait
    # Reading resumes once the client reads: every whole request it sent is answered.
    attacks.read_everything_owed(s, sent)
    s.close()


def test_a_malformed_frame_just_under_the_cap_costs_what_it_weighs(bounded: Bounded):
    no_id, with_id, status = attacks.malformed_near_cap(bounded.d.socket, BUDGETS["max_frame_bytes"])
    assert isinstance(no_id, m.Error) and no_id.code == "bad_request" and no_id.id == 0
    assert isinstance(with_id, m.Error) and with_id.code == "bad_request" and with_id.id == 7777  # found, not built
    assert isinstance(status, m.StatusResult)  # the connection lives on
    bounded.check()


@pytest.mark.parametrize("where", sorted(attacks.NESTED_BODIES))
def test_a_body_nested_very_deep_is_a_bad_request(bounded: Bounded, where: str):
    err, after = attacks.nested_deep(bounded.d.socket, where)
    assert isinstance(err, m.Error) and err.code == "bad_request", err
    assert isinstance(after, m.StatusResult) and after.id == 10
    bounded.check()


def test_an_entry_nested_very_deep_is_a_bad_request_too(bounded: Bounded):
    deep = b'{"type":"user","uuid":"u1","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with bounded.d.client() as c:
        with pytest.raises(RemoteError) as err:
            c.call(m.Append(id=c.next_id(), session=str(uuid.uuid4()), cwd=CWD, entries=[deep]))
    assert err.value.code == "bad_request"
    bounded.check()


def test_fifty_clients_stalled_inside_big_frames_wait_or_are_refused(bounded: Bounded):
    # A few are admitted; newcomers then wait, unread, while what they hold fits
    # in the budget; past that they are refused with `busy`.
    stalled, refused = attacks.stalled_big_frames(bounded.d.socket, BUDGETS["max_frame_bytes"])
    st = bounded.check()  # small frames of a well-behaved client still go through
    partial = st.budgets["partialBytes"]
    assert partial["used"] <= partial["limit"] and partial["waiting"] >= 5 and refused >= 20, (partial, refused)
    for s in stalled:
        s.close()
    wait_until(lambda: bounded.status().budgets["partialBytes"]["used"] == 0, "the budget to be given back")
    assert bounded.status().budgets["partialBytes"]["waiting"] == 0


def test_a_waiting_big_frame_is_admitted_once_others_finish(bounded: Bounded):
    """A big frame held back by the budget is served, not dropped, when it fits."""
    cap = BUDGETS["max_frame_bytes"]
    holders = []
    for _ in range(BUDGETS["max_partial_bytes"] // cap):  # three fit, the fourth waits
        s = raw_conn(bounded.d.socket)
        s.sendall(struct.pack(">I", cap) + b"\xc4" * 1024)
        holders.append(s)
    sid = str(uuid.uuid4())
    entries = [user("big " + "x" * 100_000, uid=str(uuid.uuid4())) for _ in range(20)]  # ~2 MB: a big frame
    s = raw_conn(bounded.d.socket)
    request = encode(m.Append(id=3, session=sid, cwd=CWD, entries=[line(e) for e in entries], durability="written"))
    sender = threading.Thread(target=s.sendall, args=(request,), daemon=True)  # blocks while the frame waits
    sender.start()
    wait_until(lambda: bounded.status().budgets["partialBytes"]["waiting"] == 2, "the big frame to wait its turn")
    for h in holders:
        h.close()
    (ack,) = read_answers(s, 1)
    sender.join(timeout=20)
    assert isinstance(ack, m.Appended) and ack.accepted == 20
    assert read_entries(main_path(bounded.d.root, CWD, sid)) == entries
    s.close()
    bounded.check()


def test_many_sessions_filling_their_pending_buffers_hit_the_global_budget(bounded: Bounded):
    with bounded.d.client() as c:
        # 40 sessions x 960 KiB of titles: 5x the 8 MiB budget, each under its own 1 MiB cap
        accepted, refused = attacks.fill_pending_buffers(c, CWD, sessions=40, per_session=15)
        assert refused is not None and refused.code == "busy", refused
        st = bounded.check()
        used = st.budgets["pendingBytes"]["used"]
        assert BUDGETS["max_pending_total_bytes"] - 2 * MiB < used <= BUDGETS["max_pending_total_bytes"]
        assert st.pendingBytes == used
        # Nothing acknowledged is dropped: a session's first message writes its pending entries.
        sid = next(iter(accepted))
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(user("now a file"))], durability="written"))
        lines = read_entries(main_path(bounded.d.root, CWD, sid))
        assert [e["type"] for e in lines] == ["custom-title"] * accepted[sid] + ["user"]
        assert c.status().budgets["pendingBytes"]["used"] < used  # given back when written
    human = bounded.d.cli("status").stdout.decode()
    assert "budgets   pending " in human and "/8.0 MB" in human


@pytest.mark.parametrize("content, key", [
    ("max_clients = 0\n", "max_clients"),
    ("max_output_bytes = -5\n", "max_output_bytes"),
    ("max_frame_bytes = 2097152\nmax_partial_bytes = 1048576\n", "max_partial_bytes"),
])
def test_budget_settings_are_checked(daemon_factory, short_tmp, content: str, key: str):
    cfg = short_tmp / "c.toml"
    cfg.write_text(content)
    r = daemon_factory().cli("serve", "--config", str(cfg), check=False, timeout=30)
    assert r.returncode == 2 and key.encode() in r.stderr and r.stderr.count(b"\n") == 1, r.stderr


def test_thousands_of_idle_connections_cost_little_and_block_nobody(bounded: Bounded):
    idle = attacks.idle_connections(bounded.d.socket, 2000)
    wait_until(lambda: bounded.status().clients >= 2000, "every connection to be accepted")
    bounded.check()
    for s in idle:
        s.close()
    wait_until(lambda: bounded.status().clients == 1, "the connections to be gone")


def test_connections_past_max_clients_get_busy(daemon_factory, short_tmp):
    cfg = short_tmp / "c.toml"
    cfg.write_text("max_clients = 20\n")
    d = daemon_factory().start("--config", str(cfg))
    held = [raw_conn(d.socket) for _ in range(20)]
    s = raw_conn(d.socket, hello=False)
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
    entries, answers = attacks.owed_answers_flood(bounded.d.socket, sid, CWD, 3000)
    assert sorted(a.id for a in answers if isinstance(a, m.Appended)) == list(range(1, len(entries) + 1))
    assert read_entries(main_path(bounded.d.root, CWD, sid)) == entries
    bounded.check()
    assert json.loads(bounded.d.cli("status", "--json").stdout)["budgets"]["inflightRequests"]["limit"] == 1024


def test_requests_parked_behind_a_file_scan_are_bounded(daemon_factory, short_tmp):
    """Appends to a session whose big transcript is still being scanned wait
    for the scan; past max_parked_requests they are refused with `busy`, and
    every one that was parked is answered and written once the scan ends."""
    cfg = short_tmp / "c.toml"
    cfg.write_text("max_parked_requests = 5\n")
    d = daemon_factory().start("--config", str(cfg))
    sid = str(uuid.uuid4())
    path = main_path(d.root, CWD, sid)
    path.parent.mkdir(parents=True)
    old = [user("x" * 5000) for _ in range(1200)]  # ~6 MB: scanned in a worker, not on the loop
    path.write_bytes(b"".join(line(e) + b"\n" for e in old))
    new = [user(f"new {i}") for i in range(40)]
    s = raw_conn(d.socket)
    s.sendall(b"".join(encode(m.Append(id=i + 1, session=sid, cwd=CWD, entries=[line(e)], durability="written"))
                       for i, e in enumerate(new)))
    answers = {a.id: a for a in read_answers(s, len(new))}
    s.close()
    refused = [i for i, a in answers.items() if isinstance(a, m.Error)]
    assert refused and all(answers[i].code == "busy" for i in refused)  # type: ignore[union-attr]
    kept = [e for i, e in enumerate(new, 1) if isinstance(answers[i], m.Appended)]
    assert len(kept) >= 5
    assert read_entries(path) == old + kept
    with d.client() as c:
        assert c.status().budgets["parkedRequests"] == {"used": 0, "limit": 5}


def test_many_clients_that_never_read_are_bounded_together(daemon_factory, short_tmp):
    """Each non-reader is held to max_output_bytes; together to
    max_output_total_bytes: past it, the newest one is disconnected (like
    Redis's client output buffer limit), the others and everyone else go on."""
    cfg = short_tmp / "c.toml"
    cfg.write_text(f"max_output_bytes = {MiB}\nmax_output_total_bytes = {3 * MiB}\n")
    d = daemon_factory().start("--config", str(cfg), "--log-level", "info")
    readers = [attacks.pipeline_without_reading(d.socket, 8 * MiB, patience=0.3) for _ in range(8)]
    unread = settled_non_readers(d)
    assert 0 < unread["used"] <= unread["limit"] and 2 <= unread["clients"] < 8, unread
    dropped = 0
    for s, sent in readers:
        try:
            attacks.read_everything_owed(s, sent)
        except (AssertionError, ConnectionResetError):
            dropped += 1  # disconnected: its unread answers are gone, what it sent was served
        s.close()
    assert dropped == 8 - unread["clients"]
    assert "does not read its answers" in d.log_text()
    with d.client() as c:
        assert c.status().budgets["unreadOutputBytes"]["used"] == 0


def test_max_clients_follows_the_fd_limit(daemon_factory):
    """With few fds the daemon serves fewer clients, and says `busy` to the
    next one rather than failing accept(2) for everyone."""
    d = daemon_factory().start(nofile=256)  # 128 for transcripts, 32 spare: 96 for clients
    with d.client() as c:
        limit = c.status().budgets["clients"]["limit"]
    assert limit == 96
    held = [raw_conn(d.socket) for _ in range(limit)]
    s = raw_conn(d.socket, hello=False)
    (err,) = read_answers(s, 1)
    assert isinstance(err, m.Error) and err.code == "busy"
    s.close()
    for h in held:
        h.close()


def test_sessions_in_memory_are_bounded(daemon_factory, short_tmp):
    """Every session held costs memory: one connection may hold a quarter of
    max_sessions; past max_sessions a new one gets `busy` while all are in
    use, and idle ones are evicted to make room."""
    cfg = short_tmp / "c.toml"
    cfg.write_text("max_sessions = 40\n")
    d = daemon_factory().start("--config", str(cfg))

    def one(c) -> None:
        c.call(m.Append(id=c.next_id(), session=str(uuid.uuid4()), cwd=CWD, entries=[line(user("s"))], durability="written"))

    hogs = [d.client() for _ in range(4)]
    for _ in range(10):
        one(hogs[0])
    with pytest.raises(RemoteError) as err:
        one(hogs[0])
    assert err.value.code == "busy" and "this connection already holds 10 sessions" in err.value.message
    for hog in hogs[1:]:
        for _ in range(10):
            one(hog)
    with d.client() as c:
        with pytest.raises(RemoteError) as err:
            one(c)
        assert err.value.code == "busy" and "40 sessions" in err.value.message
        assert c.status().budgets["sessions"]["limit"] == 40
        for hog in hogs:
            hog.close()  # their sessions are idle now: a new one evicts them
        sid = str(uuid.uuid4())
        wait_until(lambda: _appends(c, sid), "room for a new session")
        assert c.status().budgets["sessions"]["used"] <= 40
    assert read_entries(main_path(d.root, CWD, sid))[-1]["type"] == "user"


def _appends(c, sid: str) -> bool:
    try:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(user("fits"))], durability="written"))
        return True
    except RemoteError as exc:
        assert exc.code == "busy"
        return False
