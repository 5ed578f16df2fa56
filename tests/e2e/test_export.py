"""export: Markdown, one self-contained HTML file checked in a real headless
Chromium (a screenshot that is not blank, no network request), jsonl = the
original lines."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import uuid
import zlib
from pathlib import Path

import pytest

from tests.helpers import assistant, line, main_path, user
from tests.lifecycle_tree import build

CWD = "/work/project"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _session(d) -> str:
    sid = str(uuid.uuid4())
    msg_id = "msg_1"
    entries = [
        {"type": "custom-title", "customTitle": "Fix <the> parser & friends", "sessionId": sid},
        user("Why does the parser choke on `{}`?", timestamp="2025-03-04T10:00:00.000Z"),
        {**assistant("", timestamp="2025-03-04T10:00:05.000Z"), "message": {"role": "assistant", "id": msg_id, "content": [
            {"type": "thinking", "thinking": "SECRET-THOUGHT: the lexer drops braces"}]}},
        {**assistant("", timestamp="2025-03-04T10:00:06.000Z"), "message": {"role": "assistant", "id": msg_id, "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "/src/lexer.py"}}]}},
        user("", timestamp="2025-03-04T10:00:07.000Z", message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "TOOL-OUTPUT: def lex(): ..."}]}),
        assistant("The lexer drops braces; fixed in lex().", timestamp="2025-03-04T10:01:00.000Z"),
        {**assistant("subagent says hi", timestamp="2025-03-04T10:00:30.000Z"), "isSidechain": True, "agentId": "helper1"},
    ]
    parent = None
    for e in entries[1:-1]:  # one chain, as an agent records it
        e["parentUuid"], parent = parent, e["uuid"]
    d.cli("--no-autostart", "append", "--cwd", CWD, "--session", sid, input=b"\n".join(line(e) for e in entries))
    return sid


def test_markdown_and_jsonl_exports(daemon_factory, short_tmp):
    d = daemon_factory()
    sid = _session(d)
    md = d.cli("export", sid, "--cwd", CWD).stdout.decode()
    assert md.startswith("# Fix \\<the\\> parser \\& friends\n")  # a renderer shows <the>, not an HTML tag
    assert "2025-03-04 10:00:00" in md and "2025-03-04 10:01:00" in md
    assert "<details><summary>Thinking</summary>" in md and "SECRET-THOUGHT" in md
    assert "<details><summary>Read: /src/lexer.py</summary>" in md and "TOOL-OUTPUT" in md  # the call's gist
    assert "[helper1](#subagent-helper1)" in md and "subagent says hi" in md
    out = short_tmp / "s.jsonl"
    d.cli("export", sid, "--cwd", CWD, "--format", "jsonl", "-o", str(out))
    assert out.read_bytes() == main_path(d.root, CWD, sid).read_bytes()
    assert out.stat().st_mode & 0o077 == 0


def _pixels(png: bytes) -> tuple[int, int, list[bytes]]:
    """Rows of an 8-bit RGB/RGBA PNG, unfiltered (enough to tell a blank page)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos : pos + 8])
        data = png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", data[:10])
            assert depth == 8 and color in (2, 6)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += data
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytes(stride)
    for y in range(height):
        f, row = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = row[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                row[i] = (row[i] + a) & 255
            elif f == 2:
                row[i] = (row[i] + b) & 255
            elif f == 3:
                row[i] = (row[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(row))
        prev = row
    return width, height, rows


def _browse(page: Path, out: Path) -> tuple[bytes, list[str]]:
    """Screenshot of ``page`` in headless Chromium, and the URLs the page itself
    asked for (the browser's own background requests left out)."""
    net = out / "net.json"
    shot = out / "shot.png"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
                    "--disable-background-networking", f"--user-data-dir={out / 'profile'}", "--window-size=900,900",
                    f"--log-net-log={net}", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    events = json.loads(net.read_text())["events"]
    asked = {e["params"]["url"] for e in events
             if "url" in e.get("params", {}) and e["params"].get("initiator", "not an origin") != "not an origin"}
    return shot.read_bytes(), sorted(u for u in asked if not u.startswith("file:"))


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs it)")
def test_html_export_renders_in_a_real_browser_without_the_network(daemon_factory, short_tmp):
    d = daemon_factory()
    tree = build(short_tmp / "src")
    d.cli("import", str(tree.projects))
    sid = tree.with_agents  # a real transcript with subagents
    page = short_tmp / "export.html"
    d.cli("export", sid, "--format", "html", "-o", str(page))
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<details" in text and 'href="#subagent-' in text
    links = set(re.findall(r'href="#([^"]+)"', text))
    assert links and links <= set(re.findall(r'id="([^"]+)"', text))  # every in-page link lands somewhere
    agents = {link for link in links if link.startswith("subagent-")}
    assert len(agents) == len(list((tree.sessions[sid].parent / sid / "subagents").glob("agent-*.jsonl")))
    png, asked = _browse(page, short_tmp)
    assert asked == []
    width, height, rows = _pixels(png)
    colours = {row[i : i + 3] for row in rows[::7] for i in range(0, len(row), 21)}
    assert len(colours) > 20, "the screenshot is (nearly) blank"
    # The check itself can fail: a page that loads something is caught.
    bad = short_tmp / "bad.html"
    bad.write_text('<html><body><img src="http://127.0.0.1:9/x.png"></body></html>')
    assert _browse(bad, short_tmp / "b")[1] == ["http://127.0.0.1:9/x.png"]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs it)")
def test_html_export_escapes_what_the_transcript_says(daemon_factory, short_tmp):
    d = daemon_factory()
    sid = _session(d)
    page = short_tmp / "p.html"
    d.cli("export", sid, "--cwd", CWD, "--format", "html", "-o", str(page))
    text = page.read_text()
    assert "Fix &lt;the&gt; parser &amp; friends" in text and "<the>" not in text
    assert '<details class="thinking"><summary>Thinking</summary>' in text
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          f"--user-data-dir={short_tmp / 'profile'}", "--dump-dom", page.as_uri()],
                         capture_output=True, timeout=120, check=True).stdout.decode()
    assert "<title>Fix &lt;the&gt; parser &amp; friends</title>" in dom
    assert dom.count("<details") == text.count("<details") >= 2


def test_export_says_when_the_daemon_could_not_write_what_it_accepted(daemon_factory):
    """The flush before the read fails (the daemon's writes hit its file size
    limit): the export is of the file as it is, and says so in one line."""
    from sessiond.wire import messages as m

    d = daemon_factory().start(fsize=64 * 1024)
    cwd, sid = "/home/dev/export-fsize", str(uuid.uuid4())
    small = [user(f"s{i} " + "a" * 900) for i in range(40)]  # ~38 KB
    with d.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=cwd, entries=[line(e) for e in small], durability="written"))
        c.call(m.Append(id=c.next_id(), session=sid, cwd=cwd, entries=[line(assistant("b" * 40_000))], durability="queued"))
    r = d.cli("export", sid, "--cwd", cwd, "--format", "jsonl", check=False)
    err = r.stderr.decode().splitlines()
    assert r.returncode == 0 and [json.loads(x)["uuid"] for x in r.stdout.splitlines()] == [e["uuid"] for e in small]
    assert len(err) == 1 and "the daemon answered io_error" in err[0] and "could not write" in err[0], err
    d.kill()  # the queue still holds the big entry: it can never fit


@pytest.mark.parametrize("running", [False, True], ids=["no-daemon", "daemon"])
def test_jsonl_export_keeps_a_last_line_that_has_no_newline(daemon_factory, running):
    """A transcript whose last line is whole but unterminated (a tool that
    leaves the last newline off; the corpus has such files) exports every
    line; a torn fragment after the last newline still does not."""
    d = daemon_factory()
    if running:
        d.start()
    sid = str(uuid.uuid4())
    path = main_path(d.root, CWD, sid)
    path.parent.mkdir(parents=True)
    first, last = user("first", sessionId=sid), assistant("the last answer", sessionId=sid)
    path.write_bytes(line(first) + b"\n" + line(last))  # no final newline
    args = ["--no-autostart", "export", sid, "--cwd", CWD, "--format", "jsonl", "--no-redact"]
    assert d.cli(*args).stdout == path.read_bytes()
    path.write_bytes(line(first) + b"\n" + line(last)[:-9])  # cut inside the line: torn
    assert d.cli(*args).stdout == line(first) + b"\n"


def test_export_says_what_it_left_out_as_show_does(daemon_factory, short_tmp):
    """A line no reader can use is not in the document: export says which, and
    exits 1, as show does; an empty file is refused in one line, not exported
    as an empty conversation."""
    d = daemon_factory()
    sid = str(uuid.uuid4())
    path = main_path(d.root, CWD, sid)
    path.parent.mkdir(parents=True)
    first = user("first", sessionId=sid)
    answer = assistant("the answer", sessionId=sid, parentUuid=first["uuid"])
    path.write_bytes(line(first) + b"\n" + b"{not json\n" + line(answer) + b"\n")
    for fmt in ("markdown", "html"):
        r = d.cli("--no-autostart", "export", sid, "--cwd", CWD, "--format", fmt, "-o", str(short_tmp / f"x.{fmt}"),
                  check=False)
        assert r.returncode == 1 and "line 2" in r.stderr.decode() and "unreadable" in r.stderr.decode(), r.stderr
        assert "the answer" in (short_tmp / f"x.{fmt}").read_text()  # the rest is exported all the same
    path.write_bytes(b"")
    r = d.cli("--no-autostart", "export", sid, "--cwd", CWD, check=False)
    assert r.returncode != 0 and r.stdout == b"" and b"is empty" in r.stderr and b"Traceback" not in r.stderr


def test_subagents_written_inline_by_claude_code_1_0_are_exported_and_linked(daemon_factory):
    """Claude Code 1.0.x wrote each Task's subagent into the main transcript
    (``isSidechain``, no agent id, no file of its own): the exports show each
    such conversation after the main one, linked from the call that started
    it, as they show a 2.x subagent file. They were left out, 405 of this
    file's 438 lines, with nothing said."""
    from tests.conftest import CORPUS

    src = CORPUS / "d-kimuson__claude-code-viewer__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"
    lines = [json.loads(x) for x in src.read_bytes().splitlines() if x.strip()]
    calls = {b["id"]: b["input"]["prompt"] for e in lines if e["type"] == "assistant" and not e.get("isSidechain")
             for b in e["message"]["content"] if isinstance(b, dict) and b.get("name") == "Task"}
    last_words = [b["text"] for e in lines if e.get("isSidechain") and e["type"] == "assistant"
                  for b in e["message"]["content"] if isinstance(b, dict) and b.get("type") == "text"]
    d = daemon_factory()
    md = d.cli("--no-autostart", "export", str(src), "--no-redact").stdout.decode()
    assert len(calls) == 5
    for call in calls:
        anchor = f"#subagent-{call.lower()}"
        assert f"(subagent {call})</summary>" in md and md.count(anchor) >= 2, call  # the call names it, links it
        assert f'<a id="subagent-{call.lower()}"></a>' in md or f'id="subagent-{call.lower()}"' in md, call
    assert all(t.strip()[:60].replace("*", "") in md.replace("\\", "").replace("*", "") for t in last_words[-3:])
    page = d.cli("--no-autostart", "export", str(src), "--format", "html", "--no-redact").stdout.decode()
    assert all(f'id="subagent-{call.lower()}"' in page for call in calls)


def test_inline_subagents_of_a_transcript_larger_than_a_read_are_exported_whole(daemon_factory):
    """Inline subagent lines far apart in a file of several read buffers (the
    reader reuses its buffer): each is kept as read, not as the buffer holds
    it later."""
    sid = str(uuid.uuid4())
    prompts = [f"subtask number {i}: look into part {i}" for i in range(3)]
    entries: list[dict] = [user("split the work", sessionId=sid)]
    for i, prompt in enumerate(prompts):
        call = {"type": "tool_use", "id": f"toolu_{i}", "name": "Task", "input": {"prompt": prompt}}
        entries.append({**assistant("", sessionId=sid), "message": {"role": "assistant", "content": [call]}})
        root = {**user(prompt, sessionId=sid), "isSidechain": True, "parentUuid": None}
        entries.append(root)
        entries.append({**user("padding " + "x" * 700_000, sessionId=sid), "type": "system"})  # a read apart
        entries.append({**assistant(f"SIDE-ANSWER-{i} done", sessionId=sid), "isSidechain": True,
                        "parentUuid": root["uuid"]})
        entries.append({**user("", sessionId=sid), "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f"part {i} done"}]}})
    parent = None
    for e in entries:  # the main conversation, one chain; each subagent a chain of its own from its root
        if not e.get("isSidechain"):
            e["parentUuid"], parent = parent, e["uuid"]
    d = daemon_factory()
    path = main_path(d.root, CWD, sid)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(line(e) + b"\n" for e in entries))
    assert path.stat().st_size > 2 * 1024 * 1024
    md = d.cli("--no-autostart", "export", sid, "--cwd", CWD, "--no-redact").stdout.decode()
    for i in range(3):
        assert f"SIDE-ANSWER-{i} done" in md and f"(subagent toolu_{i})</summary>" in md, i
