"""Which conversation resume picks in a file with several leaves (SPEC 4 step 4),
against what Claude Code's ``--resume`` restores (claude_code.py): rewinds, forks,
a newest sidechain, a tool_result or system leaf, a compaction boundary written
in the same millisecond as its summary, a clock that stepped back, timestamps
in other ISO-8601 spellings, a torn tail; and every corpus file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sessiond.client.resume.pipeline import load_transcript
from tests.conftest import CORPUS, run_cli

from . import claude_code
from .build import Conv, stamp, text, tool_use

CORPUS_FILES = sorted(CORPUS.glob("*.jsonl"))
STEPPED_BACK = CORPUS / "daaain__claude-code-log__3680252d-d4e3-4416-bddd-8f5b5b4fdb7f.jsonl"


def resumed(conv: Conv, tmp_path: Path, name: str = "t.jsonl"):
    return load_transcript(conv.write(tmp_path / name))


def test_a_rewind_resumes_the_new_branch(tmp_path):
    """Esc-Esc back to a1 and a new prompt: the old branch stays in the file."""
    conv = Conv()
    conv.user("u1"), conv.assistant("a1"), conv.user("u2"), conv.assistant("a2")
    conv.user("u3", "try it another way", parent="a1"), conv.assistant("a3")
    r = resumed(conv, tmp_path)
    assert r.chain == ["u1", "a1", "u3", "a3"] and r.interruption == "none"


def test_a_rewind_not_answered_yet_is_an_interrupted_prompt(tmp_path):
    conv = Conv()
    conv.user("u1"), conv.assistant("a1"), conv.user("u2"), conv.assistant("a2")
    conv.user("u3", "try it another way", parent="a1")
    r = resumed(conv, tmp_path)
    assert r.chain == ["u1", "a1", "u3"] and r.interruption == "interrupted_prompt"


def test_of_two_forks_the_newer_wins_whatever_the_file_order(tmp_path):
    conv = Conv()
    conv.user("u1", ts=stamp(1)), conv.assistant("a1", ts=stamp(2))
    conv.user("x1", parent="a1", ts=stamp(10)), conv.assistant("x2", ts=stamp(11))  # newer, written first
    conv.user("y1", parent="a1", ts=stamp(5)), conv.assistant("y2", ts=stamp(6))
    assert resumed(conv, tmp_path).chain == ["u1", "a1", "x1", "x2"]


def test_a_newer_sidechain_is_never_the_leaf(tmp_path):
    """Claude Code 1.0.x kept a subagent's entries in the main file."""
    conv = Conv()
    conv.user("u1"), conv.assistant("a1")
    conv.user("s1", parent=None, isSidechain=True), conv.assistant("s2", isSidechain=True)
    r = resumed(conv, tmp_path)
    assert r.chain == ["u1", "a1"]


def test_a_tool_result_leaf_is_an_interrupted_turn(tmp_path):
    conv = Conv()
    conv.user("u1"), conv.assistant("a1", tool_use("t1"))
    conv.result("r1", "t1", "a1")
    r = resumed(conv, tmp_path)
    assert r.chain == ["u1", "a1", "r1"] and r.interruption == "interrupted_turn"
    assert r.messages[-1]["message"]["content"] == "Continue from where you left off."


def test_a_system_leaf_is_kept_and_a_summary_is_never_one(tmp_path):
    """The turn_duration line Claude Code writes after a turn is its newest
    message: --resume ends the chain there (SPEC 4 keeps it too)."""
    conv = Conv()
    conv.user("u1"), conv.assistant("a1", text("done"))
    conv.system("d1", "turn_duration", durationMs=5, messageCount=2)
    conv.meta("summary", summary="Done", leafUuid="a1")
    r = resumed(conv, tmp_path)
    assert r.chain == ["u1", "a1", "d1"] and r.interruption == "none"
    assert claude_code.resume_chain(tmp_path / "t.jsonl") == r.chain


def test_a_boundary_and_its_summary_in_one_millisecond_resume_the_summary(tmp_path):
    """Claude Code stamps the compaction boundary and its summary alike; taking
    the first of equals (as its findLatestMessage does) would resume the bare
    boundary and lose the summary."""
    conv = Conv()
    conv.user("u1", ts=stamp(1)), conv.assistant("a1", ts=stamp(2))
    conv.boundary("b1")
    conv.lines[-1]["timestamp"] = stamp(9)
    conv.summary_msg("s1")
    conv.lines[-1]["timestamp"] = stamp(9)
    r = resumed(conv, tmp_path)
    assert r.chain == ["b1", "s1"]
    assert claude_code.resume_chain(tmp_path / "t.jsonl") == ["b1"]  # what Claude Code would restore


def test_entries_after_the_latest_one_with_an_older_clock_are_kept(tmp_path):
    """The clock stepped back between a message and its children: they are the
    same conversation, written after it (a real file: STEPPED_BACK)."""
    conv = Conv()
    conv.user("u1", ts=stamp(50)), conv.user("u2", ts=stamp(40)), conv.progress("p1", ts=stamp(41))
    conv.user("u3", parent="u2", ts=stamp(41))
    r = resumed(conv, tmp_path)
    assert r.chain == ["u1", "u2", "u3"]
    assert claude_code.resume_chain(tmp_path / "t.jsonl") == ["u1"]


def test_a_progress_line_under_a_message_does_not_hide_it(tmp_path):
    conv = Conv()
    conv.user("u1", ts=stamp(50)), conv.assistant("a1", ts=stamp(40)), conv.progress("p1", ts=stamp(41))
    assert resumed(conv, tmp_path).chain == ["u1", "a1"]


@pytest.mark.parametrize("later, earlier", [
    ("2026-01-01T09:00:00.000Z", "2026-01-01T10:00:00+02:00"),  # an offset: 08:00 UTC
    ("2026-01-01T09:00:00.500Z", "2026-01-01T09:00:00Z"),  # no milliseconds ('Z' sorts after '.')
    ("2026-01-01T09:00:00.123457+00:00", "2026-01-01T09:00:00.123Z"),  # Python's isoformat()
    ("2026-01-01 10:00:00.000Z", "2026-01-01T09:00:00.000Z"),  # a space for the T: same width, ' ' < 'T'
])
def test_timestamps_compare_as_times_not_as_strings(tmp_path, later, earlier):
    for order in ((later, earlier), (earlier, later)):
        conv = Conv()
        conv.user("root", ts="2026-01-01T00:00:00.000Z")
        for i, ts in enumerate(order):
            conv.assistant(f"a{i}", parent="root", ts=ts)
        r = resumed(conv, tmp_path)
        assert r.chain == ["root", f"a{order.index(later)}"], order


def test_a_missing_or_bad_timestamp_never_beats_a_real_one(tmp_path):
    conv = Conv()
    conv.user("root", ts=stamp(1))
    conv.assistant("good", parent="root", ts=stamp(2))
    conv.assistant("none", parent="root")
    del conv.lines[-1]["timestamp"]
    conv.assistant("junk", parent="root", ts="yesterday")
    assert resumed(conv, tmp_path).chain == ["root", "good"]


@pytest.mark.parametrize("junk", ["2026-01-01T99:00:00.000Z", "2026-13-01T00:00:00.000Z", "9026-01-01T-1:00:00.000Z"])
def test_a_bad_timestamp_of_the_usual_width_never_beats_a_real_one(tmp_path, junk):
    """Shaped like every timestamp Claude Code writes and sorting last as a
    string, but no date (Date.parse: NaN)."""
    conv = Conv()
    conv.user("root", ts=stamp(1))
    conv.assistant("good", parent="root", ts=stamp(2))
    conv.assistant("junk", parent="root", ts=junk)
    assert resumed(conv, tmp_path).chain == ["root", "good"]


def test_a_lone_message_without_a_timestamp_is_the_leaf(tmp_path):
    conv = Conv()
    conv.user("u1")
    del conv.lines[-1]["timestamp"]
    assert resumed(conv, tmp_path).chain == ["u1"]


def test_a_torn_last_line_leaves_the_entry_before_it(tmp_path):
    conv = Conv()
    conv.user("u1"), conv.assistant("a1")
    data = conv.data() + json.dumps({"type": "user", "uuid": "u2", "parentUuid": "a1"}).encode()[:30]
    (tmp_path / "t.jsonl").write_bytes(data)
    r = load_transcript(tmp_path / "t.jsonl")
    assert r.chain == ["u1", "a1"] and r.skippedLines == 1


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.name[:60])
def test_every_corpus_file_resumes_at_least_what_claude_code_does(path):
    """Claude Code's chain is always within ours; where its leaf is a true leaf
    (nothing hangs off it) ours ends at the same entry."""
    ours = load_transcript(path)
    if all(m.get("isSidechain") for m in claude_code.load_messages(path).values()):
        return  # a subagent file: Claude Code's --resume does not read those
    theirs = claude_code.resume_chain(path)
    assert set(theirs) <= set(ours.chain)
    messages = claude_code.load_messages(path)
    if theirs and not any(m.get("parentUuid") == theirs[-1] for m in messages.values()):
        assert ours.chain[-1] == theirs[-1]


def test_show_of_a_file_whose_clock_stepped_back_shows_all_three_messages(tmp_path):
    """The real file, through the CLI: Claude Code resumes its first line alone."""
    out = run_cli("show", str(STEPPED_BACK), "--json", env={"SESSIOND_NO_AUTOSTART": "1",
                  "SESSIOND_ROOT": str(tmp_path), "SESSIOND_SOCKET": str(tmp_path / "none.sock")})
    shown = json.loads(out.stdout)
    assert len(shown["chain"]) == 3
    assert claude_code.resume_chain(STEPPED_BACK) == shown["chain"][:1]

