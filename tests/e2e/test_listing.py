"""`sessiond list` over files the daemon wrote: titles survive growth, paging works."""

from __future__ import annotations

import json
import os
import time
import uuid

from sessiond.client import Session
from sessiond.wire import messages as m
from tests.helpers import assistant, line, main_path, user, wait_until

CWD = "/work/listed"


def test_a_title_survives_ten_megabytes_of_later_messages(daemon):
    sid = str(uuid.uuid4())
    with daemon.client() as c:
        s = Session(c, sid, CWD)
        s.record([{"type": "user", "message": {"role": "user", "content": "start the big refactor"}}])
        s.set_title("Big refactor")
        s.set_tag("important")
        for _ in range(10):  # ~1 MB per request
            chunk = [line(assistant("z" * 4000)) for _ in range(256)]
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(user("q"))] + chunk))
        s.close()
        c.flush()
    path = main_path(daemon.root, CWD, sid)
    assert path.stat().st_size > 10 * 1024 * 1024
    listed = json.loads(daemon.cli("list", "--cwd", CWD, "--json").stdout)
    assert [(x["sessionId"], x["title"], x["customTitle"], x["tag"]) for x in listed] == [(sid, "Big refactor", "Big refactor", "important")]
    assert listed[0]["firstPrompt"] == "start the big refactor"


def test_list_pages_newest_first_in_json_and_for_people(daemon):
    sids = [str(uuid.uuid4()) for _ in range(3)]
    with daemon.client() as c:
        for i, sid in enumerate(sids):
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written",
                            entries=[line(user(f"prompt number {i}")), line(assistant("ok"))]))
    for i, sid in enumerate(sids):  # distinct mtimes, oldest first
        t = time.time() - 1000 + i * 100
        os.utime(main_path(daemon.root, CWD, sid), (t, t))
    page1 = json.loads(daemon.cli("list", "--cwd", CWD, "--limit", "2", "--json").stdout)
    page2 = json.loads(daemon.cli("list", "--cwd", CWD, "--limit", "2", "--offset", "2", "--json").stdout)
    assert [x["sessionId"] for x in page1 + page2] == sids[::-1]
    assert page1[0]["title"] == "prompt number 2"
    human = daemon.cli("list", "--cwd", CWD).stdout.decode().splitlines()
    assert len(human) == 4 and human[0].split()[:2] == ["TITLE", "MSGS"]  # a header row
    assert human[1].startswith("prompt number 2") and sids[2][:8] in human[1]
    empty = daemon.cli("list", "--cwd", "/nowhere/at/all")
    assert empty.stdout == b"" and b"no sessions" in empty.stderr
    assert json.loads(daemon.cli("list", "--cwd", "/nowhere/at/all", "--json").stdout) == []


def test_the_daemon_catalog_serves_lists_and_catches_foreign_writers(daemon):
    sid = str(uuid.uuid4())
    with daemon.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written",
                        entries=[line(user("through the daemon")), line(assistant("ok"))]))
        project = str(main_path(daemon.root, CWD, sid).parent)
        first = c.call(m.List(id=c.next_id(), dirs=[project], limit=20))
        assert [s.sessionId for s in first.sessions] == [sid]
        # A title appended through the daemon shows at once (the writer observer).
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written",
                        entries=[line({"type": "custom-title", "customTitle": "Renamed"})]))
        assert c.call(m.List(id=c.next_id(), dirs=[project])).sessions[0].title == "Renamed"
        # Claude Code itself writing into the same root: picked up by the refresh.
        other = str(uuid.uuid4())
        foreign = main_path(daemon.root, CWD, other)
        foreign.write_bytes(line(user("written by another program")) + b"\n")
        listed = lambda: [s.sessionId for s in c.call(m.List(id=c.next_id(), dirs=[project])).sessions]  # noqa: E731
        wait_until(lambda: other in listed(), "the foreign session in the list", every=0.2)
        # Paths outside the root are refused.
        for bad in ("/etc", str(daemon.root), project + "/../../.."):
            try:
                c.call(m.List(id=c.next_id(), dirs=[bad]))
            except Exception as exc:  # RemoteError
                assert getattr(exc, "code", "") == "permission_denied"
            else:
                raise AssertionError(f"{bad} was listed")
        everything = c.call(m.List(id=c.next_id(), all=True)).sessions
    assert {s.sessionId for s in everything} == {sid, other}


def test_a_list_sees_every_entry_accepted_before_it(daemon):
    """Read-your-writes across clients: an agent's ``queued`` append (answered
    before it is written, inside the 100 ms coalescing window) is in the very
    next List of another client, here and from the CLI; before, every such
    List missed the new session."""
    with daemon.client() as agent, daemon.client() as lister:
        for i in range(20):
            sid, cwd = str(uuid.uuid4()), f"/work/rw{i}"
            agent.call(m.Append(id=agent.next_id(), session=sid, cwd=cwd, durability="queued",
                                entries=[line(user(f"prompt {i}", parentUuid=None, cwd=cwd, sessionId=sid))]))
            listed = lister.call(m.List(id=lister.next_id(), dirs=[str(main_path(daemon.root, cwd, sid).parent)]))
            assert [s.sessionId for s in listed.sessions] == [sid], i
        sid, cwd = str(uuid.uuid4()), "/work/rw-cli"
        agent.call(m.Append(id=agent.next_id(), session=sid, cwd=cwd, durability="queued",
                            entries=[line(user("from the cli", parentUuid=None, cwd=cwd, sessionId=sid))]))
        assert sid in daemon.cli("list", "--cwd", cwd, "--json").stdout.decode()


def test_a_file_of_sidechain_messages_only_is_no_session(daemon):
    """A 1.0.x-style inline Task (``isSidechain`` with no agentId) that is the
    first message of a session the daemon was told to title: the file it makes
    begins with the title, then holds only the subagent's messages. Claude
    Code's picker (2.1.337) does not list such a file, its message count is 0,
    and SPEC 5 has sidechain files never appear as sessions; a session with one
    main message besides them is listed (and the 1.0.x sessions of the corpus
    hold many)."""
    side, mixed = str(uuid.uuid4()), str(uuid.uuid4())
    task = {"isSidechain": True, "parentUuid": None, "timestamp": "2026-01-01T00:00:00.000Z"}
    with daemon.client() as c:
        for sid in (side, mixed):
            title = {"type": "custom-title", "customTitle": f"named {sid[:8]}", "sessionId": sid}
            entries = [line(title), line(user("Search the repo for X", **task)), line(assistant("found", **task))]
            if sid == mixed:
                entries.append(line(user("and now the main prompt")))
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written", entries=entries))
    assert main_path(daemon.root, CWD, side).exists()
    listed = json.loads(daemon.cli("list", "--cwd", CWD, "--json").stdout)
    assert [(x["sessionId"], x["title"]) for x in listed] == [(mixed, f"named {mixed[:8]}")]
    everything = json.loads(daemon.cli("--no-autostart", "--socket", str(daemon.base / "none.sock"), "list",
                                       "--cwd", CWD, "--json").stdout)
    assert [x["sessionId"] for x in everything] == [mixed]  # the same read of the files, without the daemon
