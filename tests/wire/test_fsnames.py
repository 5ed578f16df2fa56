"""Names that are not UTF-8 (``os.fsdecode``'s lone surrogates) through every
codec that carries them: the wire's msgpack, ``--json``, the search index's name
columns. Each round trip gives back the same str (so ``os.fsencode`` the same
bytes); a value without one encodes exactly as it always did."""

from __future__ import annotations

import json

import msgspec
import pytest

from sessiond.search.schema import from_db, to_db
from sessiond.wire import messages as m
from sessiond.wire.framing import HEADER_SIZE, decode_request, decode_response, encode
from sessiond.wire.fsnames import json_bytes
from sessiond.wire.session_info import SessionInfo


def info(path: str, title: str | None = None) -> SessionInfo:
    return SessionInfo(sessionId="s", path=path, title=title, firstPrompt=None, lastPrompt=None, customTitle=None,
                       aiTitle=None, summary=None, tag=None, createdAt=None, modifiedAt="2026-01-01T00:00:00Z",
                       size=1, cwd=None, gitBranch=None)


NAMES = ["/r/projects/-proj\udcff/x.jsonl", "agent-\udcfe\udc80", "\ud800 lone high", "plain", "naïve ✓"]


@pytest.mark.parametrize("name", NAMES)
def test_the_wire_carries_any_name_both_ways(name: str) -> None:
    listed = info(name, title=name)
    answer = decode_response(encode(m.Listed(id=3, sessions=[listed]))[HEADER_SIZE:])
    assert isinstance(answer, m.Listed) and answer.sessions == [listed]
    request = decode_request(encode(m.Adopt(id=4, session="s", path=name))[HEADER_SIZE:])
    assert request == m.Adopt(id=4, session="s", path=name)


def test_a_message_without_such_a_name_is_encoded_as_always() -> None:
    msg = m.Listed(id=3, sessions=[info("/r/projects/-p/s.jsonl")])
    assert encode(msg)[HEADER_SIZE:] == msgspec.msgpack.encode(msg)


def test_an_answer_of_the_core_messages_carries_such_a_name() -> None:
    """``decode_response`` tries ``core``'s answers first: a name that is not
    UTF-8 in one of them (the root a daemon serves) comes back whole too."""
    welcome = m.Welcome(id=0, protocol_version=1, daemon_version="v", pid=1, root=NAMES[0])
    assert decode_response(encode(welcome)[HEADER_SIZE:]) == welcome


def test_a_malformed_request_is_still_refused_with_the_field_named() -> None:
    from sessiond.wire.errors import ProtocolError

    body = msgspec.msgpack.encode({"op": "List", "id": 1, "offset": msgspec.msgpack.Ext(1, b"5")})
    with pytest.raises(ProtocolError, match=r"\$\.offset"):
        decode_request(body)
    for ext in (msgspec.msgpack.Ext(1, b"\xff"), msgspec.msgpack.Ext(9, b"x")):  # not what ``pack`` writes
        with pytest.raises(ProtocolError, match="malformed request"):
            decode_request(msgspec.msgpack.encode({"op": "Adopt", "id": 1, "session": "s", "path": ext}))


@pytest.mark.parametrize("name", NAMES)
def test_json_writes_each_lone_surrogate_as_its_escape(name: str) -> None:
    out = json_bytes({"path": name, "n": 1})
    out.decode("utf-8")  # valid UTF-8 whatever the name
    assert json.loads(out) == {"path": name, "n": 1}


def test_json_of_a_plain_value_is_msgspecs() -> None:
    value = {"path": "naïve", "n": [1, 2.5, None]}
    assert json_bytes(value) == msgspec.json.encode(value)


@pytest.mark.parametrize("name", NAMES)
def test_the_index_name_columns_keep_any_name(name: str) -> None:
    stored = to_db(name)
    stored.encode("utf-8")  # sqlite3 binds it
    assert from_db(stored) == name
    if not any(0xD800 <= ord(c) < 0xE000 for c in name):
        assert stored == name
