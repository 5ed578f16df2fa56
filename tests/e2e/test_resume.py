"""show / resume / continue / fork through the CLI, against real daemons and files."""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
import uuid
from pathlib import Path

import pytest

from sessiond.client import Session
from sessiond.store.paths import MAX_SANITIZED, sanitize
from sessiond.wire import messages as m
from tests.conftest import CORPUS, DaemonProc
from tests.helpers import CliProcess, assistant, line, main_path, read_entries, user

CWD = "/work/resumed"


@pytest.fixture
def daemon(shared_daemon: DaemonProc) -> DaemonProc:
    """One daemon for the module: every test here writes sessions of its own
    and leaves the daemon as it found it."""
    return shared_daemon
EXPECTED = Path(__file__).resolve().parents[1] / "client" / "resume" / "expected"


@pytest.mark.parametrize("name", [
    "blackgirlbytes__planetfall-seed-signalkit__07-d253ca52d8-3-full",
    "entireio__cli__29-38d5d1ba71-0-full",
    "daaain__claude-code-log__agent-ea02459f",
])
def test_show_path_needs_no_daemon_and_gives_the_reviewed_chain(daemon_factory, name):
    d = daemon_factory()  # never started
    out = json.loads(d.cli("show", str(CORPUS / f"{name}.jsonl"), "--json").stdout)
    expected = json.loads((EXPECTED / f"{name}.json").read_text())
    assert out["chain"] == expected["chain"]
    assert out["interruption"] == expected["interruption"] and out["bridges"] == expected["bridges"]
    assert set(out) == {"sessionId", "path", "chain", "messages", "interruption", "consistencyDelta", "bridges",
                        "cuts", "repairs", "skippedLines", "metadata", "subagents",
                        "tokens", "costUSD", "unpricedModels"}
    assert not d.socket.exists()
    human = d.cli("show", str(CORPUS / f"{name}.jsonl")).stdout.decode()
    assert f"{len(expected['chain'])} messages" in human


def test_resume_adopts_the_file_and_reappends_metadata(daemon):
    sid = str(uuid.uuid4())
    path = main_path(daemon.root, CWD, sid)
    path.parent.mkdir(parents=True)
    title = {"type": "custom-title", "customTitle": "Written by someone else", "sessionId": sid}
    first = user("hello", parentUuid=None)
    body = [first] + [assistant("x" * 2000, parentUuid=None) for _ in range(60)]  # pushes the title out of the tail
    for a, b in zip(body, body[1:]):
        b["parentUuid"] = a["uuid"]
    path.write_bytes(b"".join(line(e) + b"\n" for e in [title, *body]))
    out = json.loads(daemon.cli("resume", sid, "--cwd", CWD, "--json").stdout)
    assert out["chain"] == [e["uuid"] for e in body] and out["sessionId"] == sid
    entries = read_entries(path)
    assert entries[-1] == title  # re-appended at EOF
    # A second resume finds it in the tail window already: nothing more written.
    daemon.cli("resume", sid, "--cwd", CWD)
    assert len(read_entries(path)) == len(entries)
    # Later appends of the session go to the same file and dedup knows its past.
    with daemon.client() as c:
        r = c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(first), line(user("more"))], durability="written"))
    assert (r.accepted, r.duplicates) == (1, 1)
    assert read_entries(path)[-1]["message"]["content"] == "more"


def test_resume_finds_a_hash_variant_dir_and_keeps_writing_there(daemon):
    long_cwd = "/very/" + "deep/" * 50 + "project"
    assert len(sanitize(long_cwd)) > MAX_SANITIZED
    variant = daemon.root / "projects" / (sanitize(long_cwd)[:MAX_SANITIZED] + "-otherhash")
    variant.mkdir(parents=True)
    sid = str(uuid.uuid4())
    u = user("from another runtime", cwd=long_cwd, parentUuid=None)
    (variant / f"{sid}.jsonl").write_bytes(line(u) + b"\n")
    out = json.loads(daemon.cli("resume", sid, "--cwd", long_cwd, "--json").stdout)
    assert out["chain"] == [u["uuid"]]
    with daemon.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=long_cwd, entries=[line(assistant("same file"))], durability="written"))
    assert [e["type"] for e in read_entries(variant / f"{sid}.jsonl")] == ["user", "assistant"]
    assert not main_path(daemon.root, long_cwd, sid).exists()


def test_a_session_of_another_project_prints_the_command_to_run(daemon):
    sid = str(uuid.uuid4())
    with daemon.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd="/elsewhere/repo", durability="written",
                        entries=[line(user("there", cwd="/elsewhere/repo"))]))
    r = daemon.cli("resume", sid, "--cwd", CWD, check=False)
    assert r.returncode == 1
    assert f"cd /elsewhere/repo && sessiond resume {sid}".encode() in r.stderr
    shown = daemon.cli("show", sid, "--cwd", CWD)
    assert b"cd /elsewhere/repo" in shown.stderr and b"there" in shown.stdout


def test_continue_resumes_the_most_recent_session(daemon_factory):
    """A daemon of its own: "most recent of the project" must not see other tests' sessions."""
    daemon = daemon_factory().start()
    sids = [str(uuid.uuid4()) for _ in range(2)]
    with daemon.client() as c:
        for i, sid in enumerate(sids):
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written", entries=[line(user(f"session {i}"))]))
    out = json.loads(daemon.cli("continue", "--cwd", CWD, "--json").stdout)
    assert out["sessionId"] == sids[1]
    none = daemon.cli("continue", "--cwd", "/nothing/here", check=False)
    assert none.returncode == 1 and b"no session to continue" in none.stderr


def test_fork_copies_the_chain_into_a_new_session(daemon):
    src = CORPUS / "blackgirlbytes__planetfall-seed-signalkit__07-d253ca52d8-3-full.jsonl"
    before = hashlib.sha256(src.read_bytes()).hexdigest()
    original = json.loads(daemon.cli("show", str(src), "--json").stdout)
    forked = json.loads(daemon.cli("fork", str(src), "--cwd", CWD, "--json").stdout)
    new_id = forked["sessionId"]
    assert new_id != original["sessionId"] and forked["messages"] == len(original["chain"])
    new_path = main_path(daemon.root, forked["cwd"], new_id)
    entries = read_entries(new_path)
    assert [e["uuid"] for e in entries if "uuid" in e][: len(original["chain"])] == original["chain"]
    assert all(e["sessionId"] == new_id for e in entries if "sessionId" in e)
    again = json.loads(daemon.cli("show", str(new_path), "--json").stdout)
    assert again["chain"] == original["chain"] and again["sessionId"] == new_id
    assert hashlib.sha256(src.read_bytes()).hexdigest() == before


def test_resume_sees_everything_acknowledged_by_a_concurrent_writer(daemon):
    sid = str(uuid.uuid4())
    acked: list[str] = []
    stop = threading.Event()
    started = threading.Event()

    def writer() -> None:
        with daemon.client() as c:
            s = Session(c, sid, CWD, lease=False)  # a writer that does not hold it (a holder: exit 4, tests/live)
            while not stop.is_set():
                acked.append(s.record([{"type": "user", "message": {"content": "tick"}}]))  # acked as queued
                started.set()
            s.close()

    t = threading.Thread(target=writer)
    t.start()
    try:
        assert started.wait(20)
        snapshot = list(acked)
        out = json.loads(daemon.cli("resume", sid, "--cwd", CWD, "--json").stdout)
    finally:
        stop.set()
        t.join(30)
    assert snapshot and set(snapshot) <= set(out["chain"])


@pytest.mark.skipif(not shutil.which("strace"), reason="strace not installed")
def test_resume_of_a_session_whose_file_is_still_being_created(daemon_factory):
    """A queued first message is acknowledged before its file exists (files are
    created off the loop): resume must flush before it looks the session up."""
    d = daemon_factory()
    # Every mkdir of the daemon takes half a second: the project dir appears late.
    d.start(wrap=["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=mkdir,mkdirat",
                  "-e", "inject=mkdir,mkdirat:delay_enter=500000"])
    sid = str(uuid.uuid4())
    with d.client() as c:
        Session(c, sid, CWD, lease=False).record([{"type": "user", "message": {"content": "first"}}])  # acked as queued
        out = json.loads(d.cli("resume", sid, "--cwd", CWD, "--json").stdout)
    assert [m["message"]["content"] for m in out["messages"]] == ["first"]


def lines_until(proc: CliProcess, text: bytes, most: int = 4) -> list[bytes]:
    """The lines ``proc`` prints up to the first holding ``text`` (a turn is
    drawn as a header line, then its text): at most ``most`` lines."""
    got = [proc.line()]
    while text not in got[-1]:
        assert len(got) < most, got
        got.append(proc.line())
    return got


def test_tail_shows_the_last_entries_and_follows_new_ones(daemon):
    sid = str(uuid.uuid4())
    with daemon.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written",
                        entries=[line(user(f"old {i}")) for i in range(5)]))
    last2 = daemon.cli("tail", sid, "--cwd", CWD, "-n", "2").stdout.decode().splitlines()
    assert [x for x in last2 if x.startswith("old")] == ["old 3", "old 4"]  # each under its header
    raw = daemon.cli("tail", sid, "--cwd", CWD, "-n", "1", "--json").stdout
    assert json.loads(raw)["message"]["content"] == "old 4"
    with CliProcess("tail", "-f", "-n", "1", sid, "--cwd", CWD, "--interval", "0.05", env=daemon.env) as tail:
        assert b"old 4" in lines_until(tail, b"old 4")[-1]  # it has read the file: now follow
        with daemon.client() as c:
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written", entries=[line(assistant("fresh reply"))]))
        got = b"".join(lines_until(tail, b"fresh reply")).decode()
        assert "assistant" in got and "fresh reply" in got  # its header, its text


def test_show_reports_the_repairs_it_made(daemon_factory):
    """Issue 16: the streamed response of entireio 48 comes back as one turn answered in
    the next, and ``show`` says so (--json: ``repairs``; human: one summary line)."""
    d = daemon_factory()  # never started: show reads the file itself
    path = CORPUS / "entireio__cli__48-b429896bcb-1-full.jsonl"
    out = json.loads(d.cli("show", str(path), "--json").stdout)
    reordered = [r for r in out["repairs"] if r["kind"] == "reordered"]
    assert {"kind": "reordered", "uuid": "45b533c9-c575-4218-9b8c-6328f680a607",
            "detail": "response msg_01KbHKB1V6zkqEkEbSrLFv4U: 8 entries, then the 7 results answering them"} in reordered
    assert set(out["repairs"][0]) == {"kind", "uuid", "detail"}
    human = d.cli("show", str(path)).stdout.decode()
    assert f"{len(out['repairs'])} repair(s) so the model API accepts it: reordered" in human


def test_tail_follows_a_transcript_replaced_at_its_path(tmp_path):
    """``tail -f`` kept reading the descriptor of the file it opened: when the
    path was replaced (a rename over it, a delete and a new file, as the daemon
    recreates a moved transcript) by a shorter file, it printed the OLD file
    again from its start and never the new one's entries."""
    import os

    path = tmp_path / f"{uuid.uuid4()}.jsonl"
    path.write_bytes(b"".join(line(user(f"old {i}")) + b"\n" for i in range(5)))
    with CliProcess("tail", "-f", "-n", "1", str(path), "--interval", "0.05") as tail:
        assert not any(b"old 3" in x for x in lines_until(tail, b"old 4"))
        fresh = tmp_path / "fresh"
        fresh.write_bytes(line(user("new 1")) + b"\n")
        os.replace(fresh, path)
        assert not any(b"old" in x for x in lines_until(tail, b"new 1"))
        with open(path, "ab") as f:
            f.write(line(assistant("new 2")) + b"\n")
        assert not any(b"old" in x for x in lines_until(tail, b"new 2"))


def test_resume_through_the_daemon_takes_the_sessions_own_leaf(daemon):
    """Through the daemon (it flushes, loads and adopts): a file whose clock
    stepped back resumes whole (the real file: Claude Code resumes its first
    line alone), and a file another session's writer got into resumes its own
    conversation, not the other's newer one."""
    stepped = CORPUS / "daaain__claude-code-log__3680252d-d4e3-4416-bddd-8f5b5b4fdb7f.jsonl"
    sid = str(uuid.uuid4())
    path = main_path(daemon.root, CWD, sid)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(stepped, path)
    out = json.loads(daemon.cli("resume", sid, "--cwd", CWD, "--json").stdout)
    assert len(out["chain"]) == 3

    sid, other = str(uuid.uuid4()), str(uuid.uuid4())
    mine = [user("mine first", sessionId=sid, parentUuid=None, timestamp="2026-01-01T00:00:01.000Z")]
    mine.append(assistant("mine second", sessionId=sid, parentUuid=mine[0]["uuid"], timestamp="2026-01-01T00:00:02.000Z"))
    theirs = [user("theirs", sessionId=other, parentUuid=None, timestamp="2026-01-01T00:00:03.000Z")]
    path = main_path(daemon.root, CWD, sid)
    path.write_bytes(b"".join(line(e) + b"\n" for e in (mine[0], theirs[0], mine[1])))
    out = json.loads(daemon.cli("resume", sid, "--cwd", CWD, "--json").stdout)
    assert out["chain"] == [e["uuid"] for e in mine]
