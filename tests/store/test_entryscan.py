"""The compiled header scan (``sessiond/store/_entryscan.c``) against Python's path.

``decode_headers`` takes the scan's answer when it gives one and Python's path
(``_decode_headers``: msgspec, the line-break and UTF-8 checks) otherwise, so the
scan must never accept a line Python's path refuses, nor read a header
differently from it; it may decline (None) anything, and Python's path decides.
These tests hold it to that with generated JSON, mutated lines and the edge
cases of each part of the grammar, and check that it does take the lines agents
really write (it is not a scan that declines everything)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiond.store import entries
from sessiond.store.entries import EntryHeader, _decode_headers
from sessiond.wire import messages as m
from sessiond.wire.errors import RemoteError, SessiondError
from tests.helpers import examples, main_path

try:
    from sessiond.store._entryscan import scan_headers
except ImportError:  # not built (no compiler): the pure-Python path is all there is
    scan_headers = None  # type: ignore[assignment]

compiled = pytest.mark.skipif(scan_headers is None, reason="sessiond.store._entryscan was not built")
CORPUS = Path(__file__).parents[1] / "corpus"
HEADER_FIELDS = ("type", "uuid", "parentUuid", "logicalParentUuid", "isSidechain", "agentId", "subtype",
                 "sourceToolAssistantUUID")


def scan(lines: list[bytes]) -> list[EntryHeader] | None:
    assert scan_headers is not None
    return scan_headers(lines, EntryHeader, msgspec.UNSET)


def exactly(headers: list[EntryHeader]) -> list[tuple]:
    """Headers as (field, type, value) tuples: ``True == 1`` must not pass for equal."""
    return [tuple((f, type(getattr(h, f)), getattr(h, f)) for f in HEADER_FIELDS) for h in headers]


def python_path(lines: list[bytes]) -> list[EntryHeader] | None:
    try:
        return _decode_headers(lines)
    except SessiondError:
        return None


def assert_agrees(lines: list[bytes]) -> list[EntryHeader] | None:
    """The scan declines, or gives exactly what Python's path accepts."""
    got = scan(lines)
    if got is not None:
        expected = python_path(lines)
        assert expected is not None, f"the scan accepted what Python's path refuses: {lines!r}"
        assert exactly(got) == exactly(expected), lines
    return got


def test_the_scan_is_built_and_used_wherever_it_can_be():
    """CI has a C compiler and Python's headers: there the install must have
    built ``_entryscan`` (an optional extension fails to build quietly) and
    ``decode_headers`` must use it; ``SESSIOND_ENTRYSCAN=python`` turns it off."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if shutil.which(cc) is None or not headers.exists():
        pytest.skip(f"no C compiler ({cc}) or no Python headers ({headers}): Python's path is used")
    assert scan_headers is not None, "sessiond.store._entryscan was not built: run `make install` (pip install -e .)"
    from sessiond.store import _entryscan

    source = Path(entries.__file__).with_name("_entryscan.c")
    assert Path(_entryscan.__file__).stat().st_mtime >= source.stat().st_mtime, "a stale build: run `make install`"
    if os.environ.get("SESSIOND_ENTRYSCAN") != "python":
        assert entries._scan_headers is scan_headers
    forced = subprocess.run([sys.executable, "-c", "from sessiond.store import entries; print(entries._scan_headers)"],
                            env={**os.environ, "SESSIOND_ENTRYSCAN": "python"}, capture_output=True, text=True, check=True)
    assert forced.stdout.strip() == "None"


# ------------------------------------------------------------------ what it takes


def corpus_lines() -> list[bytes]:
    return [line for path in sorted(CORPUS.rglob("*.jsonl")) for line in path.read_bytes().split(b"\n") if line]


@compiled
def test_every_line_of_the_real_transcripts_that_python_accepts_is_scanned_the_same():
    """The transcripts in tests/corpus (Claude Code's own, with tool results,
    escapes, emoji and non-Latin text): the scan reads every line Python's path
    accepts, one at a time and as one batch, with the same headers."""
    lines = corpus_lines()
    assert len(lines) > 1000
    accepted = [line for line in lines if python_path([line]) is not None]
    assert len(accepted) > 0.99 * len(lines)
    for line in accepted:
        assert assert_agrees([line]) is not None, line[:200]
    got = scan(accepted)
    assert got is not None and exactly(got) == exactly(_decode_headers(accepted))


@compiled
@pytest.mark.parametrize("line", [
    b'{"type":"user","uuid":"u1","parentUuid":null,"isSidechain":false,"message":{"content":"caf\xc3\xa9 \xf0\x9f\x98\x80"}}',
    b'{"type": "user", "uuid": "u1", "message": {"content": "\\"quoted\\" \\\\ \\/ \\b\\f\\n\\r\\t \\u00e9 \\ud83d\\ude00"}}',
    b' \t{"type":"system","subtype":"compact_boundary","logicalParentUuid":"p","n":[-0,1.5e-3,2E+10,true,false,null,{},[]]} \t',
    b'{"isSidechain":true,"agentId":"a1","sourceToolAssistantUUID":"t","type":"\xe7\x94\xa8\xe6\x88\xb7"}',
    b"{}",
    b'{"type":null,"uuid":null,"parentUuid":null,"logicalParentUuid":null,"isSidechain":null,"agentId":null,'
    b'"subtype":null,"sourceToolAssistantUUID":null}',
    b'{"deep":' + b"[" * 100 + b"]" * 100 + b',"x":"\x7f"}',
])
def test_the_usual_forms_are_scanned(line):
    assert assert_agrees([line]) is not None


# ------------------------------------------------------------------ what it must not take

EDGES = [
    # not one JSON object
    b"", b" ", b"[1]", b'"s"', b"1", b"null", b"{", b"}", b'{"a":1}{}', b'{"a":1} x', b'{"a":1,}', b'{,"a":1}',
    b'{"a"}', b'{"a":}', b'{"a" 1}', b'{a:1}', b"{'a':1}", b'{"a":1 "b":2}', b'{"a":[1,]}', b'{"a":[,1]}',
    b'{"a":[1 2]}', b'{"a":{"b"}}', b'{"a":tru}', b'{"a":nul}', b'{"a":True}', b'{"a":truex}', b'{"a":NaN}',
    b'{"a":Infinity}',
    # numbers
    b'{"a":01}', b'{"a":1.}', b'{"a":.5}', b'{"a":-}', b'{"a":+1}', b'{"a":1e}', b'{"a":1e+}', b'{"a":0x10}',
    b'{"a":--1}', b'{"a":1.5.5}', b'{"a":1e400}', b'{"a":1e-400}', b'{"a":' + b"9" * 70 + b"}",
    b'{"a":' + b"9" * 64 + b"}", b'{"a":-0.0e-0}',
    # strings
    b'{"a":"\\x"}', b'{"a":"\\u12"}', b'{"a":"\\u12G4"}', b'{"a":"\\"}', b'{"a":"unterminated}',
    b'{"a":"\t"}', b'{"a":"\x00"}', b'{"a":"\x1f"}', b'{"a":"\\ud83d"}', b'{"a":"\\ude00"}',
    b'{"a":"\\ud83d\\u0041"}', b'{"a":"\\ud83d\\"}', b'{"type":"\\ud83d"}', b'{"a":"\\uD83D\\uDE00"}',
    # UTF-8
    b'{"a":"\xff"}', b'{"a":"\xc0\xaf"}', b'{"a":"\xe0\x80\xaf"}', b'{"a":"\xed\xa0\x80"}', b'{"a":"\xf4\x90\x80\x80"}',
    b'{"a":"\xf5\x80\x80\x80"}', b'{"a":"\xc3"}', b'{"a":"\xe2\x82"}', b'{"a":"\x80"}', b'{"a":"\xc3\xa9"}',
    b'{"a":"\xf0\x9f\x98"}', b'\xef\xbb\xbf{"a":1}', b'{"\xff":1}', b'{"a":1}\xc3\xa9',
    # line breaks
    b'{"a":"x\ny"}', b'{"a":1,\n"b":2}', b'{"a":1}\n', b'\r{"a":1}', b'{"a":"\r"}',
    # routing fields: types, escapes, repeats
    b'{"type":5}', b'{"type":true}', b'{"type":["user"]}', b'{"uuid":{"a":1}}', b'{"isSidechain":1}',
    b'{"isSidechain":"true"}', b'{"isSidechain":tru}', b'{"parentUuid":false}', b'{"agentId":1.5}',
    b'{"typ\\u0065":"user"}', b'{"type":"us\\u0065r"}', b'{"type":"a\\"b"}', b'{"type":"user","type":"system"}',
    b'{"uuid":"x","uuid":null}', b'{"type":"user","a":{"type":5}}', b'{"Type":5}', b'{"type ":5}',
    # the uuid's bound (MAX_UUID characters; the scan counts bytes, so it declines a non-ASCII one of fewer)
    b'{"uuid":"' + b"u" * 256 + b'"}', b'{"uuid":"' + b"u" * 257 + b'"}', b'{"uuid":"' + "é".encode() * 200 + b'"}',
    b'{"uuid":"' + "é".encode() * 257 + b'"}', b'{"a":"' + b"u" * 300 + b'","uuid":"u"}',
    # nesting
    b'{"a":' + b"[" * 127 + b"]" * 127 + b"}", b'{"a":' + b"[" * 129 + b"]" * 129 + b"}",
    b'{"a":' + b"[" * 3000 + b"]" * 3000 + b"}", b'{"a":' + b'{"b":' * 200 + b"1" + b"}" * 200 + b"}",
    b'{"a":' + b"[" * 10 + b"]" * 9 + b"}",
]


@compiled
@pytest.mark.parametrize("line", EDGES)
def test_an_edge_case_is_declined_or_read_as_python_reads_it(line):
    assert_agrees([line])
    assert_agrees([b"{}", line, b'{"type":"user"}'])


@compiled
def test_a_batch_with_a_declined_line_is_declined_whole():
    good = b'{"type":"user","uuid":"u1"}'
    assert scan([good, good]) is not None
    assert scan([good, b'{"type":5}', good]) is None
    assert scan([good, bytearray(good)]) is None  # type: ignore[list-item]  # only bytes are read
    assert scan([]) == []


# ------------------------------------------------------------------ generated

json_text = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=12)  # lone surrogates too
scalar = st.one_of(st.none(), st.booleans(), st.integers(-10**60, 10**60), st.floats(allow_nan=False), json_text)
value = st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.dictionaries(json_text, inner, max_size=4)), max_leaves=12)
header_value = st.one_of(st.none(), st.booleans(), st.integers(), json_text, st.sampled_from(["user", "u-1", "é"]))
objects = st.builds(
    lambda head, rest: {**rest, **head},
    st.dictionaries(st.sampled_from(HEADER_FIELDS), header_value, max_size=5),
    st.dictionaries(json_text, value, max_size=5),
)


def dump(obj: object, ascii_only: bool, compact: bool) -> bytes:
    text = json.dumps(obj, ensure_ascii=ascii_only, separators=(",", ":") if compact else None)
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate with ensure_ascii off: invalid UTF-8


lines = st.builds(dump, objects, st.booleans(), st.booleans())
NOISE = b'"\\{}[],:0123456789eE.-+ \t\n\r\x00\x1f\x7fu\xc3\xa9\xed\xa0\x80\xf4\x90\xffntrue'


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A generated line with a few bytes inserted, removed or replaced, or cut."""
    data = bytearray(draw(lines))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        how = draw(st.sampled_from(["insert", "delete", "replace", "cut"]))
        byte = draw(st.sampled_from(NOISE))
        if how == "insert":
            data[at:at] = bytes([byte])
        elif how == "delete" and at < len(data):
            del data[at]
        elif how == "replace" and at < len(data):
            data[at] = byte
        elif how == "cut":
            del data[at:]
    return bytes(data)


@compiled
@settings(max_examples=examples(2000))
@given(lines)
def test_generated_lines_are_read_as_python_reads_them(line):
    """Valid JSON (with escapes, every kind of value and routing fields of every
    type): the scan agrees, and declines only for a reason it documents."""
    got = assert_agrees([line])
    if got is None and python_path([line]) is not None:
        obj = json.loads(line.decode("utf-8", "surrogatepass"))
        header = {k: obj[k] for k in HEADER_FIELDS if k in obj}
        declinable = (b"\\u" in line and any(0xD800 <= ord(c) <= 0xDFFF for c in json.dumps(obj, ensure_ascii=False))
                      or any(isinstance(v, str) and json.dumps(v) != f'"{v}"' for v in header.values())
                      or any(json.dumps(k) != f'"{k}"' for k in obj))  # an escaped key might spell a routing field
        assert declinable, f"declined a plain line: {line!r}"


@compiled
@settings(max_examples=examples(2000))
@given(st.one_of(mutated(), st.binary(max_size=40), st.lists(st.sampled_from(NOISE), max_size=30).map(bytes)))
def test_broken_lines_are_never_taken_for_good_ones(line):
    assert_agrees([line])


@compiled
@settings(max_examples=examples(400))
@given(st.lists(st.one_of(lines, mutated()), max_size=6))
def test_a_batch_is_read_as_python_reads_it(batch):
    assert_agrees(batch)


# ------------------------------------------------------------------ in the daemon


@compiled
@pytest.mark.parametrize("scan", ["compiled", "python"])
def test_a_daemon_writes_and_refuses_the_same_with_either_path(daemon_factory, monkeypatch, scan):
    """A real daemon, with the scan (what it takes when built) and without it
    (``SESSIOND_ENTRYSCAN=python``): the same bytes are written, the same bad
    entry is refused naming the same entry, and the start log says which ran."""
    if scan == "python":
        monkeypatch.setenv("SESSIOND_ENTRYSCAN", "python")
    else:
        monkeypatch.delenv("SESSIOND_ENTRYSCAN", raising=False)
    d = daemon_factory().start()
    sid = "6f0d4c9e-1f6b-4f59-9a51-6d2f3c1b2a00"
    good = [json.dumps({"type": "user", "uuid": f"00000000-0000-4000-8000-{i:012d}", "parentUuid": None,
                        "message": {"role": "user", "content": f"caf\u00e9 \\ \" {i} \U0001F600"}},
                       ensure_ascii=i % 2 == 0).encode() for i in range(20)]
    bad = good[:3] + [b'{"type":"user","uuid":"x","isSidechain":"yes"}']
    with d.client() as c:
        ok = c.call(m.Append(id=c.next_id(), session=sid, cwd="/home/dev/scan", entries=good, durability="written"))
        with pytest.raises(RemoteError) as refused:
            c.call(m.Append(id=c.next_id(), session=sid, cwd="/home/dev/scan", entries=bad, durability="written"))
    assert isinstance(ok, m.Appended) and ok.accepted == 20
    assert refused.value.code == "bad_request"
    assert str(refused.value).startswith("entry 3: entry has a field of the wrong type")
    assert main_path(d.root, "/home/dev/scan", sid).read_bytes() == b"".join(line + b"\n" for line in good)
    assert f"entry scan {scan}" in d.log.read_text()
