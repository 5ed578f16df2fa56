"""Every number a client sends is range-checked as it is decoded: a raw client
sends each out-of-range value of each message over the real socket and gets a
``bad_request`` naming the field, the daemon stays up and serves the next
client; the CLI refuses what would overflow with an error, never a traceback."""

from __future__ import annotations

import math
import uuid

import msgspec
import pytest

from sessiond.wire import messages as m
from tests.conftest import DaemonProc

from .attacks import frame, raw_conn, read_answers

SID = str(uuid.UUID(int=0xBAD))
HUGE = 2**64 - 1
TOO_BIG = 2**63

# (message without its id, the field the error must name)
CASES: list[tuple[dict, str]] = [
    ({"op": "Status", "id": TOO_BIG}, "id"),
    ({"op": "Status", "id": -1}, "id"),
    ({"op": "List", "all": True, "limit": -5}, "limit"),
    ({"op": "List", "all": True, "limit": TOO_BIG}, "limit"),
    ({"op": "List", "all": True, "limit": 1e20}, "limit"),
    ({"op": "List", "all": True, "offset": -1}, "offset"),
    ({"op": "List", "all": True, "offset": HUGE}, "offset"),
    ({"op": "Search", "query": "x", "all": True, "limit": HUGE}, "limit"),
    ({"op": "Search", "query": "x", "all": True, "limit": 0}, "limit"),
    ({"op": "Search", "query": "x", "all": True, "since": "999999w"}, "since"),
    ({"op": "Search", "query": "x", "all": True, "since": "9999-12-31T23:59:59-05:00"}, "since"),
    ({"op": "Search", "query": "x", "all": True, "since": "1" * 100_000}, "since"),
    ({"op": "EmptyTrash", "dry_run": True, "older_than": math.nan}, "older_than"),
    ({"op": "EmptyTrash", "dry_run": True, "older_than": math.inf}, "older_than"),
    ({"op": "EmptyTrash", "dry_run": True, "older_than": 1e300}, "older_than"),
    ({"op": "EmptyTrash", "dry_run": True, "older_than": -1.0}, "older_than"),
    ({"op": "Subscribe", "session": SID, "cwd": "/x", "offset": -1}, "offset"),
    ({"op": "Subscribe", "session": SID, "cwd": "/x", "offset": HUGE}, "offset"),
    ({"op": "Subscribe", "session": SID, "cwd": "/x", "last": -3}, "last"),
    ({"op": "Subscribe", "session": SID, "cwd": "/x", "last": TOO_BIG}, "last"),
    ({"op": "Unsubscribe", "subscription": HUGE}, "subscription"),
]


def _body(msg: dict) -> bytes:
    return msgspec.msgpack.encode({"id": 7, **msg})


@pytest.mark.parametrize("msg, field", CASES, ids=[f"{c['op']}.{f}={str(c.get(f))[:12]}" for c, f in CASES])
def test_an_out_of_range_value_is_a_bad_request_naming_its_field(shared_daemon: DaemonProc, msg: dict, field: str) -> None:
    s = raw_conn(shared_daemon.socket)
    try:
        s.sendall(frame(_body(msg)) + frame(_body({"op": "Status", "id": 8})))
        answers = read_answers(s, 2)
    finally:
        s.close()
    err = next(a for a in answers if a.id != 8)
    assert isinstance(err, m.Error) and err.code == "bad_request", err
    assert field in err.message, err.message
    assert isinstance(next(a for a in answers if a.id == 8), m.StatusResult)
    with shared_daemon.client() as c:  # another client is served too
        assert c.status().pid == shared_daemon.pid


@pytest.mark.parametrize("msg, field", [
    ({"op": "Hello", "protocol_version": HUGE}, "protocol_version"),
    ({"op": "Hello", "protocol_version": m.PROTOCOL_VERSION, "pid": -1}, "pid"),
    ({"op": "Hello", "protocol_version": m.PROTOCOL_VERSION, "pid": TOO_BIG}, "pid"),
])
def test_a_hello_out_of_range_is_a_bad_request_naming_its_field(shared_daemon: DaemonProc, msg: dict, field: str) -> None:
    s = raw_conn(shared_daemon.socket, hello=False)
    try:
        s.sendall(frame(_body(msg)))
        (err,) = read_answers(s, 1)
    finally:
        s.close()
    assert isinstance(err, m.Error) and err.code == "bad_request" and field in err.message, err
    with shared_daemon.client() as c:
        assert c.status().pid == shared_daemon.pid


CLI_CASES = [
    (["search", "x", "--since", "999999w"], "--since"),
    (["search", "x", "--since", "9999-12-31T23:59:59-05:00"], "--since"),
    (["list", "--limit", "100000000000000000000"], "--limit"),
    (["list", "--all", "--offset", "100000000000000000000"], "--offset"),
    (["list", "--limit", "1e20"], "--limit"),
    (["list", "--offset", "-1"], "--offset"),
    (["watch", "-n", "100000000000000000000", SID], "-n"),
    (["tail", "-n", "100000000000000000000", SID], "-n"),
    (["--timeout", "nan", "status"], "--timeout"),
    (["--timeout", "1e300", "list"], "--timeout"),
    (["stop", "--timeout", "nan"], "--timeout"),
    (["trash", "empty", "--older-than", "nans", "--dry-run"], "nans"),
    (["trash", "empty", "--older-than", "999999999w", "--dry-run"], "999999999w"),
    (["prune", "--older-than", "1d", "--larger-than", "1e400", "--dry-run", "--all"], "1e400"),
]


@pytest.mark.parametrize("args, named", CLI_CASES, ids=[" ".join(a) for a, _ in CLI_CASES])
def test_the_cli_refuses_what_would_overflow_in_one_error_line(shared_daemon: DaemonProc, args: list[str], named: str) -> None:
    r = shared_daemon.cli(*args, check=False, timeout=60)
    assert r.returncode != 0 and b"Traceback" not in r.stderr, r.stderr.decode(errors="replace")
    errors = [ln for ln in r.stderr.decode().splitlines() if ln.startswith(("sessiond: ", "Error: "))]
    assert len(errors) == 1 and named in errors[0], r.stderr
    with shared_daemon.client() as c:  # ``stop --timeout nan`` stopped nothing
        assert c.status().pid == shared_daemon.pid


@pytest.mark.parametrize("ext", [msgspec.msgpack.Ext(1, b"\xff"), msgspec.msgpack.Ext(9, b"x")], ids=["bad text", "unknown code"])
def test_a_malformed_extension_is_a_bad_request(shared_daemon: DaemonProc, ext: msgspec.msgpack.Ext) -> None:
    """A str that is not UTF-8 travels as extension 1 (``fsnames``); one whose
    data is not what the codec writes, or another extension, is refused."""
    s = raw_conn(shared_daemon.socket)
    try:
        s.sendall(frame(_body({"op": "Adopt", "session": SID, "path": ext})) + frame(_body({"op": "Status", "id": 8})))
        answers = read_answers(s, 2)
    finally:
        s.close()
    err = next(a for a in answers if a.id != 8)
    assert isinstance(err, m.Error) and err.code == "bad_request", err
    with shared_daemon.client() as c:
        assert c.status().pid == shared_daemon.pid
