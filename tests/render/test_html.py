"""render.html without a browser: the document's frame (CSP, no script), the
pre-compaction turns folded, subagent links that land, times with their zone,
deep-link anchors. (What a browser makes of it: test_html_browser.py.)"""

from __future__ import annotations

import re
import time

import pytest

from sessiond.client.render.conversation import ConversationView, Subagent, build_turns
from sessiond.client.render.html import STYLESHEET, conversation_html, page, turns_html


def _msg(kind: str, content, uid: str, ts: str = "2025-03-04T10:00:00.000Z", **extra) -> dict:
    inner = {"role": kind, "content": content}
    if kind == "assistant":
        inner["id"] = extra.pop("mid", uid)
    return {"type": kind, "uuid": uid, "timestamp": ts, "message": inner, **extra}


TASK = [_msg("assistant", [{"type": "tool_use", "id": "t1", "name": "Task", "input": {"description": "scan"}}], "a1"),
        _msg("user", [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}], "u1", toolUseResult={"agentId": "ab1"}),
        _msg("assistant", [{"type": "tool_use", "id": "t2", "name": "Agent", "input": {"description": "lost"}}], "a2"),
        _msg("user", [{"type": "tool_result", "tool_use_id": "t2", "content": "ok"}], "u2", toolUseResult={"agentId": "zz9"})]


@pytest.fixture
def tokyo():
    import os

    old = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Tokyo"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


def test_page_is_self_contained_with_a_csp():
    doc = page("A <b> title", "<p>x</p>")
    assert doc.startswith("<!DOCTYPE html>")
    assert "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">" in doc
    assert "<title>A &lt;b&gt; title</title>" in doc and STYLESHEET in doc and "<script" not in doc
    assert ".highlight .k" in STYLESHEET  # Pygments' classes


def test_history_is_folded_and_anchors_and_times(tokyo):
    history = build_turns([_msg("user", "old question", "h1")]).turns
    now = build_turns([_msg("user", "new question", "n1", ts="2025-03-04T23:30:00Z")]).turns
    view = ConversationView(session_id="s", title="t", path="/x", turns=now, history=history, first="2025-03-04T10:00:00Z")
    html = conversation_html(view)
    folded = re.search(r'<details class="history">(.*?)</details><h2 class="after">', html, re.S)
    assert folded and 'id="m-h1"' in folded.group(1) and "old question" in folded.group(1)
    assert 'id="m-n1"' in html.split('<h2 class="after">')[1]
    assert '<time datetime="2025-03-04T23:30:00Z">2025-03-05 08:30:00 JST</time>' in html
    assert '<a href="#m-n1">User' in html  # each message links to itself


def test_subagent_links_land():
    built = build_turns(TASK)
    sub = Subagent("ab1", build_turns([_msg("assistant", [{"type": "text", "text": "sub"}], "s1")]).turns)
    view = ConversationView(session_id="s", title="t", path="/x", turns=built.turns, subagents=[sub], agents=["ab1"])
    html = conversation_html(view)
    assert '<a href="#subagent-ab1">→ subagent ab1</a>' in html and 'id="subagent-ab1"' in html
    assert "subagent zz9 (no transcript of it here)" in html and "#subagent-zz9" not in html
    # the web view's links: to a page per subagent that has a transcript, not a section
    view = ConversationView(session_id="s", title="t", path="/x", turns=built.turns, agents=["ab1"])
    html = conversation_html(view, agent_href=lambda a: f"/s/s/agent/{a}")
    assert '<a href="/s/s/agent/ab1">→ subagent ab1</a>' in html and "/agent/zz9" not in html
    assert 'href="/s/s/agent/zz9"' not in turns_html(built.turns, agent_href=lambda a: f"/a/{a}", agents=["ab1"])
