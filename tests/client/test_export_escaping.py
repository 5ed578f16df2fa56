"""Exports show what a transcript holds and render none of it: the Markdown
export, rendered by markdown-it-py (CommonMark, raw HTML enabled), and the
HTML export, parsed as a browser would, hold no element or attribute that
came from transcript text (no ``<script>``, no ``<img onerror=>``, no
``<iframe>``, no ``javascript:`` link), and no fake heading or early fence
lets a message out of its block. Exported through the real CLI from a real
daemon's store, and rendered directly for what the CLI cannot put there (a
timestamp the CLI's local-time helper would not print)."""

from __future__ import annotations

import html.parser
import uuid

from markdown_it import MarkdownIt

from sessiond.client import export as ex
from sessiond.client.resume.pipeline import load_transcript
from tests.conftest import DaemonProc
from tests.helpers import assistant, line, main_path, user

CWD = "/work/hostile"
PAYLOADS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    '<iframe src="https://evil.example/"></iframe>',
    "[click me](javascript:alert(1))",
    "<javascript:alert(1)>",
    '<a href="javascript:alert(1)">x</a>',
    "<div>\nraw html block <b onmouseover=alert(1)>b</b>\n</div>",
    "\n# FAKE HEADING\n",
    "```\n</details><script>alert(2)</script>\n```",
    "`````\n<svg onload=alert(3)>",
    "controls \x1b]0;owned\x07\x1b[2J \u202eevil\u2066 \x9b31m",
]
EVIL = "\n\n".join(PAYLOADS)
AGENT = 'x"><img src=x onerror=alert(1)>'  # a file name: anything but a slash
TITLE = "Title <script>alert(1)</script> <img src=x onerror=alert(1)> [t](javascript:alert(1))"


class Elements(html.parser.HTMLParser):
    """Every start tag of a document with its attributes, and its headings' text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.headings: list[str] = []
        self.text: list[str] = []
        self._heading: list[str] | None = None
        self._title: list[str] | None = None
        self.title = ""

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self._heading = []
        if tag == "title":
            self._title = []

    def handle_endtag(self, tag):
        if tag.startswith("h") and tag[1:].isdigit() and self._heading is not None:
            self.headings.append("".join(self._heading))
            self._heading = None
        if tag == "title" and self._title is not None:
            self.title, self._title = "".join(self._title), None

    def handle_data(self, data):
        self.text.append(data)
        for sink in (self._heading, self._title):
            if sink is not None:
                sink.append(data)


def elements(document: str) -> Elements:
    parser = Elements()
    parser.feed(document)
    parser.close()
    return parser


def assert_nothing_rendered(document: str, allowed: set[str]) -> Elements:
    found = elements(document)
    tags = {t for t, _ in found.tags}
    assert tags <= allowed, f"elements from transcript text: {tags - allowed}"
    for tag, attrs in found.tags:
        for name, value in attrs.items():
            assert not name.startswith("on"), f"<{tag} {name}=...>"
            if name in ("href", "src"):
                assert (value or "").startswith("#"), f"<{tag} {name}={value!r}>"
    text = "".join(found.text)
    assert "onerror=alert(1)" in text and "<script>alert(1)</script>" in text  # shown, not dropped
    return found


def assert_controls_shown(document: str) -> None:
    """A document for a person, often printed to a terminal: its controls are
    shown as every CLI line shows them (``output.printable``)."""
    for ch in ("\x1b", "\x07", "\x9b", "\u202e", "\u2066"):
        assert ch not in document, ch
    assert "controls ^[]0;owned^G^[[2J \\u202eevil\\u2066 \\u009b31m" in document


MD_ALLOWED = {"h1", "h2", "h3", "ul", "li", "p", "pre", "code", "details", "summary", "a", "em", "strong"}
HTML_ALLOWED = {"html", "head", "meta", "title", "style", "body", "header", "h1", "h2", "h3", "p", "code", "time", "nav",
                "a", "article", "div", "details", "summary", "pre", "em", "section", "span", "dl", "dt", "dd"}


def hostile_session(d: DaemonProc) -> str:
    sid = str(uuid.uuid4())
    entries = [
        {"type": "custom-title", "customTitle": TITLE, "sessionId": sid},
        user(f"prompt {EVIL}", "u1", parentUuid=None, cwd=CWD, sessionId=sid),
        {**assistant("", "a1", parentUuid="u1", cwd=CWD, sessionId=sid), "message": {"role": "assistant", "id": "m1", "content": [
            {"type": "thinking", "thinking": f"thinking {EVIL}"},
            {"type": "text", "text": f"answer {EVIL}"},
            {"type": "tool_use", "id": "t1", "name": "Bash<img src=x onerror=alert(1)>\n\n<script>x</script>",
             "input": {"command": EVIL}}]}},
        {**user("", "u2", parentUuid="a1", cwd=CWD, sessionId=sid), "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": f"result {EVIL}", "is_error": True}]}},
        {**user(f"meta {EVIL}", "u3", parentUuid="u2", cwd=CWD, sessionId=sid), "isMeta": True},
        {"type": "system", "content": f"system {EVIL}", "uuid": "s1", "parentUuid": "u3", "sessionId": sid, "cwd": CWD},
        assistant(f"last {EVIL}", "a2", parentUuid="s1", cwd=CWD, sessionId=sid),
    ]
    d.cli("append", "--cwd", CWD, "--session", sid, "--durability", "written", input=b"".join(line(e) + b"\n" for e in entries))
    agents = main_path(d.root, CWD, sid).parent / sid / "subagents"
    agents.mkdir(parents=True)
    (agents / f"agent-{AGENT}.jsonl").write_bytes(line(assistant(f"subagent {EVIL}", "b1", parentUuid=None, cwd=CWD,
                                                                   sessionId=sid, isSidechain=True)) + b"\n")
    return sid


def test_markdown_export_renders_no_transcript_html(daemon: DaemonProc):
    sid = hostile_session(daemon)
    md = daemon.cli("export", sid, "--cwd", CWD).stdout.decode()
    assert_controls_shown(md)
    rendered = MarkdownIt("commonmark", {"html": True}).render(md)
    found = assert_nothing_rendered(rendered, MD_ALLOWED)
    assert found.headings[0] == TITLE
    roles = ("User", "Assistant", "Tool result", "System", "Subagent")
    assert all(h.startswith(roles) for h in found.headings[1:]), found.headings  # no FAKE HEADING
    assert not any("FAKE" in h for h in found.headings)
    for tag, attrs in found.tags:
        if tag == "a":
            assert set(attrs) <= {"href", "id"} and (attrs.get("href") or attrs.get("id") or "").lstrip("#").startswith(("subagent-", "m-"))
    pres = md.count("```")
    assert pres and "subagent " in "".join(found.text)


def test_html_export_renders_no_transcript_html(daemon: DaemonProc):
    sid = hostile_session(daemon)
    page = daemon.cli("export", sid, "--cwd", CWD, "--format", "html").stdout.decode()
    assert_controls_shown(page)
    found = assert_nothing_rendered(page, HTML_ALLOWED)
    assert found.title == TITLE
    ids = [a["id"] for _, a in found.tags if "id" in a]
    # the file name made an anchor (nothing but a-z0-9_-), each message its own
    assert [i for i in ids if not i.startswith(("m-", "t-"))] == ["subagent-x---img-src-x-onerror-alert-1--"]
    # a message's own Markdown heading renders, under its turn (h3), never level with the page's (h1, h2)
    assert all(h in (TITLE, f"Subagent {AGENT}", "FAKE HEADING") for h in found.headings), found.headings
    assert "<h1>FAKE" not in page and "<h2>FAKE" not in page and "<h3>FAKE HEADING</h3>" in page


def test_a_hostile_timestamp_is_text_in_both_exports(daemon: DaemonProc):
    """The default time rendering prints a timestamp's first 19 characters,
    which is room for ``<img src=x onerror=``."""
    sid = hostile_session(daemon)
    path = main_path(daemon.root, CWD, sid)
    with open(path, "ab") as f:
        f.write(line(assistant("stamped", "a9", parentUuid="a2", cwd=CWD, sessionId=sid,
                               timestamp="<img src=x onerror=alert(1)>")) + b"\n")
    exported = ex.Exported(main=load_transcript(path), subagents=[])
    assert_nothing_rendered(MarkdownIt("commonmark", {"html": True}).render(ex.to_markdown(exported)), MD_ALLOWED)
    assert_nothing_rendered(ex.to_html(exported), HTML_ALLOWED)
