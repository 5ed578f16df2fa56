"""render.markdown: a message's Markdown goes in to be rendered unless it could
do more than show text (raw HTML, an image, an unsafe link, a construct left
open), which goes in fenced; what the export writes itself is escaped; the
same notices as every rendering. Checked by rendering the document with
markdown-it-py with raw HTML *on*, as a permissive viewer would."""

from __future__ import annotations

import html.parser

from markdown_it import MarkdownIt

from sessiond.client.render.conversation import ConversationView, Subagent, build_turns, time_text
from sessiond.client.render.markdown import conversation_markdown, fence, inline


def _msg(kind: str, content, uid: str, **extra) -> dict:
    inner = {"role": kind, "content": content}
    if kind == "assistant":
        inner["id"] = extra.pop("mid", uid)
    return {"type": kind, "uuid": uid, "timestamp": "2025-03-04T10:00:00.000Z", "message": inner, **extra}


def _doc(messages: list[dict], **view) -> str:
    built = build_turns(messages)
    return conversation_markdown(ConversationView(session_id="s", title=view.pop("title", "t"), path="/x",
                                                  turns=built.turns, hidden=built.hidden, **view))


class Tags(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def _render(document: str) -> Tags:
    parsed = Tags()
    parsed.feed(MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]).render(document))
    return parsed


def test_message_markdown_renders():
    text = "## Steps\n\n- read **a.py**\n- run `pytest`\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nSee [docs](https://example.com)."
    found = _render(_doc([_msg("assistant", [{"type": "text", "text": text}], "a1")]))
    tags = [t for t, _ in found.tags]
    assert {"h2", "ul", "li", "strong", "code", "table", "td"} <= set(tags)
    assert ("a", {"href": "https://example.com"}) in found.tags


def test_what_could_do_more_than_show_text_goes_in_fenced():
    for hostile in ("<img src=x onerror=alert(1)>", "![pixel](http://127.0.0.1:9/p.png)", "[x](javascript:alert(1))",
                    "<script>alert(1)</script>", "[r]: javascript:alert(1)\n\n[go][r]", "<a href=\"https://x.y\">x</a>"):
        found = _render(_doc([_msg("assistant", [{"type": "text", "text": f"look:\n\n{hostile}"}], "a1")]))
        assert not any(t in ("img", "script") for t, _ in found.tags), hostile
        for tag, attrs in found.tags:
            assert not any(k.startswith("on") for k in attrs), hostile
            assert tag != "a" or (attrs.get("href") or attrs.get("id") or "#").startswith(("#", "https://", "m-")), (hostile, attrs)
        assert hostile in "".join(found.text), hostile  # shown, as its characters


def test_an_unclosed_fence_cannot_swallow_what_follows():
    doc = _doc([_msg("assistant", [{"type": "text", "text": "```python\ndef f():"}], "a1"),
                _msg("user", "next prompt", "u2")])
    found = _render(doc)
    assert ("a", {"id": "m-u2"}) in found.tags  # the next turn's heading is a heading, not code
    assert "next prompt" in "".join(found.text)


def test_tool_calls_and_notices():
    msgs = [
        _msg("user", "<command-name>/model</command-name><command-args>opus</command-args>", "u1"),
        _msg("assistant", [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls\npwd"}}], "a1"),
        _msg("user", [{"type": "tool_result", "tool_use_id": "t1", "content": "a\nb"}], "u2"),
    ]
    doc = _doc(msgs)
    assert "*command: /model opus*" in doc and "<command-" not in doc
    assert "<details><summary>Bash: ls pwd</summary>" in doc
    assert "```bash\nls\npwd\n```" in doc and "**Result**" in doc and "```text\na\nb\n```" in doc


def test_header_subagents_and_hidden_counts(monkeypatch):
    import time

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        msgs = [_msg("assistant", [{"type": "tool_use", "id": "t1", "name": "Task", "input": {"description": "scan"}}], "a1"),
                _msg("user", [{"type": "tool_result", "tool_use_id": "t1", "content": "done"}], "u1", toolUseResult={"agentId": "ab1"}),
                {"type": "attachment", "uuid": "x", "timestamp": "2025-03-04T10:00:01.000Z", "attachment": {"type": "hook_success"}}]
        sub = build_turns([_msg("assistant", [{"type": "text", "text": "sub work"}], "s1")])
        doc = _doc(msgs, title="Fix <the> parser", first="2025-03-04T10:00:00Z", subagents=[Subagent("ab1", sub.turns)])
        assert doc.startswith("# Fix \\<the\\> parser\n")
        assert "2025-03-04 19:00:00 JST" in doc  # local, with its zone
        assert "→ [subagent ab1](#subagent-ab1)" in doc and '<a id="subagent-ab1"></a>' in doc
        assert "*1 attachment not shown*" in doc
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_time_text_and_helpers():
    assert time_text(None) == "?" and time_text("<img src=x>") == "?"
    assert fence("a ``` b") == "````text\na ``` b\n````"
    assert inline("<b>*x*</b>\nnext") == "\\<b\\>\\*x\\*\\</b\\> next"
