"""The lite codec (``sessiond/wire/lite.py``) against the Structs it stands in for.

Its table (``lite_table.py``) is derived here from ``msgspec.structs.fields``
of every Struct it covers, for every field, nested Structs found from the field
types; requests it encodes are the bytes msgspec writes and decode on the
daemon's side to the very Struct; answers msgspec encodes decode to objects
with the Struct's attributes, defaults the daemon left out filled in.
"""

from __future__ import annotations

import subprocess
import sys

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiond.wire import lite, lite_table
from sessiond.wire import messages as m
from sessiond.wire.framing import decode_request, encode
from sessiond.wire.lease import LeaseHolder
from sessiond.wire.session_info import SessionInfo
from tests.helpers import examples

RECORDS = {"SessionInfo": SessionInfo, "LeaseHolder": LeaseHolder}


def struct_of(name: str) -> type[msgspec.Struct]:
    return RECORDS.get(name) or getattr(m, name)


def nested_structs(t: msgspec.inspect.Type) -> list[type]:
    """The Struct types a field's type holds (through lists, unions, dicts)."""
    if isinstance(t, msgspec.inspect.StructType):
        return [t.cls]
    out = []
    for attr in ("item_type", "types", "key_type", "value_type"):
        inner = getattr(t, attr, None)
        for sub in inner if isinstance(inner, tuple) else [inner] if inner is not None else []:
            out += nested_structs(sub)
    return out


def expected_table() -> tuple[dict, dict]:
    fields, nested = {}, {}
    for name in lite_table.FIELDS:
        cls = struct_of(name)
        row = []
        for f in msgspec.structs.fields(cls):
            if f.required:
                row.append((f.name, lite_table.REQUIRED))
            else:
                row.append((f.name, f.default if f.default is not msgspec.NODEFAULT else f.default_factory()))
        fields[name] = tuple(row)
        info = msgspec.inspect.type_info(cls)
        for f in info.fields:
            kinds = nested_structs(f.type)
            if kinds:
                assert len(kinds) == 1, (name, f.name, kinds)
                nested.setdefault(name, {})[f.name] = kinds[0].__name__
    return fields, nested


def test_the_lite_table_is_the_structs_fields_and_defaults():
    fields, nested = expected_table()
    assert (lite_table.FIELDS, lite_table.NESTED) == (fields, nested), (
        "lite_table.py has drifted from messages.py: set FIELDS and NESTED to\n" + repr(fields) + "\n" + repr(nested))
    for name in lite_table.FIELDS:
        for f in msgspec.structs.fields(struct_of(name)):
            assert f.encode_name == f.name  # no renamed fields: the table's names are the wire's
    for by_field in lite_table.NESTED.values():
        assert set(by_field.values()) <= set(lite_table.FIELDS)


def test_the_tagged_messages_are_tagged_by_name_and_omit_defaults():
    for name in lite_table.TAGGED:
        config = struct_of(name).__struct_config__
        assert (config.tag_field, config.tag, config.omit_defaults, config.forbid_unknown_fields) == ("op", name, True, False)
    assert lite.PROTOCOL_VERSION == m.PROTOCOL_VERSION
    for name in set(lite_table.FIELDS) - set(lite_table.TAGGED):
        assert struct_of(name).__struct_config__.tag is None


def test_every_answer_to_a_lite_request_has_a_lite_class():
    """What the daemon answers the lite requests: each is in the table (else
    the lite client would fall back to msgspec on every run)."""
    for answer in ("Welcome", "StatusResult", "Listed", "Appended", "Done", "Error"):
        assert answer in lite_table.TAGGED


TEXT = st.text(max_size=12)
REQUESTS = st.one_of(
    st.builds(dict, op=st.just("Hello"), id=st.just(0), protocol_version=st.integers(0, 5), client=TEXT, pid=st.integers(0, m.MAX_PID)),
    st.builds(dict, op=st.just("Status"), id=st.integers(0, 2**63 - 1)),
    st.builds(dict, op=st.just("List"), id=st.integers(1, 2**40), dirs=st.lists(TEXT, max_size=4), all=st.booleans(),
              limit=st.none() | st.integers(1, 10**6), offset=st.integers(0, 10**6)),
    st.builds(dict, op=st.just("Append"), id=st.integers(1, 2**40), session=TEXT, cwd=TEXT,
              entries=st.lists(st.binary(max_size=40), max_size=5), durability=st.sampled_from(m.DURABILITIES),
              agent=st.none() | TEXT, run=st.none() | TEXT, resend=st.booleans(), lease=st.booleans()),
    st.builds(dict, op=st.just("Close"), id=st.integers(1, 2**40), session=TEXT),
)


@settings(max_examples=examples(300))
@given(REQUESTS)
def test_a_lite_request_is_msgspecs_bytes_and_decodes_to_the_struct(spec):
    name = spec.pop("op")
    mine = getattr(lite, name)(**spec)
    theirs = getattr(m, name)(**spec)
    frame = lite.encode(mine)
    assert frame == encode(theirs)
    assert decode_request(frame[4:]) == theirs


def lease_holder():
    return st.builds(LeaseHolder, session=TEXT, pid=st.integers(0, 2**31), client=TEXT, since=TEXT,
                     lastWrite=st.none() | TEXT, reconnecting=st.booleans())


def session_info():
    maybe = st.none() | TEXT
    return st.builds(SessionInfo, sessionId=TEXT, path=TEXT, title=maybe, firstPrompt=maybe, lastPrompt=maybe, customTitle=maybe,
                     aiTitle=maybe, summary=maybe, tag=maybe, createdAt=maybe, modifiedAt=TEXT, size=st.integers(0, 2**40),
                     cwd=maybe, gitBranch=maybe, lastEntryAt=maybe, messageCount=st.none() | st.integers(0, 10**6),
                     live=st.none() | st.dictionaries(TEXT, TEXT | st.integers(0, 2**31), max_size=3))


COUNTS = st.integers(0, 2**40)
SCALAR_MAPS = st.dictionaries(TEXT, st.none() | st.booleans() | st.integers(-5, 2**40) | TEXT, max_size=4)
ANSWERS = st.one_of(
    st.builds(m.Welcome, id=st.just(0), protocol_version=st.integers(0, 5), daemon_version=TEXT, pid=COUNTS, max_frame_bytes=COUNTS),
    st.builds(m.StatusResult, id=COUNTS, pid=COUNTS, version=TEXT, root=TEXT, socket=TEXT, uptime=st.floats(0, 1e9),
              sessions=COUNTS, materialized=COUNTS, clients=COUNTS, queuedEntries=COUNTS, queuedBytes=COUNTS,
              pendingEntries=COUNTS, writes=COUNTS, bytesWritten=COUNTS, fsyncs=COUNTS, errors=COUNTS,
              config=st.dictionaries(TEXT, TEXT | st.integers(0, 100) | st.floats(0, 100) | st.booleans(), max_size=4),
              mirror=st.none() | SCALAR_MAPS, spooledBytes=COUNTS, pendingBytes=COUNTS,
              budgets=st.none() | st.dictionaries(TEXT, st.dictionaries(TEXT, COUNTS, max_size=2), max_size=3),
              live=st.lists(lease_holder(), max_size=3), watchers=COUNTS),
    st.builds(m.Listed, id=COUNTS, sessions=st.lists(session_info(), max_size=3)),
    st.builds(m.Appended, id=COUNTS, accepted=COUNTS, duplicates=COUNTS, last=st.none() | TEXT, pending=COUNTS),
    st.builds(m.Done, id=COUNTS),
    st.builds(m.Error, id=COUNTS, code=TEXT, message=TEXT),
)


def as_plain(value):
    """A Struct (or lite object) as nested builtins, every field present."""
    if isinstance(value, msgspec.Struct):
        return {f: as_plain(getattr(value, f)) for f in value.__struct_fields__}
    if isinstance(value, lite.LiteMessage):
        return {f: as_plain(getattr(value, f)) for f, _ in value.FIELDS}
    if isinstance(value, list):
        return [as_plain(v) for v in value]
    return value


@settings(max_examples=examples(300))
@given(ANSWERS)
def test_an_answer_decodes_to_the_structs_attributes_with_defaults_filled_in(answer):
    mine = lite.decode_response(encode(answer)[4:])
    assert type(mine).__name__ == type(answer).__name__
    assert as_plain(mine) == as_plain(answer)


def test_omitted_fields_come_back_as_fresh_defaults():
    a = lite.decode_response(encode(m.StatusResult(id=1, pid=2, version="v", root="/r", socket="/s", uptime=1.5, sessions=0,
                                                    materialized=0, clients=1, queuedEntries=0, queuedBytes=0, pendingEntries=0,
                                                    writes=0, bytesWritten=0, fsyncs=0, errors=0, config={}))[4:])
    b = lite.Status(id=3)
    assert (a.live, a.mirror, a.budgets, a.watchers) == ([], None, None, 0) and b.id == 3
    a.live.append("x")
    assert dict(lite.StatusResult.FIELDS)["live"] == [] and dict(lite_table.FIELDS["StatusResult"])["live"] == []


@pytest.mark.parametrize("body", [
    b"\xc1",  # not MessagePack
    b"\x92\x01\x02",  # not a map
    msgspec.msgpack.encode({"op": "Subscribed", "id": 1, "session": "s", "path": "p", "offset": 0}),  # no lite class
    msgspec.msgpack.encode({"op": "Appended", "id": 1}),  # a required field missing
    msgspec.msgpack.encode({"op": "Appended", "id": "1", "accepted": 1}),  # an id that is no int
    msgspec.msgpack.encode({"op": "Listed", "id": 1, "sessions": [1]}),  # a nested record that is no map
    encode(m.Error(id=1, code="session_busy", message="held", holder=LeaseHolder(session="s", pid=1, client="c", since="t")))[4:],
])
def test_what_the_lite_codec_does_not_handle_is_not_lite(body):
    with pytest.raises(lite.NotLite):
        lite.decode_response(body)


def test_a_big_answer_is_left_to_msgspec():
    info = SessionInfo(sessionId="s" * 36, path="p" * 100, title="t" * 40, firstPrompt=None, lastPrompt=None, customTitle=None,
                       aiTitle=None, summary=None, tag=None, createdAt=None, modifiedAt="2025-01-01T00:00:00.000Z", size=1,
                       cwd="/c", gitBranch=None)
    small = encode(m.Listed(id=1, sessions=[info] * 20))[4:]
    assert len(lite.decode_response(small).sessions) == 20
    big = encode(m.Listed(id=1, sessions=[info] * 1000))[4:]
    assert len(big) > lite.MAX_BODY
    with pytest.raises(lite.NotLite, match="faster"):
        lite.decode_response(big)


def test_unknown_fields_are_ignored_as_the_structs_ignore_them():
    got = lite.decode_response(msgspec.msgpack.encode({"op": "Done", "id": 4, "later": [1, 2]}))
    assert as_plain(got) == {"id": 4}


def test_building_a_message_checks_its_arguments_as_a_struct_does():
    with pytest.raises(TypeError, match="Missing required argument 'session'"):
        lite.Close(id=1)
    with pytest.raises(TypeError, match="Unexpected keyword argument 'nope'"):
        lite.Status(id=1, nope=2)


def test_the_lite_client_side_imports_no_msgspec():
    code = ("import sys; import sessiond.wire.lite, sessiond.wire.codecs, sessiond.client.connection, "
            "sessiond.client.batching; print(sorted(n for n in sys.modules if n.startswith('msgspec') or n == 'typing' "
            "or n == 'sessiond.wire.messages'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, timeout=60).stdout
    assert out == b"[]\n"
