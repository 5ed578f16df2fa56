"""Input that is not a transcript never "succeeds": show, tail, append and record
of a non-transcript file, a binary, an empty file or /dev/null exit non-zero
with one line; lines skipped among good ones are one summary line and exit 1;
entries that cannot make a file on their own are reported at once."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from tests.conftest import DaemonProc
from tests.helpers import assistant, line, main_path, read_entries, user

CWD = "/work/project"


@pytest.fixture
def daemon(shared_daemon: DaemonProc) -> DaemonProc:
    """One daemon for the module: every test here writes sessions of its own
    and leaves the daemon as it found it."""
    return shared_daemon


@pytest.fixture
def junk(short_tmp: Path) -> dict[str, Path]:
    """Files a person might hand to the CLI by mistake."""
    text = short_tmp / "passwd"
    text.write_text("".join(f"user{i}:x:{1000 + i}:{1000 + i}::/home/user{i}:/bin/sh\n" for i in range(3000)))
    binary = short_tmp / "blob.bin"
    binary.write_bytes(bytes(range(256)) * 40 + b"\n" + os.urandom(2048))
    empty = short_tmp / "empty.jsonl"
    empty.write_bytes(b"")
    return {"text": text, "binary": binary, "empty": empty, "devnull": Path(os.devnull)}


def one_error_line(r) -> str:
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.count(b"\n") == 1 and r.stderr.startswith(b"sessiond: ") and b"Traceback" not in r.stderr, r.stderr
    return r.stderr.decode()


@pytest.mark.parametrize("kind", ["text", "binary", "empty", "devnull"])
def test_show_and_tail_of_what_is_not_a_transcript_fail_in_one_line(daemon: DaemonProc, junk, kind):
    for command in ("show", "tail"):
        r = daemon.cli(command, str(junk[kind]), check=False)
        if kind == "devnull":  # not a regular file: not a transcript file at all
            assert "is not a regular file" in one_error_line(r)
            continue
        msg = one_error_line(r)
        assert ("is empty" if kind == "empty" else "is not a transcript") in msg, msg
        assert r.stdout == b"", r.stdout[:200]  # no "session ?", no "?? (unreadable line)"


@pytest.mark.parametrize("kind", ["text", "binary", "empty", "devnull"])
@pytest.mark.parametrize("command", ["append", "record"])
def test_append_and_record_of_what_is_not_a_transcript_write_nothing(daemon: DaemonProc, junk, kind, command):
    sid = str(uuid.uuid4())
    r = daemon.cli(command, "--cwd", CWD, "--session", sid, str(junk[kind]), check=False)
    msg = one_error_line(r)  # one line, however many bad lines (the text file has 3000)
    assert "nothing written" in msg and ("is not a transcript" in msg or "has no entries" in msg), msg
    with daemon.client() as c:
        c.flush()
    assert not main_path(daemon.root, CWD, sid).exists()
    stdin = daemon.cli(command, "--cwd", CWD, "--session", sid, input=junk[kind].read_bytes() if kind != "devnull" else b"",
                       check=False)
    assert "stdin" in one_error_line(stdin)


def test_skipped_lines_are_one_summary_with_their_numbers_and_exit_1(daemon: DaemonProc):
    sid = str(uuid.uuid4())
    good = [user("hello"), assistant("hi")]
    bad = [b"not json", b"[1, 2]", b"{\"torn", b"42", b"\"a string\"", b"null", b"{]"]
    data = line(good[0]) + b"\n" + b"\n".join(bad) + b"\n" + line(good[1]) + b"\n"
    r = daemon.cli("append", "--cwd", CWD, "--session", sid, "--durability", "written", "--json", input=data, check=False)
    assert r.returncode == 1
    assert json.loads(r.stdout) == {"session": sid, "accepted": 2, "duplicates": 0, "skipped": 7}
    assert r.stderr.startswith(b"sessiond: 7 lines skipped (lines 2, 3, 4, 5, 6, \xe2\x80\xa6) of stdin: not one JSON object each (line 2: ")
    assert r.stderr.count(b"\n") == 1
    assert read_entries(main_path(daemon.root, CWD, sid)) == good  # the good ones are written all the same
    rec = daemon.cli("record", "--cwd", CWD, "--session", sid, input=b"nope\n" + line(user("more")) + b"\n", check=False)
    assert rec.returncode == 1 and rec.stderr.count(b"\n") == 1
    assert rec.stderr.startswith(b"sessiond: 1 line skipped (line 1) of stdin: not one JSON object each (line 1: ")
    assert b"1 message recorded" in rec.stdout


def test_show_and_tail_count_unreadable_lines_in_one_summary(daemon: DaemonProc, short_tmp):
    path = short_tmp / "mixed.jsonl"
    a, b = user("question", "u1"), assistant("answer", "a1", parentUuid="u1")
    path.write_bytes(line(a) + b"\n" + b"garbage\n" * 500 + line(b) + b"\n")
    for args in (["show", str(path)], ["tail", "-n", "1000", str(path)]):
        r = daemon.cli(*args, check=False)
        assert r.returncode == 1, args
        assert r.stderr == f"sessiond: 500 lines skipped (lines 2, 3, 4, 5, 6, …) of {path}: unreadable\n".encode(), r.stderr
        assert b"question" in r.stdout and b"answer" in r.stdout and b"??" not in r.stdout
    assert daemon.cli("show", "--json", str(path), check=False).returncode == 1


def test_show_of_a_transcript_without_a_conversation_says_so(daemon: DaemonProc, short_tmp):
    path = short_tmp / "summary.jsonl"
    path.write_bytes(line({"type": "summary", "summary": "old work", "leafUuid": "x"}) + b"\n")
    msg = one_error_line(daemon.cli("show", str(path), check=False))
    assert "holds no conversation" in msg and "no user or assistant message" in msg


@pytest.mark.parametrize("direct", [False, True], ids=["daemon", "fallback"])
def test_append_of_a_summary_only_file_says_no_file_was_written(daemon_factory, short_tmp, direct):
    """Entries with no user/assistant message are never written alone (lazy
    materialization): the user hears it at once, and where to go instead."""
    d: DaemonProc = daemon_factory()
    if not direct:
        d.start()
    src = short_tmp / "summary-only.jsonl"
    src.write_bytes(line({"type": "summary", "summary": "a", "leafUuid": "x"}) + b"\n"
                    + line({"type": "file-history-snapshot", "messageId": "m", "snapshot": {}}) + b"\n")
    sid = str(uuid.uuid4())
    extra = ["--no-autostart"] if direct else []
    r = d.cli(*extra, "append", "--cwd", CWD, "--session", sid, "--json", str(src), check=False)
    assert r.returncode == 1
    note = r.stderr.decode().splitlines()[-1]
    assert note.startswith("sessiond: no file was written") and "2 entries" in note and "sessiond import" in note, note
    report = json.loads(r.stdout)
    assert report.get("pending" if not direct else "dropped") == 2
    assert not main_path(d.root, CWD, sid).exists()
    if not direct:  # record says the same
        rec = d.cli("record", "--cwd", CWD, "--session", sid, str(src), check=False)
        assert rec.returncode == 1 and b"sessiond: no file was written" in rec.stderr, rec.stderr
        assert not main_path(d.root, CWD, sid).exists()


def test_the_append_result_counts_what_waits_for_a_message(daemon: DaemonProc):
    """The protocol says it (an additive field): pending until the first
    message, 0 once the session has its file."""
    from sessiond.wire import messages as m

    sid = str(uuid.uuid4())
    with daemon.client() as c:
        first = c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line({"type": "custom-title", "customTitle": "t"})]))
        assert isinstance(first, m.Appended) and first.pending == 1
        then = c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(user("now"))], durability="written"))
        assert isinstance(then, m.Appended) and then.pending == 0
    assert [e["type"] for e in read_entries(main_path(daemon.root, CWD, sid))] == ["custom-title", "user"]
