"""Back into Claude Code in one step (issue 29): ``resume --claude`` and
``fork --claude`` run ``claude --resume ID`` in the session's own directory,
with its file where that Claude Code reads it (``$CLAUDE_CONFIG_DIR/projects``),
placed there first, byte for byte and saying so, when the store is elsewhere;
without ``claude`` on PATH, one line says how to do it by hand.

``claude`` here is a stand-in on PATH that records how it was run and what it
found (a real process, real files): what is checked is sessiond's part.
"""

from __future__ import annotations

import json
import os
import shlex
import uuid
from pathlib import Path

import pytest

from sessiond.store.paths import sanitize
from tests.helpers import assistant, line, main_path, user

FAKE = """#!/bin/sh
# what Claude Code would see: its argv, its directory, the file it would read
f="$CLAUDE_CONFIG_DIR/projects/$(pwd | sed 's/[^a-zA-Z0-9]/-/g')/$2.jsonl"
printf '{"argv": "%s", "cwd": "%s", "found": %s}\\n' "$*" "$(pwd)" "$(test -f "$f" && echo true || echo false)" > "$RECORD"
"""


@pytest.fixture
def claude_env(short_tmp):
    bin_dir = short_tmp / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "claude"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    config = short_tmp / "claude-config"
    record = short_tmp / "record.json"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "CLAUDE_CONFIG_DIR": str(config), "RECORD": str(record)}
    return env, config, record


def session(daemon, cwd: Path) -> str:
    sid = str(uuid.uuid4())
    entries = [user("why is the build red", "u1", parentUuid=None, cwd=str(cwd), sessionId=sid),
               assistant("a flaky test", "a1", parentUuid="u1", cwd=str(cwd), sessionId=sid)]
    daemon.cli("append", "--cwd", str(cwd), "--session", sid, "--durability", "written",
               input=b"".join(line(e) + b"\n" for e in entries))
    return sid


def test_resume_claude_places_the_file_and_runs_claude_in_its_directory(daemon, short_tmp, claude_env):
    env, config, record = claude_env
    work = (short_tmp / "work").resolve()
    work.mkdir()
    sid = session(daemon, work)
    r = daemon.cli("resume", sid, "--cwd", str(work), "--claude", env=env)
    placed = config / "projects" / sanitize(str(work)) / f"{sid}.jsonl"
    assert placed.read_bytes() == main_path(daemon.root, str(work), sid).read_bytes()  # byte for byte
    assert f"placed 1 file of session {sid} into {placed.parent}" in r.stderr.decode()
    ran = json.loads(record.read_text())
    assert ran == {"argv": f"--resume {sid}", "cwd": str(work), "found": True}
    record.unlink()
    again = daemon.cli("resume", sid, "--cwd", str(work), "--claude", env=env)
    assert b"placed" not in again.stderr  # there already: nothing to say
    assert json.loads(record.read_text())["found"] is True


def test_fork_claude_opens_the_fork_not_the_original(daemon, short_tmp, claude_env):
    env, config, record = claude_env
    work = (short_tmp / "work").resolve()
    work.mkdir()
    sid = session(daemon, work)
    r = daemon.cli("fork", sid, "--cwd", str(work), "--claude", env=env)
    new_id = r.stdout.decode().split()[0]
    assert new_id != sid
    ran = json.loads(record.read_text())
    assert ran == {"argv": f"--resume {new_id}", "cwd": str(work), "found": True}
    assert not (config / "projects" / sanitize(str(work)) / f"{sid}.jsonl").exists()


def test_without_claude_on_path_one_line_says_how(daemon, short_tmp, claude_env):
    _, config, _ = claude_env
    work = (short_tmp / "work").resolve()
    work.mkdir()
    sid = session(daemon, work)
    env = {"PATH": "/nonexistent", "CLAUDE_CONFIG_DIR": str(config)}
    r = daemon.cli("resume", sid, "--cwd", str(work), "--claude", env=env, check=False)
    assert r.returncode == 1
    err = r.stderr.decode().strip().splitlines()
    assert err[-1] == (f"sessiond: `claude` is not on PATH; to resume it in Claude Code: "
                       f"cd {shlex.quote(str(work))} && claude --resume {sid}")
    assert (config / "projects" / sanitize(str(work)) / f"{sid}.jsonl").is_file()  # placed all the same


def test_a_store_that_is_claude_codes_own_dir_needs_no_placing(daemon, short_tmp, claude_env):
    env, _, record = claude_env
    work = (short_tmp / "work").resolve()
    work.mkdir()
    sid = session(daemon, work)
    env = {**env, "CLAUDE_CONFIG_DIR": str(daemon.root)}  # the store is ~/.claude
    r = daemon.cli("resume", sid, "--cwd", str(work), "--claude", env=env)
    assert b"placed" not in r.stderr
    assert json.loads(record.read_text()) == {"argv": f"--resume {sid}", "cwd": str(work), "found": True}
    assert sorted(p.name for p in (daemon.root / "projects").rglob("*.jsonl")) == [f"{sid}.jsonl"]
