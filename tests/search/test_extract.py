"""What of an entry is searchable, on the entry shapes Claude Code writes and on
shapes it does not."""

from __future__ import annotations

import json

from sessiond.search.extract import TOOL_TEXT_MAX, extract
from tests.conftest import CORPUS


def ex(entry) -> list[tuple[str, str]]:
    got = extract(json.dumps(entry).encode() if not isinstance(entry, bytes) else entry)
    return [] if got is None else [(d.role, d.text) for d in got.docs]


def test_prompts_answers_tools_and_results_get_their_roles():
    assert ex({"type": "user", "message": {"role": "user", "content": "find the bug"}}) == [("user", "find the bug")]
    blocks = [{"type": "thinking", "thinking": "secret musing"}, {"type": "text", "text": "Here it is."},
              {"type": "tool_use", "id": "t", "name": "Bash", "input": {"command": "git log -5", "description": "history"}}]
    assert ex({"type": "assistant", "message": {"role": "assistant", "content": blocks}}) == [
        ("assistant", "Here it is."), ("tool", "Bash git log -5 history")]
    result = {"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "commit abc"}, {"type": "image", "source": {}}]}]}}
    assert ex(result) == [("tool", "commit abc")]


def test_a_huge_tool_result_is_cut_and_meta_messages_are_skipped():
    big = {"type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "y " * 100_000}]}}
    [(role, text)] = ex(big)
    assert role == "tool" and len(text) <= TOOL_TEXT_MAX
    assert ex({"type": "user", "isMeta": True, "message": {"role": "user", "content": "<local-command-stdout>x</local-command-stdout>"}}) == []


def test_titles_tags_and_summaries():
    got = extract(b'{"type":"custom-title","customTitle":"Fix the parser","sessionId":"s"}')
    assert got.titles == {"custom-title": "Fix the parser"} and [(d.role, d.text) for d in got.docs] == [("title", "Fix the parser")]
    assert ex({"type": "tag", "tag": "urgent"}) == [("tag", "urgent")]
    assert ex({"type": "summary", "summary": "Parser fixed", "leafUuid": "u"}) == [("summary", "Parser fixed")]
    assert ex({"type": "ai-title", "aiTitle": "  "}) == []


def test_odd_shapes_give_what_they_can_and_never_raise():
    assert ex({"type": "user", "message": {"role": "user", "content": 5}}) == []
    assert ex({"type": "user", "uuid": 7, "message": {"role": "user", "content": [{"type": "text", "text": "still here"}, 3, None]}}) == [
        ("user", "still here")]
    assert ex(b"[1, 2]") == [] and ex(b"not json") == [] and ex(b"") == []
    assert ex(b'{"type":"user","x":1e400,"message":{"role":"user","content":"inf"}}') == [("user", "inf")]
    deep = (b'{"type":"assistant","message":{"role":"assistant","content":[{"type":"tool_use","name":"T","input":'
            + b"[" * 5000 + b"]" * 5000 + b"}]}}")
    assert ex(deep) in ([("tool", "T")], [])


def test_every_corpus_line_extracts_without_error():
    docs = 0
    for path in CORPUS.glob("*.jsonl"):
        for line in path.read_bytes().splitlines():
            got = extract(line)
            docs += 0 if got is None else len(got.docs)
    assert docs > 4000
