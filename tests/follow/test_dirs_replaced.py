"""A project directory deleted or renamed away, and made again at the same
path (Claude Code makes it again at its next session there): the new
directory is watched, so a session another program writes in it is followed
live, whatever still holds the old directory (the daemon's own open
transcript in it keeps the kernel from dropping the old watch)."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from sessiond.store.paths import project_dir
from sessiond.wire import messages as m
from tests.helpers import line, user, wait_until

from .foreign import Foreign, Frames, by_file, corpus_lines, follow_status, raw

CWD = "/work/made-again"


@pytest.mark.parametrize("how", ["deleted", "renamed"])
def test_a_project_dir_made_again_is_followed(daemon, how):
    d = project_dir(daemon.root, CWD)
    held, sid = str(uuid.uuid4()), str(uuid.uuid4())
    path = d / f"{sid}.jsonl"
    lines = corpus_lines(5, skip=70)
    with Foreign() as w, daemon.client() as c, daemon.client() as watching:
        r = c.call(m.Append(id=c.next_id(), session=held, cwd=CWD, entries=[line(user("the daemon's"))],
                            durability="written"))
        assert r.accepted == 1  # the daemon holds a transcript open in the directory
        if how == "deleted":
            shutil.rmtree(d)
        else:
            d.rename(d.with_name(d.name + "-old"))
        w.do("append", path, data=lines[0])  # a new session: the directory is made again
        watch = Frames(watching, m.Subscribe(id=watching.next_id(), session=sid, path=str(path)))
        for x in lines[1:]:
            w.do("append", path, data=x)
        seen = by_file(watch.until((path.name, raw(lines[-1:])[0]), timeout=10))
    assert seen[path.name] == raw(lines[1:])


def test_a_renamed_project_dirs_sessions_are_followed_at_their_new_path(daemon):
    d = project_dir(daemon.root, CWD)
    sid = str(uuid.uuid4())
    lines = corpus_lines(4, skip=80)
    with Foreign() as w, daemon.client() as watching:
        w.do("append", d / f"{sid}.jsonl", data=lines[0])
        moved = d.with_name(d.name + "-moved")
        d.rename(moved)
        path = moved / f"{sid}.jsonl"
        w.do("append", path, data=lines[1])
        watch = Frames(watching, m.Subscribe(id=watching.next_id(), session=sid, path=str(path)))
        for x in lines[2:]:
            w.do("append", path, data=x)
        seen = by_file(watch.until((path.name, raw(lines[-1:])[0]), timeout=10))
    assert seen[path.name] == raw(lines[2:])


def test_the_projects_dir_made_again_is_followed(daemon_factory):
    """``projects/`` itself deleted (history cleared by hand) and made again by
    the next session: that session is followed live."""
    d = daemon_factory()
    sid = str(uuid.uuid4())
    path = project_dir(d.root, CWD) / f"{sid}.jsonl"
    lines = corpus_lines(5, skip=90)
    path.parent.mkdir(parents=True)
    path.write_text(lines[0])  # there when the daemon starts: its root is not watched
    d.start()
    with Foreign() as w, d.client() as watching:
        shutil.rmtree(d.root / "projects")
        w.do("append", path, data=lines[1])  # Claude Code makes it again
        wait_until(lambda: follow_status(d)["bytes"] >= len(lines[1].encode()), "the new file to be followed")
        watch = Frames(watching, m.Subscribe(id=watching.next_id(), session=sid, path=str(path)))
        for x in lines[2:]:
            w.do("append", path, data=x)
        seen = by_file(watch.until((path.name, raw(lines[-1:])[0]), timeout=10))
    assert seen[path.name] == raw(lines[2:])


def test_a_projects_tree_moved_into_place_is_followed_to_its_depth(daemon):
    """A whole tree moved in as ``projects/`` (restored from a copy): walked
    at its true depth, so a workflow's agent file five levels down is
    followed like one found at start."""
    sid = str(uuid.uuid4())
    staged = daemon.root / "projects.restored"
    path = Path(project_dir(daemon.root, CWD).name)
    agent = path / sid / "subagents" / "workflows" / "run-1" / "agent-a1.jsonl"
    lines = corpus_lines(4, skip=96)
    (staged / agent).parent.mkdir(parents=True)
    (staged / path / f"{sid}.jsonl").write_text(lines[0])
    (staged / agent).write_text(lines[1])
    projects = daemon.root / "projects"
    shutil.rmtree(projects, ignore_errors=True)
    staged.rename(projects)
    main = projects / path / f"{sid}.jsonl"
    with Foreign() as w, daemon.client() as watching:
        wait_until(lambda: follow_status(daemon)["files"] == 2, "the moved tree to be walked")
        # and read: a watcher's agent file starts where the follower has passed it on to (one that found the file
        # walked but not yet read would get its first line too, as the file's news)
        size = main.stat().st_size + (projects / agent).stat().st_size
        wait_until(lambda: (lambda f: f["bytes"] + f["known_bytes"])(follow_status(daemon)) >= size,
                   "the moved tree's lines to be passed on")
        watch = Frames(watching, m.Subscribe(id=watching.next_id(), session=sid, path=str(main), agents=True))
        w.do("append", projects / agent, data=lines[2])
        w.do("append", main, data=lines[3])
        rel = agent.relative_to(path).as_posix()
        seen = by_file(watch.until((main.name, raw([lines[3]])[0]), (rel, raw([lines[2]])[0]), timeout=10))
    assert seen == {main.name: raw([lines[3]]), rel: raw([lines[2]])}
