"""What ``import`` makes of the odd sources a real home holds: one session in
two project dirs (a repo that moved), a folder of sessions named like no
project (``~/backup``), a hidden dir, a symlinked project dir, a FIFO. Every
session lands where its cwd's ``list`` and ``claude --resume`` look, one odd
source never stops the others, and each path left out is named with why."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from sessiond.store.paths import sanitize
from tests.helpers import assistant, line, main_path, user

CWD = "/work/moved-repo"


def _json(proc) -> dict:
    return json.loads(proc.stdout)


def _session(path, sid: str, cwd: str | None, *texts: str) -> bytes:
    """A transcript of ``texts`` (user, assistant, ...) at ``path``; its bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    extra = {"sessionId": sid, **({"cwd": cwd} if cwd else {})}
    entries, parent = [], None
    for i, text in enumerate(texts):
        uid = f"{sid[:8]}-{i}"
        make = user if i % 2 == 0 else assistant
        entries.append(make(text, uid, parentUuid=parent, **extra))
        parent = uid
    data = b"".join(line(e) + b"\n" for e in entries)
    path.write_bytes(data)
    return data


@pytest.mark.parametrize("with_daemon", [True, False], ids=["daemon", "no-daemon"])
def test_one_session_in_two_project_dirs_comes_in_from_both_in_one_run(daemon_factory, short_tmp, with_daemon):
    """A repo that moved: Claude Code kept the session in the old project dir
    and went on with it in the new one. One import brings both, never
    ``busy`` with itself."""
    d = daemon_factory()
    if with_daemon:
        d.start()
    sid = str(uuid.uuid4())
    projects = short_tmp / "cc" / "projects"
    old = _session(projects / "-work-old-place" / f"{sid}.jsonl", sid, "/work/old-place", "start here", "ok")
    new = _session(projects / sanitize(CWD) / f"{sid}.jsonl", sid, CWD, "start here", "ok", "go on", "done")
    agent = projects / "-work-old-place" / sid / "subagents" / "agent-a1.jsonl"
    agent.parent.mkdir(parents=True)
    agent.write_bytes(line({**user("sub"), "isSidechain": True, "agentId": "a1", "sessionId": sid}) + b"\n")
    out = d.cli("import", str(projects), "--json", check=False)
    report = _json(out)
    assert out.returncode == 0, out.stderr.decode()
    assert report["counts"]["busy"] == 0 and report["counts"]["imported"] == 2, report
    assert main_path(d.root, "/work/old-place", sid).read_bytes() == old
    assert main_path(d.root, CWD, sid).read_bytes() == new
    assert (d.root / "projects" / "-work-old-place" / sid / "subagents" / "agent-a1.jsonl").read_bytes() == agent.read_bytes()


@pytest.mark.parametrize("with_daemon", [True, False], ids=["daemon", "no-daemon"])
def test_a_folder_named_like_no_project_puts_each_session_where_its_cwd_lists_it(daemon_factory, short_tmp, with_daemon):
    """``sessiond import ~/backup`` (session files copied out of a project
    dir): each goes into the project its cwd names, subagent files with it,
    as importing the file itself does, not into a project dir "backup" that
    no ``list`` and no ``claude --resume`` looks in. One recording no cwd is
    named as skipped, and the others still come in."""
    d = daemon_factory()
    if with_daemon:
        d.start()
    backup = short_tmp / "backup"
    sid = str(uuid.uuid4())
    data = _session(backup / f"{sid}.jsonl", sid, CWD, "saved before the wipe", "noted")
    agent = backup / sid / "subagents" / "agent-b2.jsonl"
    agent.parent.mkdir(parents=True)
    agent.write_bytes(line({**user("sub"), "isSidechain": True, "agentId": "b2", "sessionId": sid, "cwd": CWD}) + b"\n")
    anonymous = str(uuid.uuid4())
    _session(backup / f"{anonymous}.jsonl", anonymous, None, "who knows where")
    out = d.cli("import", str(backup), "--json", check=False)
    report = _json(out)
    assert [(s["session"], s["status"]) for s in report["sessions"]] == [(sid, "imported")], report
    assert report["skipped"] == [str(backup / f"{anonymous}.jsonl")]
    assert out.returncode == 1  # something was left out
    assert main_path(d.root, CWD, sid).read_bytes() == data
    assert (main_path(d.root, CWD, sid).with_suffix("") / "subagents" / "agent-b2.jsonl").read_bytes() == agent.read_bytes()
    assert not (d.root / "projects" / "backup").exists()
    listed = _json(d.cli("list", "--cwd", CWD, "--json"))
    assert [s["sessionId"] for s in listed] == [sid]
    said = d.cli("import", str(backup), check=False).stderr.decode()
    assert f"skipped: {backup / anonymous}.jsonl: in no project dir and records no cwd" in said, said


@pytest.mark.parametrize("with_daemon", [True, False], ids=["daemon", "no-daemon"])
def test_odd_entries_of_a_projects_dir_are_named_and_never_stop_the_rest(daemon_factory, short_tmp, with_daemon):
    """A hidden dir (``.backup``, a name Claude Code never makes), a symlinked
    project dir, a FIFO named ``<uuid>.jsonl``: each is said with why, and
    every real session of the tree comes in, in the same run."""
    d = daemon_factory()
    if with_daemon:
        d.start()
    projects = short_tmp / "cc" / "projects"
    hidden, plain = str(uuid.uuid4()), str(uuid.uuid4())
    _session(projects / ".backup" / f"{hidden}.jsonl", hidden, CWD, "kept aside", "yes")
    data = _session(projects / "-work-zzz" / f"{plain}.jsonl", plain, "/work/zzz", "the real one", "sure")
    fifo = projects / "-work-zzz" / f"{uuid.uuid4()}.jsonl"
    os.mkfifo(fifo)
    elsewhere = short_tmp / "elsewhere"
    _session(elsewhere / f"{uuid.uuid4()}.jsonl", str(uuid.uuid4()), "/work/else", "outside the tree")
    (projects / "-work-else").symlink_to(elsewhere)
    out = d.cli("import", str(projects), check=False)
    said = out.stderr.decode()
    assert "Traceback" not in said and "not a project dir name" not in said, said
    assert main_path(d.root, "/work/zzz", plain).read_bytes() == data
    assert main_path(d.root, CWD, hidden).is_file()  # by its cwd, as any session in no project dir
    assert f"skipped: {fifo}: not a regular file (a FIFO)" in said, said
    assert f"skipped: {projects / '-work-else'}: a symlink" in said, said
    assert out.stdout.decode().startswith("2 imported"), out.stdout
    assert out.returncode == 1


@pytest.mark.parametrize("with_daemon", [True, False], ids=["daemon", "no-daemon"])
def test_a_meta_file_claude_code_rewrote_since_comes_in_again(daemon_factory, short_tmp, with_daemon):
    """An agent's ``.meta.json`` is a state Claude Code replaces whole (an
    agent stopped, revived): the source's newer state replaces the store's
    older copy on the next import, instead of a ``diverged`` (and exit 1) at
    every import from then on. A store copy newer than the source is never
    replaced."""
    d = daemon_factory()
    if with_daemon:
        d.start()
    sid = str(uuid.uuid4())
    project = short_tmp / "cc" / "projects" / sanitize(CWD)
    _session(project / f"{sid}.jsonl", sid, CWD, "spawn one", "spawned")
    meta = project / sid / "subagents" / "agent-a7.meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_bytes(b'{"agentType":"general-purpose"}')
    os.utime(meta, (1_700_000_000, 1_700_000_000))
    d.cli("import", str(project.parent))
    copy = main_path(d.root, CWD, sid).with_suffix("") / "subagents" / "agent-a7.meta.json"
    assert copy.read_bytes() == meta.read_bytes()
    meta.write_bytes(b'{"agentType":"general-purpose","observerStopped":true}')  # rewritten since, now
    out = d.cli("import", str(project.parent), "--json", check=False)
    assert out.returncode == 0, out.stdout.decode()
    (session,) = _json(out)["sessions"]
    assert {f["rel"]: f["status"] for f in session["files"]}[f"{sid}/subagents/agent-a7.meta.json"] == "merged"
    assert copy.read_bytes() == meta.read_bytes()
    assert copy.stat().st_mtime == meta.stat().st_mtime
    assert oct(copy.stat().st_mode & 0o777) == "0o600"
    # The store's copy changed after the source's last write: the source is the older state.
    copy.write_bytes(b'{"agentType":"general-purpose","note":"the store\'s own"}')
    os.utime(meta, (1_700_000_000, 1_700_000_000))
    out = d.cli("import", str(project.parent), "--json", check=False)
    assert out.returncode == 1 and _json(out)["counts"]["diverged"] == 1
    assert copy.read_bytes() == b'{"agentType":"general-purpose","note":"the store\'s own"}'
