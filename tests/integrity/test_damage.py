"""Each kind of damage a real transcript can carry, through the CLI a user runs:
``show --json`` (what ``resume`` hands the agent) gives a conversation the model
API accepts (tests/client/resume/api_rule.py: roles alternate once responses
and user entries merge, every tool_use answered in the next turn, no message
or text block empty), holding what the damage left, and ``check --json`` names
the damage. One base conversation (a prompt, a response of text + a Bash call,
its result, a reply, a second prompt and its answer) is damaged one way per test.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tests.client.resume.api_rule import violations
from tests.conftest import run_cli

pytestmark = pytest.mark.timeout(120)

A = "aaaaaaaa-1111-4111-8111-111111111111"
B = "bbbbbbbb-2222-4222-8222-222222222222"
CHAIN = ["u1", "a1", "a2", "r1", "a3", "u2", "a4"]


def _entry(kind: str, uid: str, parent: str | None, second: int, sid: str, **fields) -> dict:
    return {"parentUuid": parent, "isSidechain": False, "type": kind, "uuid": uid, "sessionId": sid, "cwd": "/w",
            "timestamp": f"2026-01-01T00:{second // 60:02d}:{second % 60:02d}.000Z", **fields}


def _msg(role: str, content, mid: str | None = None) -> dict:
    return {"message": {"role": role, "content": content, **({"id": mid} if mid else {})}}


def conversation(sid: str = A, p: str = "", start: int = 1) -> list[dict]:
    t = start
    return [
        _entry("user", p + "u1", None, t, sid, **_msg("user", "list the files")),
        _entry("assistant", p + "a1", p + "u1", t + 1, sid, **_msg("assistant", [{"type": "text", "text": "Looking."}], p + "m1")),
        _entry("assistant", p + "a2", p + "a1", t + 2, sid, **_msg("assistant", [
            {"type": "tool_use", "id": p + "t1", "name": "Bash", "input": {"command": "ls"}}], p + "m1")),
        _entry("user", p + "r1", p + "a2", t + 3, sid, sourceToolAssistantUUID=p + "a2",
               **_msg("user", [{"type": "tool_result", "tool_use_id": p + "t1", "content": "a b"}])),
        _entry("assistant", p + "a3", p + "r1", t + 4, sid, **_msg("assistant", [{"type": "text", "text": "Two files."}], p + "m2")),
        _entry("user", p + "u2", p + "a3", t + 5, sid, **_msg("user", "thanks")),
        _entry("assistant", p + "a4", p + "u2", t + 6, sid, **_msg("assistant", [{"type": "text", "text": "Welcome."}], p + "m3")),
    ]


def _line(e: dict) -> bytes:
    return json.dumps(e, separators=(",", ":")).encode()


def _file(tmp_path: Path, entries: list, tail: bytes = b"") -> Path:
    path = tmp_path / f"{A}.jsonl"
    path.write_bytes(b"".join((e if isinstance(e, bytes) else _line(e)) + b"\n" for e in entries) + tail)
    return path


def _run(tmp_path: Path, *args: str):
    env = {"SESSIOND_NO_AUTOSTART": "1", "SESSIOND_ROOT": str(tmp_path / "root"),
           "SESSIOND_SOCKET": str(tmp_path / "none.sock")}
    return run_cli(*args, env=env, check=False)


def resume_and_check(tmp_path: Path, path: Path) -> tuple[dict, dict]:
    shown = _run(tmp_path, "show", str(path), "--json")
    assert shown.returncode in (0, 1), shown.stderr  # 1: lines were skipped, and said so
    assert b"Traceback" not in shown.stderr
    resumed = json.loads(shown.stdout)
    messages = resumed["messages"]
    assert violations(messages) == []
    for m in messages:
        if m["type"] in ("user", "assistant"):
            message = m.get("message")
            assert isinstance(message, dict) and message.get("content"), f"{m['uuid']}: nothing to send"
    uses = {b["id"] for m in messages for b in _blocks(m) if b.get("type") == "tool_use"}
    answered = {b["tool_use_id"] for m in messages for b in _blocks(m) if b.get("type") == "tool_result"}
    assert uses <= answered
    checked = _run(tmp_path, "check", str(path), "--json")
    assert b"Traceback" not in checked.stderr
    document = json.loads(checked.stdout)  # one document: the file's report is its only one
    assert checked.returncode == (0 if document["healthy"] else 1)
    (report,) = document["files"]
    assert report["healthy"] == document["healthy"]
    return resumed, report


def _blocks(m: dict) -> list[dict]:
    content = m.get("message", {}).get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def test_a_torn_last_line(tmp_path):
    torn = _line(_entry("user", "u3", "a4", 20, A, **_msg("user", "and more")))[:40]
    resumed, report = resume_and_check(tmp_path, _file(tmp_path, conversation(), torn))
    assert resumed["chain"] == CHAIN and resumed["skippedLines"] == 1
    assert report["tornTail"] and report["verdict"] == "unhealthy"


def test_a_line_of_garbage_in_the_middle(tmp_path):
    entries = conversation()
    resumed, report = resume_and_check(tmp_path, _file(tmp_path, entries[:4] + [b"this is not json {"] + entries[4:]))
    assert resumed["chain"] == CHAIN and resumed["skippedLines"] == 1
    assert report["unparseableLines"] == [5] and not report["tornTail"]


@pytest.mark.parametrize("same", [True, False], ids=["retried", "rewritten"])
def test_a_duplicated_uuid(tmp_path, same):
    entries = conversation()
    again = copy.deepcopy(entries[5])
    if not same:
        again["message"]["content"] = "thanks a lot"  # the last line of a uuid wins
    resumed, report = resume_and_check(tmp_path, _file(tmp_path, entries[:6] + [again] + entries[6:]))
    assert resumed["chain"] == CHAIN
    assert report["duplicateUuids"] == ["u2"] and report["verdict"] == "unhealthy"
    assert [m["message"]["content"] for m in resumed["messages"] if m["uuid"] == "u2"] == [again["message"]["content"]]


def test_an_entry_whose_parent_is_missing(tmp_path):
    """The line holding the Bash call is lost: its result answers nothing (dropped,
    reported), and the conversation is bridged over the gap, not cut at it."""
    entries = conversation()
    resumed, report = resume_and_check(tmp_path, _file(tmp_path, entries[:2] + entries[3:]))
    assert resumed["chain"] == ["u1", "a1", "r1", "a3", "u2", "a4"]
    assert [(b["at"], b["missingParent"]) for b in resumed["bridges"]] == [("r1", "a2")]
    assert ("tool_result_dropped", "r1") in [(r["kind"], r["uuid"]) for r in resumed["repairs"]]
    assert report["danglingParents"] == ["a2"] and report["verdict"] == "warning"


def test_a_loop_of_parent_links_is_reported_by_check(tmp_path):
    """u1's parent is a1, whose parent is u1 (a bad writer, a bad merge): the
    chain walked from the end never reaches its start. Resume cuts it there;
    check said ok, and names it now, with the line to read for a person."""
    entries = conversation()
    entries[0]["parentUuid"] = "a1"
    resumed, report = resume_and_check(tmp_path, _file(tmp_path, entries))
    assert report["parentCycles"] and report["parentCycles"][0] in ("u1", "a1") and report["verdict"] == "warning"
    human = _run(tmp_path, "check", str(tmp_path / f"{A}.jsonl"))
    assert b"1 loop of parent links" in human.stdout and b"Traceback" not in human.stderr
    clean_dir = tmp_path / "clean"
    clean_dir.mkdir()
    assert resume_and_check(clean_dir, _file(clean_dir, conversation()))[1]["parentCycles"] == []


def test_a_tool_use_without_its_result_at_the_tail(tmp_path):
    entries = conversation()
    resumed, report = resume_and_check(tmp_path, _file(tmp_path, entries[:3]))
    assert resumed["chain"] == ["u1", "a1", "a2"]
    assert ("tool_use_dropped", "a2") in [(r["kind"], r["uuid"]) for r in resumed["repairs"]]
    assert report["unansweredToolUses"] == ["t1"]


def test_a_tool_use_whose_result_is_lost_before_the_conversation_went_on(tmp_path):
    entries = conversation()
    entries[4]["parentUuid"] = "a2"
    resumed, report = resume_and_check(tmp_path, _file(tmp_path, entries[:3] + entries[4:]))
    assert [(r["kind"], r["uuid"], r["detail"]) for r in resumed["repairs"]] == [("tool_result_synthesized", "a2", "t1")]
    assert report["unansweredToolUses"] == ["t1"]


@pytest.mark.parametrize("content", [[], "", [{"type": "text", "text": "  "}]], ids=["no-blocks", "empty-string", "whitespace"])
def test_an_empty_assistant_message_in_the_middle(tmp_path, content):
    """Claude Code writes one when a response is cut off before its first word;
    the API refuses a message with no content ("content": [] was let through)."""
    entries = conversation()
    empty = _entry("assistant", "ae", "a3", 9, A, **_msg("assistant", content, "m9"))
    entries[5]["parentUuid"] = "ae"
    resumed, report = resume_and_check(tmp_path, _file(tmp_path, entries[:5] + [empty] + entries[5:]))
    assert "ae" in resumed["chain"] and "ae" not in [m["uuid"] for m in resumed["messages"]]
    assert ("empty_message_dropped", "ae") in [(r["kind"], r["uuid"]) for r in resumed["repairs"]]
    assert report["emptyMessages"] == ["ae"] and report["verdict"] == "ok"


@pytest.mark.parametrize("kind", ["user", "assistant"])
@pytest.mark.parametrize("message", [{"role": "x"}, None, "hello"], ids=["no-content", "null", "a-string"])
def test_a_message_without_content_is_left_out(tmp_path, kind, message):
    """No writer makes these; an agent building its request from one would crash
    or be refused, so resume leaves it out and says so."""
    entries = conversation()
    odd = _entry(kind, "ae", "a3", 9, A, message=message)
    entries[5]["parentUuid"] = "ae"
    resumed, report = resume_and_check(tmp_path, _file(tmp_path, entries[:5] + [odd] + entries[5:]))
    assert "ae" not in [m["uuid"] for m in resumed["messages"]]
    assert ("empty_message_dropped", "ae") in [(r["kind"], r["uuid"]) for r in resumed["repairs"]]
    assert report["unparseableLines"] == [] and report["emptyMessages"] == ["ae"]  # it was called unreadable


def test_interleaved_writes_of_two_sessions(tmp_path):
    """Another session's writer appended to this file too, its entries newer: the
    file's own conversation is resumed (it resumed the other one), whole."""
    mine, theirs = conversation(), conversation(B, "B", start=60)
    lines = [e for pair in zip(mine, theirs) for e in pair]
    resumed, report = resume_and_check(tmp_path, _file(tmp_path, lines))
    assert resumed["chain"] == CHAIN and resumed["sessionId"] == A
    assert report["otherSessions"] == [B] and report["verdict"] == "warning"


def test_interleaved_writes_and_a_lost_line_do_not_bridge_into_the_other_session(tmp_path):
    mine, theirs = conversation(), conversation(B, "B", start=60)
    lost = mine[:2] + mine[3:]
    lines = [e for pair in zip(lost, theirs) for e in pair]
    resumed, report = resume_and_check(tmp_path, _file(tmp_path, lines))
    assert resumed["chain"] == ["u1", "a1", "r1", "a3", "u2", "a4"]  # bridged to a1, not to B's entry before r1
    assert report["danglingParents"] == ["a2"] and report["otherSessions"] == [B]
