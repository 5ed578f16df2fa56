"""``sessiond/wire/purepack.py`` against msgspec.msgpack, both ways: the same
bytes for every value of the wire's builtins, the same value from msgspec's
bytes and from any other byte string either accepts, and bounded decoding."""

from __future__ import annotations

import math

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiond.wire.errors import ProtocolError
from sessiond.wire.purepack import MAX_DEPTH, DecodeError, TooDeep, packb, unpackb
from tests.helpers import examples

SCALARS = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats()
           | st.text() | st.binary()
           | st.sampled_from([0, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, -32, -33, -128, -129, -32768,
                              -32769, -(2**31), -(2**31) - 1, "x" * 31, "x" * 32, "é" * 200, b"b" * 255, b"b" * 256]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=20) | st.dictionaries(st.text(max_size=8), inner, max_size=20),
                      max_leaves=60)


def same(a: object, b: object) -> bool:
    """Equal, types included (True is not 1), NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


@settings(max_examples=examples(400))
@given(VALUES)
def test_encodes_the_bytes_msgspec_writes(value):
    assert packb(value) == msgspec.msgpack.encode(value)


@settings(max_examples=examples(400))
@given(VALUES)
def test_decodes_what_msgspec_writes_and_msgspec_decodes_what_it_writes(value):
    assert same(unpackb(msgspec.msgpack.encode(value)), value)
    assert same(msgspec.msgpack.decode(packb(value)), value)


def _msgspec(data: bytes):
    try:
        return True, msgspec.msgpack.decode(data)
    except (msgspec.DecodeError, RecursionError, ValueError):
        return False, None


def _mine(data: bytes):
    try:
        return True, unpackb(data)
    except DecodeError:
        return False, None


def _has_ext(value) -> bool:
    if isinstance(value, (msgspec.msgpack.Ext,)) or type(value).__name__ == "datetime":
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_ext(v) for v in value)
    if isinstance(value, dict):
        return any(_has_ext(k) or _has_ext(v) for k, v in value.items())
    return False


FORMS = st.lists(st.sampled_from([
    b"\x90", b"\x91", b"\x92", b"\x81", b"\x82", b"\xdc\x00\x01", b"\xdd\x00\x00\x00\x01", b"\xde\x00\x01",
    b"\xdf\x00\x00\x00\x01", b"\xc0", b"\xc2", b"\xc3", b"\x05", b"\xff", b"\xcc\x80", b"\xcd\x00\x01", b"\xce\x00\x00\x00\x01",
    b"\xcf\x00\x00\x00\x00\x00\x00\x00\x01", b"\xd0\x80", b"\xd1\xff\xff", b"\xd2\x00\x00\x00\x00", b"\xd3" + b"\xff" * 8,
    b"\xca\x3f\x80\x00\x00", b"\xcb" + b"\x00" * 8, b"\xa1a", b"\xd9\x01b", b"\xda\x00\x01c", b"\xdb\x00\x00\x00\x01d",
    b"\xc4\x01x", b"\xc5\x00\x01y", b"\xc6\x00\x00\x00\x01z", b"\xa2\xc3\x28", b"\xc1", b"\xd4\x01\x02",
]), max_size=12).map(b"".join)


@settings(max_examples=examples(600))
@given(FORMS | st.binary(max_size=24))
def test_any_bytes_decode_as_msgspec_decodes_them(data):
    """Every form of every header (not only the smallest), truncations,
    trailing bytes, invalid UTF-8, reserved types: accepted alike, to equal
    values, or refused alike. Ext types are msgspec's own, refused here."""
    ok, theirs = _msgspec(data)
    mine_ok, mine = _mine(data)
    if ok and _has_ext(theirs):
        assert not mine_ok
        return
    assert (mine_ok, ok) == (ok, ok), data
    if ok:
        assert same(mine, theirs) or (isinstance(theirs, dict) and mine == theirs), (data, mine, theirs)


def test_nesting_is_bounded_both_ways():
    deep: list = []
    for _ in range(MAX_DEPTH - 1):
        deep = [deep]
    assert unpackb(packb(deep)) == deep
    with pytest.raises(ValueError):
        packb([deep])
    with pytest.raises(TooDeep):
        unpackb(b"\x91" * (MAX_DEPTH + 1) + b"\xc0")
    with pytest.raises(TooDeep):
        unpackb(b"\x81\xa1k" * (MAX_DEPTH + 1) + b"\xc0")
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(ValueError):
        packb(cycle)


def test_announced_lengths_are_checked_against_the_bytes_before_anything_is_built():
    """A 2**32-1 element array, map, str or bin announced in a few bytes is
    refused at once as truncated (never allocated, never looped over)."""
    for header in (b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff", b"\xdb\xff\xff\xff\xff", b"\xc6\xff\xff\xff\xff"):
        with pytest.raises(DecodeError, match="truncated"):
            unpackb(header + b"\xc0" * 16)


def test_refusals_are_protocol_errors_and_unsupported_types_are_type_errors():
    for bad in (b"", b"\xc1", b"\xd4\x01\x02", b"\xa2\xc3\x28", b"\xc0\xc0", b"\x81\x80\x01", b"\x81\x91\x80\x01"):
        with pytest.raises(ProtocolError):
            unpackb(bad)
    with pytest.raises(TypeError):
        packb({1, 2})
    with pytest.raises(OverflowError):
        packb(2**64)
    with pytest.raises(OverflowError):
        packb(-(2**63) - 1)
