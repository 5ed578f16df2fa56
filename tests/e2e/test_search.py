"""`sessiond search` / `reindex` against a real daemon and its indexer process:
the daemon's own writes, foreign writers, shrinking, replaced and deleted files,
restarts, the offline paths, and bad input."""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path

import pytest

from sessiond.store.paths import agent_file, project_dir
from sessiond.wire import messages as m
from sessiond.wire.errors import RemoteError
from tests.helpers import assistant, index_status, indexer_started, line, main_path, user, wait_until

CWD = "/work/searched"
OTHER = "/work/elsewhere"


@pytest.fixture
def sd(fresh_config, daemon_factory):
    return daemon_factory().start()


def write(d, sid: str, *entries: dict, cwd: str = CWD, agent: str | None = None) -> None:
    with d.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=cwd, durability="written", agent=agent,
                        entries=[line(e) for e in entries]))


def search(d, *args: str) -> list[dict]:
    """The hits of ``search --json``: exit 0 with hits, 1 with none (as grep, and as text mode)."""
    r = d.cli("search", *args, "--json", check=False)
    hits = json.loads(r.stdout)
    assert r.returncode == (0 if hits else 1), r.stderr
    return hits


def answered_from_the_index(d, query: str) -> bool:
    """Whether a search of ``query`` is answered from an index caught up with
    every write (the indexer runs at SCHED_IDLE: beside a busy test run it may
    not have made the index within the 5 s a search waits, and the answer
    then scans the files)."""
    with d.client() as c:
        r = c.call(m.Search(id=c.next_id(), query=query, all=True))
    return r.caughtUp and r.scanned is None


def test_a_written_entry_is_found_at_once_with_every_field(sd):
    sid = str(uuid.uuid4())
    u = str(uuid.uuid4())
    write(sd, sid, user("how do I rotate the flux capacitor keys?", cwd=CWD),
          assistant("Rotate them with the quarterly zebrafish procedure.", uid=u, cwd=CWD, timestamp="2026-03-04T05:06:07.000Z"))
    hits = search(sd, "zebrafish", "--cwd", CWD)
    assert len(hits) == 1
    h = hits[0]
    assert h["sessionId"] == sid and h["uuid"] == u and h["role"] == "assistant"
    assert h["path"] == str(main_path(sd.root, CWD, sid)) and h["file"] == h["path"]
    assert h["project"] == project_dir(sd.root, CWD).name
    assert h["title"] == "how do I rotate the flux capacitor keys?"
    assert h["timestamp"] == "2026-03-04T05:06:07.000Z" and h["score"] > 0 and h["sidechain"] is False
    a, b = h["highlights"][0]
    assert h["snippet"][a:b].lower() == "zebrafish"
    human = sd.cli("search", "zebrafish", "--cwd", CWD).stdout.decode()
    assert "how do I rotate the flux capacitor keys?" in human and "zebrafish" in human
    assert f"sessiond resume {sid}" in human


def test_a_queued_append_of_another_client_is_found_by_the_next_search(sd):
    """An agent's ``queued`` append is answered before it is written (the 100 ms
    coalescing window); a search from another client right after finds it: the
    search waits for what was accepted before it to be written, and so noted."""
    with sd.client() as agent, sd.client() as reader:
        for i in range(10):
            sid = str(uuid.uuid4())
            agent.call(m.Append(id=agent.next_id(), session=sid, cwd=CWD, durability="queued",
                                entries=[line(user(f"queuedword{i} is here", cwd=CWD, sessionId=sid))]))
            found = reader.call(m.Search(id=reader.next_id(), query=f"queuedword{i}", all=True))
            assert [h.sessionId for h in found.hits] == [sid], i


def test_scope_roles_since_phrases_and_prefixes(sd):
    here, there = str(uuid.uuid4()), str(uuid.uuid4())
    write(sd, here, user("please grep the lighthouse logs", timestamp="2025-01-01T00:00:00.000Z"),
          {"type": "assistant", "uuid": str(uuid.uuid4()), "timestamp": "2025-01-01T00:00:01.000Z",
           "message": {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash",
                                                          "input": {"command": "rg lighthouse /var/log/beacon"}}]}})
    write(sd, there, user("lighthouse keeper rota", timestamp="2026-06-01T00:00:00.000Z"), cwd=OTHER)
    # what is asserted is the index's ranking and filters: beside a busy run the SCHED_IDLE indexer may be more
    # than the 5 s a search waits behind, and the answer then comes from the index as it is (caughtUp: false)
    wait_until(lambda: answered_from_the_index(sd, "rota"), "the indexer to catch up", timeout=120, every=0.5)
    assert [h["sessionId"] for h in search(sd, "lighthouse", "--cwd", CWD)] == [here]
    assert {h["sessionId"] for h in search(sd, "lighthouse", "--all")} == {here, there}
    tool = search(sd, "beacon", "--cwd", CWD, "--role", "tool")
    assert [(h["sessionId"], h["role"]) for h in tool] == [(here, "tool")]
    assert search(sd, "beacon", "--cwd", CWD, "--role", "user") == []
    assert [h["sessionId"] for h in search(sd, "lighthouse", "--all", "--since", "2026-01-01")] == [there]
    assert search(sd, '"keeper lighthouse"', "--all") == []
    assert [h["sessionId"] for h in search(sd, '"lighthouse keeper"', "--all")] == [there]
    assert [h["sessionId"] for h in search(sd, "lightho*", "--cwd", OTHER)] == [there]
    # FTS5 syntax in a query is plain text: never an error
    for q in ("AND", "NEAR(", "lighthouse OR", "col:lighthouse", '"unclosed', "-x", "^a"):
        assert sd.cli("search", "--all", "--json", "--", q, check=False).returncode in (0, 1)  # hits or none


def test_a_subagent_hit_points_at_its_parent_and_is_marked(sd):
    sid = str(uuid.uuid4())
    write(sd, sid, user("main prompt about ducks"))
    write(sd, sid, {**user("subagent digs into the marmalade factory"), "isSidechain": True, "agentId": "a1"}, agent="a1")
    hits = search(sd, "marmalade", "--cwd", CWD)
    assert len(hits) == 1
    h = hits[0]
    assert h["sessionId"] == sid and h["sidechain"] is True and h["agentId"] == "a1"
    assert h["path"] == str(main_path(sd.root, CWD, sid))
    assert h["file"] == str(agent_file(project_dir(sd.root, CWD), sid, "a1"))
    assert h["title"] == "main prompt about ducks"
    assert "[subagent a1]" in sd.cli("search", "marmalade", "--cwd", CWD).stdout.decode()


def test_titles_tags_and_summaries_are_searchable(sd):
    sid = str(uuid.uuid4())
    write(sd, sid, user("hello"), {"type": "custom-title", "customTitle": "Quokka migration", "sessionId": sid},
          {"type": "tag", "tag": "wombat", "sessionId": sid}, {"type": "summary", "summary": "Ported the numbat", "leafUuid": "x"})
    for word, role in (("quokka", "title"), ("wombat", "tag"), ("numbat", "summary")):
        hits = search(sd, word, "--cwd", CWD)
        assert [(h["sessionId"], h["role"], h["title"]) for h in hits] == [(sid, role, "Quokka migration")]


def test_foreign_appends_truncation_replacement_and_deletion_are_followed(sd):
    sid = str(uuid.uuid4())
    write(sd, sid, user("first words about armadillos"))
    path = main_path(sd.root, CWD, sid)
    with open(path, "ab") as f:  # another writer (Claude Code itself, the fallback)
        f.write(line(assistant("a foreign pangolin appears")) + b"\n" + b'{"type":"user","message":{"role":"user","content":"half a li')
    assert [h["sessionId"] for h in search(sd, "pangolin", "--cwd", CWD)] == [sid]
    assert search(sd, "li", "--cwd", CWD) == []  # a line without its newline is not indexed yet
    with open(path, "ab") as f:
        f.write(b'ne of capybaras"}}\n')
    assert [h["sessionId"] for h in search(sd, "capybaras", "--cwd", CWD)] == [sid]
    # shrunk: cut back to the first line only
    data = path.read_bytes()
    os.truncate(path, data.index(b"\n") + 1)
    assert search(sd, "pangolin", "--cwd", CWD) == []
    assert [h["sessionId"] for h in search(sd, "armadillos", "--cwd", CWD)] == [sid]
    # replaced by another file (new inode)
    tmp = path.with_suffix(".new")
    tmp.write_bytes(line(user("replaced with okapi notes")) + b"\n")
    os.replace(tmp, path)
    assert search(sd, "armadillos", "--cwd", CWD) == []
    assert [h["sessionId"] for h in search(sd, "okapi", "--cwd", CWD)] == [sid]
    # rewritten in place to the same size or longer: the bytes before the offset changed
    same = line(user("rewritten with tapir notes")) + b"\n"
    with open(path, "r+b") as f:
        f.write(same)
    assert search(sd, "okapi", "--cwd", CWD) == []
    assert [h["sessionId"] for h in search(sd, "tapir", "--cwd", CWD)] == [sid]
    path.unlink()
    assert search(sd, "tapir", "--cwd", CWD) == []


def test_what_changed_while_no_daemon_ran_is_indexed_at_start(fresh_config, daemon_factory):
    d = daemon_factory().start()
    sid = str(uuid.uuid4())
    write(d, sid, user("before the restart: gazelle"))
    assert d.stop() == 0
    path = main_path(d.root, CWD, sid)
    with open(path, "ab") as f:
        f.write(line(assistant("while it was down: impala")) + b"\n")
    other = main_path(d.root, CWD, str(uuid.uuid4()))
    other.write_bytes(line(user("a new file: springbok")) + b"\n")
    d.start()
    assert [h["sessionId"] for h in search(d, "impala", "--cwd", CWD)] == [sid]
    assert [h["file"] for h in search(d, "springbok", "--cwd", CWD)] == [str(other)]
    assert [h["sessionId"] for h in search(d, "gazelle", "--cwd", CWD)] == [sid]


@pytest.mark.timeout(180)
def test_without_a_daemon_the_index_is_read_and_without_one_the_files_are_scanned(fresh_config, daemon_factory):
    d = daemon_factory().start()
    sid = str(uuid.uuid4())
    write(d, sid, user("offline search for the word heliotrope"), assistant("heliotrope is a colour"))
    # what is compared below is the index's answer, read by the daemon and then by the CLI alone
    wait_until(lambda: answered_from_the_index(d, "heliotrope"), "the indexer to catch up", timeout=120, every=0.5)
    online = search(d, "heliotrope", "--cwd", CWD)
    assert d.stop() == 0
    index = d.root / ".sessiond-search.sqlite3"
    before = index.read_bytes()
    offline = d.cli("--no-autostart", "search", "heliotrope", "--cwd", CWD, "--json")
    assert json.loads(offline.stdout) == online and offline.stderr == b""
    assert index.read_bytes() == before  # read-only
    assert not d.socket.exists()  # reading never starts a daemon
    for suffix in ("", "-wal", "-shm"):
        Path(f"{index}{suffix}").unlink(missing_ok=True)
    scanned = d.cli("search", "heliotrope", "--cwd", CWD, "--json")
    hits = json.loads(scanned.stdout)
    assert [(h["sessionId"], h["uuid"], h["role"]) for h in hits] == [(online[0]["sessionId"], online[0]["uuid"], online[0]["role"])]
    assert b"scanned the files" in scanned.stderr
    assert "heliotrope" in hits[0]["snippet"]


@pytest.mark.timeout(180)
def test_without_a_daemon_an_index_behind_the_files_is_not_trusted(fresh_config, daemon_factory):
    """The daemon stopped before its indexer saw the last writes (or files were
    written since, with no daemon): a search read from that index alone would
    answer "no matches" for them. It scans the files instead, and says why."""
    d = daemon_factory().start()
    sid = str(uuid.uuid4())
    write(d, sid, user("the indexed word is heliotrope"))
    wait_until(lambda: answered_from_the_index(d, "heliotrope"), "the indexer to catch up", timeout=120, every=0.5)
    assert d.stop() == 0
    later = str(uuid.uuid4())  # written with no daemon: the index has never seen it
    d.cli("--no-autostart", "append", "--cwd", CWD, "--session", later, input=line(user("a later word: ocelot")))
    r = d.cli("--no-autostart", "search", "ocelot", "--cwd", CWD, "--json")
    assert [h["sessionId"] for h in json.loads(r.stdout)] == [later]
    assert b"the search index is behind 1 file: scanned the files" in r.stderr, r.stderr
    assert [h["sessionId"] for h in search(d, "heliotrope", "--cwd", CWD)] == [sid]  # the rest still found


def test_reindex_rebuilds_the_same_answers(sd):
    sids = [str(uuid.uuid4()) for _ in range(3)]
    for i, sid in enumerate(sids):
        write(sd, sid, user(f"reindex me {i} kumquat"), assistant("kumquat " * (i + 1)))
    # the index's answer, not the scan a search falls back to while the indexer (at SCHED_IDLE) is behind: the two rank alike, not with equal scores
    wait_until(lambda: answered_from_the_index(sd, "kumquat"), "the indexer to catch up", timeout=120, every=0.5)
    before = search(sd, "kumquat", "--cwd", CWD)
    out = sd.cli("reindex", "--cwd", CWD).stdout.decode()
    assert out.startswith("indexed 3 files")
    assert search(sd, "kumquat", "--cwd", CWD) == before
    done = json.loads(sd.cli("reindex", "--all", "--json").stdout)
    assert done["files"] == 3 and done["bytes"] > 0
    assert search(sd, "kumquat", "--cwd", CWD) == before
    late = str(uuid.uuid4())  # searches read the rebuilt file, not the one it replaced
    write(sd, late, user("kumquat after the rebuild"))
    for _ in range(4):  # every worker thread's reader
        assert late in {h["sessionId"] for h in search(sd, "kumquat", "--cwd", CWD)}


def test_a_killed_indexer_is_restarted_and_catches_up(sd):
    sid = str(uuid.uuid4())
    write(sd, sid, user("before the crash: narwhal"))
    child = indexer_started(sd)
    assert child is not None and child["running"] is True
    os.kill(child["pid"], signal.SIGKILL)
    write(sd, sid, assistant("after the crash: beluga"))

    def restarted() -> bool:
        st = index_status(sd)
        return bool(st and st["running"] and st["restarts"] >= 1 and st["pid"] != child["pid"])

    wait_until(restarted, "the indexer to be restarted")
    assert [h["sessionId"] for h in search(sd, "beluga", "--cwd", CWD)] == [sid]
    assert [h["sessionId"] for h in search(sd, "narwhal", "--cwd", CWD)] == [sid]


def test_bad_queries_are_one_line_errors(sd):
    for args in (["   "], ['""'], ["x", "--since", "yesterday-ish"], ["x", "--role", "robot"], ["x", "--limit", "0"]):
        r = sd.cli("search", *args, "--cwd", CWD, check=False)
        assert r.returncode == 2 and b"Traceback" not in r.stderr, r.stderr
    with sd.client() as c:
        for req in (m.Search(id=c.next_id(), query="***"), m.Search(id=c.next_id(), query="x", role="robot"),
                    m.Search(id=c.next_id(), query="x", limit=0), m.Search(id=c.next_id(), query="x", since="nope")):
            with pytest.raises(RemoteError) as e:
                c.call(req)
            assert e.value.code == "bad_request"
        with pytest.raises(RemoteError) as e:
            c.call(m.Search(id=c.next_id(), query="x", dirs=["/etc"]))
        assert e.value.code == "permission_denied"
        assert c.status().pid  # the connection and the daemon are fine
    r = sd.cli("search", "nothing-matches-this", "--cwd", CWD, check=False)
    assert r.returncode == 1 and b"no matches" in r.stderr


def test_with_the_index_off_search_scans_and_says_so(short_tmp, monkeypatch, daemon_factory):
    cfg = short_tmp / "off.toml"
    cfg.write_text("search_index = false\n")
    monkeypatch.setenv("SESSIOND_CONFIG", str(cfg))
    d = daemon_factory().start()
    sid = str(uuid.uuid4())
    write(d, sid, user("no index for the ocelot"))
    r = d.cli("search", "ocelot", "--cwd", CWD, "--json")
    assert [h["sessionId"] for h in json.loads(r.stdout)] == [sid] and b"scanned" in r.stderr
    err = r.stderr.decode().splitlines()  # one line: what the daemon said, and what was done instead
    assert len(err) == 1 and "the daemon answered not_found: the search index is off" in err[0], err
    assert "start the daemon" not in err[0]  # it runs
    assert not (d.root / ".sessiond-search.sqlite3").exists()
    with d.client() as c:
        assert c.status().index is None


def test_the_catalogs_re_stat_feeds_the_indexer(short_tmp, monkeypatch, daemon_factory):
    cfg = short_tmp / "lazy.toml"
    cfg.write_text("search_refresh_s = 3600\n")  # searches never re-stat: only the catalog can tell the indexer
    monkeypatch.setenv("SESSIOND_CONFIG", str(cfg))
    d = daemon_factory().start()
    for word in ("cassowary", "emu"):  # the daemon's own writes are found at once, whatever the setting
        sid = str(uuid.uuid4())
        write(d, sid, user(f"a session the daemon wrote: {word}"))
        assert [h["sessionId"] for h in search(d, word, "--cwd", CWD)] == [sid]
    d.cli("list", "--cwd", CWD)  # the catalog knows the project now
    other = main_path(d.root, CWD, str(uuid.uuid4()))
    other.write_bytes(line(user("written by someone else: quetzal")) + b"\n")

    def found() -> bool:
        d.cli("list", "--cwd", CWD)  # a list older than 2 s re-stats the project in the background
        return [h["file"] for h in search(d, "quetzal", "--cwd", CWD)] == [str(other)]

    wait_until(found, "the catalog's re-stat to reach the index", timeout=20, every=0.5)


def test_a_fifo_or_a_symlink_named_like_a_transcript_is_never_read(sd, short_tmp):
    sid = str(uuid.uuid4())
    write(sd, sid, user("a real one about axolotls"))
    project = main_path(sd.root, CWD, sid).parent
    os.mkfifo(project / f"{uuid.uuid4()}.jsonl")  # a plain open would block forever
    outside = short_tmp / "outside.jsonl"
    outside.write_bytes(line(user("secret axolotls outside the root")) + b"\n")
    os.symlink(outside, project / f"{uuid.uuid4()}.jsonl")
    assert [h["sessionId"] for h in search(sd, "axolotls", "--cwd", CWD)] == [sid]
    assert [h["sessionId"] for h in json.loads(sd.cli("--no-autostart", "search", "axolotls", "--cwd", CWD, "--json").stdout)] == [sid]


def _proc_stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()  # fields from the 3rd (state) on


def test_the_indexer_takes_only_what_the_daemon_leaves_over(sd):
    """SCHED_IDLE and nice 19, inside the daemon's session: Linux weighs both
    only against the processes of the same autogroup (one per session), so an
    indexer in a session of its own would weigh as much as the daemon. Its own
    process group: a terminal's Ctrl-C reaches the daemon, which stops it."""
    pid = indexer_started(sd)["pid"]
    daemon = _proc_stat(sd.proc.pid)
    # it sets its nice, then its class: both, before it is looked at
    wait_until(lambda: _proc_stat(pid)[16] == "19" and int(_proc_stat(pid)[38]) == os.SCHED_IDLE,
               "the indexer to lower its priority to nice 19 in SCHED_IDLE")
    indexer = _proc_stat(pid)
    # fields (man 5 proc), counted from state = index 0: pgrp 2, session 3, nice 16, policy 38
    assert indexer[3] == daemon[3], "the indexer left the daemon's session (and autogroup)"
    assert indexer[2] == str(pid) != daemon[2]
    assert int(indexer[38]) == os.SCHED_IDLE


def _classes(pid: int) -> set[int]:
    """The scheduling class of each thread of ``pid``."""
    return {int(_proc_stat(int(t.name))[38]) for t in Path(f"/proc/{pid}/task").iterdir()}  # a thread's /proc/<tid> too


def test_a_search_waiting_for_the_indexer_lifts_it_out_of_the_idle_class(sd):
    """While a search waits for the indexer's answer, every thread of the
    indexer is in the normal class (nice 19 stays), and back in SCHED_IDLE
    once nothing waits: on a busy machine an idle-class indexer gets no CPU,
    and the search (the first one starts the indexer) would wait out its
    bound. Seen on an indexer held stopped (SIGSTOP) while the search waits."""
    import subprocess
    import sys

    sid = str(uuid.uuid4())
    pid = indexer_started(sd)["pid"]
    wait_until(lambda: _classes(pid) == {os.SCHED_IDLE}, "the indexer's threads to be in SCHED_IDLE")
    os.kill(pid, signal.SIGSTOP)
    try:
        write(sd, sid, user("asked while the indexer is held: capybara"))  # so the search must ask it
        proc = subprocess.Popen([sys.executable, "-m", "sessiond.client.cli", "search", "capybara", "--cwd", CWD, "--json"],
                                env=sd.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wait_until(lambda: _classes(pid) == {os.SCHED_OTHER}, "the waiting search to lift the indexer out of SCHED_IDLE")
    finally:
        os.kill(pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    assert [h["sessionId"] for h in json.loads(out)] == [sid], err
    wait_until(lambda: _classes(pid) == {os.SCHED_IDLE}, "the indexer back in SCHED_IDLE once nothing waits")
