"""Terminal controls inside a transcript are shown, never obeyed: a tool result,
a prompt, a title or a branch name can hold whatever a program printed (ESC [2J,
an OSC that sets the window title or writes the clipboard, 8-bit CSI, a
bidirectional override), and every command that prints transcript text for a
person prints it visibly escaped (``output.printable``); ``--json`` keeps it."""

from __future__ import annotations

import json
import uuid

from tests.conftest import DaemonProc
from tests.helpers import assistant, line, user

CWD = "/work/controls"
CLEAR = "\x1b[2J\x1b[H"
OSC_TITLE = "\x1b]0;owned\x07"
CSI8 = "\x9b31m"
RLO = "\u202e"
BAD = ("\x1b", "\x07", "\x9b", "\u202e", "\r")


def poisoned(daemon: DaemonProc) -> str:
    sid = str(uuid.uuid4())
    result = {"type": "tool_result", "tool_use_id": "t1", "content": f"build log{CLEAR}{OSC_TITLE}done\rhidden"}
    entries = [
        user(f"fix zebrafish{OSC_TITLE} please", "u1", parentUuid=None, cwd=CWD, sessionId=sid,
             gitBranch=f"main{CLEAR}"),
        {**assistant("", "a1", parentUuid="u1", cwd=CWD, sessionId=sid),
         "message": {"role": "assistant", "content": [
             {"type": "text", "text": f"zebrafish found {CSI8}red{RLO}txt.exe"},
             {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": f"echo {CLEAR}"}}]}},
        {**user("", "u2", parentUuid="a1", cwd=CWD, sessionId=sid),
         "message": {"role": "user", "content": [result]}},
    ]
    daemon.cli("append", "--cwd", CWD, "--session", sid, "--durability", "written",
               input=b"".join(line(e) + b"\n" for e in entries))
    return sid


def assert_inert(out: bytes, what: str) -> str:
    text = out.decode()
    for ch in BAD:
        assert ch not in text, f"{what} printed {ch!r}: {text!r}"
    assert "^[" in text, f"{what} dropped the escape instead of showing it: {text!r}"
    return text


def test_every_reading_command_shows_controls_instead_of_obeying_them(daemon: DaemonProc):
    sid = poisoned(daemon)
    shown = assert_inert(daemon.cli("show", sid, "--cwd", CWD, "--no-pager").stdout, "show")
    assert "zebrafish found \\u009b31mred\\u202etxt.exe" in shown, shown
    assert "build log^[[2J^[[H^[]0;owned^Gdone" in shown, shown  # the tool result (its CR read as a space)
    assert_inert(daemon.cli("tail", sid, "--cwd", CWD).stdout, "tail")
    listed = assert_inert(daemon.cli("list", "--cwd", CWD).stdout, "list")
    assert "main^[[2J^[[H" in listed  # the branch column
    found = daemon.cli("search", "zebrafish", "--cwd", CWD, "--role", "assistant").stdout.decode()
    for ch in BAD:
        assert ch not in found, found
    assert "\\u009b31m" in found, found  # the snippet of the assistant's text
    assert_inert(daemon.cli("search", "zebrafish", "--cwd", CWD, "--role", "user").stdout, "search")


def test_json_keeps_the_entries_own_text(daemon: DaemonProc):
    sid = poisoned(daemon)
    shown = json.loads(daemon.cli("show", sid, "--cwd", CWD, "--json").stdout)
    first, reply = shown["messages"][0], shown["messages"][1]
    assert first["message"]["content"] == f"fix zebrafish{OSC_TITLE} please" and first["gitBranch"] == f"main{CLEAR}"
    assert reply["message"]["content"][0]["text"] == f"zebrafish found {CSI8}red{RLO}txt.exe"
    hits = json.loads(daemon.cli("search", "zebrafish", "--cwd", CWD, "--json").stdout)
    assert any(OSC_TITLE in h["title"] or OSC_TITLE in h["snippet"] for h in hits)
