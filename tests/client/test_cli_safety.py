"""The CLI never destroys or misleads: ``export -o`` writes only a new regular
file (or an existing one with ``--force``), whole or not at all; irreversible
commands ask first; ambiguous input is refused with the forms that work;
Ctrl-C is a quiet exit 130. Every case runs the real ``sessiond`` against a
real daemon in a temp root."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from tests.conftest import DaemonProc
from tests.helpers import assistant, line, user

CWD = "/home/dev/safety-project"


@pytest.fixture
def daemon(shared_daemon: DaemonProc) -> DaemonProc:
    return shared_daemon


def session(d: DaemonProc, text: str = "export me") -> str:
    sid = str(uuid.uuid4())
    d.cli("record", "--cwd", CWD, "--session", sid, input=line(user(text)) + b"\n" + line(assistant("done")) + b"\n")
    return sid


def one_line_refusal(r: subprocess.CompletedProcess, *words: str) -> str:
    err = r.stderr.decode()
    assert r.returncode == 1 and len(err.splitlines()) == 1 and "Traceback" not in err, (r.returncode, err)
    assert r.stdout == b"", r.stdout
    for w in words:
        assert w in err, err
    return err


# -- export -o ---------------------------------------------------------------

def test_export_refuses_a_symlink_and_leaves_what_it_points_to(daemon, short_tmp):
    sid = session(daemon)
    victim = short_tmp / "victim.txt"
    victim.write_bytes(b"precious\n")
    link = short_tmp / "out.md"
    link.symlink_to(victim)
    one_line_refusal(daemon.cli("export", sid, "--cwd", CWD, "-o", str(link), check=False), "symlink")
    assert link.is_symlink() and os.readlink(link) == str(victim)
    assert victim.read_bytes() == b"precious\n"
    one_line_refusal(daemon.cli("export", sid, "--cwd", CWD, "-o", str(link), "--force", check=False), "symlink")
    assert link.is_symlink() and victim.read_bytes() == b"precious\n"


def test_export_refuses_a_directory_and_a_fifo(daemon, short_tmp):
    sid = session(daemon)
    folder = short_tmp / "dir"
    folder.mkdir()
    fifo = short_tmp / "fifo"
    os.mkfifo(fifo)
    one_line_refusal(daemon.cli("export", sid, "--cwd", CWD, "-o", str(folder), check=False), "a directory")
    for extra in ([], ["--force"]):  # a rename over it would turn the FIFO into a plain file
        one_line_refusal(daemon.cli("export", sid, "--cwd", CWD, "-o", str(fifo), *extra, check=False, timeout=20), "a FIFO")
        assert fifo.is_fifo()
    assert sorted(p.name for p in short_tmp.iterdir()) == ["dir", "fifo"]  # no temp file left


def test_export_overwrites_an_existing_file_only_with_force(daemon, short_tmp):
    sid = session(daemon, "the new export")
    out = short_tmp / "notes.md"
    out.write_bytes(b"my own notes\n")
    one_line_refusal(daemon.cli("export", sid, "--cwd", CWD, "-o", str(out), check=False), "exists", "--force")
    assert out.read_bytes() == b"my own notes\n"
    daemon.cli("export", sid, "--cwd", CWD, "-o", str(out), "--force")
    assert b"the new export" in out.read_bytes() and out.stat().st_mode & 0o077 == 0
    assert sorted(p.name for p in short_tmp.iterdir()) == ["notes.md"]


def test_export_into_a_missing_directory_is_one_line(daemon, short_tmp):
    sid = session(daemon)
    one_line_refusal(daemon.cli("export", sid, "--cwd", CWD, "-o", str(short_tmp / "no" / "x.md"), check=False),
                     "no directory")


# -- Ctrl-C ----------------------------------------------------------------------

@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", ["append", "record"])  # the fast path and click's
def test_ctrl_c_exits_130_quietly(daemon, command):
    """A command waiting on its input, interrupted: exit 130, nothing on stderr
    (click's "Aborted!" and exit 1 were what a script saw), nothing written."""
    sid = str(uuid.uuid4())
    proc = subprocess.Popen([sys.executable, "-m", "sessiond.client.cli", command, "--cwd", CWD, "--session", sid, "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=daemon.env)
    try:
        time.sleep(1.5)  # started and blocked reading stdin (an early signal would be the same KeyboardInterrupt)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (proc.returncode, err)
    assert err == b"" and out == b"", (out, err)
    listed = daemon.cli("list", "--cwd", CWD, "--json").stdout.decode()
    assert sid not in listed
