"""render.html in a real headless Chromium (selenium driving Debian's
chromium-driver): the Markdown of messages renders as elements (headings,
lists, Pygments-coloured code, tables), tool calls fold with their input and
result, no harness markup shows, nothing a transcript says runs (checked on a
page *without* the CSP, so the escaping itself is what is tested; a control
page shows the check catches a script that does run), nothing is fetched."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from sessiond.client.render.conversation import ConversationView, build_turns, conversation_view
from sessiond.client.render.html import STYLESHEET, conversation_html, page
from sessiond.client.resume.pipeline import load_transcript

webdriver = pytest.importorskip("selenium.webdriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None)
pytestmark = [pytest.mark.skipif(CHROMIUM is None or DRIVER is None,
                                 reason="chromium and chromium-driver not installed (.ci/run installs them)"),
              pytest.mark.timeout(180)]

CORPUS = Path(__file__).parent.parent / "corpus" / "claude-code"
HOSTILE = [
    "<script>window.__pwned = 'script'</script>",
    "<img src=x onerror=\"window.__pwned = 'img'\">",
    "<svg onload=\"window.__pwned = 'svg'\"></svg>",
    "[click](javascript:window.__pwned='link')",
    "<a href=\"javascript:window.__pwned='a'\">a</a>",
    "<iframe srcdoc=\"<script>parent.__pwned='iframe'</script>\"></iframe>",
    "![tracker](http://127.0.0.1:9/pixel.png)",
    "<img src=\"http://127.0.0.1:9/raw.png\">",
    "<style>body{background:url(http://127.0.0.1:9/bg.png)}</style>",
    "<script>alert(1)</script>",
]
EVIL = "\n\n".join(HOSTILE)

MARKDOWN = """# Plan

Some **bold**, `inline code` and a [link](https://example.com/doc). ![diagram](https://example.com/d.png)

- first item
- second item

1. one
2. two

```python
def parse(text: str) -> int:
    return len(text)
```

| file | lines |
|------|------:|
| a.py | 10 |
"""


def _msg(kind: str, content, uid: str, **extra) -> dict:
    inner = {"role": kind, "content": content}
    if kind == "assistant":
        inner.update(id=extra.pop("mid", uid), model="claude-test")
    return {"type": kind, "uuid": uid, "timestamp": "2025-03-04T10:00:00.000Z", "message": inner, **extra}


def _view(messages: list[dict], title: str = "t") -> ConversationView:
    built = build_turns(messages)
    return ConversationView(session_id="s", title=title, path="/x", turns=built.turns, hidden=built.hidden)


def _plain_page(body: str) -> str:
    """A document with the stylesheet and no CSP: what the escaping alone must make safe."""
    return f"<!DOCTYPE html><html><head><meta charset='utf-8'><style>{STYLESHEET}</style></head><body>{body}</body></html>"


@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Iterator:
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
                "--disable-background-networking", f"--user-data-dir={tmp_path_factory.mktemp('chromium')}",
                "--window-size=1000,900"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


class Asked(list):
    """The URLs a page asked for beyond its own file; ``blocked``: those its CSP stopped."""

    blocked: list[str]


def _open(browser, path: Path, html: str) -> Asked:
    """Load ``html`` from ``path``; what it asked the network for (a request
    its CSP blocked never left: it is in ``blocked``, not in the list)."""
    path.write_text(html)
    browser.get_log("performance")  # drop what came before
    browser.get(path.as_uri())
    sent: dict[str, str] = {}
    stopped: set[str] = set()
    for entry in browser.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        params = msg.get("params", {})
        if msg.get("method") == "Network.requestWillBeSent":
            url = params["request"]["url"]
            if not url.startswith(("file:", "data:", "about:", "chrome")):
                sent[params["requestId"]] = url
        elif msg.get("method") == "Network.loadingFailed" and params.get("blockedReason") == "csp":
            stopped.add(params["requestId"])
    asked = Asked(url for rid, url in sent.items() if rid not in stopped)
    asked.blocked = [url for rid, url in sent.items() if rid in stopped]
    return asked


def _js(browser, script: str, *args):
    return browser.execute_script(script, *args)


def test_markdown_renders_as_elements_with_coloured_code(browser, tmp_path):
    view = _view([_msg("user", "Make a plan", "u1"), _msg("assistant", [{"type": "text", "text": MARKDOWN}], "a1")])
    assert _open(browser, tmp_path / "md.html", page("md", conversation_html(view))) == []
    turn = "document.getElementById('m-a1')"
    assert _js(browser, f"return {turn}.querySelector('h3').textContent") == "Plan"  # under the turn, not the page's h1
    assert _js(browser, f"return [...{turn}.querySelectorAll('ul > li')].map(e => e.textContent)") == ["first item", "second item"]
    assert _js(browser, f"return [...{turn}.querySelectorAll('ol > li')].map(e => e.textContent)") == ["one", "two"]
    assert _js(browser, f"return {turn}.querySelector('strong').textContent") == "bold"
    assert _js(browser, f"return [...{turn}.querySelectorAll('th')].map(e => e.textContent)") == ["file", "lines"]
    assert _js(browser, f"return {turn}.querySelector('td').textContent") == "a.py"
    link = _js(browser, f"const a = {turn}.querySelector('a[href^=\"https:\"]'); return [a.href, a.rel]")
    assert link == ["https://example.com/doc", "nofollow noopener noreferrer"]
    image = _js(browser, f"const a = {turn}.querySelector('a.image-link'); return [a.href, a.textContent]")
    assert image == ["https://example.com/d.png", "[image: diagram]"]  # a link to it: never loaded
    assert _js(browser, "return document.images.length") == 0
    # Pygments' spans, coloured by the stylesheet: a keyword is not the text's colour
    code = _js(browser, f"""const pre = {turn}.querySelector('pre.highlight');
        const k = pre.querySelector('span.k');
        return [pre.textContent, k.textContent, getComputedStyle(k).color, getComputedStyle(pre).color]""")
    assert code[0].startswith("def parse(text: str) -> int:\n    return len(text)")
    assert code[1] == "def" and code[2] != code[3]


def test_tool_calls_fold_with_their_input_and_result(browser, tmp_path):
    messages = [
        _msg("user", "count lines", "u1"),
        _msg("assistant", [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "wc -l a.py\nls"}}], "a1", mid="r1"),
        _msg("assistant", [{"type": "tool_use", "id": "t2", "name": "Read", "input": {"file_path": "/src/b.py"}}], "a2", mid="r1"),
        _msg("user", [{"type": "tool_result", "tool_use_id": "t1", "content": "10 a.py\nb.py"}], "u2"),
        _msg("user", [{"type": "tool_result", "tool_use_id": "t2", "content": "No such file", "is_error": True}], "u3"),
    ]
    assert _open(browser, tmp_path / "tools.html", page("tools", conversation_html(_view(messages)))) == []
    calls = browser.find_elements("css selector", "details.tool")
    assert len(calls) == 2 and _js(browser, "return document.querySelectorAll('.turn').length") == 2  # one response, one turn
    summaries = [c.find_element("tag name", "summary").text for c in calls]
    assert summaries == ["Bash wc -l a.py ls", "Read /src/b.py error"], summaries
    result = calls[0].find_element("css selector", ".result pre")
    assert not result.is_displayed()  # folded
    calls[0].find_element("tag name", "summary").click()
    assert result.is_displayed() and result.text == "10 a.py\nb.py"  # the newline kept
    assert calls[0].find_element("css selector", ".input pre").text == "wc -l a.py\nls"
    calls[1].find_element("tag name", "summary").click()
    assert "error" in calls[1].get_attribute("class") and calls[1].find_element("css selector", ".result.error pre").text == "No such file"


def test_no_harness_markup_shows_in_real_transcripts(browser, tmp_path):
    for name in ("dagster-io__erk__8425536d-8181-4524-9ea2-c2148a31dcb0.jsonl",
                 "daaain__claude-code-log__03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl",
                 "daaain__claude-code-log__ef958aa1-0e93-49f0-bb71-150f63befcd1.jsonl"):
        resumed = load_transcript(CORPUS / name)
        view = conversation_view(resumed, title=name)
        assert _open(browser, tmp_path / "c.html", page(name, conversation_html(view))) == [], name
        said = _js(browser, "return [...document.querySelectorAll('.turn.user, .turn.system')].map(e => e.textContent).join('\\n')")
        for raw in ("<command-name>", "<command-message>", "<local-command-stdout>", "<local-command-caveat>",
                    "<system-reminder>", "<ide_opened_file>", "<ide_selection>"):
            assert raw not in said, (name, raw)
        notices = _js(browser, "return document.querySelectorAll('.notice').length")
        assert notices > 0, name
        calls = _js(browser, "return document.querySelectorAll('details.tool').length")
        paired = _js(browser, "return document.querySelectorAll('details.tool .result').length")
        assert calls == paired > 0, name


def test_nothing_a_transcript_says_runs_or_fetches(browser, tmp_path):
    messages = [
        _msg("user", f"prompt {EVIL}", "u1"),
        _msg("assistant", [{"type": "thinking", "thinking": f"thinking {EVIL}"}, {"type": "text", "text": f"answer {EVIL}"},
                           {"type": "tool_use", "id": "t1", "name": "Bash<img src=x onerror=\"window.__pwned='name'\">",
                            "input": {"command": EVIL}}], "a1"),
        _msg("user", [{"type": "tool_result", "tool_use_id": "t1", "content": f"result {EVIL}"}], "u2"),
        _msg("user", f"<command-name>/x{EVIL}</command-name><local-command-stdout>{EVIL}</local-command-stdout>", "u3"),
        _msg("user", f"meta {EVIL}", "u4", isMeta=True),
        {**_msg("assistant", [{"type": "text", "text": "stamped"}], "a2\"><img src=x onerror=\"window.__pwned='uuid'\">"),
         "timestamp": "<img src=x onerror=\"window.__pwned='time'\">"},
    ]
    from selenium.common.exceptions import UnexpectedAlertPresentException

    title = "<script>window.__pwned='title'</script>"
    body = conversation_html(_view(messages, title=title))
    asked = _open(browser, tmp_path / "evil.html", _plain_page(body))  # no CSP: the escaping alone
    assert asked == []
    assert _js(browser, "return window.__pwned === undefined")
    found = _js(browser, """const a = document.querySelector('article');
        return {tags: [...new Set([...a.querySelectorAll('script,img,svg,iframe,style,object,embed')].map(e => e.tagName))],
                handlers: [...a.querySelectorAll('*')].flatMap(e => [...e.attributes].map(x => x.name)).filter(n => n.startsWith('on')),
                hrefs: [...a.querySelectorAll('[href]')].map(e => e.getAttribute('href')).filter(h => !/^(https?:|mailto:|#)/.test(h))}""")
    assert found == {"tags": [], "handlers": [], "hrefs": []}
    text = _js(browser, "return document.querySelector('article').textContent")
    assert "<script>window.__pwned = 'script'</script>" in text and title in text  # shown as what it says
    for element in browser.find_elements("css selector", "details"):  # opened, still nothing runs
        _js(browser, "arguments[0].open = true", element)
    assert _js(browser, "return window.__pwned === undefined")
    # The checks can fail: a page where such text is not escaped is caught by each.
    control = _open(browser, tmp_path / "control.html", _plain_page("\n".join(HOSTILE[:-1])))
    assert _js(browser, "return window.__pwned") is not None
    assert any(u.startswith("http://127.0.0.1:9/") for u in control), control
    with pytest.raises(UnexpectedAlertPresentException):  # an alert would have failed the checks above
        _open(browser, tmp_path / "alert.html", _plain_page(HOSTILE[-1]))
        _js(browser, "return 1")


def test_the_export_page_allows_no_script_and_no_fetch(browser, tmp_path):
    """The page's CSP: even markup that got in could neither run nor fetch."""
    document = page("p", "<img src='http://127.0.0.1:9/a.png' onerror=\"window.__pwned='csp'\"><script>window.__pwned='csp'</script>")
    asked = _open(browser, tmp_path / "csp.html", document)
    assert asked == [] and asked.blocked == ["http://127.0.0.1:9/a.png"]
    assert _js(browser, "return window.__pwned === undefined")
    assert _js(browser, "return document.querySelector('meta[http-equiv=\"Content-Security-Policy\"]').content") == \
        "default-src 'none'; style-src 'unsafe-inline'"
