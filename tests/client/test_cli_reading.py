"""``show``, ``tail`` and ``watch`` read in a real terminal (issue 30): the
CLI runs in a private tmux server (the screen a person sees, read with
``capture-pane``) or a pty, on real corpus transcripts and a real daemon.

What must hold: the model's Markdown is rendered (no ``##``/``**`` left for a
heading or bold); a Bash call shows its command and its result under it, the
result's newlines kept; harness markup (``<command-name>``,
``<local-command-caveat>``) is a dim one-line notice, never raw; bookkeeping
(progress, file snapshots) is hidden unless ``--all-entries``; a transcript's
escape sequences (a screen clear, a window title, an OSC 8 link, rich markup)
are shown, not obeyed; ``watch`` prints a long message whole as it is
appended, and a result that comes later under its call."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from sessiond.wire import messages as m
from tests.conftest import CORPUS, REPO, DaemonProc
from tests.helpers import in_terminal, line, user, wait_until

MARKDOWN = CORPUS / "daaain__claude-code-log__29ccd257-68b1-427f-ae5f-6524b7cb6f20.jsonl"
"""An Explore session whose last answer is Markdown: headings, bold, a table, lists, a code block."""
BASH = CORPUS / "daaain__claude-code-log__03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl"
"""A short session: ``ls -la`` with a four-line result, a ``/exit`` command and its caveat."""
IDE = CORPUS / "daaain__claude-code-log__cb2e607c-c758-415a-8b45-c49e4631906a.jsonl"
"""Prompts sent from an IDE, with ``<ide_selection>`` and ``<ide_opened_file>`` markup."""
SKILL = CORPUS / "entireio__external-agents__24-4c84dd9136-0-full.jsonl"
"""A skill run: its body is an ``isMeta`` entry the harness expanded."""
PROGRESS = CORPUS / "dagster-io__erk__393e5f27-e608-4173-adcc-fcef1abcc750.jsonl"
"""A session with hook progress entries and file-history snapshots between its messages."""
CWD = "/work/reading"
SGR = re.compile(rb"\x1b\[[0-9;]*m")


@pytest.fixture
def daemon(shared_daemon: DaemonProc) -> DaemonProc:
    """One daemon for the module: each test writes sessions of its own."""
    return shared_daemon


class Tmux:
    """A private tmux server (its socket under ``base``) running one command
    in a ``width`` x ``height`` pane with ``env`` only; the pane is kept after
    the command ends (``remain-on-exit``) so its screen can be read."""

    def __init__(self, base: Path, args: list[str], env: dict[str, str], width: int = 100, height: int = 50) -> None:
        tmux = shutil.which("tmux")
        assert tmux is not None, "tmux is not installed (.ci/run installs it)"
        self.tmux = [tmux, "-S", str(base / "tmux.sock"), "-f", "/dev/null"]
        keep = {k: env[k] for k in ("PATH", "HOME", "SESSIOND_ROOT", "SESSIOND_SOCKET", "PYTHONPATH", "TZ") if k in env}
        keep.update({"TERM": "xterm-256color", "LANG": "C.UTF-8", "PYTHONPATH": str(REPO)})
        command = "env -i " + " ".join(f"{k}={shlex.quote(v)}" for k, v in keep.items())
        command += " " + shlex.join([sys.executable, "-m", "sessiond.client.cli", *args]) + "; echo EXITED $?"
        subprocess.run([*self.tmux, "start-server", ";", "set-option", "-g", "history-limit", "100000", ";",
                        "set-option", "-g", "remain-on-exit", "on", ";",
                        "new-session", "-d", "-s", "r", "-x", str(width), "-y", str(height), command],
                       check=True, timeout=30)

    def screen(self, escapes: bool = False) -> str:
        """Every line the pane holds, its scrollback included (with ``escapes``: its styles as SGR)."""
        return subprocess.run([*self.tmux, "capture-pane", "-p", "-t", "r", "-S", "-", *(["-e"] if escapes else [])],
                              capture_output=True, text=True, check=True, timeout=30).stdout

    def title(self) -> str:
        return subprocess.run([*self.tmux, "display-message", "-p", "-t", "r", "#{pane_title}"],
                              capture_output=True, text=True, check=True, timeout=30).stdout.strip()

    def until(self, text: str, timeout: float = 60.0) -> str:
        """The screen once ``text`` is on it; fails after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if text in screen:
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} never showed:\n{screen[-3000:]}")
            time.sleep(0.2)

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True, timeout=30)


def in_tmux(base: Path, args: list[str], env: dict[str, str], **size) -> tuple[str, Tmux]:
    """Run a command that ends in tmux: (its screen when it ended, the tmux)."""
    t = Tmux(base, args, env, **size)
    return t.until("EXITED"), t


def _lines(screen: str) -> list[str]:
    return [ln.rstrip() for ln in screen.splitlines()]


def test_show_renders_the_models_markdown(daemon: DaemonProc, short_tmp):
    screen, t = in_tmux(short_tmp, ["show", "--no-pager", str(MARKDOWN)], daemon.env)
    try:
        assert "EXITED 0" in screen, screen[-2000:]
        lines = _lines(screen)
        assert "Here's an overview of the claude-code-log project organization:" in lines  # **bold** rendered
        assert "Project Summary" in lines and "Key Directory Structure" in lines  # ## headings rendered
        answer = screen.split("Here's an overview", 1)[1]
        assert "**" not in answer and not any(ln.lstrip().startswith("#") for ln in _lines(answer)), answer
        assert re.search(r"claude_code_log/factories/ +6 factory modules", answer)  # the table's columns
        assert " • cli.py - Click-based CLI interface" in lines  # a list item, its bold rendered
        styled = t.screen(escapes=True).split("Here's an overview", 1)[1]
        assert re.search(r"\n(\x1b\[[0-9;]*m)*\x1b\[[0-9;]*4[0-9;]*m(\x1b\[[0-9;]*m)*Project Summary\n", styled), \
            styled[:600]  # a heading, styled (underlined) on a terminal
    finally:
        t.close()


def test_show_pairs_a_bash_call_with_its_result_and_names_harness_markup(daemon: DaemonProc, short_tmp):
    screen, t = in_tmux(short_tmp, ["show", "--no-pager", str(BASH)], daemon.env)
    t.close()
    assert "EXITED 0" in screen, screen[-2000:]
    lines = _lines(screen)
    at = lines.index("● Bash ls -la /home/user/project/")
    assert lines[at + 1:at + 5] == ["  ⎿ total 12",
                                     "    drwxrwxr-x 2 cboos cboos 4096 févr. 16 19:46 .",
                                     "    drwxrwxr-x 3 cboos cboos 4096 févr. 16 19:46 ..",
                                     "    -rw-rw-r-- 1 cboos cboos  345 févr. 16 19:46 work-and-dev-docs.md"], lines[at:at + 6]
    assert "● Read /home/user/project/work-and-dev-docs.md" in lines
    for raw in ("<command-name>", "<command-message>", "<local-command-caveat>", "<local-command-stdout>",
                "</"):
        assert raw not in screen, raw
    assert "· command: /exit" in lines
    assert any(ln.startswith("· local command caveat: Caveat: The messages below") for ln in lines)
    ide = daemon.cli("show", "--no-pager", str(IDE)).stdout.decode()
    assert "<ide_" not in ide and "· IDE selection: The user selected the lines 508 to 508" in ide
    skill = daemon.cli("show", "--no-pager", str(SKILL)).stdout.decode()
    assert "Base directory for this skill" not in skill and "\n· skill: Verification Before Completion\n" in skill


def test_a_long_result_is_shortened_unless_full_and_the_width_is_kept(daemon: DaemonProc):
    """A pipe: ``--width`` wraps, a long tool result shows its first lines and
    how many are left out, ``--full`` all of it."""
    short = daemon.cli("show", "--no-pager", "--width", "60", str(MARKDOWN)).stdout.decode()
    body = short.split("\n\n", 1)[1].rsplit("\n\n", 1)[0]  # between the header and the footer
    assert max(len(ln) for ln in body.splitlines()) <= 60, max(body.splitlines(), key=len)
    hidden = re.search(r"… (\d+) more lines \(--full shows them\)", short)
    assert hidden and int(hidden.group(1)) > 100
    assert "tracking, and interactive features." in " ".join(short.split())  # the answer itself: never shortened
    full = daemon.cli("show", "--no-pager", "--width", "60", "--full", str(MARKDOWN)).stdout.decode()
    assert "more lines" not in full
    assert len(full.splitlines()) > len(short.splitlines()) + int(hidden.group(1)) - 1


def test_tail_and_show_hide_the_bookkeeping_unless_asked(daemon: DaemonProc):
    env = {**daemon.env, "TERM": "xterm", "COLUMNS": "100"}
    status, out = in_terminal(["--no-autostart", "tail", "-n", "60", str(PROGRESS)], env, cols=100)
    text = out.decode()
    assert status == 0, text[-2000:]
    assert "·· progress:" not in text and "hook_progress" not in text
    assert re.search(r"\d+ progress entr(y|ies) not shown \(--all-entries shows them\)", text), text[-500:]
    status, out = in_terminal(["--no-autostart", "tail", "-n", "60", "--all-entries", str(PROGRESS)], env, cols=100)
    assert status == 0 and "·· progress: hook_progress" in out.decode() and "not shown" not in out.decode()
    shown = daemon.cli("show", "--no-pager", str(PROGRESS)).stdout.decode()
    assert "·· file-history-snapshot" not in shown and "25 file-history-snapshot entries" in shown
    everything = daemon.cli("show", "--no-pager", "--all-entries", str(PROGRESS)).stdout.decode()
    assert everything.count("·· file-history-snapshot: ") == 25 and everything.count("·· progress: ") == 222


HOSTILE_TEXT = ("# Heading\n\nA [link](http://evil.example/x) and "
                "\x1b]8;;http://evil.example/\x1b\\raw link\x1b]8;;\x1b\\, a title\x1b]0;owned\x07, "
                "a clear\x1b[2J\x1b[H, the clipboard\x1b]52;c;cm0gLXJmIH4=\x07, 8-bit\x9b31m CSI, "
                "rich markup [bold red]not markup[/bold red] :smile: and <b>html</b>.\n\n"
                "```\ncode \x1b[31mred\x1b[0m \x1b]0;owned\x07\n```\n")


def hostile_session(daemon: DaemonProc) -> str:
    sid = str(uuid.uuid4())
    call = {"type": "assistant", "uuid": "a2", "parentUuid": "a1", "cwd": CWD, "sessionId": sid,
            "message": {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "cat \x1b]0;owned\x07 x"}}]}}
    result = {**user("", "u2", parentUuid="a2", cwd=CWD, sessionId=sid),
              "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                                       "content": "out\x1b[2J\x1b[3J\x1b]0;owned\x07\nline two"}]}}
    entries = [user("hello \x1b]0;owned\x07 there", "u1", parentUuid=None, cwd=CWD, sessionId=sid),
               {"type": "assistant", "uuid": "a1", "parentUuid": "u1", "cwd": CWD, "sessionId": sid,
                "message": {"role": "assistant", "content": [{"type": "text", "text": HOSTILE_TEXT}]}},
               call, result]
    daemon.cli("append", "--cwd", CWD, "--session", sid, "--durability", "written",
               input=b"".join(line(e) + b"\n" for e in entries))
    return sid


def test_a_transcripts_escapes_are_shown_not_obeyed(daemon: DaemonProc, short_tmp):
    """No transcript text reaches the terminal as a control: the only escape
    sequences written are the colours the rendering added (SGR), links are
    text with their address (no OSC 8), rich markup and emoji codes stay as
    typed; on the screen the title is untouched and nothing was cleared."""
    sid = hostile_session(daemon)
    env = {**daemon.env, "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    for args in (["show", sid, "--cwd", CWD, "--no-pager"], ["tail", sid, "--cwd", CWD]):
        status, out = in_terminal([*args, "--color", "always"], env, cols=200)
        assert status == 0, out[-1000:]
        assert SGR.search(out), "no colour at all: the test would prove nothing"
        assert b"\x1b" not in SGR.sub(b"", out), [x for x in re.findall(rb"\x1b.{0,12}", SGR.sub(b"", out))]
        plain = SGR.sub(b"", out).decode()
        for ch in ("\x07", "\x9b", "\r\r"):
            assert ch not in plain, (args, ch)
        assert "link (http://evil.example/x)" in plain  # a link as text with its address
        assert "^[]8;;http://evil.example/^[\\raw link" in plain and "^[]0;owned^G" in plain
        flat = " ".join(plain.split())
        assert "[bold red]not markup[/bold red] :smile: and <b>html</b>" in flat  # as typed, nothing dropped
        assert "out^[[2J^[[3J^[]0;owned^G" in plain and "line two" in plain  # the tool result, its newline kept
    t = Tmux(short_tmp, ["show", sid, "--cwd", CWD, "--no-pager"], env)
    try:
        before = t.title()
        screen = t.until("EXITED")
        assert "EXITED 0" in screen
        assert screen.lstrip().startswith(f"session {sid}")  # nothing cleared the screen under it
        assert t.title() == before != "owned"
    finally:
        t.close()


def test_watch_prints_a_long_message_whole_as_it_is_appended(daemon: DaemonProc, short_tmp):
    sid = str(uuid.uuid4())
    daemon.cli("append", "--cwd", CWD, "--session", sid, "--durability", "written",
               input=line(user("start here", "u1", parentUuid=None, cwd=CWD, sessionId=sid)) + b"\n")
    paragraphs = [f"Paragraph {i}: " + " ".join(f"word{i}x{j}" for j in range(40)) for i in range(8)]
    text = "## The plan\n\n" + "\n\n".join(paragraphs) + "\n\nThe **last** word is ENDMARK."
    reply = {"type": "assistant", "uuid": "a1", "parentUuid": "u1", "cwd": CWD, "sessionId": sid,
             "message": {"role": "assistant", "id": "msg1", "content": [{"type": "text", "text": text}]}}
    call = {"type": "assistant", "uuid": "a2", "parentUuid": "a1", "cwd": CWD, "sessionId": sid,
            "message": {"role": "assistant", "id": "msg1", "content": [
                {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "printf 'one\\ntwo\\n'"}}]}}
    between = {"type": "assistant", "uuid": "a3", "parentUuid": "a2", "cwd": CWD, "sessionId": sid,
               "message": {"role": "assistant", "id": "msg1", "content": [
                   {"type": "tool_use", "id": "t2", "name": "Read", "input": {"file_path": "/etc/hostname"}}]}}
    result = {**user("", "u2", parentUuid="a3", cwd=CWD, sessionId=sid),
              "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "one\ntwo"}]}}
    t = Tmux(short_tmp, ["watch", sid, "--cwd", CWD, "-n", "1"], daemon.env, width=100, height=80)
    try:
        t.until("start here")
        with daemon.client() as c:
            wait_until(lambda: c.status().watchers >= 1, "watch to subscribe", timeout=30)
            for entry in (reply, call, between):
                c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[json.dumps(entry).encode()],
                                durability="written"))
            t.until("● Read /etc/hostname")
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[json.dumps(result).encode()],
                            durability="written"))
        screen = t.until("⎿ one")
        flat = " ".join(screen.split())
        for p in paragraphs:
            assert p in flat, p[:40]  # every word of every paragraph, wrapped, none cut
        assert "The last word is ENDMARK." in flat and "**" not in screen and "##" not in screen
        lines = _lines(screen)
        assert "The plan" in lines and sum(ln.startswith("── assistant") for ln in lines) == 1  # one response, one header
        at = lines.index("↳ Bash printf 'one\\ntwo\\n'")  # the result came after another call: its call named
        assert lines[at + 1:at + 3] == ["  ⎿ one", "    two"], lines[at:]
        assert lines.index("● Bash printf 'one\\ntwo\\n'") < lines.index("● Read /etc/hostname") < at
    finally:
        t.close()
