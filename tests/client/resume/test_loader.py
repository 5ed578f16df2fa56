"""SPEC 4 steps 1-2: chunked reading, tolerant parsing, snapshots, metadata, the skip."""

from __future__ import annotations

import json

import pytest

from sessiond.client.resume import metadata
from sessiond.client.resume.chainentry import parse_line
from sessiond.client.resume.loader import load_entries
from sessiond.client.resume.metadata import METADATA_KINDS, metadata_values
from sessiond.store.jsonl import iter_line_views

from .build import SID, Conv, text


def views(path, chunk):
    return [bytes(v) for v in iter_line_views(path, chunk)]


@pytest.mark.parametrize("chunk", [1, 2, 7, 64, 1 << 20])
def test_lines_survive_any_chunk_size(tmp_path, chunk):
    long = "x" * 300  # longer than the small chunks: the buffer grows
    data = f'{{"a":1}}\n\n{{"b":"{long}"}}\r\n{{"c":3}}'.encode()  # blank line, CRLF, no final newline
    p = tmp_path / "t.jsonl"
    p.write_bytes(data)
    assert views(p, chunk) == [b'{"a":1}', f'{{"b":"{long}"}}\r'.encode(), b'{"c":3}']


@pytest.mark.parametrize("chunk", [1, 2, 7, 16, 64, 1 << 20])
def test_only_the_lines_containing_a_marker_at_any_chunk_size(tmp_path, chunk):
    """``containing``: the lines holding the marker (found a buffer at a time),
    the same as filtering every line, whatever the chunk cuts: first and last
    line, two markers on a line, a marker at a line's very start or end, a last
    line without its newline."""
    lines = [b'MARKa', b'x' * 40, b'', b'bMARKcMARK', b'MAR', b'K', b'y' * 30 + b'MARK', b'zz', b'MARK', b'w', b'qMARKq']
    p = tmp_path / "t.jsonl"
    p.write_bytes(b"\n".join(lines))
    every = views(p, chunk)
    assert [bytes(v) for v in iter_line_views(p, chunk, containing=b"MARK")] == [v for v in every if b"MARK" in v]
    p.write_bytes(b"\n".join(lines[:-1]) + b"\nno marker at the end")
    assert [bytes(v) for v in iter_line_views(p, chunk, containing=b"MARK")] == [b'MARKa', b'bMARKcMARK',
                                                                                  b'y' * 30 + b'MARK', b'MARK']


def test_views_are_decodable_in_place(tmp_path):
    conv = Conv()
    conv.user("u1")
    conv.assistant("a1", text("hi"))
    p = conv.write(tmp_path / "t.jsonl")
    assert [parse_line(v).uuid for v in iter_line_views(p, 16)] == ["u1", "a1"]


def test_torn_glued_and_garbage_lines_are_skipped_and_counted(tmp_path):
    conv = Conv()
    conv.user("u1")
    conv.raw('{"type":"assistant","uuid":"torn","parentUuid":"u1","mess')  # torn write
    conv.raw('{"type":"user","uuid":"g1"}{"type":"user","uuid":"g2"}')  # glued
    conv.raw("[1, 2]")  # JSON, not an object
    conv.raw("\x00\x00\x00")  # garbage
    conv.raw("   ")  # whitespace only: not a line at all
    conv.assistant("a1", text("ok"), parent="u1")
    conv.raw('{"type":"user","uuid":"tail","parentUuid":"a1","message":{"ro')  # torn last line
    loaded = load_entries(conv.write(tmp_path / "t.jsonl", trailing_newline=False))
    assert loaded.skipped == 5
    assert list(loaded.entries) == ["u1", "a1"]


def test_object_with_odd_field_types_is_kept_leniently():
    line = b'{"type":"user","uuid":"u1","parentUuid":5,"isSidechain":"no","message":[1],"timestamp":"t"}'
    e = parse_line(line)
    assert (e.type, e.uuid, e.parentUuid, e.isSidechain, e.message, e.timestamp) == ("user", "u1", None, None, None, "t")
    assert parse_line(b'{"type":"assistant","uuid":"a","message":{"id":7}}').msg_id is None
    assert parse_line(b'{"type":"assistant","uuid":"a","message":{"id":"m1","content":[]}}').msg_id == "m1"


def test_entries_keep_raw_lines_of_messages_only(tmp_path):
    conv = Conv()
    conv.user("u1")
    conv.progress("p1")
    conv.entry("future-type", "f1")
    conv.meta("file-history-snapshot", messageId="u1")
    loaded = load_entries(conv.write(tmp_path / "t.jsonl"))
    assert list(loaded.entries) == ["u1", "p1", "f1"]
    assert json.loads(loaded.entries["u1"].raw)["uuid"] == "u1"
    assert loaded.entries["p1"].raw == loaded.entries["f1"].raw == b""


def test_only_the_last_attribution_snapshot_is_kept(tmp_path):
    conv = Conv()
    for n in range(3):
        conv.meta("attribution-snapshot", n=n)
        conv.user(f"u{n}")
    loaded = load_entries(conv.write(tmp_path / "t.jsonl"))
    assert json.loads(loaded.attribution)["n"] == 2


def test_duplicate_uuid_last_line_wins_and_moves(tmp_path):
    conv = Conv()
    conv.user("u1", "first")
    conv.user("u2")
    conv.user("u1", "second", parent="u2")
    loaded = load_entries(conv.write(tmp_path / "t.jsonl"))
    assert list(loaded.entries) == ["u2", "u1"]
    assert json.loads(loaded.entries["u1"].raw)["message"]["content"] == "second"


def test_sidechain_only_flag(tmp_path):
    conv = Conv()
    conv.user("u1", isSidechain=True, agentId="a1")
    conv.meta("agent-name", agentName="x")
    assert load_entries(conv.write(tmp_path / "a.jsonl")).sidechain_only
    conv.user("u2")
    assert not load_entries(conv.write(tmp_path / "b.jsonl")).sidechain_only
    assert not load_entries(Conv().write(tmp_path / "c.jsonl")).sidechain_only


def test_metadata_latest_of_each_kind(tmp_path):
    conv = Conv()
    conv.meta("custom-title", customTitle="old")
    conv.meta("summary", summary="s1", leafUuid="x")
    conv.user("u1")
    conv.meta("custom-title", customTitle="new")
    conv.meta("summary", summary="s2", leafUuid="y")
    conv.meta("ai-title", aiTitle="ai")
    conv.meta("tag", tag="t")
    conv.meta("agent-name", agentName="n")
    conv.meta("agent-color", agentColor="red")
    conv.meta("agent-setting", agentSetting="s")
    conv.meta("mode", mode="coordinator")
    conv.meta("worktree-state", worktreeSession={"worktreePath": "/w"})
    conv.meta("pr-link", prNumber=7, prUrl="https://x/7", prRepository="o/r", timestamp="t")
    conv.meta("last-prompt", lastPrompt="do it")
    loaded = load_entries(conv.write(tmp_path / "t.jsonl"))
    assert metadata_values(loaded.metadata) == {
        "summary": "s2",
        "customTitle": "new",
        "aiTitle": "ai",
        "tag": "t",
        "agentName": "n",
        "agentColor": "red",
        "agentSetting": "s",
        "mode": "coordinator",
        "worktreeState": {"worktreePath": "/w"},
        "lastPrompt": "do it",
        "prLink": {"prNumber": 7, "prUrl": "https://x/7", "prRepository": "o/r"},
    }


def test_the_kinds_collected_are_the_kinds_reported():
    assert set(metadata._ORDER) == METADATA_KINDS


def _compacted(**boundary_meta):
    conv = Conv()
    conv.meta("custom-title", customTitle="before")
    conv.user("u1")
    conv.assistant("a1")
    conv.system("t1", "turn_duration", messageCount=2)
    conv.meta("tag", tag="old-tag")
    conv.boundary("b1", **boundary_meta)
    conv.summary_msg("s1")
    conv.user("u2")
    return conv


def test_skip_discards_pre_boundary_history_but_keeps_metadata(tmp_path):
    p = _compacted().write(tmp_path / "t.jsonl")
    full = load_entries(p)
    skip = load_entries(p, skip_threshold=0)
    assert list(full.entries) == ["u1", "a1", "t1", "b1", "s1", "u2"] and not full.discarded
    assert list(skip.entries) == ["b1", "s1", "u2"] and skip.discarded
    assert skip.metadata == full.metadata
    assert metadata_values(skip.metadata) == {"customTitle": "before", "tag": "old-tag"}
    assert skip.checkpoints == full.checkpoints == {"t1": 2}


def test_skip_only_at_threshold(tmp_path):
    p = _compacted().write(tmp_path / "t.jsonl")
    assert not load_entries(p, skip_threshold=p.stat().st_size).discarded
    assert load_entries(p, skip_threshold=p.stat().st_size - 1).discarded


def test_no_skip_at_boundary_with_preserved_messages(tmp_path):
    seg = {"preservedSegment": {"headUuid": "u1", "anchorUuid": "s1", "tailUuid": "a1"}}
    p = _compacted(**seg).write(tmp_path / "t.jsonl")
    assert not load_entries(p, skip_threshold=0).discarded


def test_no_skip_at_sidechain_boundary(tmp_path):
    conv = Conv()
    conv.user("u1")
    conv.boundary("b1")["isSidechain"] = True
    conv.user("u2", parent="u1")
    p = conv.write(tmp_path / "t.jsonl")
    assert not load_entries(p, skip_threshold=0).discarded


def test_reused_boundary_uuid_makes_the_skip_unsure(tmp_path):
    conv = _compacted()
    conv.user("b1", "reuses the boundary's uuid")
    loaded = load_entries(conv.write(tmp_path / "t.jsonl"), skip_threshold=0)
    assert loaded.discarded and loaded.unsure


def test_session_id_is_not_needed_to_load(tmp_path):
    assert load_entries(Conv(SID).write(tmp_path / "x.jsonl")).entries == {}


def test_a_load_never_maps_a_write_that_may_be_rolled_back(tmp_path, monkeypatch):
    """A writer that fails mid-append cuts the file back under its exclusive
    lock; lines it had put out by then must never be in a reader's mapping (it
    would die of SIGBUS touching them). The load reads the size under a shared
    lock, so it waits for the writer and sees the file as the writer left it."""
    import fcntl
    import os
    import threading

    from sessiond.store import appendfile

    monkeypatch.setattr(appendfile, "SETTLE_WAIT", 60.0)  # the writer below lets go well before
    conv = Conv()
    conv.user("u1")
    conv.assistant("a1")
    path = conv.write(tmp_path / "t.jsonl")
    size = path.stat().st_size
    writer = os.open(path, os.O_WRONLY | os.O_APPEND)
    fcntl.flock(writer, fcntl.LOCK_EX)
    os.write(writer, b"".join(json.dumps({"type": "user", "uuid": f"rolled-{i}", "message": {"role": "user", "content": "x" * 3000}})
                              .encode() + b"\n" for i in range(8)))
    result = {}
    loading = threading.Thread(target=lambda: result.update(loaded=load_entries(path)))
    loading.start()
    loading.join(0.3)
    assert loading.is_alive()  # waiting for the writer, not reading its half-done append
    os.ftruncate(writer, size)  # the rollback
    fcntl.flock(writer, fcntl.LOCK_UN)
    os.close(writer)
    loading.join(10)
    assert not loading.is_alive()
    assert not [u for u in result["loaded"].entries if u.startswith("rolled-")]
    assert len(result["loaded"].entries) == 2


def test_a_writer_holding_its_lock_too_long_gets_the_file_read_not_mapped(tmp_path, monkeypatch):
    """Past SETTLE_WAIT the size may include a write still to be rolled back:
    the load goes on, but reads the file instead of mapping it."""
    import fcntl
    import os

    from sessiond.client.resume import loader
    from sessiond.store import appendfile

    monkeypatch.setattr(appendfile, "SETTLE_WAIT", 0.05)

    def no_map(fd, size):
        raise AssertionError("mapped a size read without the lock")

    monkeypatch.setattr(loader, "map_file", no_map)
    conv = Conv()
    conv.user("u1")
    conv.assistant("a1")
    path = conv.write(tmp_path / "t.jsonl")
    writer = os.open(path, os.O_WRONLY | os.O_APPEND)
    fcntl.flock(writer, fcntl.LOCK_EX)
    try:
        assert list(load_entries(path).entries) == ["u1", "a1"]
    finally:
        os.close(writer)


def _peak_anon_growth(fn):
    """``fn()`` and how far the process's peak RSS rose over its RSS before
    (the peak is reset first: /proc/self/clear_refs)."""
    from pathlib import Path as P

    def status(key: str) -> int:
        row = next(r for r in P("/proc/self/status").read_text().splitlines() if r.startswith(key))
        return int(row.split()[1]) * 1024

    P("/proc/self/clear_refs").write_text("5")
    before = status("VmRSS:")
    out = fn()
    return out, status("VmHWM:") - before


@pytest.mark.parametrize("where", ["history", "kept", "torn tail"])
def test_a_line_over_the_cap_is_one_skipped_line_wherever_it_is(tmp_path, where):
    """In the history the skip discards (read through its one reused buffer),
    in the part kept (mapped) or as a torn last line: an over-long line is one
    skipped line, numbered as a line, never decoded. Read through the buffer
    or as a tail, it is never held (the peak RSS stays put); in the mapped
    part its pages are the page cache's, mapped like every kept line."""
    from sessiond.store.linecap import MAX_LINE

    over = b'{"type":"user","message":{"content":"' + b"z" * MAX_LINE + b'"}}'
    conv = _compacted()
    if where == "history":
        conv.lines.insert(2, over)
    elif where == "kept":
        conv.lines.append(over)
    conv.user("u3")
    p = conv.write(tmp_path / "t.jsonl")
    if where == "torn tail":
        with open(p, "ab") as f:
            f.write(over)
    skip, grown = _peak_anon_growth(lambda: load_entries(p, skip_threshold=0))
    assert list(skip.entries) == ["b1", "s1", "u2", "u3"] and skip.discarded
    assert skip.skipped == 1 and skip.lines == len(conv.lines) + (where == "torn tail")
    assert metadata_values(skip.metadata) == {"customTitle": "before", "tag": "old-tag"}
    if where != "kept":
        assert grown < 16 << 20, f"peak RSS grew {grown >> 20} MiB"
    whole = load_entries(p, skip_threshold=float("inf"))
    assert list(whole.entries) == ["u1", "a1", "t1", "b1", "s1", "u2", "u3"] and whole.skipped == 1
