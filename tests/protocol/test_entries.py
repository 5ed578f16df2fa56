"""The entry header decoder refuses anything that is not one JSON object line."""

import pytest

from sessiond.protocol.transcript.entries import decode_header
from sessiond.protocol.wire.errors import SessiondError


def test_header_fields():
    h = decode_header(b'{"parentUuid":null,"isSidechain":true,"agentId":"a1","type":"user","uuid":"u1","message":{"x":[1]}}')
    assert (h.type, h.uuid, h.isSidechain, h.agentId, h.parentUuid) == ("user", "u1", True, "a1", None)


@pytest.mark.parametrize(
    "raw",
    [
        b"[1,2]",
        b'"text"',
        b'{"type":"user"} {"type":"user"}',
        b'{"type":"user"',
        b'{"type":"user",\n"x":1}',
        b'{"type":"user","x":"\xff"}',
        b'{"type":5}',
        b'{"uuid":{"a":1}}',
        b"",
    ],
)
def test_bad_entries_are_typed_errors(raw):
    with pytest.raises(SessiondError) as err:
        decode_header(raw)
    assert err.value.code == "bad_request"
