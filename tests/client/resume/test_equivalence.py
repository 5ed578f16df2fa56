"""The batch-decoding loader and the shortcut walk give exactly what the line-by-line
loader and plain walk gave (tests/client/resume/reference.py), on damaged files too.

The batch path decodes a block of lines in one call only when every line in it is one
``{...}`` object; any damage sends the block back to the line-by-line path. These
tests put damage of every kind at random places (so, in any block, at any chunk
size) and compare everything the loader and the chain steps produce.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sessiond.client.resume.chainentry import Entry
from sessiond.client.resume.loader import load_entries
from sessiond.client.resume.pipeline import resolve_chain
from tests.conftest import CORPUS
from tests.helpers import examples

from . import reference
from .build import SID, Conv, text
from .test_resume import transcripts

INF = float("inf")
CORPUS_FILES = sorted(CORPUS.glob("*.jsonl"))

DAMAGE = [
    b"",  # a blank line
    b"   ",  # whitespace only
    b"\t\r",
    b'{"type":"user","uuid":"torn',  # torn
    b'{"type":"user","uuid":"g1","parentUuid":null}{"type":"user","uuid":"g2"}',  # glued
    b'{"type":"user","uuid":"s1"} {"type":"user","uuid":"s2"}',  # glued with a space
    b'{"type":"user","uuid":"m1","message":{"a":',  # the first half of a value over two lines ...
    b'{}}}',  # ... and a second half that starts with "{" and ends with "}"
    b'{"type":"user",',  # a value spread over lines
    b'"uuid":"m2"}',
    b"[1, 2]",
    b"42",
    b"\x00\x00",
    b'{"type":"user","uuid":"bad\xff\xfe"}',  # not UTF-8
    b'{"type":"user","uuid":7,"parentUuid":"x"}',  # a field of a surprising type: kept leniently
    b'{"type":"assistant","uuid":"lenient","message":{"id":5},"isSidechain":"no"}',
    b"{}",
    b'{"type":"progress"}',  # no uuid
    b' {"type":"user","uuid":"lead","parentUuid":null}',  # leading space: still one object
    b'{"type":"user","uuid":"trail","parentUuid":null} ',
    b'{"type":"user","uuid":"crlf","parentUuid":null}\r',
    b'{"type":"user","uuid":"~","~sessiond.src":"x","~sessiond.index":-1}',  # our own field names
]


def render(conv: Conv, damage: list[tuple[int, bytes]], trailing_newline: bool) -> bytes:
    lines = [
        line if isinstance(line, bytes) else json.dumps(line, separators=(",", ":")).encode()
        for line in conv.lines
    ]
    for at, junk in sorted(damage, reverse=True):
        lines.insert(min(at, len(lines)), junk)
    return b"\n".join(lines) + (b"\n" if trailing_newline and lines else b"")


ENTRY_FIELDS = [f for f in Entry.__struct_fields__ if f not in ("src", "index")]


def entry_view(e) -> tuple:
    # to_builtins: the reference has its own (equal but distinct) struct classes
    return (*(msgspec.to_builtins(getattr(e, f)) for f in ENTRY_FIELDS), e.index, e.raw)


def loaded_view(loaded) -> dict:
    return {
        "entries": [(uuid, entry_view(e)) for uuid, e in loaded.entries.items()],
        "boundaries": loaded.boundaries,
        "snips": loaded.snips,
        "metadata": list(loaded.metadata.items()),
        "checkpoints": list(loaded.checkpoints.items()),
        "attribution": loaded.attribution,
        "skipped": loaded.skipped,
        "lines": loaded.lines,
        "sidechain_only": loaded.sidechain_only,
        "discarded": loaded.discarded,
        "unsure": loaded.unsure,
    }


def resolved_view(resolved) -> dict:
    c = resolved.compaction
    return {
        "loaded": loaded_view(resolved.loaded),
        "compaction": (c.boundary, c.preserved, sorted(c.zero_usage), sorted(c.missing)),
        "chain": [entry_view(e) for e in resolved.chain],
        "bridges": [(b.at, b.missingParent) for b in resolved.bridges],
    }


def assert_same(path: Path, skip_threshold: float, chunk: int) -> None:
    new = load_entries(path, skip_threshold=skip_threshold, chunk=chunk)
    old = reference.load_entries(path, skip_threshold=skip_threshold, chunk=chunk)
    assert loaded_view(new) == loaded_view(old)
    new_r = resolve_chain(path, skip_threshold=skip_threshold, chunk=chunk)
    old_r = reference.resolve_chain(path, skip_threshold=skip_threshold, chunk=chunk)
    assert resolved_view(new_r) == resolved_view(old_r)


def _stepped_back_before_midnight() -> Conv:
    """Found by the property: a clock stepped back before 00:00 wrote timestamps of
    Claude Code's width that are no dates (``T-1:59:59``). None is a time, so the
    later line is the leaf (e5, bridged to e2); a string max took e2."""
    conv = Conv()
    conv.user("e1", ts="2026-01-01T-1:59:58.000Z")
    conv.user("e2", ts="2026-01-01T-1:59:59.000Z")
    conv.user("e5", "after a gap", parent="lost5", ts="2026-01-01T-1:59:58.000Z")
    return conv


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(conv=_stepped_back_before_midnight(), damage=[], trailing_newline=False, chunk=1, skip_threshold=0)
@given(
    conv=transcripts(),
    damage=st.lists(st.tuples(st.integers(0, 40), st.sampled_from(DAMAGE)), max_size=6),
    trailing_newline=st.booleans(),
    chunk=st.sampled_from([1, 7, 64, 300, 1 << 20]),
    skip_threshold=st.sampled_from([0, INF]),
)
def test_same_as_line_by_line(conv, damage, trailing_newline, chunk, skip_threshold):
    assert_same_rendered(conv, damage, trailing_newline, chunk, skip_threshold)


def assert_same_rendered(conv: Conv, damage: list[tuple[int, bytes]], trailing_newline: bool, chunk: int,
                         skip_threshold: float) -> None:
    """``assert_same`` on ``conv`` written (with its damage) to a file of its own."""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / f"{SID}.jsonl"
        p.write_bytes(render(conv, damage, trailing_newline))
        assert_same(p, skip_threshold, chunk)


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.name[:40])
def test_corpus_same_as_line_by_line(path):
    for skip_threshold in (0, INF):
        for chunk in (4096, 1 << 20):
            assert_same(path, skip_threshold, chunk)


def test_each_damage_alone_in_a_long_block(tmp_path):
    """Damage in the middle of a block that would otherwise be decoded in one call."""
    for junk in DAMAGE:
        conv = Conv()
        for i in range(50):
            conv.user(f"u{i}", "hi")
            conv.assistant(f"a{i}", text("ok"))
        p = tmp_path / "t.jsonl"
        p.write_bytes(render(conv, [(51, junk)], True))
        for chunk in (1 << 20, 1000):
            assert_same(p, INF, chunk)


def test_a_value_over_two_lines_next_to_a_glued_line(tmp_path):
    """As many values as lines, but not one per line: must not be decoded in one batch."""
    conv = Conv()
    conv.user("u1")
    conv.raw(b'{"type":"user","uuid":"x1","parentUuid":"u1"}{"type":"user","uuid":"x2","parentUuid":"u1"}')
    conv.raw(b'{"type":"user","uuid":"y1",')
    conv.raw(b'"parentUuid":"u1"}')
    conv.user("u2", parent="u1")
    p = conv.write(tmp_path / "t.jsonl")
    loaded = load_entries(p)
    assert list(loaded.entries) == ["u1", "u2"]
    assert loaded.skipped == 3 and loaded.lines == 5
    assert_same(p, INF, 1 << 20)


class _Counting:
    """Stands in for the loader's decoder, counting the calls of each kind."""

    def __init__(self, decoder) -> None:
        self.decoder = decoder
        self.lines = self.batches = 0

    def decode(self, buf):
        self.lines += 1
        return self.decoder.decode(buf)

    def decode_lines(self, buf):
        self.batches += 1
        return self.decoder.decode_lines(buf)


def test_clean_blocks_are_decoded_in_one_call_each(tmp_path, monkeypatch):
    from sessiond.client.resume import chainentry

    counting = _Counting(chainentry.decoder)
    monkeypatch.setattr(chainentry, "decoder", counting)
    conv = Conv()
    for i in range(200):
        conv.user(f"u{i}", "hi")
    conv.raw("torn {")  # not "{...}": decoded on its own, the lines around it in batches
    for i in range(200):
        conv.user(f"v{i}", "hi")
    p = conv.write(tmp_path / "t.jsonl")
    size = p.stat().st_size
    loaded = load_entries(p, chunk=size // 8)
    assert len(loaded.entries) == 400 and loaded.skipped == 1
    assert counting.lines == 1


def test_a_glued_line_costs_a_few_calls_not_its_block(tmp_path, monkeypatch):
    """A glued line starts with "{" and ends with "}", so it is only found when its
    run of lines decodes to one value too many: that run is decoded again line by line."""
    from sessiond.client.resume import chainentry

    counting = _Counting(chainentry.decoder)
    monkeypatch.setattr(chainentry, "decoder", counting)
    conv = Conv()
    for i in range(300):
        conv.user(f"u{i}", "hi")
        if i == 123:
            conv.raw('{"type":"user","uuid":"g1"}{"type":"user","uuid":"g2"}')
    p = conv.write(tmp_path / "t.jsonl")
    loaded = load_entries(p)  # one block
    assert len(loaded.entries) == 300 and loaded.skipped == 1 and loaded.lines == 301
    assert counting.lines == chainentry._RUN  # its run of lines, one by one
    assert counting.batches == -(-301 // chainentry._RUN)
    assert_same(p, INF, 1 << 20)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    conv=transcripts(),
    damage=st.lists(st.tuples(st.integers(0, 40), st.sampled_from(DAMAGE)), max_size=4),
    trailing_newline=st.booleans(),
    chunk=st.sampled_from([1, 7, 64, 300, 1 << 20]),
    skip_threshold=st.sampled_from([0, INF]),
)
def test_same_when_the_file_cannot_be_mapped(conv, damage, trailing_newline, chunk, skip_threshold):
    """Files that cannot be mapped (special files, some FUSE mounts) are read into buffers."""
    from sessiond.client.resume import loader

    real = loader.map_file
    loader.map_file = lambda fd, size: None
    try:
        assert_same_rendered(conv, damage, trailing_newline, chunk, skip_threshold)
    finally:
        loader.map_file = real


def test_forward_pass_redone_when_it_sees_a_reuse_the_skip_would_not(tmp_path):
    """A boundary in the first half is met by the forward pass, which also keeps what
    the skip discards: there a line reusing an older boundary's uuid makes it unsure,
    though the skip never saw that boundary. The file is then read again exactly."""
    from sessiond.client.resume import loader

    conv = Conv()
    conv.user("u0")
    conv.boundary("w")
    conv.user("w", "reuses the first boundary's uuid", parent=None)
    conv.boundary("b")
    for i in range(40):  # the last boundary ends up in the first half of the file
        conv.user(f"t{i}", "x" * 200)
    p = conv.write(tmp_path / "t.jsonl")
    size = p.stat().st_size
    fd = os.open(p, os.O_RDONLY)
    try:
        forward = loader._pass(fd, loader.map_file(fd, size), size, True, 1 << 20, None)
    finally:
        os.close(fd)
    assert forward.discarded and forward.unsure
    loaded = load_entries(p, skip_threshold=0)
    assert loaded.discarded and not loaded.unsure
    assert list(loaded.entries)[:2] == ["b", "t0"]
    assert_same(p, 0, 1 << 20)


def test_boundary_in_the_first_half_gives_the_skip_result(tmp_path):
    conv = Conv()
    conv.meta("custom-title", customTitle="early")
    conv.user("u0")
    conv.system("c0", "turn_duration", messageCount=1)
    conv.boundary("b")
    conv.summary_msg("s")
    for i in range(40):
        conv.user(f"t{i}", "x" * 200)
    p = conv.write(tmp_path / "t.jsonl")
    loaded = load_entries(p, skip_threshold=0)
    assert loaded.discarded and list(loaded.entries)[:2] == ["b", "s"]
    assert loaded.checkpoints == {"c0": 1} and b"early" in loaded.metadata["custom-title"]
    assert_same(p, 0, 1 << 20)
    assert_same(p, 0, 64)


def test_a_boundary_on_the_unterminated_last_line_is_found(tmp_path):
    """The loader maps only up to the last newline (a writer may cut what
    follows): a boundary on the last line, unterminated, is still where the skip
    starts, as it was for the reference loader (found by a review)."""
    conv = Conv()
    conv.user("u0")
    conv.boundary("w")
    conv.user("w", "reuses the first boundary's uuid", parent=None)
    for i in range(5):
        conv.user(f"t{i}")
    conv.boundary("b")
    p = tmp_path / "t.jsonl"
    p.write_bytes(render(conv, [], trailing_newline=False))
    loaded = load_entries(p, skip_threshold=0)
    assert list(loaded.entries) == ["b"] and loaded.discarded and not loaded.unsure
    assert_same(p, 0, 1 << 20)
    assert_same(p, 0, 64)
