"""Import, rm → trash, restore, trash empty, prune, du, rename, tag: against real
daemon processes and, with none running, the CLI's own fallback, on real files."""

from __future__ import annotations

import json
import os
import time
import uuid

import pytest

from sessiond.client import Session
from sessiond.wire import messages as m
from tests.helpers import line, main_path, user
from tests.lifecycle_tree import build, session_with_agent

CWD = "/work/project"


def _json(proc) -> object:
    return json.loads(proc.stdout)


def _store(d) -> dict[str, bytes]:
    projects = d.root / "projects"
    return {str(p.relative_to(projects)): p.read_bytes() for p in sorted(projects.rglob("*")) if p.is_file()}


def _copy(d, src):
    """The store's copy of a source transcript."""
    return d.root / "projects" / src.parent.name / src.name


def _listed(d) -> set[str]:
    return {s["sessionId"] for s in _json(d.cli("list", "--all", "--json"))}


def _trash(d) -> list[dict]:
    return _json(d.cli("trash", "--json"))


@pytest.mark.parametrize("with_daemon", [True, False], ids=["daemon", "no-daemon"])
def test_import_copies_every_file_byte_for_byte_and_a_second_run_imports_nothing(daemon_factory, short_tmp, with_daemon):
    tree = build(short_tmp / "src")
    d = daemon_factory()
    if with_daemon:
        d.start()
    first = _json(d.cli("import", str(tree.projects), "--json"))
    assert first["counts"]["imported"] == len(tree.sessions)
    assert first["counts"]["diverged"] == first["counts"]["unreadable"] == 0
    # Every file as it is: summary-only and snapshot-only files, agent and meta files.
    assert _store(d) == tree.files()
    assert any(p.endswith(".meta.json") for p in _store(d))
    again = _json(d.cli("import", str(tree.projects), "--json"))
    assert again["counts"]["unchanged"] == len(tree.sessions)
    assert again["counts"]["imported"] == again["counts"]["grown"] == 0
    assert _store(d) == tree.files()
    if with_daemon:  # the catalog learnt of them: listed at once
        assert tree.with_agents in _listed(d)


def test_import_brings_only_new_whole_lines_and_reports_a_diverged_copy(daemon, short_tmp):
    tree = build(short_tmp / "src")
    daemon.cli("import", str(tree.projects))
    grown_sid, diverged_sid = sorted(tree.sessions)[:2]
    src = tree.sessions[grown_sid]
    with open(src, "ab") as f:  # Claude Code went on, and is in the middle of a line
        f.write(b"\n" + line(user("later")) + b"\n" + b'{"type":"assistant","mess')
    local = _copy(daemon, tree.sessions[diverged_sid])
    local_before = local.read_bytes()
    with open(tree.sessions[diverged_sid], "r+b") as f:  # the source was rewritten
        f.write(b"X")
    out = daemon.cli("import", str(tree.projects), "--json", check=False)
    assert out.returncode == 1  # something could not be imported
    report = {s["session"]: s for s in _json(out)["sessions"]}
    assert report[grown_sid]["status"] == "grown"
    assert report[diverged_sid]["status"] == "diverged"
    assert local.read_bytes() == local_before  # reported, never overwritten
    copy = _copy(daemon, src)
    whole = src.read_bytes()[: src.read_bytes().rindex(b"\n") + 1]
    assert copy.read_bytes() == whole  # the torn fragment waits for the next import
    with open(src, "ab") as f:
        f.write(b'sage":{"role":"assistant","content":"done"},"uuid":"' + str(uuid.uuid4()).encode() + b'"}\n')
    daemon.cli("import", str(src), check=False)
    assert copy.read_bytes() == src.read_bytes()


def test_importing_the_store_itself_only_catalogs(daemon, short_tmp):
    tree = build(short_tmp / "src")
    daemon.cli("import", str(tree.projects))
    before = _store(daemon)
    out = _json(daemon.cli("import", str(daemon.root / "projects"), "--json"))
    assert out["counts"]["unchanged"] == len(tree.sessions)
    assert _store(daemon) == before


def test_rm_and_restore_through_the_daemon(daemon):
    sid, before = session_with_agent(daemon, CWD)
    path = main_path(daemon.root, CWD, sid)
    assert sid in _listed(daemon)

    out = _json(daemon.cli("rm", sid, "--cwd", CWD, "--json"))
    assert out[0]["session"] == sid and out[0]["bytes"] == sum(len(b) for b in before.values())
    assert not path.exists() and not path.with_suffix("").exists()
    assert sid not in _listed(daemon)
    shown = daemon.cli("show", sid, "--cwd", CWD, check=False)
    assert shown.returncode == 1 and b"no session" in shown.stderr
    trashed = _trash(daemon)
    assert [e["session"] for e in trashed] == [sid]
    assert {i["path"] for i in trashed[0]["items"]} == {str(path.relative_to(daemon.root)), str(path.with_suffix("").relative_to(daemon.root))}
    # A later append to the trashed id is refused, and no new file appears.
    late = daemon.cli("append", "--cwd", CWD, "--session", sid, input=line(user("too late")), check=False)
    assert late.returncode == 1 and b"in the trash" in late.stderr
    assert not path.exists()

    daemon.cli("restore", sid.upper())  # any spelling of the id is the one session
    assert {p: p.read_bytes() for p in before} == before
    assert sid in _listed(daemon)
    assert _trash(daemon) == []
    daemon.cli("append", "--cwd", CWD, "--session", sid, input=line(user("back")))


def test_rm_refuses_a_live_session_unless_forced_and_the_writer_never_recreates_it(daemon):
    sid = str(uuid.uuid4())
    path = main_path(daemon.root, CWD, sid)
    with daemon.client() as c:
        s = Session(c, sid, CWD)
        s.append(line(user("working")), "written")
        refused = daemon.cli("rm", sid, "--cwd", CWD, check=False)
        assert refused.returncode == 1 and b"live" in refused.stderr
        assert path.exists()
        s.set_title("metadata the exit cleanup would re-append")
        daemon.cli("rm", sid, "--cwd", CWD, "--force")
        assert not path.exists()
        with pytest.raises(Exception, match="in the trash"):
            s.append(line(user("after the rm")), "written")
        c.call(m.Close(id=c.next_id(), session=sid))  # the last client leaves: exit cleanup
    daemon.cli("flush")
    assert not path.exists()  # neither the append nor the exit cleanup recreated it
    assert [e["session"] for e in _trash(daemon)] == [sid]


@pytest.mark.parametrize("with_daemon", [True, False], ids=["daemon", "no-daemon"])
def test_restore_refuses_to_overwrite_a_file_that_reappeared(daemon_factory, with_daemon):
    d = daemon_factory()
    sid = str(uuid.uuid4())
    d.cli("--no-autostart", "append", "--cwd", CWD, "--session", sid, input=line(user("first life")))
    path = main_path(d.root, CWD, sid)
    original = path.read_bytes()
    if with_daemon:
        d.start()
    d.cli("rm", sid, "--cwd", CWD)
    if with_daemon:
        d.stop()
    late = d.cli("--no-autostart", "append", "--cwd", CWD, "--session", sid, input=line(user("late")), check=False)
    assert late.returncode == 1 and b"in the trash" in late.stderr and not path.exists()  # the fallback refuses too
    path.write_bytes(line(user("second life")) + b"\n")  # another writer (Claude Code itself) made a new one
    if with_daemon:
        d.start()
    second = path.read_bytes()
    out = d.cli("restore", sid, check=False)
    assert out.returncode == 1 and b"exists again" in out.stderr and len(out.stderr.splitlines()) == 1
    assert path.read_bytes() == second
    assert [e["session"] for e in _trash(d)] == [sid]
    path.rename(path.with_name("aside.jsonl"))
    d.cli("restore", sid)
    assert path.read_bytes() == original


@pytest.mark.parametrize("with_daemon", [True, False], ids=["daemon", "no-daemon"])
def test_trash_empty_is_the_only_delete_and_says_what_it_deleted(daemon_factory, with_daemon):
    d = daemon_factory()
    if with_daemon:
        d.start()
    sids = [str(uuid.uuid4()) for _ in range(3)]
    for sid in sids:
        d.cli("--no-autostart", "append", "--cwd", CWD, "--session", sid, input=line(user(sid)))
        d.cli("rm", sid, "--cwd", CWD)
    assert _json(d.cli("trash", "empty", "--older-than", "1d", "--yes", "--json"))["deleted"] == []
    dry = _json(d.cli("trash", "empty", "--dry-run", "--json"))
    assert sorted(e["session"] for e in dry["deleted"]) == sorted(sids)
    assert len(_trash(d)) == 3
    out = d.cli("trash", "empty", "--yes")
    assert all(sid.encode() in out.stdout for sid in sids) and b"deleted 3 sessions" in out.stdout
    assert _trash(d) == [] and os.listdir(d.root / ".trash") == [".lock"]
    # Emptied: the ids are free again.
    d.cli("--no-autostart", "append", "--cwd", CWD, "--session", sids[0], input=line(user("new")))


@pytest.mark.parametrize("with_daemon", [True, False], ids=["daemon", "no-daemon"])
def test_prune_dry_run_prints_exactly_what_yes_moves(daemon_factory, short_tmp, with_daemon):
    tree = build(short_tmp / "src")
    d = daemon_factory()
    d.cli("import", str(tree.projects))
    now = time.time()
    old = sorted(tree.sessions)[:5]
    for sid in old:  # last written 100 days ago, subagent files included
        for p in [d.root / "projects" / tree.sessions[sid].parent.name / f"{sid}.jsonl",
                  *(d.root / "projects" / tree.sessions[sid].parent.name / sid).rglob("*")]:
            os.utime(p, (now - 100 * 86400, now - 100 * 86400))
    if with_daemon:
        d.start()
    before = _store(d)
    dry = _json(d.cli("prune", "--all", "--older-than", "90d", "--dry-run", "--json"))
    assert sorted(s["sessionId"] for s in dry["sessions"]) == sorted(old)
    assert _store(d) == before  # changed nothing
    human = d.cli("prune", "--all", "--older-than", "90d", "--dry-run").stdout.decode()
    assert f"({dry['bytes']} bytes" in human
    done = _json(d.cli("prune", "--all", "--older-than", "90d", "--yes", "--json"))
    assert [s["sessionId"] for s in done["sessions"]] == [s["sessionId"] for s in dry["sessions"]]
    assert done["bytes"] == dry["bytes"] == sum(e["bytes"] for e in _trash(d))
    assert sorted(e["session"] for e in _trash(d)) == sorted(old)
    assert all(e["reason"] == "prune" for e in _trash(d))
    big = _json(d.cli("prune", "--all", "--older-than", "0s", "--larger-than", "1M", "--dry-run", "--json"))
    assert big["sessions"] and all(s["bytes"] > 1 << 20 for s in big["sessions"])
    bad = d.cli("prune", "--all", check=False)
    assert bad.returncode == 2 and b"--dry-run" in bad.stderr


def test_du_from_the_daemon_agrees_with_the_files(daemon_factory, short_tmp):
    tree = build(short_tmp / "src")
    d = daemon_factory()
    d.cli("import", str(tree.projects))
    offline = _json(d.cli("du", "--all", "--json"))
    d.start()
    online = _json(d.cli("du", "--all", "--json"))
    assert online == offline
    assert online["bytes"] == sum(len(b) for b in tree.files().values())
    agents = next(s for s in online["sessions"] if s["sessionId"] == tree.with_agents)
    side = tree.sessions[tree.with_agents].parent / tree.with_agents
    assert agents["bytes"] == tree.sessions[tree.with_agents].stat().st_size + sum(p.stat().st_size for p in side.rglob("*") if p.is_file())
    assert sum(p["sessions"] for p in online["projects"]) == len(tree.sessions)


@pytest.mark.parametrize("with_daemon", [True, False], ids=["daemon", "no-daemon"])
def test_rename_and_tag_are_listed_at_once_and_survive_growth(daemon_factory, with_daemon):
    d = daemon_factory()
    sid = str(uuid.uuid4())
    d.cli("--no-autostart", "append", "--cwd", CWD, "--session", sid, input=line(user("the first prompt")))
    if with_daemon:
        d.start()
    d.cli("rename", sid, "Parser rewrite", "--cwd", CWD)
    tagged = _json(d.cli("tag", sid, "urgent", "--cwd", CWD, "--json"))
    assert tagged == {"session": sid, "path": str(main_path(d.root, CWD, sid)), "tag": "urgent"}
    info = next(s for s in _json(d.cli("list", "--cwd", CWD, "--json")) if s["sessionId"] == sid)
    assert (info["title"], info["tag"]) == ("Parser rewrite", "urgent")
    if not with_daemon:
        d.start()
    with d.client() as c:  # the session grows far past the 64 KB tail window
        s = Session(c, sid, CWD)
        for i in range(40):
            s.record([user("x" * 4000 + str(i))])
        s.close()
    assert main_path(d.root, CWD, sid).stat().st_size > 150_000
    info = next(s for s in _json(d.cli("list", "--cwd", CWD, "--json")) if s["sessionId"] == sid)
    assert (info["title"], info["tag"]) == ("Parser rewrite", "urgent")


@pytest.mark.parametrize("with_daemon", [True, False], ids=["daemon", "no-daemon"])
def test_a_title_or_tag_no_listing_would_show_is_refused_and_nothing_written(daemon_factory, with_daemon):
    """A listing reads a session's title and tag from its last 64 KB: a
    120 KB title would be written, said done, and never shown (``list`` and
    Claude Code's picker keep the old one). ``rename``, ``tag`` and a
    ``Session``'s setters refuse it in one line; the largest that fits is
    taken and listed."""
    from sessiond.store.lite import METADATA_MAX
    from sessiond.wire.errors import RemoteError, SessiondError

    d = daemon_factory()
    sid = str(uuid.uuid4())
    d.cli("--no-autostart", "append", "--cwd", CWD, "--session", sid, input=line(user("the first prompt")))
    if with_daemon:
        d.start()
    path = main_path(d.root, CWD, sid)
    before = path.read_bytes()
    for command in ("rename", "tag"):
        out = d.cli(command, sid, "x" * 120_000, "--cwd", CWD, check=False)
        assert out.returncode == 1 and len(out.stderr.splitlines()) == 1, out.stderr
        assert b"would be 120," in out.stderr and b"last 64 KB" in out.stderr, out.stderr
    assert path.read_bytes() == before
    fits = "y" * (METADATA_MAX - 200)
    d.cli("rename", sid, fits, "--cwd", CWD)
    info = next(s for s in _json(d.cli("list", "--cwd", CWD, "--json")) if s["sessionId"] == sid)
    assert info["title"] == fits
    if with_daemon:
        with d.client() as c:
            s = Session(c, sid, CWD)
            for setter in (s.set_title, s.set_tag):
                with pytest.raises((SessiondError, RemoteError)) as refused:
                    setter("z" * 120_000)
                assert refused.value.code == "too_large"
            s.close()
        assert b"z" * 1000 not in path.read_bytes()


def test_lifecycle_errors_are_one_line_and_a_non_zero_exit(daemon, short_tmp):
    missing = str(uuid.uuid4())
    for args in (["rm", missing], ["rm", "not-a-uuid"], ["restore", missing], ["rename", missing, "t"],
                 ["export", missing], ["import", str(short_tmp / "nowhere")], ["trash", "empty", "--older-than", "soon"],
                 ["prune", "--larger-than", "huge", "--dry-run"]):
        out = daemon.cli(*args, check=False)
        assert out.returncode != 0, args
        assert len(out.stderr.strip().splitlines()) == 1 and b"Traceback" not in out.stderr, (args, out.stderr)


def test_rm_is_not_hung_by_a_writer_that_stopped_holding_its_lock(daemon):
    import fcntl

    sid = str(uuid.uuid4())
    daemon.cli("append", "--cwd", CWD, "--session", sid, input=line(user("hello")))
    daemon.cli("flush")
    path = main_path(daemon.root, CWD, sid)
    before = path.read_bytes()
    with open(path, "rb") as held:  # a fallback writer stopped inside its append
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        daemon.cli("rm", sid, "--cwd", CWD, timeout=30)
        assert not path.exists()
    entry = _trash(daemon)[0]
    moved = daemon.root / ".trash" / entry["name"] / "files" / entry["items"][0]["path"]
    assert moved.read_bytes() == before and entry["files"] == 1


def test_import_into_a_session_the_daemon_knows_keeps_dedup_true(daemon, short_tmp):
    tree = build(short_tmp / "src")
    daemon.cli("import", str(tree.projects))
    sid = sorted(tree.sessions)[0]
    src = tree.sessions[sid]
    copy = _copy(daemon, src)
    with daemon.client() as c:  # the daemon loads the session (its uuid set) ...
        c.call(m.Adopt(id=c.next_id(), session=sid, path=str(copy)))
        c.call(m.Close(id=c.next_id(), session=sid))
    copy_before = copy.read_bytes()
    new = user("written by Claude Code after the first import")
    with open(src, "ab") as f:  # ... then the source grows
        f.write((b"" if src.read_bytes().endswith(b"\n") else b"\n") + line(new) + b"\n")
    report = _json(daemon.cli("import", str(src), "--json"))
    assert report["sessions"][0]["status"] == "grown"
    with daemon.client() as c:  # a resend of the imported entry is a duplicate, not a second copy
        c.call(m.Adopt(id=c.next_id(), session=sid, path=str(copy)))
        r = c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(new)], durability="written"))
        assert (r.accepted, r.duplicates) == (0, 1)
    assert copy.read_bytes().startswith(copy_before) and copy.read_bytes().count(new["uuid"].encode()) == 1


def test_import_reports_a_session_a_client_is_writing_as_busy(daemon, short_tmp):
    tree = build(short_tmp / "src")
    daemon.cli("import", str(tree.projects))
    sid = sorted(tree.sessions)[0]
    with open(tree.sessions[sid], "ab") as f:
        f.write(b"\n" + line(user("more")) + b"\n")
    with daemon.client() as c:
        c.call(m.Adopt(id=c.next_id(), session=sid, path=str(_copy(daemon, tree.sessions[sid]))))
        out = daemon.cli("import", str(tree.sessions[sid]), "--json", check=False)
        assert out.returncode == 1 and _json(out)["sessions"][0]["status"] == "busy"
    assert _json(daemon.cli("import", str(tree.sessions[sid]), "--json"))["sessions"][0]["status"] == "grown"


def test_import_shows_progress_on_a_terminal(daemon_factory, short_tmp):
    import pty
    import subprocess
    import sys

    tree = build(short_tmp / "src")
    d = daemon_factory()
    master, slave = pty.openpty()
    try:
        out = subprocess.run([sys.executable, "-m", "sessiond.client.cli", "import", str(tree.projects)], env=d.env,
                             stdout=slave, stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(slave)
        os.close(master)
    assert out.returncode == 0
    assert f"importing sessions {len(tree.sessions)}/{len(tree.sessions)}".encode() in out.stderr
    piped = d.cli("import", str(tree.projects))
    assert b"importing sessions" not in piped.stderr  # scripts see no counter


def test_lifecycle_requests_refuse_paths_outside_the_store(daemon, short_tmp):
    from sessiond.store.importer import ImportFile, SessionSource
    from sessiond.wire.errors import RemoteError

    sid = str(uuid.uuid4())
    outside = short_tmp / "victim"
    outside.write_text("keep me")
    bad = [
        m.Trash(id=1, session=sid, path=str(outside)),
        m.Trash(id=1, session=sid, path=str(daemon.root / "projects" / ".." / f"{sid}.jsonl")),
        m.Trash(id=1, session="../x", path="/x"),
        m.Restore(id=1, session="not-a-uuid"),
        m.Import(id=1, source=SessionSource(project="..", session=sid, files=[ImportFile(src=str(outside), rel=f"{sid}.jsonl")])),
        m.Import(id=1, source=SessionSource(project="p", session=sid, files=[ImportFile(src=str(outside), rel=f"{sid}/../../x")])),
        m.Import(id=1, source=SessionSource(project="p", session=sid, files=[ImportFile(src="relative", rel=f"{sid}.jsonl")])),
        m.EmptyTrash(id=1, older_than=-1),
        m.Usage(id=1, dirs=[str(short_tmp)]),
    ]
    with daemon.client() as c:
        for req in bad:
            req.id = c.next_id()
            with pytest.raises(RemoteError) as err:
                c.call(req)
            assert err.value.code in ("bad_request", "permission_denied"), req
        assert c.status().pid  # the connection and the daemon go on
    assert outside.read_text() == "keep me"
    assert not (daemon.root / "projects" / "p").exists()


def test_a_flat_agent_file_of_claude_code_2_0_comes_in_and_goes_to_the_trash_with_its_session(daemon, short_tmp):
    tree = build(short_tmp / "src")
    out = _json(daemon.cli("import", str(tree.projects), "--json"))
    assert out["skipped"] == [] and out["counts"]["unreadable"] == 0
    flat = _copy(daemon, tree.flat_agent)
    assert flat.read_bytes() == tree.flat_agent.read_bytes()
    sid = "b3edadab-bca0-4054-9b41-f7ffa6941260"
    daemon.cli("rm", sid)
    assert not flat.exists()
    assert str(flat.relative_to(daemon.root)) in {i["path"] for i in _trash(daemon)[0]["items"]}
    daemon.cli("restore", sid)
    assert flat.read_bytes() == tree.flat_agent.read_bytes()
