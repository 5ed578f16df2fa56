"""Issue 16: every resumed conversation is one the model API accepts (api_rule.py),
over every corpus file and over generated Claude Code-like transcripts, and the
order step changes only the order of what the walk and the splice chose."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiond.client.resume.chain import choose_leaf, recover_parallel_tool_results, walk
from sessiond.client.resume.loader import load_entries
from sessiond.client.resume.pipeline import load_transcript, resolve_chain
from sessiond.client.resume.relink import apply_compaction, apply_snips
from tests.conftest import CORPUS
from tests.helpers import examples

from .api_rule import split_responses, turns, violations
from .build import SID, Conv, text, thinking, tool_use
from .test_resume import transcripts

CORPUS_FILES = sorted(CORPUS.glob("*.jsonl"))


def walked_and_spliced(path: Path) -> list[str]:
    """SPEC 4 steps 5-6 without the order: the set the order may only permute."""
    loaded = load_entries(path, skip_threshold=float("inf"))
    side = loaded.sidechain_only
    apply_compaction(loaded.entries, loaded.boundaries, sidechain_only=side)
    apply_snips(loaded.entries, loaded.snips)
    chain, _, _ = walk(loaded.entries, choose_leaf(loaded.entries, sidechain_only=side), sidechain_only=side)
    return [e.uuid for e in recover_parallel_tool_results(loaded.entries, chain, sidechain_only=side)]


def assert_api_valid(path: Path) -> None:
    resumed = load_transcript(path)
    assert violations(resumed.messages) == []
    assert split_responses(resumed.messages) == []
    ordered = [e.uuid for e in resolve_chain(path, skip_threshold=float("inf")).chain]
    assert Counter(ordered) == Counter(walked_and_spliced(path))


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.name[:60])
def test_every_corpus_file_resumes_api_valid(path):
    assert_api_valid(path)


def test_the_streamed_parallel_response_of_the_issue():
    """entireio 48: a response writes text, tool_use A, B, C, result C, D, result D ...
    and the results of A and B (off the walked branch) much later. Before the order
    step the splice put them after the response's last entry: A and B were answered
    eight turns later, which the API refuses."""
    path = CORPUS / "entireio__cli__48-b429896bcb-1-full.jsonl"
    resumed = load_transcript(path)
    assert violations(resumed.messages) == []
    response = next(t for t in turns(resumed.messages) if "45b533c9-c575-4218-9b8c-6328f680a607" in t.uuids)
    assert [b["type"] for b in response.blocks] == ["text"] + ["tool_use"] * 7
    reordered = [r for r in resumed.repairs if r.kind == "reordered"]
    assert "45b533c9-c575-4218-9b8c-6328f680a607" in [r.uuid for r in reordered]


def test_hook_output_between_parallel_results_goes_after_them():
    """ef958aa1: rA, hook attachment, rB, hook attachment: the user turn must start
    with its tool_results, so the attachments follow both results."""
    path = CORPUS / "daaain__claude-code-log__ef958aa1-0e93-49f0-bb71-150f63befcd1.jsonl"
    for t in turns(load_transcript(path).messages):
        kinds = [b["type"] for b in t.blocks]
        if "tool_result" in kinds:
            assert kinds == sorted(kinds, key=lambda k: k != "tool_result")


# --- generated: what Claude Code writes while tools run during the stream -----------------


@st.composite
def streamed(draw) -> Conv:
    """Claude Code-like files: prompts, responses of thinking/text/parallel tool_uses whose
    results are written in any order after their call (interleaved with the response's
    later blocks), hook progress and hook attachments between them, cut streams
    (results never written, then the conversation goes on), compaction boundaries,
    and a file cut at any point. Links follow Claude Code (recording.py): a result
    hangs off its call and moves the tip only when its call is the tip; a later
    block of a response hangs off the tip; everything else off the last message."""
    conv = Conv()
    legacy = draw(st.integers(0, 3)) == 0  # versions before sourceToolAssistantUUID
    cursor: str | None = None  # the tip
    previous: str | None = None  # the last message written
    n = 0

    def uid() -> str:
        nonlocal n
        n += 1
        return f"x{n}"

    for turn in range(draw(st.integers(1, 4))):
        if turn and draw(st.integers(0, 5)) == 0:
            b = uid()
            conv.boundary(b, logical=previous)
            s = uid()
            conv.summary_msg(s, parent=b)
            cursor = previous = s
        p = uid()
        conv.user(p, "do it", parent=previous)
        cursor = previous = p
        for r in range(draw(st.integers(1, 3))):
            mid = f"msg_{turn}_{r}"
            blocks = []
            if draw(st.booleans()):
                blocks.append(thinking())
            if draw(st.booleans()):
                blocks.append(text("working"))
            calls = [f"toolu_{turn}_{r}_{k}" for k in range(draw(st.integers(0, 4)))]
            blocks += [tool_use(c) for c in calls]
            if not blocks:
                blocks.append(text("done"))
            events: list[tuple[str, int]] = [("block", k) for k in range(len(blocks))]
            first_call = len(blocks) - len(calls)
            lost = draw(st.sets(st.sampled_from(range(len(calls))))) if calls and draw(st.integers(0, 4)) == 0 else set()
            for k in range(len(calls)):
                if k in lost:
                    continue
                after = events.index(("block", first_call + k)) + 1
                events.insert(draw(st.integers(after, len(events))), ("result", k))
            holder: dict[int, str] = {}
            for kind, k in events:
                if kind == "block":
                    u = uid()
                    # the response's first block follows the last message written,
                    # a later one the tip (recording.py: Claude Code's links)
                    conv.assistant(u, blocks[k], mid=mid, parent=cursor if k else previous)
                    cursor = previous = u
                    if k >= first_call:
                        holder[k - first_call] = u
                        if draw(st.booleans()):
                            conv.progress(uid(), parent=u)
                else:
                    u = uid()
                    src = holder[k]
                    written = conv.result(u, calls[k], src, parent=src)
                    if legacy:
                        del written["sourceToolAssistantUUID"]
                    if src == cursor:
                        cursor = u
                    previous = u
                    if draw(st.booleans()):  # hook output, off the result it follows
                        a = uid()
                        conv.attachment(a, parent=u)
                        cursor = previous = a
        if draw(st.booleans()):
            t = uid()
            conv.system(t, "turn_duration", parent=previous)
            cursor = previous = t
    cut = draw(st.integers(1, len(conv.lines)))
    conv.lines = conv.lines[:cut]
    return conv


def _check(conv: Conv) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = conv.write(Path(d) / f"{SID}.jsonl")
        assert_api_valid(path)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv=streamed())
def test_generated_streams_resume_api_valid(conv):
    _check(conv)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv=transcripts())
def test_chaotic_files_resume_api_valid(conv):
    """Branches, snips, dangling parents, reused uuids, results of random calls: even
    where no writer would produce it, what resume returns is API-valid."""
    with tempfile.TemporaryDirectory() as d:
        path = conv.write(Path(d) / f"{SID}.jsonl")
        assert violations(load_transcript(path).messages) == []
        ordered = [e.uuid for e in resolve_chain(path, skip_threshold=float("inf")).chain]
        assert Counter(ordered) == Counter(walked_and_spliced(path))


def _streamed(tmp_path: Path, *user_contents: object, source: bool = False) -> Path:
    """A prompt, a response calling t1, then user entries with ``user_contents``
    (the one holding t1's result names its call only when ``source``), then a reply."""
    import json

    lines = [{"type": "user", "uuid": "u0", "parentUuid": None, "message": {"role": "user", "content": "go"}},
             {"type": "assistant", "uuid": "a1", "parentUuid": "u0",
              "message": {"id": "m1", "role": "assistant", "content": [tool_use("t1")]}}]
    for n, content in enumerate(user_contents):
        entry = {"type": "user", "uuid": f"r{n}", "parentUuid": lines[-1]["uuid"], "message": {"role": "user", "content": content}}
        if source and isinstance(content, list):
            entry["sourceToolAssistantUUID"] = "a1"
        lines.append(entry)
    lines.append({"type": "assistant", "uuid": "a2", "parentUuid": lines[-1]["uuid"],
                  "message": {"id": "m2", "role": "assistant", "content": [text("done")]}})
    for i, entry in enumerate(lines):
        entry.update(sessionId=SID, timestamp=f"2025-01-01T00:00:{i:02d}.000Z")
    path = tmp_path / f"{SID}.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    return path


def test_a_user_turn_answering_calls_starts_with_its_results(tmp_path):
    """The API refuses a user turn whose tool_results come after other content
    ("tool_result blocks must come first"). Resume left two such turns as they
    were: an entry with text before its result, and a prompt typed while the
    tool ran written before the result's entry by a version that does not name
    the call a result answers (order.py cannot move what it cannot pair)."""
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}
    for path in (_streamed(tmp_path, [text("note"), result]),
                 _streamed(tmp_path, "typed while it ran", [result])):
        resumed = load_transcript(path)
        assert violations(resumed.messages) == []
        assert "reordered" in [r.kind for r in resumed.repairs]
        written = [line.split('"uuid": "')[1].split('"')[0] for line in path.read_text().splitlines()]
        assert sorted(m["uuid"] for m in resumed.messages) == sorted(written)  # nothing dropped: only moved
