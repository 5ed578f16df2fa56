"""The entry header decoder refuses anything that is not one JSON object line."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiond.store.entries import decode_header, decode_headers
from sessiond.wire.errors import SessiondError
from tests.helpers import examples


def test_header_fields():
    h = decode_header(b'{"parentUuid":null,"isSidechain":true,"agentId":"a1","type":"user","uuid":"u1","message":{"x":[1]}}')
    assert (h.type, h.uuid, h.isSidechain, h.agentId, h.parentUuid) == ("user", "u1", True, "a1", None)


BAD = [
    b"[1,2]",
    b'"text"',
    b'{"type":"user"} {"type":"user"}',
    b'{"type":"user"',
    b'{"type":"user",\n"x":1}',
    b'{"type":"user","x":"\xff"}',
    b'{"type":5}',
    b'{"uuid":{"a":1}}',
    b"",
    b"  ",
    b'{"type":"user",\r"x":1}',
]


@pytest.mark.parametrize("raw", BAD)
def test_bad_entries_are_typed_errors(raw):
    with pytest.raises(SessiondError) as err:
        decode_header(raw)
    assert err.value.code == "bad_request"


GOOD = b'{"type":"user","uuid":"u1","message":{"content":"caf\xc3\xa9"}}'


@pytest.mark.parametrize("raw", BAD)
@pytest.mark.parametrize("where", [0, 1, 2])
def test_batch_refused_whole_naming_the_bad_entry(raw, where):
    """The joined fast path must never accept what the per-line path refuses:
    a blank entry beside one holding two objects split by a raw newline would
    otherwise decode to the right count of objects."""
    lines = [GOOD, GOOD, GOOD]
    lines[where] = raw
    with pytest.raises(SessiondError) as err:
        decode_headers(lines)
    assert err.value.code == "bad_request"
    assert err.value.message.startswith(f"entry {where}:")


@pytest.mark.parametrize(
    "lines, bad",
    [
        ([b'{"type":"user","uuid":"a"}\n{"type":"user","uuid":"b"}', b""], 0),  # a raw newline, count made up by a blank
        ([b'{"type":"user","uuid":"u1"', b'}{"type":"assistant","uuid":"u2"}'], 0),  # one object split over two lines
        ([b"{} {}", b"   "], 0),  # two objects on one line beside a blank one
        ([b"{}", b"{},{}", b""], 1),
        ([b'{"a":{"b":1}', b'{"c":2}}'], 0),  # a nested close at a line end
    ],
)
def test_a_batch_whose_values_do_not_match_its_lines_is_refused(lines, bad):
    """decode_lines reads a value stream: a newline is only whitespace to it."""
    with pytest.raises(SessiondError) as err:
        decode_headers(lines)
    assert err.value.message.startswith(f"entry {bad}:")


entry_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=20)
good_entry = st.builds(lambda t, u: f'{{"type":{t},"uuid":{u}}}'.encode(), st.sampled_from(['"user"', '"system"', "null", "5"]),
                       st.sampled_from(['"x"', "null", "[1]"]))
fragment = st.sampled_from([b"{", b"}", b"{}", b"} {", b"}{", b",", b" ", b"", b'"', b":1", b'{"type":"user"', b'"uuid":"u"}'])
entry = st.one_of(
    good_entry,
    entry_text.map(lambda t: t.encode("utf-8")),
    st.binary(max_size=20),
    st.lists(st.one_of(fragment, good_entry), max_size=4).map(b"".join),  # glued, split and partial objects
)


@settings(max_examples=examples(500))
@given(st.lists(entry, max_size=6))
def test_batch_decode_equals_per_line_decode(lines):
    try:
        expected = [decode_header(line) for line in lines]
    except SessiondError:
        expected = None
    if expected is None:
        with pytest.raises(SessiondError):
            decode_headers(lines)
    else:
        assert decode_headers(lines) == expected
