"""A reading command that reads the files although a daemon runs says so.

With no daemon, ``list``, ``search``, ``tail -f`` and ``watch`` read the files
quietly; a daemon that refuses the request, or serves another root than
``--root``, is named in one line on stderr (``daemon_source.py``), and stdout
stays the answer (``--json``: valid JSON).
"""

from __future__ import annotations

import json
import select
import uuid
from pathlib import Path

from sessiond.store.paths import project_dir
from tests.conftest import DaemonProc, short_dir
from tests.helpers import CliProcess, assistant, line, user, wait_until

CWD = "/home/dev/fallback-notes"


def _write_session(project: Path, text: str) -> str:
    """A session file written by hand (another program), as Claude Code would."""
    sid = str(uuid.uuid4())
    project.mkdir(parents=True, exist_ok=True)
    entries = [user(text, "u1", parentUuid=None, sessionId=sid, cwd=CWD),
               assistant("done", "a1", parentUuid="u1", sessionId=sid, cwd=CWD)]
    (project / f"{sid}.jsonl").write_bytes(b"".join(line(e) + b"\n" for e in entries))
    return sid


def _linked_project(daemon: DaemonProc, elsewhere: Path, cwd: str, text: str) -> str:
    """A project dir of the root that is a symlink to a dir outside it: the
    daemon refuses to list it (it never reads outside its root), the files
    can still be read through the link."""
    target = elsewhere / "project"
    sid = _write_session(target, text)
    link = project_dir(daemon.root, cwd)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target, target_is_directory=True)
    return sid


def test_list_says_when_the_daemon_refused_and_the_files_were_read(shared_daemon: DaemonProc):
    cwd = f"{CWD}/{uuid.uuid4().hex[:8]}"
    with short_dir() as elsewhere:
        sid = _linked_project(shared_daemon, elsewhere, cwd, "through a symlink")
        out = shared_daemon.cli("--no-autostart", "list", "--cwd", cwd, "--json")
        assert [s["sessionId"] for s in json.loads(out.stdout)] == [sid]  # stdout: the JSON list alone
        err = out.stderr.decode().splitlines()
        assert len(err) == 1, err
        assert "permission_denied" in err[0] and "not a project directory" in err[0], err
        assert err[0].endswith("listed from the files"), err
        people = shared_daemon.cli("--no-autostart", "list", "--cwd", cwd, env={"COLUMNS": "200"})
        assert people.stdout.decode().splitlines()[1].endswith(sid[:8])
        assert len(people.stderr.decode().splitlines()) == 1


def test_list_says_when_the_daemon_serves_another_root(shared_daemon: DaemonProc):
    with short_dir() as other:
        sid = _write_session(project_dir(other, CWD), "in another store")
        out = shared_daemon.cli("--root", str(other), "--no-autostart", "list", "--cwd", CWD, "--json")
        assert [s["sessionId"] for s in json.loads(out.stdout)] == [sid]
        err = out.stderr.decode().splitlines()
        assert len(err) == 1 and f"serves {shared_daemon.root}, not {other}" in err[0], err
        assert err[0].endswith("listed from the files"), err


def test_list_with_no_daemon_reads_the_files_quietly(daemon_factory):
    d = daemon_factory()  # never started: nothing answers on its socket
    sid = _write_session(project_dir(d.root, CWD), "no daemon")
    out = d.cli("--no-autostart", "list", "--cwd", CWD, "--json")
    assert [s["sessionId"] for s in json.loads(out.stdout)] == [sid] and out.stderr == b""


def test_search_says_when_the_daemon_serves_another_root(shared_daemon: DaemonProc):
    with short_dir() as other:
        sid = _write_session(project_dir(other, CWD), "the pangolin of another store")
        out = shared_daemon.cli("--root", str(other), "search", "pangolin", "--cwd", CWD, "--json")
        assert [h["sessionId"] for h in json.loads(out.stdout)] == [sid]
        err = out.stderr.decode().splitlines()
        assert len(err) == 1 and f"serves {shared_daemon.root}, not {other}" in err[0], err
        assert "scanned the files" in err[0], err


def _said(cli: CliProcess) -> bool:
    """Whether it wrote to stderr (or ended), without reading it."""
    return cli.proc.poll() is not None or bool(select.select([cli.proc.stderr], [], [], 0)[0])


def _stderr_after(cli: CliProcess) -> list[str]:
    cli.proc.kill()
    cli.proc.wait(timeout=20)
    return cli.proc.stderr.read().decode().splitlines()


def test_tail_follow_says_when_the_daemon_refuses_to_stream_and_polls(shared_daemon: DaemonProc):
    with short_dir() as elsewhere:
        sid = _write_session(elsewhere / "project", "outside the root")
        path = elsewhere / "project" / f"{sid}.jsonl"
        with CliProcess("tail", "-f", "--json", "-n", "0", "--interval", "0.05", str(path), env=shared_daemon.env) as tail:
            later = assistant("appended by hand", "a2", parentUuid="a1")
            wait_until(lambda: _said(tail), "tail -f to say it polls")
            with open(path, "ab") as f:
                f.write(line(later) + b"\n")
            assert json.loads(tail.line())["uuid"] == "a2"  # followed all the same, from the file
            err = _stderr_after(tail)
        assert len(err) == 1 and "permission_denied" in err[0] and "outside the store root" in err[0], err
        assert err[0].endswith(f"following {path} by polling it"), err


def test_watch_says_when_the_daemon_serves_another_root(shared_daemon: DaemonProc):
    with short_dir() as other:
        sid = _write_session(project_dir(other, CWD), "watched in another store")
        path = project_dir(other, CWD) / f"{sid}.jsonl"
        with CliProcess("--root", str(other), "watch", sid, "--cwd", CWD, "-n", "1", "--json", "--interval", "0.05",
                        env=shared_daemon.env) as watch:
            assert json.loads(watch.line())["uuid"] == "a1"  # the last turn
            wait_until(lambda: _said(watch), "watch to say it polls")
            with open(path, "ab") as f:
                f.write(line(user("more", "u2", parentUuid="a1")) + b"\n")
            assert json.loads(watch.line())["uuid"] == "u2"
            err = _stderr_after(watch)
        assert len(err) == 1 and f"serves {shared_daemon.root}, not {other}" in err[0], err
        assert err[0].endswith("by polling it"), err
