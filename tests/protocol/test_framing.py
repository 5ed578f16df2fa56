"""Framing and message decoding: any split decodes the same; junk is a typed error."""

import struct

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiond.protocol.wire import messages as m
from sessiond.protocol.wire.errors import FrameTooLarge, ProtocolError
from sessiond.protocol.wire.framing import FrameBuffer, decode_request, decode_response, encode, request_id_of

entries = st.lists(st.binary(max_size=64), max_size=5)
requests = st.one_of(
    st.builds(m.Append, id=st.integers(0, 2**32), session=st.text(max_size=40), cwd=st.text(max_size=40), entries=entries,
              durability=st.sampled_from(m.DURABILITIES)),
    st.builds(m.Flush, id=st.integers(0, 2**32), session=st.none() | st.text(max_size=36), durable=st.booleans()),
    st.builds(m.Status, id=st.integers(0, 2**32)),
    st.builds(m.Close, id=st.integers(0, 2**32), session=st.text(max_size=36)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(requests, min_size=1, max_size=8), st.data())
def test_any_split_of_a_stream_decodes_the_same(reqs, data):
    stream = b"".join(encode(r) for r in reqs)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    buf = FrameBuffer()
    bodies = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        bodies += buf.feed(stream[prev:cut])
        prev = cut
    assert buf.pending == 0
    assert [decode_request(b) for b in bodies] == reqs


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_only_raise_the_typed_error(junk):
    for decode in (decode_request, decode_response):
        try:
            decode(junk)
        except ProtocolError:
            pass
    request_id_of(junk)  # never raises


def test_oversized_frame_is_refused_from_the_header_alone():
    buf = FrameBuffer(max_frame=1024)
    with pytest.raises(FrameTooLarge):
        buf.feed(struct.pack(">I", 1025))  # no body sent at all


def test_valid_msgpack_of_the_wrong_shape_is_a_protocol_error():
    for raw in ({"op": "Append", "id": 1}, {"op": "Nope", "id": 1}, [1, 2, 3], {"op": "Status", "id": "x"}):
        with pytest.raises(ProtocolError):
            decode_request(msgspec.msgpack.encode(raw))
    assert request_id_of(msgspec.msgpack.encode({"op": "Nope", "id": 7})) == 7


def test_each_frame_is_a_new_buffer():
    a = encode(m.Status(id=1))
    b = encode(m.Status(id=2))
    assert a != b and decode_request(a[4:]) == m.Status(id=1)
