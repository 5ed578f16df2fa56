"""The whole pipeline: every corpus file, reviewed fixtures, the skip path, the JSON shape."""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiond.client.resume.pipeline import load_transcript, resolve_chain, subagent_ids
from tests.conftest import CORPUS
from tests.helpers import examples

from .build import SID, Conv, text, thinking, tool_use

HERE = Path(__file__).parent
CORPUS_FILES = sorted(CORPUS.glob("*.jsonl"))
EXPECTED = sorted((HERE / "expected").glob("*.json"))
SHOW_KEYS = [
    "sessionId", "path", "chain", "messages", "interruption", "consistencyDelta",
    "bridges", "cuts", "repairs", "skippedLines", "metadata", "subagents",
]
INF = float("inf")


def as_json(resumed) -> dict:
    return json.loads(msgspec.json.encode(resumed))


# --- every corpus file ----------------------------------------------------------------------


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.name[:60])
def test_every_corpus_file_loads(path):
    full = load_transcript(path, skip_threshold=INF)
    out = as_json(full)
    assert list(out) == SHOW_KEYS
    assert msgspec.to_builtins(full) == out
    assert len(set(out["chain"])) == len(out["chain"])
    real = [m for m in out["messages"] if not m.get("synthetic")]
    assert {m["uuid"] for m in real} <= set(out["chain"])
    assert [m["uuid"] for m in real] == [u for u in out["chain"] if u in {m["uuid"] for m in real}]
    assert out["interruption"] in ("none", "interrupted_turn", "interrupted_prompt")
    continuations = [m for m in out["messages"] if m.get("synthetic") and m.get("isMeta")]
    assert len(continuations) == (out["interruption"] == "interrupted_turn")
    # the skip path (threshold lowered to 0) gives the same result, byte for byte
    assert msgspec.json.encode(load_transcript(path, skip_threshold=0)) == msgspec.json.encode(full)


# --- reviewed fixtures --------------------------------------------------------------------


@pytest.mark.parametrize("fixture", EXPECTED, ids=lambda p: p.stem[:60])
def test_reviewed_expectations(fixture):
    want = json.loads(fixture.read_text())
    source = HERE / "data" / want["file"]
    if not source.exists():
        source = CORPUS / want["file"]
        if not source.exists():
            pytest.skip("corpus not found")
    got = load_transcript(source)
    if "chain" in want:
        assert got.chain == want["chain"]
    else:
        assert len(got.chain) == want["chainLength"]
        assert got.chain[:16] == want["chainHead"] and got.chain[-4:] == want["chainTail"]
        assert hashlib.sha256("\n".join(got.chain).encode()).hexdigest() == want["chainSha256"]
    assert got.sessionId == want["sessionId"]
    assert len(got.messages) == want["messages"]
    assert bool(got.messages and got.messages[-1].get("synthetic")) == want["syntheticLast"]
    assert got.interruption == want["interruption"]
    assert got.consistencyDelta == want["consistencyDelta"]
    assert msgspec.to_builtins(got.bridges) == want["bridges"]
    assert got.skippedLines == want["skippedLines"]
    assert got.metadata == want["metadata"]


def test_fixtures_cover_the_issue_list():
    names = {json.loads(p.read_text())["file"] for p in EXPECTED}
    assert {
        "blackgirlbytes__planetfall-seed-signalkit__07-d253ca52d8-3-full.jsonl",  # parallel tools
        "preserved-segment.jsonl",  # compaction with preserved segment
        "blackgirlbytes__planetfall-seed-signalkit__84-da75cf4015-2-full.jsonl",  # real preserved segment
        "dagster-io__erk__41140470-f3f6-4945-bf7f-884c4a037ab0.jsonl",  # double compaction
        "entireio__cli__29-38d5d1ba71-0-full.jsonl",  # dangling parent
        "d-kimuson__claude-code-viewer__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl",  # inline sidechains
        "kfischer-okarin__scripts-and-tools__agent-a434715.jsonl",  # agent file
        "daaain__claude-code-log__b23cbd1d-a39d-4f31-98fd-98f8ff69b816.jsonl",  # empty
        "kfischer-okarin__scripts-and-tools__be89c3cd-bfbf-4c4f-a515-5af6e13249bf.jsonl",  # summary only
    } <= names


# --- specifics of the whole result ------------------------------------------------------------


def test_show_json_shape_of_a_small_session(tmp_path):
    conv = Conv()
    conv.meta("custom-title", customTitle="t")
    conv.user("u1", "hi")
    conv.assistant("a1", tool_use("X"))
    conv.result("r1", "X", "a1")
    p = conv.write(tmp_path / f"{SID}.jsonl")
    out = as_json(load_transcript(p))
    assert out["sessionId"] == SID and out["path"] == str(p)
    assert out["chain"] == ["u1", "a1", "r1"]
    assert [m["uuid"] for m in out["messages"]][:3] == ["u1", "a1", "r1"]
    assert out["messages"][0] == conv.lines[1]  # the original object
    assert out["messages"][-1]["synthetic"] is True
    assert (out["interruption"], out["consistencyDelta"], out["bridges"], out["skippedLines"]) == (
        "interrupted_turn", None, [], 0)
    assert out["metadata"] == {"customTitle": "t"} and out["subagents"] == []


def test_torn_and_glued_lines_are_counted_and_bridged(tmp_path):
    conv = Conv()
    conv.user("u1")
    conv.raw('{"parentUuid":"u1","type":"assistant","uuid":"a1","message":{"content":[{"type":"te')
    conv.last = "a1"
    conv.user("u2", "still there?")
    conv.raw('{"type":"user","uuid":"x"}{"type":"user","uuid":"y"}')
    conv.assistant("a2", text("yes"))
    out = load_transcript(conv.write(tmp_path / "t.jsonl"))
    assert out.skippedLines == 2
    assert out.chain == ["u1", "u2", "a2"]
    assert msgspec.to_builtins(out.bridges) == [{"at": "u2", "missingParent": "a1"}]


def test_subagent_ids(tmp_path):
    p = Conv().write(tmp_path / f"{SID}.jsonl")
    sub = tmp_path / SID / "subagents"
    (sub / "workflows" / "run1").mkdir(parents=True)
    for name in ("agent-b2.jsonl", "agent-a1.jsonl", "agent-a1.meta.json", "agent-bad id.jsonl", "notes.txt"):
        (sub / name).write_text("")
    (sub / "workflows" / "run1" / "agent-c3.jsonl").write_text("")
    assert subagent_ids(p) == ["a1", "b2", "c3"]
    assert load_transcript(p).subagents == ["a1", "b2", "c3"]
    assert subagent_ids(tmp_path / "not-a-session.jsonl") == []
    assert subagent_ids(tmp_path / "x.jsonl", SID) == ["a1", "b2", "c3"]


def test_session_id_falls_back_to_the_entries(tmp_path):
    assert load_transcript(Conv().write(tmp_path / "copy.jsonl")).sessionId is None
    conv = Conv()
    conv.user("u1")
    assert load_transcript(conv.write(tmp_path / "copy.jsonl")).sessionId == SID
    meta_only = Conv()
    meta_only.meta("custom-title", customTitle="x")
    assert load_transcript(meta_only.write(tmp_path / "copy.jsonl")).sessionId == SID


def test_missing_file_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_transcript(tmp_path / "nope.jsonl")


def test_skip_reloads_when_compaction_needs_a_discarded_uuid(tmp_path):
    conv = Conv()
    conv.user("old")  # before the first boundary: the skip discards it
    conv.boundary("b1")
    conv.summary_msg("s1")
    conv.user("u1")
    keep = {"preservedMessages": {"anchorUuid": "s2", "uuids": ["old", "u1"]}}
    conv.boundary("b2", logical="u1", **keep)
    conv.summary_msg("s2")
    conv.user("n1", "next", parent="s2")
    p = conv.write(tmp_path / "t.jsonl")
    full = load_transcript(p, skip_threshold=INF)
    assert full.chain == ["b2", "s2", "old", "u1", "n1"]
    assert resolve_chain(p, skip_threshold=0).loaded.discarded is False  # it read again in full
    assert msgspec.json.encode(load_transcript(p, skip_threshold=0)) == msgspec.json.encode(full)


def test_compaction_relinks_show_in_messages(tmp_path):
    out = load_transcript(HERE / "data" / "preserved-segment.jsonl")
    by_uuid = {m["uuid"]: m for m in out.messages}
    head, caveat, kept_answer = (by_uuid[f"e00000{n}-0000-4000-8000-0000000000{n}"] for n in ("09", "14", "10"))
    assert head["parentUuid"] == "e0000013-0000-4000-8000-000000000013"  # the anchor
    assert caveat["parentUuid"] == "e0000011-0000-4000-8000-000000000011"  # the tail
    assert kept_answer["message"]["usage"]["input_tokens"] == 0


# --- property: the >5 MB skip gives the same result as a full load -----------------------------

KINDS = ["custom-title", "tag", "summary", "ai-title", "last-prompt", "mode", "pr-link", "agent-name"]


@st.composite
def transcripts(draw) -> Conv:
    """Random but Claude-Code-like files: branches, compactions, snips, damage, metadata."""
    conv = Conv()
    written: list[str] = []
    tools: list[tuple[str, str]] = []
    mids: list[str] = []
    for i in range(draw(st.integers(1, 30))):
        uuid = f"e{i}"
        op = draw(st.sampled_from([
            "user", "user", "assistant", "assistant", "result", "attachment", "progress",
            "checkpoint", "meta", "attribution", "boundary", "snip", "damage", "sidechain",
            "branch", "dangling", "reuse", "clock",
        ]))
        if op == "user":
            conv.user(uuid, draw(st.sampled_from(["hi", "<local-command-stdout>x</local-command-stdout>"])))
        elif op == "assistant":
            mid = draw(st.sampled_from(mids)) if mids and draw(st.booleans()) else f"m{i}"
            mids.append(mid)
            block = draw(st.sampled_from([text("ok"), text("  "), thinking(), tool_use(f"t{i}")]))
            conv.assistant(uuid, block, mid=mid)
            if block["type"] == "tool_use":
                tools.append((f"t{i}", uuid))
        elif op == "result" and tools:
            tool_id, source = draw(st.sampled_from(tools))
            conv.result(uuid, tool_id, source)
        elif op == "attachment":
            conv.attachment(uuid)
        elif op == "progress":
            conv.progress(uuid)
        elif op == "checkpoint":
            conv.system(uuid, "turn_duration", messageCount=draw(st.integers(0, 40)))
        elif op == "meta":
            kind = draw(st.sampled_from(KINDS))
            conv.meta(kind, **{"customTitle": "t", "tag": "g", "summary": "s", "aiTitle": "a",
                               "lastPrompt": f"p{i}", "mode": "normal", "prNumber": i, "agentName": "n"})
        elif op == "attribution":
            conv.meta("attribution-snapshot", n=i)
        elif op == "boundary":
            kept = draw(st.lists(st.sampled_from(written), max_size=3, unique=True)) if written else []
            style = draw(st.sampled_from(["none", "segment", "messages"]))
            meta = {}
            if style == "segment" and kept:
                meta["preservedSegment"] = {"headUuid": kept[0], "anchorUuid": f"e{i}s", "tailUuid": kept[-1]}
            elif style == "messages" and kept:
                meta["preservedMessages"] = {"anchorUuid": f"e{i}s", "uuids": kept}
            conv.boundary(uuid, **meta)
            conv.summary_msg(f"e{i}s")
            written.append(f"e{i}s")
        elif op == "snip" and written:
            removed = draw(st.lists(st.sampled_from(written), max_size=3, unique=True))
            conv.system(uuid, "snip_boundary", snipMetadata={"removedUuids": removed})
        elif op == "damage":
            conv.raw(draw(st.sampled_from(['{"type":"user","uuid":"torn', '{"a":1}{"b":2}', "[]", "\x00"])))
        elif op == "sidechain":
            conv.user(uuid, "side", isSidechain=True, parent=draw(st.sampled_from([None, *written])))
        elif op == "branch" and written:
            conv.user(uuid, "edited", parent=draw(st.sampled_from(written)))
        elif op == "dangling":
            conv.user(uuid, "after a gap", parent=f"lost{i}")
        elif op == "reuse" and written:
            conv.user(draw(st.sampled_from(written)), "same uuid again")
        elif op == "clock":
            conv.clock -= draw(st.integers(0, 5))  # equal or earlier timestamps
        if conv.lines and isinstance(conv.lines[-1], dict) and "uuid" in conv.lines[-1]:
            written.append(conv.lines[-1]["uuid"])
    return conv


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv=transcripts(), chunk=st.sampled_from([8, 64, 1 << 20]))
def test_skip_path_equals_full_load(conv, chunk):
    with tempfile.TemporaryDirectory() as d:
        p = conv.write(Path(d) / f"{SID}.jsonl")
        full = msgspec.json.encode(load_transcript(p, skip_threshold=INF))
        assert msgspec.json.encode(load_transcript(p, skip_threshold=0, chunk=chunk)) == full
        assert msgspec.json.encode(load_transcript(p, skip_threshold=INF, chunk=chunk)) == full
