"""One output layer: every line the CLI prints for a person goes through
``output.echo``, which shows terminal controls instead of obeying them.

The structural tests hold every module of ``sessiond/client/`` to it (no ``click.echo``,
``print``, ``sys.stdout.write`` outside ``output.py``; ``raw=True`` only where
this package rendered and escaped the text itself), so a field added later
cannot forget it. The rest runs the real CLI against a real daemon on a store
whose every name is hostile: control characters and escape sequences in the
cwd, the project directory's name, titles, branches, tags, lease holders,
error messages, usage errors and file paths."""

from __future__ import annotations

import ast
import json
import os
import unicodedata
import uuid
from pathlib import Path

from sessiond.client.cli.output import printable
from tests.conftest import REPO, DaemonProc
from tests.helpers import assistant, line, user

# ------------------------------------------------------------------ structure

FORBIDDEN_CALLS = {("click", "echo"), ("click", "secho"), ("click", "echo_via_pager"), ("sys.stdout", "write"),
                   ("sys.stderr", "write"), ("sys.stdout.buffer", "write"), ("sys.stderr.buffer", "write")}
RAW_ALLOWED = {"sessiond/client/cli/output.py": 3, "sessiond/client/cli/search_cmds.py": 5}
"""Where text goes out without ``printable``, and how often: a progress line's
CR, ``paged`` (the conversation ``show`` rendered and the table ``list`` made,
each field made printable, then styled), and search hits. A new one is a
decision, made here."""


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return "?"


def _calls(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            yield node


def _client_modules() -> list[Path]:
    return sorted((REPO / "sessiond" / "client").rglob("*.py"))


def test_nothing_in_the_client_writes_around_the_output_layer():
    found = []
    for path in _client_modules():
        rel = str(path.relative_to(REPO))
        if rel == "sessiond/client/cli/output.py":
            continue
        for call in _calls(path):
            name = _dotted(call.func)
            owner, _, attr = name.rpartition(".")
            if name == "print" or (owner, attr) in FORBIDDEN_CALLS:
                found.append(f"{rel}:{call.lineno}: {name}(...)")
    assert not found, "write human text with output.echo (it escapes):\n" + "\n".join(found)


def test_raw_output_is_rare_and_declared():
    raw: dict[str, int] = {}
    for path in _client_modules():
        rel = str(path.relative_to(REPO))
        for call in _calls(path):
            if _dotted(call.func).endswith("echo") and any(
                    k.arg == "raw" and not (isinstance(k.value, ast.Constant) and k.value.value is False) for k in call.keywords):
                raw[rel] = raw.get(rel, 0) + 1
    assert raw == RAW_ALLOWED


# ------------------------------------------------------------------ printable


def test_printable_shows_every_kind_of_control():
    assert printable("a\x1b[2Jb\x07c\x7fd\re\tf\ng") == "a^[[2Jb^Gc^?d^Me\tf\ng"
    assert printable("\x9b31m\x85") == "\\u009b31m\\u0085"
    assert printable("x\u202etxt\u2066y\u2069\u200fz") == "x\\u202etxt\\u2066y\\u2069\\u200fz"
    assert printable("ma\u200bin\ufeff\u00ad\u2028") == "ma\\u200bin\\ufeff\\u00ad\\u2028"
    assert printable("tag\U000e0041\U000e007f") == "tag\\U000e0041\\U000e007f"  # tag characters: invisible text
    name = b"caf\xe9-\xff".decode("utf-8", "surrogateescape")
    assert printable(name) == "caf\\xe9-\\xff"
    assert printable("lone \ud800") == "lone \\ud800"
    assert printable("ma\u200din") == "ma\\u200din"  # ZWJ between ASCII letters: a disguise
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    assert printable(family) == family  # between emoji: how the sequence is written
    assert printable("\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645") == "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"
    for text in ("naïve 中文 ✓", "plain"):
        assert printable(text) == text


def test_every_format_character_unicode_knows_is_shown():
    missed = []
    for c in range(0x110000):
        ch = chr(c)
        if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs") and ch not in "\t\n\u200c\u200d":
            if printable(ch) == ch:
                missed.append(f"U+{c:04X}")
    assert not missed


def test_printable_is_idempotent():
    text = "a\x1b]0;t\x07\u202e\x9b" + b"\xff".decode("utf-8", "surrogateescape")
    assert printable(printable(text)) == printable(text)


# ------------------------------------------------------------------ the CLI, end to end

ESC = "\x1b]0;owned\x07\x1b[2J"
"""An OSC that sets the window title and a CSI that clears the screen."""
HOSTILE = f"{ESC}\x9b31m\u202eevil\u200b"
BAD = ("\x1b", "\x07", "\x9b", "\u202e", "\u200b")


def assert_inert(out: bytes | str, what: str) -> str:
    text = out.decode("utf-8", "surrogateescape") if isinstance(out, bytes) else out
    for ch in BAD:
        assert ch not in text, f"{what} printed {ch!r}: {text!r}"
    assert "\udcff" not in text, f"{what} printed a raw non-UTF-8 byte: {text!r}"
    return text


def hostile_store(daemon: DaemonProc) -> tuple[str, str]:
    """A session in a project whose cwd (so its directory name) holds controls,
    with a hostile prompt, title, branch and tag; returns (cwd, session id)."""
    cwd = f"/work/x{HOSTILE}proj"
    sid = str(uuid.uuid4())
    entries = [
        user(f"prompt zebra{HOSTILE}", "u1", parentUuid=None, cwd=cwd, sessionId=sid, gitBranch=f"br{HOSTILE}"),
        assistant(f"answer zebra{HOSTILE}", "a1", parentUuid="u1", cwd=cwd, sessionId=sid, gitBranch=f"br{HOSTILE}"),
    ]
    daemon.cli("append", "--cwd", cwd, "--session", sid, "--durability", "written",
               input=b"".join(line(e) + b"\n" for e in entries))
    daemon.cli("rename", sid, f"title{HOSTILE}", "--cwd", cwd)
    daemon.cli("tag", sid, f"tag{HOSTILE}", "--cwd", cwd)
    return cwd, sid


def _outputs(r) -> str:
    return r.stdout.decode("utf-8", "surrogateescape") + r.stderr.decode("utf-8", "surrogateescape")


def test_every_command_shows_hostile_names_escaped(daemon: DaemonProc):
    cwd, sid = hostile_store(daemon)
    runs = {
        "list": daemon.cli("list", "--cwd", cwd),
        "list --all": daemon.cli("list", "--all"),
        "show": daemon.cli("show", sid, "--cwd", cwd, "--no-pager"),
        "tail": daemon.cli("tail", sid, "--cwd", cwd),
        "search": daemon.cli("search", "zebra", "--all"),
        "du": daemon.cli("du", "--all"),
        "check": daemon.cli("check", "--all", check=False),
        "status": daemon.cli("status"),
        "rename": daemon.cli("rename", sid, f"again{HOSTILE}", "--cwd", cwd),
        "tag": daemon.cli("tag", sid, f"tag2{HOSTILE}", "--cwd", cwd),
        "prune": daemon.cli("prune", "--older-than", "0s", "--dry-run", "--all", check=False),
        "import": daemon.cli("import", f"/nonexistent{HOSTILE}/x.jsonl", check=False),
        "show (missing)": daemon.cli("show", f"nope{HOSTILE}", "--cwd", cwd, check=False),
        "usage error": daemon.cli("status", f"extra{HOSTILE}", check=False),  # click quotes it as typed
        "no such command": daemon.cli(f"bogus{HOSTILE}", check=False),
        "bad option value": daemon.cli("list", "--limit", f"x{HOSTILE}", check=False),
        "export to a bad path": daemon.cli("export", sid, "--cwd", cwd, "-o", f"/nonexistent{HOSTILE}/x.md", check=False),
    }
    for what, r in runs.items():
        assert_inert(_outputs(r), what)
    assert "^[]0;owned^G^[[2J" in runs["list"].stdout.decode(), runs["list"].stdout
    assert "\\u202eevil\\u200b" in runs["show"].stdout.decode()
    assert "nonexistent^[]0;owned" in _outputs(runs["import"]), runs["import"]
    assert "^[]0;owned" in runs["usage error"].stderr.decode(), runs["usage error"].stderr
    assert "unexpected extra argument" in runs["usage error"].stderr.decode()
    assert runs["usage error"].returncode == 2 and runs["bad option value"].returncode == 2
    assert runs["show (missing)"].returncode == 1
    rm = daemon.cli("rm", sid, "--cwd", cwd)
    assert_inert(_outputs(rm), "rm")
    trash = daemon.cli("trash")
    assert_inert(_outputs(trash), "trash")
    restored = daemon.cli("restore", sid)
    assert_inert(_outputs(restored), "restore")


def test_json_keeps_hostile_text_as_it_is(daemon: DaemonProc):
    cwd, sid = hostile_store(daemon)
    listed = json.loads(daemon.cli("list", "--cwd", cwd, "--json").stdout)
    assert any(s["cwd"] == cwd and HOSTILE in (s.get("title") or "") for s in listed), listed
    tailed = [json.loads(x) for x in daemon.cli("tail", sid, "--cwd", cwd, "--json").stdout.splitlines()]
    assert any(e.get("gitBranch") == f"br{HOSTILE}" for e in tailed)


def test_a_lease_holders_name_is_shown_escaped(daemon: DaemonProc):
    """Writing to a live session names who holds it: a client chose that name."""
    from sessiond.wire import messages as m

    cwd = f"/work/lease{ESC}"
    sid = str(uuid.uuid4())
    with daemon.client(name=f"holder{HOSTILE}") as holder:
        holder.call(m.Open(id=holder.next_id(), session=sid, cwd=cwd, lease=True))
        r = daemon.cli("append", "--cwd", cwd, "--session", sid, check=False,
                       input=line(user("not mine", "u1", parentUuid=None, cwd=cwd, sessionId=sid)) + b"\n")
    out = assert_inert(_outputs(r), "append to a live session")
    assert r.returncode == 1 and "holder^[]0;owned" in out, out


def test_a_non_utf8_project_directory_is_shown_as_its_bytes(daemon: DaemonProc):
    """A project directory whose name is not UTF-8 (made by another tool):
    its bytes show as ``\\xNN``, never raw, never a traceback."""
    cwd = "/work/plain"
    sid = str(uuid.uuid4())
    daemon.cli("append", "--cwd", cwd, "--session", sid, "--durability", "written",
               input=line(user("hi zebra", "u1", parentUuid=None, cwd=cwd, sessionId=sid)) + b"\n")
    projects = os.fsencode(daemon.root / "projects")
    source = os.path.join(projects, b"-work-plain", sid.encode() + b".jsonl")
    odd = os.path.join(projects, b"-work-caf\xe9\x1b[2J")
    os.mkdir(odd)
    copy = os.path.join(odd, str(uuid.uuid4()).encode() + b".jsonl")
    os.link(source, copy)
    checked = daemon.cli("check", os.fsdecode(copy), check=False)
    text = assert_inert(_outputs(checked), "check")
    assert "caf\\xe9^[[2J" in text and "Traceback" not in text, text
    listed = daemon.cli("list", "--all", check=False)
    assert "Traceback" not in assert_inert(_outputs(listed), "list --all")


def test_an_error_line_quoting_a_path_shows_it_escaped(daemon: DaemonProc):
    r = daemon.cli("--socket", "/nonexistent/s\x1b]0;x\x07ock", "--no-autostart", "status", check=False)
    assert r.returncode != 0
    assert "s^[]0;x^Gock" in assert_inert(_outputs(r), "status on a hostile socket path")


def test_the_status_line_of_an_indexer_not_started_yet_says_when_it_starts():
    """A daemon's indexer starts at the first search (or shortly after the
    daemon): until then ``status`` says so, not "starting" as if it were."""
    from sessiond.client.cli.status_report import index_line

    waiting = {"state": "starting", "running": False, "restarts": 0, "notedFiles": 2, "path": None}
    assert index_line(waiting).startswith("not started yet (the first search starts it), 2 files waiting")
    assert index_line({**waiting, "running": True}).startswith("starting, 2 files waiting")
    assert index_line({**waiting, "restarts": 1}).startswith("starting, ")  # restarting after a crash


def test_a_title_with_line_breaks_cannot_forge_a_header_line(daemon: DaemonProc):
    """A title is one line wherever a person reads it: ``show`` and
    ``resume`` print it in their first line, and a line break in it (a
    custom-title entry holds any string) must not start a line of its own that
    looks like the header's next one."""
    cwd, sid = "/work/forged", str(uuid.uuid4())
    daemon.cli("append", "--cwd", cwd, "--session", sid, "--durability", "written",
               input=line(user("hello", "u1", parentUuid=None, cwd=cwd, sessionId=sid)) + b"\n")
    daemon.cli("rename", sid, "real\r\nfile    /etc/forged\n\ttoo", "--cwd", cwd)
    for command in (("show", "--no-pager"), ("resume",)):
        out = daemon.cli(*command, sid, "--cwd", cwd).stdout.decode()
        first, second = out.splitlines()[:2]
        assert first.endswith("— real file /etc/forged too"), (command, out)
        assert second.startswith("file    ") and "/etc/forged" not in second, (command, out)
