"""A stop asked as soon as the socket answers (a service manager, a test) is a
clean stop: the daemon replays its spool before it serves, and a SIGTERM in that
window used to kill it with the default action (nothing drained, exit -15)."""

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from sessiond.client.autostart import socket_answers
from tests.helpers import index_status, line, user, wait_until


def until_listening(proc: subprocess.Popen, sock: Path) -> None:
    """Back as soon as the daemon's socket answers (polled every millisecond:
    the SIGTERM that follows is to land inside start-up)."""
    wait_until(lambda: socket_answers(sock) or proc.poll() is not None, "the socket to answer", every=0.001)
    assert proc.poll() is None, "the daemon did not start"


def test_sigterm_right_after_the_socket_listens_is_a_clean_stop(short_tmp):
    codes = []
    for i in range(12):
        base = short_tmp / str(i)
        (base / "run").mkdir(parents=True, mode=0o700)
        sock = base / "run" / "s.sock"
        proc = subprocess.Popen([sys.executable, "-m", "sessiond.client.cli", "--root", str(base / "root"),
                                 "--socket", str(sock), "serve"], stderr=subprocess.DEVNULL)
        until_listening(proc, sock)
        proc.send_signal(signal.SIGTERM)
        codes.append(proc.wait(timeout=20))
    assert codes == [0] * 12



def test_a_stop_asked_while_starting_starts_nothing_after_it(daemon_factory):
    """SIGTERM while start-up still reads the store (here the follower's walk
    of 3,000 transcripts): the daemon never says it is ready after it said it
    is shutting down, starts no search indexer only to stop it (it did, and
    on a busy machine then waited out the indexer's 10 s stop bound: the log
    says when one was killed), and exits 0."""
    d = daemon_factory()
    d.socket.parent.mkdir(mode=0o700)
    project = d.root / "projects" / "-work-many"
    project.mkdir(parents=True)
    for i in range(3000):
        (project / f"{uuid.UUID(int=i)}.jsonl").write_bytes(line(user(f"n{i}")) + b"\n")
    early = 0
    for _ in range(3):
        d.log.write_bytes(b"")
        with open(d.log, "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "sessiond.client.cli", "serve", "--log-level", "info"],
                                    env=d.env, stderr=log, stdout=subprocess.DEVNULL)
        until_listening(proc, d.socket)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, d.log_text()
        text = d.log_text()
        before, _, after = text.partition("shutting down")
        assert after, text
        early += "ready:" not in before
        assert "ready:" not in after and "search indexer started" not in after, text
        assert "did not stop" not in text, text
    assert early, "every SIGTERM came after start-up: nothing shown"


def test_a_stop_before_the_indexer_said_anything_ends_it_at_once(daemon_factory, short_tmp, monkeypatch):
    """The daemon stopped while its search indexer is still starting (held here,
    before its main runs, by a sitecustomize on its path): it is ended at once
    by SIGTERM, having done nothing, not asked to commit and waited for (a
    starting indexer does not read the Stop: the daemon waited out its 10 s
    bound and killed it, and the log said so). Most daemons of a test run stop
    before their indexer, at the lowest priority, has even imported its code."""
    held = short_tmp / "held"
    held.mkdir()
    (held / "sitecustomize.py").write_text(
        "import sys, time\n"
        "if 'sessiond.daemon.index.worker' in sys.orig_argv:\n"
        "    time.sleep(600)  # the interpreter starting, for as long as the test needs\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(held), os.environ.get("PYTHONPATH")])))
    d = daemon_factory().start()

    wait_until(lambda: index_status(d).get("pid") is not None, "the indexer to be started")
    assert index_status(d)["state"] == "starting"
    assert d.stop() == 0
    text = d.log_text()
    assert "did not stop" not in text and "Traceback" not in text, text


def test_the_stop_takes_the_indexer_out_of_the_idle_class(daemon_factory):
    """The indexer runs in SCHED_IDLE, which on a busy machine waits for an
    idle moment to do anything: the daemon's stop first moves it to the normal
    class (nice 19 stays), so its commit and exit do not wait for the machine
    to go quiet. Seen here on an indexer held stopped (SIGSTOP) meanwhile."""
    d = daemon_factory().start()

    wait_until(lambda: index_status(d).get("state") == "ok", "the indexer to open its index")
    pid = index_status(d)["pid"]
    wait_until(lambda: os.sched_getscheduler(pid) == os.SCHED_IDLE, "the indexer to enter SCHED_IDLE")
    os.kill(pid, signal.SIGSTOP)
    try:
        d.signal(signal.SIGTERM)
        wait_until(lambda: os.sched_getscheduler(pid) == os.SCHED_OTHER, "the stop to move the indexer to SCHED_OTHER")
    finally:
        os.kill(pid, signal.SIGCONT)
    assert d.wait() == 0
    assert "did not stop" not in d.log_text()
