"""Entries a client could not deliver at exit (the daemon alive but stalled, so
the fallback refuses to write beside it; or the fallback itself failing) are a
loud error and a non-zero CLI exit, never a quiet return value."""

import logging
import os
import signal
import subprocess
import sys
import uuid

from sessiond.client import Client, Session
from sessiond.client.cli.write_cmds import BATCH_ENTRIES
from tests.helpers import line, main_path, user, wait_until

CWD = "/work/project"


def test_cli_record_beside_a_stalled_daemon_exits_non_zero(daemon):
    sid = str(uuid.uuid4())
    proc = subprocess.Popen([sys.executable, "-m", "sessiond.client.cli", "--timeout", "0.5", "record", "--cwd", CWD,
                             "--session", sid], env=daemon.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        # A full first batch goes out before the input ends; once it is in the file
        # the CLI is surely talking to the daemon.
        proc.stdin.write(b"".join(line(user(f"q{i}")) + b"\n" for i in range(BATCH_ENTRIES)))
        proc.stdin.flush()
        wait_until(lambda: main_path(daemon.root, CWD, sid).exists(), "the first batch to be written")
        daemon.signal(signal.SIGSTOP)
        out, err = proc.communicate(line(user("last")) + b"\n", timeout=60)
    finally:
        daemon.signal(signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, (out, err)
    text = err.decode()
    assert "NOT DELIVERED" in text and "Traceback" not in text
    assert f"{BATCH_ENTRIES + 1} entries of session" in text  # the unconfirmed first batch and the last message
    assert b"recorded in session" not in out


def test_session_close_is_loud_when_the_fallback_fails(daemon_factory, caplog):
    d = daemon_factory()  # never started: the fallback writes directly
    sid = str(uuid.uuid4())
    project = main_path(d.root, CWD, sid).parent
    project.mkdir(parents=True)
    os.chmod(project, 0o500)  # the fallback cannot create the transcript
    try:
        if os.access(project, os.W_OK):  # root ignores the mode: make the target a directory instead
            main_path(d.root, CWD, sid).mkdir()
        c = Client(d.socket, root=d.root, autostart=False, timeout=0.5)
        s = Session(c, sid, CWD, reconnect_timeout=0.2)
        s.record([user("q")])
        with caplog.at_level(logging.WARNING, logger="sessiond.client"):
            res = s.close(timeout=0.2)
    finally:
        os.chmod(project, 0o700)
    assert res is not None and res.undelivered == 1
    assert any(r.levelno >= logging.ERROR and "NOT DELIVERED" in r.getMessage() for r in caplog.records)
