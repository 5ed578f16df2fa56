"""The CLI never destroys or misleads: ``export -o`` writes only a new regular
file (or an existing one with ``--force``), whole or not at all; irreversible
commands ask first; ambiguous input is refused with the forms that work;
Ctrl-C is a quiet exit 130. Every case runs the real ``sessiond`` against a
real daemon in a temp root."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.conftest import CORPUS, DaemonProc
from tests.helpers import assistant, in_terminal, line, main_path, sigint_default, user, wait_until, wait_until_open
from tests.lifecycle_tree import build

CWD = "/home/dev/safety-project"


@pytest.fixture
def daemon(shared_daemon: DaemonProc) -> DaemonProc:
    return shared_daemon


def session(d: DaemonProc, text: str = "export me") -> str:
    sid = str(uuid.uuid4())
    d.cli("record", "--cwd", CWD, "--session", sid, input=line(user(text)) + b"\n" + line(assistant("done")) + b"\n")
    return sid


def one_line_refusal(r: subprocess.CompletedProcess, *words: str, code: int = 1) -> str:
    err = r.stderr.decode()
    assert r.returncode == code and len(err.splitlines()) == 1 and "Traceback" not in err, (r.returncode, err)
    assert r.stdout == b"", r.stdout
    for w in words:
        assert w in err, err
    return err


def in_pty(args: list[str], env: dict, *, answer: bytes, after: bytes, timeout: float = 60) -> tuple[int, bytes]:
    """Run the CLI on a pty (stdin, stdout, stderr), type ``answer`` once
    ``after`` shows; (exit status, all it wrote)."""
    return in_terminal(args, env, timeout=timeout, answer=answer, after=after)


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

def _reading_stdin(pid: int) -> bool:
    """Whether ``pid`` is past start-up, blocked reading its stdin: in ``read(0, ...)``
    by ``/proc/PID/syscall`` (its number and first argument), or asleep in a pipe
    read by ``wchan`` where the kernel does not show the syscall."""
    try:
        call = Path(f"/proc/{pid}/syscall").read_text().split()
    except OSError:
        call = []
    if call[:2] == [str(READ_SYSCALL), "0x0"]:
        return True
    try:
        return "pipe" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False


READ_SYSCALL = {"x86_64": 0, "aarch64": 63}.get(os.uname().machine, 0)
"""read(2)'s number in ``/proc/PID/syscall``."""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", ["append", "record"])  # the fast path and click's
def test_ctrl_c_exits_130_quietly(daemon, command):
    """A command waiting on its input, interrupted: exit 130, nothing on stderr
    (click's "Aborted!" and exit 1 were what a script saw), nothing written."""
    sid = str(uuid.uuid4())
    proc = subprocess.Popen(preexec_fn=sigint_default,
                            args=[sys.executable, "-m", "sessiond.client.cli", command, "--cwd", CWD, "--session", sid, "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=daemon.env)
    try:
        wait_until(lambda: _reading_stdin(proc.pid), "the command to wait on its stdin", timeout=30)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (proc.returncode, err)
    assert err == b"" and out == b"", (out, err)
    listed = daemon.cli("list", "--cwd", CWD, "--json").stdout.decode()
    assert sid not in listed


# -- trash empty, restore ----------------------------------------------------

def _trash_ids(d: DaemonProc) -> set[str]:
    return {e["session"] for e in json.loads(d.cli("trash", "--json").stdout)}


def test_trash_empty_needs_yes_when_no_one_can_be_asked(daemon_factory):
    d = daemon_factory().start()
    sid = session(d)
    d.cli("rm", sid, "--cwd", CWD)
    for args in ([], ["--json"], ["--older-than", "0s"]):
        r = d.cli("trash", "empty", *args, check=False)  # stdin is a pipe: no one to ask
        assert r.returncode == 2 and b"--yes" in r.stderr and b"Traceback" not in r.stderr, r.stderr
        assert _trash_ids(d) == {sid}
    dry = json.loads(d.cli("trash", "empty", "--dry-run", "--json").stdout)
    done = json.loads(d.cli("trash", "empty", "--yes", "--json").stdout)
    assert [e["session"] for e in dry["deleted"]] == [e["session"] for e in done["deleted"]] == [sid]
    assert _trash_ids(d) == set()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("answer", [b"n", b"y"])
def test_trash_empty_on_a_terminal_lists_and_asks(daemon_factory, answer):
    d = daemon_factory().start()
    sid = session(d)
    d.cli("rm", sid, "--cwd", CWD)
    status, out = in_pty(["trash", "empty"], d.env, answer=answer + b"\n", after=b"[y/N]")
    assert b"would delete " + sid.encode() in out and b"for good? [y/N]" in out, out
    assert b"Traceback" not in out
    if answer == b"n":
        assert status == 1 and _trash_ids(d) == {sid}
    else:
        assert status == 0 and b"deleted 1 session," in out and _trash_ids(d) == set()


def test_restore_says_where_each_file_went_back(daemon, short_tmp):
    sid = session(daemon)
    daemon.cli("rm", sid, "--cwd", CWD)
    out = daemon.cli("trash", "restore", sid).stdout.decode()  # `restore ID` under the trash group too
    path = main_path(daemon.root, CWD, sid)
    assert out.startswith(f"restored {sid}") and f"  {path}\n" in out and path.exists(), out
    missing = daemon.cli("restore", str(uuid.uuid4()), check=False)
    one_line_refusal(missing, "is not in the trash")


def test_times_for_a_person_are_local_and_json_stays_utc(daemon):
    """Export shows the viewer's zone to the second; the trash list, trash
    empty and prune show a time as every listing does (``when``: how long ago
    while recent, else the local date and time); --json keeps ISO-8601 UTC."""
    sid = session(daemon)
    tokyo = {"TZ": "Asia/Tokyo"}  # UTC+9, no daylight saving
    md = daemon.cli("export", sid, "--cwd", CWD, "--format", "markdown", env=tokyo).stdout.decode()
    stamp = json.loads(daemon.cli("export", sid, "--cwd", CWD, "--format", "jsonl").stdout.splitlines()[0])["timestamp"]
    local = datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(timezone(timedelta(hours=9)))
    assert f"- Started: {local:%Y-%m-%d %H:%M:%S}" in md, md[:300]
    daemon.cli("rm", sid, "--cwd", CWD)
    entry = next(e for e in json.loads(daemon.cli("trash", "--json").stdout) if e["session"] == sid)
    assert entry["trashedAt"].endswith("Z")
    listed = next(r for r in daemon.cli("trash", env=tokyo).stdout.decode().splitlines() if sid in r)
    first = listed.split()[:2]
    assert first == ["just", "now"] or first[1] == "ago", listed  # trashed a moment ago
    assert " 1 file " in listed, listed  # not "1 files"
    daemon.cli("restore", sid)
    dry = json.loads(daemon.cli("prune", "--cwd", CWD, "--older-than", "0s", "--dry-run", "--json").stdout)
    assert next(s for s in dry["sessions"] if s["sessionId"] == sid)["lastWrite"].endswith("Z")
    human = daemon.cli("prune", "--cwd", CWD, "--older-than", "0s", "--dry-run", env=tokyo).stdout.decode()
    row = next(r for r in human.splitlines() if sid in r)  # an older time: tests/client/test_cli_voice.py
    assert "last written just now" in row or re.search(r"last written \d+m ago", row), row


# -- durations, roots ------------------------------------------------------------

@pytest.mark.parametrize("args", [["trash", "empty", "--older-than", "30", "--dry-run"],
                                  ["prune", "--older-than", "30", "--dry-run"],
                                  ["prune", "--older-than", "1.5", "--dry-run"]])
def test_a_duration_without_a_unit_is_refused_with_the_forms(daemon, args):
    """``--older-than 30`` was 30 seconds: ``prune --yes`` would have moved every
    session older than half a minute."""
    sid = session(daemon)
    err = one_line_refusal(daemon.cli(*args, check=False), "needs a unit", "30m", "2h", "7d", "3mo", "1y", code=2)
    assert "not a duration" in err
    assert sid[:8] in daemon.cli("list", "--cwd", CWD).stdout.decode()


def test_since_without_a_unit_is_refused_with_the_forms(daemon):
    r = daemon.cli("search", "anything", "--since", "30", check=False)
    err = r.stderr.decode()
    assert r.returncode == 2 and "needs a unit" in err and "30m" in err and "2026-01-31" in err, err


@pytest.mark.parametrize("how", ["--root", "SESSIOND_ROOT"])
@pytest.mark.parametrize("args", [["list"], ["list", "--all", "--json"], ["search", "x", "--all"], ["reindex", "--all"],
                                  ["trash"], ["trash", "empty", "--dry-run"], ["du", "--all"], ["prune", "--dry-run"],
                                  ["check"]])
def test_a_given_root_that_does_not_exist_is_an_error_not_an_empty_answer(daemon, short_tmp, how, args):
    nope = short_tmp / "nope"
    env = {"SESSIOND_ROOT": str(nope)}
    argv = ["--root", str(nope), *args] if how == "--root" else args
    one_line_refusal(daemon.cli(*argv, env=env, check=False), f"no store at {nope}")
    assert not nope.exists()  # and nothing made it


# -- one JSON document -------------------------------------------------------------

def test_check_json_is_one_document_for_any_number_of_files(daemon, short_tmp):
    good = main_path(daemon.root, CWD, session(daemon))
    bad = short_tmp / "bad.jsonl"
    bad.write_bytes(line(user("a")) + b"\n{\"torn")
    fifo = short_tmp / "fifo.jsonl"
    os.mkfifo(fifo)
    r = daemon.cli("check", "--json", str(good), str(bad), str(fifo), check=False, timeout=30)
    assert r.returncode == 1
    doc = json.loads(r.stdout)  # one document, not one per file
    assert set(doc) == {"healthy", "checked", "unhealthy", "warnings", "skipped", "notTranscripts", "files", "errors"}
    assert doc["healthy"] is False and doc["checked"] == 3 and doc["unhealthy"] == 2
    assert [f["path"] for f in doc["files"]] == [str(good), str(bad)] and doc["files"][1]["tornTail"]
    assert [e["path"] for e in doc["errors"]] == [str(fifo)] and doc["notTranscripts"] == []
    passwd = json.loads(daemon.cli("check", "--json", "/etc/passwd", check=False).stdout)
    assert passwd["notTranscripts"] == ["/etc/passwd"] and passwd["healthy"] is False and passwd["unhealthy"] == 0
    one = daemon.cli("check", "--json", str(good))
    assert json.loads(one.stdout)["healthy"] is True and len(one.stdout.splitlines()) == 1
    human = daemon.cli("check", str(good)).stdout.decode().splitlines()
    assert human[-1] == "1 file checked, 0 unhealthy, 0 with warnings" and human[0].startswith("ok   ")


def test_reindex_json_has_the_documented_keys(daemon):
    session(daemon)
    r = json.loads(daemon.cli("reindex", "--cwd", CWD, "--json").stdout)
    assert set(r) == {"files", "bytes", "seconds"} and r["files"] >= 1  # not the wire frame's op and id


# -- a reader that leaves early ----------------------------------------------------

BIG = max((p for p in CORPUS.glob("*.jsonl")), key=lambda p: p.stat().st_size)  # 3 MB: far more than a pipe holds


@pytest.mark.timeout(120)
@pytest.mark.parametrize("args", [["show", str(BIG)], ["export", str(BIG)], ["export", str(BIG), "--format", "html"],
                                  ["export", str(BIG), "--format", "jsonl"], ["tail", "-n", "5000", str(BIG)]])
def test_piped_into_head_every_command_stops_with_141_and_says_nothing(daemon, args):
    """One write of the whole output used to come back short when ``head``
    left (no error), so show and export exited 0 having written 64 KiB."""
    proc = subprocess.Popen(preexec_fn=sigint_default, args=[sys.executable, "-m", "sessiond.client.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=daemon.env)
    try:
        assert proc.stdout.readline()
        proc.stdout.close()  # as head -1 does
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 141, err
    finally:
        proc.stderr.close()
        if proc.poll() is None:
            proc.kill()
    assert err == b"", err
    whole = daemon.cli(*args).stdout  # read to the end, it is all there
    assert len(whole) > 100_000  # more than the 64 KiB pipe: the early exit was real


# -- colour ------------------------------------------------------------------------

@pytest.mark.timeout(120)
def test_search_colours_only_a_terminal_without_no_color(daemon):
    from tests.client.test_cli_terminal import in_terminal

    session(daemon, "the quokkaword is here")
    wait_until(lambda: daemon.cli("search", "quokkaword", "--cwd", CWD, check=False).returncode == 0, "the index")
    env = {**daemon.env, "TERM": "xterm"}
    env.pop("NO_COLOR", None)
    status, coloured = in_terminal(["search", "quokkaword", "--cwd", CWD], env)
    assert status == 0 and b"\x1b[1;33mquokkaword" in coloured, coloured
    for plain in ({**env, "NO_COLOR": "1"}, {**env, "TERM": "dumb"}):
        status, out = in_terminal(["search", "quokkaword", "--cwd", CWD], plain)
        assert status == 0 and b"quokkaword" in out and b"\x1b[" not in out, out
    piped = daemon.cli("search", "quokkaword", "--cwd", CWD, env={"NO_COLOR": ""}).stdout
    assert b"quokkaword" in piped and b"\x1b[" not in piped


@pytest.mark.timeout(120)
@pytest.mark.parametrize("delay", [0.4, 0.8, 1.2])
def test_ctrl_c_in_an_export_leaves_the_whole_file_or_none(daemon, short_tmp, delay):
    """Interrupted at some point of an export of a 3 MB session: exit 130 and
    no file (nor a temp file), or done and the whole export; never half."""
    out = short_tmp / "big.html"
    proc = subprocess.Popen(preexec_fn=sigint_default,
                            args=[sys.executable, "-m", "sessiond.client.cli", "export", str(BIG), "--format", "html",
                                  "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=daemon.env)
    wait_until_open(proc, BIG)
    time.sleep(delay - 0.4)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    # 130; or -SIGINT, a signal that came while the interpreter was exiting
    # (the shell shows 130 for both); or 0, done before it came.
    assert proc.returncode in (130, -signal.SIGINT, 0) and b"Traceback" not in err, (proc.returncode, err)
    if out.exists():
        assert out.read_bytes().rstrip().endswith(b"</html>") and [p.name for p in short_tmp.iterdir()] == ["big.html"]
    else:
        assert proc.returncode != 0 and list(short_tmp.iterdir()) == [] and err == b"", err


def test_a_ctrl_c_as_the_temp_file_is_made_leaves_no_temp_file(short_tmp, monkeypatch):
    """A Ctrl-C raised the moment ``os.open`` has made an export's temp file
    (Python raises it at the next instruction, before any ``try`` around what
    follows) still removes that file: the window the export test above once
    fell into, leaving ``.big.html.<pid>.tmp`` behind with exit 130."""
    from sessiond.client.cli import transfer_cmds

    real_open = os.open

    def open_then_interrupted(path, flags, mode=0o777, **kw):
        os.close(real_open(path, flags, mode, **kw))
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "open", open_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        transfer_cmds.write_new(short_tmp / "out.html", b"<html></html>\n", force=False)
    monkeypatch.undo()
    assert list(short_tmp.iterdir()) == []


@pytest.mark.timeout(180)
@pytest.mark.parametrize("delay", [0.5, 1.0])
def test_ctrl_c_in_an_import_leaves_no_half_file(daemon_factory, short_tmp, delay):
    """Interrupted at some point: exit 130 (or done), and every file in the
    store is byte for byte its source (an import writes an unlinked O_TMPFILE)."""
    tree = build(short_tmp / "src")
    d = daemon_factory()  # no daemon: the CLI copies the files itself
    proc = subprocess.Popen(preexec_fn=sigint_default,
                            args=[sys.executable, "-m", "sessiond.client.cli", "--no-autostart", "import", str(tree.projects)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=d.env)
    wait_until_open(proc, tree.projects)
    time.sleep(delay - 0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (130, -signal.SIGINT, 0) and b"Traceback" not in err, (proc.returncode, err)
    store = d.root / "projects"
    copied = {str(p.relative_to(store)): p.read_bytes() for p in store.rglob("*") if p.is_file()} if store.exists() else {}
    source = tree.files()
    assert all(source[rel] == data for rel, data in copied.items()), sorted(set(copied) - set(source))
    if proc.returncode == 0:
        assert set(copied) >= {rel for rel in source if rel.endswith(".jsonl")}
