"""Issue 16 item 3: what resume repairs so the model API accepts the conversation,
each repair reported, the file never touched."""

from __future__ import annotations

import json

from sessiond.client.resume.pipeline import load_transcript
from sessiond.client.resume.repairs import LOST_RESULT_TEXT

from .api_rule import violations
from .build import SID, Conv, text, tool_use


def kinds(resumed) -> list[tuple[str, str | None]]:
    return [(r.kind, r.uuid) for r in resumed.repairs]


def load(conv: Conv, tmp_path):
    path = conv.write(tmp_path / f"{SID}.jsonl")
    before = path.read_bytes()
    resumed = load_transcript(path)
    assert path.read_bytes() == before
    assert violations(resumed.messages) == []
    return resumed


def test_a_lone_surrogate_becomes_the_replacement_character(tmp_path):
    """JSON.stringify cut inside an emoji: the line parses in JavaScript; it must not be
    dropped (and bridged around), and what resume returns must be encodable."""
    conv = Conv()
    conv.user("u1", "look")
    conv.assistant("a1", text("PLACEHOLDER"))
    conv.user("u2", "thanks")
    path = conv.write(tmp_path / f"{SID}.jsonl")
    data = path.read_bytes().replace(b"PLACEHOLDER", b"half \\ud83d emoji, pair \\ud83d\\ude00, \\\\ud83d literal")
    path.write_bytes(data)
    resumed = load_transcript(path)
    assert path.read_bytes() == data
    assert resumed.chain == ["u1", "a1", "u2"] and resumed.bridges == [] and resumed.skippedLines == 0
    said = resumed.messages[1]["message"]["content"][0]["text"]
    assert said == "half \ufffd emoji, pair \U0001f600, \\ud83d literal"
    assert kinds(resumed) == [("lone_surrogate", "a1")]
    assert violations(resumed.messages) == []
    json.dumps(resumed.messages, ensure_ascii=False).encode("utf-8")  # encodable, as the API needs


def test_bytes_that_are_not_utf8_are_read_as_claude_code_reads_them(tmp_path):
    """A line with bytes that are not UTF-8 inside a string (another tool's
    write, a disk's damage): Claude Code reads the file as UTF-8 text, so it
    sees U+FFFD there and the message. It was dropped here, and the turn
    before it taken for an interrupted one, with nothing said."""
    conv = Conv()
    conv.user("u1", "look")
    conv.assistant("a1", text("PLACEHOLDER"))
    path = conv.write(tmp_path / f"{SID}.jsonl")
    data = path.read_bytes().replace(b"PLACEHOLDER", b"done \xff\xfe both, caf\xc3")
    path.write_bytes(data)
    resumed = load_transcript(path)
    assert path.read_bytes() == data
    assert resumed.chain == ["u1", "a1"] and resumed.skippedLines == 0 and resumed.interruption == "none"
    assert resumed.messages[1]["message"]["content"][0]["text"] == "done \ufffd\ufffd both, caf\ufffd"
    assert kinds(resumed) == [("invalid_utf8", "a1")]
    assert violations(resumed.messages) == []


def test_empty_and_whitespace_text_blocks_are_dropped(tmp_path):
    conv = Conv()
    conv.user("u1", [text("   "), text("real question")])
    conv.assistant("a1", text(""), mid="m1")
    conv.assistant("a2", tool_use("t1"), mid="m1")
    conv.result("r1", "t1", "a2")
    conv.user("u2", " \n ")
    conv.assistant("a3", text("done"))
    resumed = load(conv, tmp_path)
    assert [m["uuid"] for m in resumed.messages] == ["u1", "a2", "r1", "a3"]
    assert resumed.messages[0]["message"]["content"] == [text("real question")]
    assert kinds(resumed) == [
        ("empty_text_dropped", "u1"), ("empty_message_dropped", "a1"), ("empty_message_dropped", "u2"),
    ]


def test_a_call_the_conversation_went_on_without_gets_a_synthetic_error_result(tmp_path):
    """A crash between call and result, then the conversation goes on: the call is
    answered first in the next turn, as an error, and nothing the model wrote is lost."""
    conv = Conv()
    conv.user("u1", "run both")
    conv.assistant("a1", tool_use("t1"), mid="m1")
    conv.assistant("a2", tool_use("t2"), mid="m1")
    conv.result("r2", "t2", "a2")
    conv.user("u2", "are you there?", parent="r2")
    conv.assistant("a3", text("yes"))
    resumed = load(conv, tmp_path)
    uuids = [m["uuid"] for m in resumed.messages]
    assert uuids[:3] == ["u1", "a1", "a2"] and uuids[4:] == ["r2", "u2", "a3"]
    synthetic = resumed.messages[3]
    assert synthetic["synthetic"] is True and synthetic["parentUuid"] == "a1"
    assert synthetic["sourceToolAssistantUUID"] == "a1" and synthetic["sessionId"] == SID
    assert synthetic["message"]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": LOST_RESULT_TEXT, "is_error": True}
    ]
    assert synthetic["uuid"] not in resumed.chain
    assert kinds(resumed) == [("tool_result_synthesized", "a1")]
    assert resumed.interruption == "none"
    assert load_transcript(tmp_path / f"{SID}.jsonl").messages == resumed.messages  # deterministic


def test_a_call_unanswered_at_the_end_is_dropped_and_the_turn_reported_interrupted(tmp_path):
    conv = Conv()
    conv.user("u1", "run both")
    conv.assistant("a1", tool_use("t1"), mid="m1")
    conv.assistant("a2", tool_use("t2"), mid="m1")
    conv.result("r1", "t1", "a1", parent="a2")
    resumed = load(conv, tmp_path)
    assert [m["uuid"] for m in resumed.messages][:3] == ["u1", "a1", "r1"]
    assert resumed.interruption == "interrupted_turn"
    assert kinds(resumed) == [("tool_use_dropped", "a2")]


def test_a_result_whose_call_is_lost_is_dropped(tmp_path):
    """The call's line was lost (the walk bridges over it): its result answers nothing."""
    conv = Conv()
    conv.user("u1", "go")
    conv.assistant("a1", text("calling"), mid="m1")
    conv.result("r1", "t-lost", "lost-call", parent="a1")
    conv.assistant("a2", text("after"))
    resumed = load(conv, tmp_path)
    assert [m["uuid"] for m in resumed.messages] == ["u1", "a1", "a2"]
    assert kinds(resumed) == [("tool_result_dropped", "r1"), ("empty_message_dropped", "r1")]


def test_a_result_answering_twice_is_dropped(tmp_path):
    conv = Conv()
    conv.user("u1", "go")
    conv.assistant("a1", tool_use("t1"))
    conv.result("r1", "t1", "a1")
    conv.result("r1b", "t1", "a1", parent="r1")
    conv.assistant("a2", text("after"))
    resumed = load(conv, tmp_path)
    assert [m["uuid"] for m in resumed.messages] == ["u1", "a1", "r1", "a2"]
    assert kinds(resumed)[0] == ("tool_result_dropped", "r1b")


def test_a_streamed_response_is_reordered_and_reported(tmp_path):
    """tool_use A, tool_use B, result B, tool_use C, result C, result A (tools run while
    the response streams): one assistant turn, then the three results."""
    conv = Conv()
    conv.user("u1", "go")
    conv.assistant("A", tool_use("tA"), mid="m1")
    conv.assistant("B", tool_use("tB"), mid="m1")
    conv.result("rB", "tB", "B")
    conv.assistant("C", tool_use("tC"), mid="m1", parent="rB")
    conv.result("rC", "tC", "C")
    conv.result("rA", "tA", "A")
    conv.assistant("D", text("all done"), parent="rC")
    resumed = load(conv, tmp_path)
    # the splice put rA (off the walked branch) after C; results keep the order they had
    assert resumed.chain == ["u1", "A", "B", "C", "rB", "rA", "rC", "D"]
    assert kinds(resumed) == [("reordered", "A")]
    assert resumed.repairs[0].detail == "response m1: 3 entries, then the 3 results answering them"


def test_a_plain_conversation_needs_no_repair(tmp_path):
    conv = Conv()
    conv.user("u1", "hi")
    conv.assistant("a1", text("hello"))
    conv.user("u2", "bye")
    conv.assistant("a2", text("bye"))
    assert load(conv, tmp_path).repairs == []


def test_a_response_split_by_hook_output_is_joined_and_reported(tmp_path):
    """No call at all: text, hook attachment, more text of the same response. The
    response is one turn; the attachment follows it."""
    conv = Conv()
    conv.user("u1", "explain")
    conv.assistant("a1", text("first part"), mid="m1")
    conv.attachment("h1")
    conv.assistant("a2", text("second part"), mid="m1")
    resumed = load(conv, tmp_path)
    assert resumed.chain == ["u1", "a1", "a2", "h1"]
    assert kinds(resumed) == [("reordered", "a1")]
    assert resumed.repairs[0].detail == "response m1: 2 entries, then the 0 results answering them"


def test_hook_output_between_a_call_and_its_result_goes_after_the_result(tmp_path):
    """A version without sourceToolAssistantUUID, one block per response (nothing
    shares a message.id): the attachment still must not open the answering turn."""
    conv = Conv()
    conv.user("u1", "go")
    conv.assistant("a1", tool_use("t1"))
    conv.attachment("h1", parent="a1")
    r1 = conv.result("r1", "t1", "a1", parent="h1")
    del r1["sourceToolAssistantUUID"]
    conv.assistant("a2", text("done"), parent="r1")
    resumed = load(conv, tmp_path)
    assert resumed.chain == ["u1", "a1", "r1", "h1", "a2"]
    assert kinds(resumed) == [("reordered", "a1")]


def test_a_half_emoji_in_a_parallel_result_does_not_hide_it(tmp_path):
    """The result of the first call, off the walked branch, holds a lone surrogate: it
    is still recovered by the splice and put in the turn after its call."""
    conv = Conv()
    conv.user("u1", "go")
    conv.assistant("A", tool_use("tA"), mid="m1")
    conv.assistant("B", tool_use("tB"), mid="m1")
    conv.result("rB", "tB", "B")
    ra = conv.result("rA", "tA", "A")
    ra["message"]["content"][0]["content"] = "HALF"
    conv.assistant("C", text("done"), parent="rB")
    path = conv.write(tmp_path / f"{SID}.jsonl")
    path.write_bytes(path.read_bytes().replace(b"HALF", b"cut \\ud83d"))
    resumed = load_transcript(path)
    assert resumed.chain == ["u1", "A", "B", "rA", "rB", "C"]  # spliced after B, where the splice puts it
    assert violations(resumed.messages) == []
    assert resumed.messages[3]["message"]["content"][0]["content"] == "cut \ufffd"
    assert ("lone_surrogate", "rA") in kinds(resumed)


def test_interrupt_detection_runs_on_the_ordered_list(tmp_path):
    """tool_use A, its result (the tool ran while the response streamed), then the
    response's closing text. In file order the conversation ends on assistant text,
    but the model has not seen the result yet: ordered, it ends on the result, an
    interrupted turn that gets the continuation."""
    conv = Conv()
    conv.user("u1", "go")
    conv.assistant("A", tool_use("tA"), mid="m1")
    conv.result("rA", "tA", "A")
    conv.assistant("B", text("started it"), mid="m1", parent="rA")
    resumed = load(conv, tmp_path)
    assert resumed.chain == ["u1", "A", "B", "rA"]
    assert resumed.interruption == "interrupted_turn"
    assert resumed.messages[-1]["synthetic"] is True and resumed.messages[-1]["parentUuid"] == "rA"
