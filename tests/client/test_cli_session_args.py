"""Every command that takes a session understands what a user types: the whole
id, a unique prefix of it (at least 4 characters; an ambiguous one lists the
candidates, exit 1), or the path of the .jsonl file; and the shell completes
session ids (and titles) for those arguments."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time

import pytest

from sessiond.wire import messages as m
from tests.conftest import DaemonProc
from tests.helpers import assistant, line, main_path, sigint_default, user

CWD = "/home/dev/args-project"
TWINS = ("abcd1111-0000-4000-8000-000000000001", "abcd2222-0000-4000-8000-000000000002")
LONE = "feed3333-0000-4000-8000-000000000003"


def seed(daemon: DaemonProc) -> None:
    for sid in (*TWINS, LONE):
        entries = [user(f"fix the parser of {sid[:8]}", f"u-{sid}", parentUuid=None, cwd=CWD, sessionId=sid),
                   assistant("on it", f"a-{sid}", parentUuid=f"u-{sid}", cwd=CWD, sessionId=sid)]
        daemon.cli("append", "--cwd", CWD, "--session", sid, "--durability", "written",
                   input=b"".join(line(e) + b"\n" for e in entries))


@pytest.mark.timeout(300)
def test_a_unique_prefix_names_the_session_for_every_command(daemon: DaemonProc):
    seed(daemon)
    path = main_path(daemon.root, CWD, LONE)
    said = {("show", "--no-pager", "feed"): "fix the parser of feed3333", ("show", "--no-pager", "FEED33"): LONE,
            ("show", "--no-pager", str(path)): LONE, ("tail", "-n", "2", "feed"): "fix the parser of feed3333",
            ("export", "feed"): "fix the parser of feed3333", ("check", "feed"): f"ok   {path}",
            ("repair", "feed"): "nothing to repair", ("watch", "-n", "1", "feed", "--json"): f"a-{LONE}"}
    for args, expected in said.items():
        if args[0] == "watch":  # follows until stopped: its first lines, then Ctrl-C
            proc = subprocess.Popen(preexec_fn=sigint_default, args=[sys.executable, "-m", "sessiond.client.cli", *args], env=daemon.env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                first = proc.stdout.readline().decode()
                proc.send_signal(signal.SIGINT)
                proc.communicate(timeout=20)
            finally:  # a watch that outlives the test is killed, not left to the next one's warnings
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
            assert expected in first, first
            continue
        out = daemon.cli(*args).stdout.decode()
        assert expected in out, (args, out)
    assert json.loads(daemon.cli("show", "feed", "--json").stdout)["sessionId"] == LONE
    assert b"tagged 'urgent'" in daemon.cli("tag", "feed", "urgent").stdout
    assert b"now titled" in daemon.cli("rename", str(path), "The parser").stdout  # a path names its session
    assert json.loads(daemon.cli("list", "--cwd", CWD, "--json").stdout)[0]["customTitle"] == "The parser"
    new = daemon.cli("fork", "feed", "--cwd", CWD).stdout.decode().strip()
    assert new != LONE and main_path(daemon.root, CWD, new).exists()
    resumed = json.loads(daemon.cli("resume", "feed3", "--cwd", CWD, "--json").stdout)
    assert resumed["sessionId"] == LONE
    assert LONE.encode() in daemon.cli("rm", "feed").stdout
    assert LONE.encode() in daemon.cli("restore", "feed").stdout  # a prefix of what is in the trash
    assert path.exists()


def test_an_ambiguous_prefix_lists_the_candidates_and_exits_1(daemon: DaemonProc):
    seed(daemon)
    for args in (["show", "abcd"], ["tag", "abcd", "x"], ["rm", "abcd"], ["check", "abcd"]):
        r = daemon.cli(*args, check=False)
        err = r.stderr.decode()
        assert r.returncode == 1 and r.stdout == b"", (args, err)
        assert "2 sessions start with abcd" in err and "Traceback" not in err
        assert all(sid in err for sid in TWINS) and "fix the parser of abcd1111" in err, err
    assert all(main_path(daemon.root, CWD, sid).exists() for sid in TWINS)  # rm moved nothing
    short = daemon.cli("show", "abc", check=False)
    assert short.returncode == 2 and b"too short: give at least 4" in short.stderr
    none = daemon.cli("show", "0000aaaa", check=False)
    assert none.returncode == 1 and b"no session id starts with 0000aaaa" in none.stderr
    junk = daemon.cli("tag", "not-an-id!", "x", check=False)
    assert junk.returncode == 1 and b"no session or transcript file" in junk.stderr and b"Traceback" not in junk.stderr


def complete(daemon: DaemonProc, words: str, shell: str = "bash") -> list[str]:
    env = {**daemon.env, "_SESSIOND_COMPLETE": f"{shell}_complete", "COMP_WORDS": words,
           "COMP_CWORD": str(len(shlex.split(words)) - (0 if words.endswith(" ") else 1))}
    out = subprocess.run([sys.executable, "-m", "sessiond.client.cli"], env=env, capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.decode().splitlines()


def test_the_shell_completes_session_ids_and_titles(daemon: DaemonProc):
    seed(daemon)
    # bash prints values only: where there is a choice, each is the id and its title (the shell inserts the ids' common start)
    assert sorted(complete(daemon, "sessiond show abcd")) == sorted(f"plain,{sid}  fix the parser of {sid[:8]}" for sid in TWINS)
    assert complete(daemon, "sessiond --root " + str(daemon.root) + " tag fee") == [f"plain,{LONE}"]
    zsh = complete(daemon, "sessiond resume 'parser of feed'", shell="zsh")  # the title's words, the id offered
    assert zsh[:3] == ["plain", LONE, "fix the parser of feed3333"], zsh
    assert len(complete(daemon, "sessiond watch ")) == 3  # nothing typed: every session


@pytest.mark.timeout(120)
def test_watch_waits_for_a_session_that_has_no_file_yet(daemon: DaemonProc):
    """The daemon holds a session's first entries until it has a message (lazy
    materialization): watch started then waits for the file instead of failing, and
    shows all of it once it comes."""
    sid = "cafe4444-0000-4000-8000-000000000004"
    path = main_path(daemon.root, CWD, sid)
    with daemon.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written",
                        entries=[line({"type": "custom-title", "customTitle": "later", "sessionId": sid})]))
        assert not path.exists()  # buffered
        proc = subprocess.Popen(preexec_fn=sigint_default, args=[sys.executable, "-m", "sessiond.client.cli", "watch", sid, "--cwd", CWD, "--json"],
                                env=daemon.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            time.sleep(1.5)
            assert proc.poll() is None, proc.communicate()  # waiting, not failed
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written",
                            entries=[line(user("now it starts", "u1", parentUuid=None, cwd=CWD, sessionId=sid))]))
            # every entry of a file written after the watch started is new: the buffered title first,
            # whatever moment the watch found the file at (it once printed the title only when it
            # happened to read the file before the message was in it)
            assert json.loads(proc.stdout.readline()) == {"type": "custom-title", "customTitle": "later", "sessionId": sid}
            assert json.loads(proc.stdout.readline())["uuid"] == "u1"
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                _, err = proc.communicate(timeout=20)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
    assert f"session {sid} has no file yet".encode() in err and b"waiting for it" in err and b"Traceback" not in err, err
    assert proc.returncode == 0, err
