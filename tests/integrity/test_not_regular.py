"""Readers skip what is not a regular file, and say so: a FIFO named
``<uuid>.jsonl`` in the store must never block a reader (it waits forever for a
writer on a plain open)."""

import json
import os
import uuid

from tests.helpers import line, main_path, user

CWD = "/work/project"
NO_DAEMON = {"SESSIOND_SOCKET": "/nonexistent/sessiond.sock"}


def test_every_reader_skips_a_fifo_named_like_a_transcript(daemon_factory):
    d = daemon_factory()
    good_sid, fifo_sid = str(uuid.uuid4()), str(uuid.uuid4())
    good = main_path(d.root, CWD, good_sid)
    good.parent.mkdir(parents=True)
    good.write_bytes(line(user("hello")) + b"\n")
    fifo = main_path(d.root, CWD, fifo_sid)
    os.mkfifo(fifo, 0o600)

    def cli(*args, **kw):
        return d.cli("--no-autostart", *args, env=NO_DAEMON, timeout=20, **kw)

    checked = cli("check", check=False)  # no arguments: every transcript under the root
    assert checked.returncode == 0, checked.stderr
    assert b"skipped" in checked.stderr and b"FIFO" in checked.stderr and fifo.name.encode() in checked.stderr
    assert b"1 file checked, 0 unhealthy, 1 skipped" in checked.stdout

    listed = json.loads(cli("list", "--cwd", CWD, "--json").stdout)
    assert [s["sessionId"] for s in listed] == [good_sid]
    for cmd in (["show", str(fifo)], ["tail", str(fifo)], ["repair", str(fifo)], ["check", str(fifo)]):
        res = cli(*cmd, check=False)
        assert res.returncode != 0 and b"FIFO" in res.stderr and b"Traceback" not in res.stderr, cmd
    for cmd in (["show", fifo_sid, "--cwd", CWD], ["tail", fifo_sid, "--cwd", CWD]):
        res = cli(*cmd, check=False)
        assert res.returncode != 0 and b"Traceback" not in res.stderr, cmd

    d.start()  # the daemon's catalog scan and its List skip it too
    listed = json.loads(d.cli("list", "--cwd", CWD, "--json", timeout=20).stdout)
    assert [s["sessionId"] for s in listed] == [good_sid]


def test_check_reads_a_symlinked_project_dir_that_list_shows(daemon_factory, tmp_path):
    """A project dir that is a symlink (a store moved to another disk, one project
    at a time) is listed; ``check`` without arguments must check it too, not
    report "0 files checked" over sessions ``list`` shows."""
    d = daemon_factory()
    sid = str(uuid.uuid4())
    real = main_path(tmp_path / "elsewhere", CWD, sid)
    real.parent.mkdir(parents=True)
    real.write_bytes(line(user("hello")) + b"\n" + b'{"type":"user","uuid":')  # torn tail: BAD
    link = main_path(d.root, CWD, sid).parent
    link.parent.mkdir(parents=True)
    link.symlink_to(real.parent, target_is_directory=True)

    def cli(*args, **kw):
        return d.cli("--no-autostart", *args, env=NO_DAEMON, timeout=20, **kw)

    listed = json.loads(cli("list", "--all", "--json").stdout)
    assert [s["sessionId"] for s in listed] == [sid]
    checked = cli("check", "--json", check=False)
    report = json.loads(checked.stdout)
    assert checked.returncode == 1 and report["checked"] == 1 and report["unhealthy"] == 1, report
    assert report["files"][0]["tornTail"]
