"""Protocol abuse: reused ids, msgpack extension types, and fuzzing at the frame,
message and entry level. The daemon answers every bad frame with a typed error
(never ``internal``), keeps serving everyone, and loses nothing acknowledged."""

from __future__ import annotations

import json
import socket
import uuid

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiond.wire import messages as m
from sessiond.wire.framing import FrameBuffer, decode_response, encode
from tests.helpers import line, main_path, read_entries, user

from .attacks import MiB, frame, msgpack, raw_conn, read_answers
from .conftest import CWD, Bounded

FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
                derandomize=True)
SENTINEL = 2**40
OPS = [cls.__name__ for cls in m.Request.__args__ if cls is not m.Shutdown]  # type: ignore[attr-defined]


@pytest.fixture
def bounded(shared_bounded: Bounded) -> Bounded:
    """One bounded daemon for the module (each attack ends in ``check``)."""
    yield shared_bounded
    assert shared_bounded.d.proc is not None and shared_bounded.d.proc.poll() is None, "the daemon did not survive the attack"


def answers_until_sentinel(s: socket.socket, attack: bytes = b"") -> list[m.Response]:
    """Every answer the connection is owed for ``attack`` (and what was sent
    before it), and for a Status sent with it (the sentinel: the connection
    was still served).

    Answers are matched by id, not ordered: a Status is answered at once, a
    ``written`` append once its file is written, a List once its worker is
    done. So the sentinel's answer may come before an answer owed earlier, in
    the same read; stopping at it would leave that answer unread, and waiting
    for the sentinel to be the last one read would wait forever. Instead the
    client half-closes: the daemon closes the connection once nothing more is
    owed (every frame served, every answer made), so reading to EOF gets all of
    them, and an answer never made shows as this read's timeout."""
    s.sendall(attack + encode(m.Status(id=SENTINEL)))
    s.shutdown(socket.SHUT_WR)
    frames = FrameBuffer(64 * MiB)
    out: list[m.Response] = []
    while data := s.recv(1 << 20):
        out.extend(decode_response(body) for body in frames.feed(data))
    assert any(isinstance(a, m.StatusResult) and a.id == SENTINEL for a in out), out
    return out


def no_internal(answers: list[m.Response]) -> None:
    bad = [a for a in answers if isinstance(a, m.Error) and a.code == "internal"]
    assert not bad, bad


def test_a_reused_request_id_is_refused_while_the_first_is_owed(bounded: Bounded):
    sid = str(uuid.uuid4())
    first, second = user("first"), user("second")
    s = raw_conn(bounded.d.socket)
    s.sendall(encode(m.Append(id=5, session=sid, cwd=CWD, entries=[line(first)], durability="durable"))
              + encode(m.Append(id=5, session=sid, cwd=CWD, entries=[line(second)], durability="durable")))
    refused, ack = read_answers(s, 2)
    assert isinstance(refused, m.Error) and refused.code == "bad_request" and "still awaiting" in refused.message
    assert isinstance(ack, m.Appended) and ack.id == 5
    # Once answered, the id may be used again; answered-at-once requests may share one freely.
    s.sendall(encode(m.Append(id=5, session=sid, cwd=CWD, entries=[line(second)], durability="written")))
    assert isinstance(read_answers(s, 1)[0], m.Appended)
    s.sendall(encode(m.Status(id=6)) + encode(m.Status(id=6)))
    assert [type(a) for a in read_answers(s, 2)] == [m.StatusResult, m.StatusResult]
    s.close()
    assert read_entries(main_path(bounded.d.root, CWD, sid)) == [first, second]
    bounded.check()


def held_or_message(held: bool) -> bytes:
    """An entry held until the session's first message, or such a message."""
    return line({"type": "attachment", "uuid": str(uuid.uuid4())} if held else user("hello"))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("held", [True, False], ids=["held", "materialized"])
def test_an_answer_owed_that_comes_after_the_sentinel_is_read(bounded: Bounded, held: bool):
    """A ``written`` append and the sentinel in one pass: the Status is answered
    at once, the ack by the drain at the end of that pass, in the same write.
    The fuzz tests' read must return both: it once stopped only at a sentinel
    read last, and so waited forever whenever both answers reached one read
    (on a busy machine, for held entries of a session with no message yet)."""
    sid = str(uuid.uuid4())
    s = raw_conn(bounded.d.socket, timeout=30)
    try:  # the first append makes the file (spool or transcript): the next drain needs no worker
        s.sendall(encode(m.Append(id=1, session=sid, cwd=CWD, entries=[held_or_message(held)], durability="written")))
        assert isinstance(read_answers(s, 1)[0], m.Appended)
        owed = m.Append(id=2, session=sid, cwd=CWD, entries=[held_or_message(held)], durability="written")
        answers = answers_until_sentinel(s, encode(owed))
    finally:
        s.close()
    # the sentinel's answer first, the owed ack after it, in one read: what the read must get past
    assert [(type(a), a.id) for a in answers] == [(m.StatusResult, SENTINEL), (m.Appended, 2)]
    assert answers[1].pending == (2 if held else 0)  # type: ignore[union-attr]  # held: both wait for a message
    bounded.check()


EXT = msgspec.msgpack.Ext


@pytest.mark.parametrize("body", [
    msgpack(EXT(1, b"x")),
    msgpack({"op": EXT(1, b"Status"), "id": 1}),
    msgpack({"op": "Status", "id": EXT(-1, b"\x00" * 4)}),  # the timestamp extension
    msgpack({"op": "Append", "id": 2, "session": str(uuid.uuid4()), "cwd": CWD, "entries": [EXT(5, b"{}")]}),
    msgpack({"op": "Append", "id": 3, "session": EXT(127, b"\xff" * 300), "cwd": CWD, "entries": []}),
    msgpack({"op": "List", "id": 4, "dirs": [EXT(2, b"")] * 3}),
    msgpack({"op": "Status", "id": 6, "extra": EXT(9, b"\x00" * 100_000)}),  # skipped: an unknown field
], ids=["top", "op", "timestamp-id", "entry", "session", "dirs", "unknown-field"])
def test_msgpack_extension_types_are_bad_requests(bounded: Bounded, body: bytes):
    s = raw_conn(bounded.d.socket)
    answers = answers_until_sentinel(s, frame(body))
    no_internal(answers)
    assert len(answers) == 2
    assert isinstance(answers[0], m.Error) and answers[0].code == "bad_request" or isinstance(answers[0], m.StatusResult)
    s.close()
    bounded.check()


@pytest.mark.timeout(300)  # 80 examples, each with its own 60 s bound on a shared disk
def test_fuzzed_byte_streams(bounded: Bounded):
    """Frame level: arbitrary bytes, cut anywhere, after a valid Hello."""

    @FUZZ
    @given(st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=6))
    def attack(chunks: list[bytes]) -> None:
        s = raw_conn(bounded.d.socket, timeout=60)
        try:
            for chunk in chunks:
                s.sendall(chunk)
            s.shutdown(socket.SHUT_WR)
            frames = FrameBuffer(64 * MiB)
            while data := s.recv(1 << 16):
                for body in frames.feed(data):
                    answer = msgspec.msgpack.decode(body, type=m.Response)
                    assert not (isinstance(answer, m.Error) and answer.code == "internal"), answer
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon closed on a bad frame header: allowed
        finally:
            s.close()

    attack()
    bounded.check()


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**64 - 1), st.floats(),
    st.text(max_size=20), st.binary(max_size=20),
    st.builds(EXT, st.integers(min_value=-128, max_value=127), st.binary(max_size=8)),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                      max_leaves=12)
FIELDS = ["id", "session", "cwd", "entries", "messages", "durability", "agent", "run", "resend", "parent", "dirs",
          "all", "limit", "offset", "path", "meta", "protocol_version"]


@pytest.mark.timeout(300)  # 80 examples, each with its own 60 s bound on a shared disk
def test_fuzzed_messages(bounded: Bounded):
    """Message level: every request type with fields of any msgpack type."""

    @FUZZ
    @given(st.sampled_from(OPS), st.dictionaries(st.sampled_from(FIELDS), values, max_size=6))
    def attack(op: str, fields: dict) -> None:
        s = raw_conn(bounded.d.socket, timeout=60)  # a generous bound: this machine is shared
        try:
            no_internal(answers_until_sentinel(s, frame(msgpack({"op": op, **fields}))))
        finally:
            s.close()

    attack()
    bounded.check()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=15,
)
header_fields = st.fixed_dictionaries({}, optional={
    "type": st.sampled_from(["user", "assistant", "system", "summary", "custom-title", "attachment", "x"]) | json_values,
    "uuid": st.uuids().map(str) | json_values,
    "parentUuid": st.none() | st.uuids().map(str) | json_values,
    "isSidechain": st.booleans() | json_values,
    "agentId": st.sampled_from(["a1", "../x", "", "a" * 300]) | json_values,
    "subtype": st.sampled_from(["compact_boundary", "turn_duration"]) | json_values,
    "message": json_values,
})
entries = st.one_of(
    st.tuples(header_fields, st.dictionaries(st.text(max_size=8), json_values, max_size=3)).map(
        lambda t: json.dumps({**t[1], **t[0]}).encode()),
    st.binary(max_size=60),
)


@pytest.mark.timeout(300)  # 80 examples, each with its own 60 s bound on a shared disk
def test_fuzzed_entries(bounded: Bounded):
    """Entry level: appends of arbitrary entries; whatever is accepted is written
    as whole JSON lines, everything else is a typed error."""
    sessions: list[str] = []

    @FUZZ
    @given(st.lists(entries, min_size=1, max_size=5), st.sampled_from(["queued", "written"]), st.booleans())
    def attack(batch: list[bytes], durability: str, record: bool) -> None:
        sid = str(uuid.uuid4())
        sessions.append(sid)
        s = raw_conn(bounded.d.socket, timeout=60)  # a generous bound: this machine's disk is shared
        try:
            req = (m.Record(id=1, session=sid, cwd=CWD, messages=batch, durability=durability) if record  # type: ignore[arg-type]
                   else m.Append(id=1, session=sid, cwd=CWD, entries=batch, durability=durability))  # type: ignore[arg-type]
            answers = answers_until_sentinel(s, encode(req))
            no_internal(answers)
            assert [a.id for a in answers].count(1) == 1, answers  # answered, once, whatever the order
        finally:
            s.close()

    attack()
    with bounded.d.client() as c:
        c.flush()
    for path in bounded.d.root.rglob("*.jsonl"):
        for row in read_entries(path):  # whole lines, each one JSON object
            assert isinstance(row, dict)
    bounded.check()
