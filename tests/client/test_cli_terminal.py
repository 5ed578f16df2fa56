"""``show`` in a real terminal (a pty): paged through ``$PAGER`` when longer
than the screen (``--no-pager`` not), coloured unless ``NO_COLOR``; piped, it is
plain text and never paged. Noise is counted, not shown, unless asked for."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import CORPUS, DaemonProc
from tests.helpers import in_terminal

LONG = CORPUS / "blackgirlbytes__planetfall-seed-signalkit__07-d253ca52d8-3-full.jsonl"
ESC = b"\x1b["


@pytest.fixture
def daemon(shared_daemon: DaemonProc) -> DaemonProc:
    """One daemon for the module: every test here writes sessions of its own
    and leaves the daemon as it found it."""
    return shared_daemon


def pager(short_tmp: Path) -> tuple[str, Path]:
    """A $PAGER that keeps what it was given."""
    got = short_tmp / "paged.txt"
    script = short_tmp / "pager.py"
    script.write_text(f"import sys\nopen({str(got)!r}, 'wb').write(sys.stdin.buffer.read())\n")
    return f"{sys.executable} {script}", got


def test_show_pages_a_long_conversation_in_colour_on_a_terminal(daemon: DaemonProc, short_tmp):
    cmd, got = pager(short_tmp)
    env = {**daemon.env, "PAGER": cmd, "TERM": "xterm"}
    env.pop("NO_COLOR", None)
    status, out = in_terminal(["show", str(LONG)], env)
    assert status == 0 and got.exists(), out[-500:]
    paged = got.read_bytes()
    assert b"Review project checkpoints and level 1 status" in paged.splitlines()[0]  # the title in the header
    assert ESC in paged  # coloured: a terminal, no NO_COLOR
    assert b"51 messages; turn complete" in paged


def test_no_pager_and_no_color_are_honoured(daemon: DaemonProc, short_tmp):
    cmd, got = pager(short_tmp)
    env = {**daemon.env, "PAGER": cmd, "TERM": "xterm", "NO_COLOR": "1"}
    status, out = in_terminal(["show", "--no-pager", str(LONG)], env)
    assert status == 0 and not got.exists()
    assert b"51 messages; turn complete" in out and ESC not in out


def test_a_short_conversation_is_not_paged(daemon: DaemonProc, short_tmp):
    cmd, got = pager(short_tmp)
    env = {**daemon.env, "PAGER": cmd, "TERM": "xterm"}
    status, out = in_terminal(["show", str(LONG)], env, rows=2000)
    assert status == 0 and not got.exists() and b"51 messages" in out


def test_piped_show_is_plain_and_folds_the_noise(daemon: DaemonProc, short_tmp):
    cmd, got = pager(short_tmp)
    r = daemon.cli("show", str(LONG), env={"PAGER": cmd, "TERM": "xterm"})
    assert not got.exists() and ESC not in r.stdout
    lines = r.stdout.decode().splitlines()
    # the queued prompt (an attachment) and the slash commands' records (system entries) are the conversation
    assert lines[-2] == ("5 attachments, 3 system entries and 4 file-history-snapshot entries not shown "
                         "(--all-entries shows them)")
    assert lines[-1].startswith("to resume it: sessiond import ")  # a file outside the store
    assert not any(line.startswith("·· ") for line in lines)
    full = daemon.cli("show", "--all-entries", str(LONG)).stdout.decode().splitlines()
    assert sum(line.startswith("·· attachment: ") for line in full) == 5
    assert sum(line.startswith("·· system: ") for line in full) == 3
    assert sum(line.startswith("·· file-history-snapshot: ") for line in full) == 4
    assert "not shown" not in full[-1]


def test_the_pager_gets_less_frx_unless_less_is_set(daemon: DaemonProc, short_tmp):
    got = short_tmp / "less.txt"
    script = short_tmp / "pager.py"
    script.write_text(f"import os, sys\nsys.stdin.buffer.read()\nopen({str(got)!r}, 'w').write(os.environ.get('LESS', '-'))\n")
    env = {**daemon.env, "PAGER": f"{sys.executable} {script}", "TERM": "xterm"}
    env.pop("LESS", None)
    status, out = in_terminal(["show", str(LONG)], env)
    assert status == 0 and got.read_text() == "FRX", out[-500:]
    status, out = in_terminal(["show", str(LONG)], {**env, "LESS": "-M"})
    assert status == 0 and got.read_text() == "-M", out[-500:]


def test_a_pager_quit_at_once_is_no_error(daemon: DaemonProc, short_tmp):
    """q in less before it read everything: the rest is dropped quietly, exit 0."""
    env = {**daemon.env, "PAGER": f"{sys.executable} -c pass", "TERM": "xterm"}
    status, out = in_terminal(["show", str(LONG)], env)
    assert status == 0 and b"Traceback" not in out and b"Broken pipe" not in out and b"rror" not in out, out[-500:]
