"""Back into Claude Code in one step (issue 29): ``resume --claude`` and
``fork --claude`` run ``claude --resume ID`` in the session's own directory,
with its file where that Claude Code reads it (``$CLAUDE_CONFIG_DIR/projects``),
placed there first, byte for byte and saying so, when the store is elsewhere;
without ``claude`` on PATH, one line says how to do it by hand.

``claude`` in the first tests is a stand-in on PATH that records how it was
run and what it found (a real process, real files): what is checked is
sessiond's part. The last two run the real Claude Code (the CLI bundled in the
Agent SDK's wheel, offline against ``tests/agentsdk/fake_api.py``) and check
Claude Code's part: it finds the placed session, sends the old conversation to
the model with the next prompt, and chains the new turn onto the file's last
entry, in the session's directory.
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


# ---------------------------------------------------------------- the real Claude Code
# What Claude Code itself makes of the hand-off: the CLI the Agent SDK's wheel
# bundles, offline against the fake Messages API. sessiond runs `claude --resume ID`;
# the `claude` on PATH here is that real binary, given print mode and the next
# prompt (an interactive picker needs a terminal), so it resumes the placed file
# as a user's `claude --resume ID` would and answers one more turn.

REAL = """#!/bin/sh
exec "$REAL_CLAUDE" -p "$NEXT_PROMPT" --max-turns 1 "$@"
"""


@pytest.fixture
def real_claude(short_tmp):
    from tests.agentsdk.conftest import CLAUDE
    from tests.agentsdk.fake_api import FakeAPI

    assert CLAUDE.is_file(), f"the Agent SDK wheel's Claude Code is missing ({CLAUDE}): run `make install`"
    bin_dir = short_tmp / "real-bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "claude"
    wrapper.write_text(REAL)
    wrapper.chmod(0o755)
    config = short_tmp / "real-config"
    config.mkdir()
    api = FakeAPI().start()
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "REAL_CLAUDE": str(CLAUDE), "CLAUDE_CONFIG_DIR": str(config),
           "ANTHROPIC_BASE_URL": api.url, "ANTHROPIC_API_KEY": "sk-ant-dummy",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}
    try:
        yield env, config, api
    finally:
        api.stop()


def claude_session(daemon, cwd: Path) -> tuple[str, list[dict]]:
    """A two-turn session as Claude Code writes one (the fields its resume reads)."""
    sid = str(uuid.uuid4())
    common = {"cwd": str(cwd), "sessionId": sid, "version": "2.1.0", "userType": "external", "isSidechain": False}
    entries = [user("why is the build red", "u1", parentUuid=None, timestamp="2026-01-05T10:00:00.000Z", **common),
               assistant("a flaky test in test_io", "a1", parentUuid="u1", timestamp="2026-01-05T10:00:02.000Z",
                         **common),
               user("which one exactly", "u2", parentUuid="a1", timestamp="2026-01-05T10:01:00.000Z", **common),
               assistant("test_partial_write, it races the flush", "a2", parentUuid="u2",
                         timestamp="2026-01-05T10:01:03.000Z", **common)]
    daemon.cli("append", "--cwd", str(cwd), "--session", sid, "--durability", "written",
               input=b"".join(line(e) + b"\n" for e in entries))
    return sid, entries


def request_with(api, prompt: str) -> dict:
    """The Messages API request of the turn that carries ``prompt``."""
    found = [r for r in api.requests if prompt in json.dumps(r.get("messages"))]
    assert found, f"no request carried {prompt!r}: {[json.dumps(r)[:300] for r in api.requests]}"
    return found[-1]


def texts(request: dict) -> str:
    return json.dumps(request["messages"])


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_real_claude_resumes_what_resume_claude_placed(daemon, short_tmp, real_claude):
    from tests.agentsdk.conftest import chained_onto

    env, config, api = real_claude
    work = (short_tmp / "work").resolve()
    work.mkdir()
    sid, old = claude_session(daemon, work)
    prompt = "NEXT-TURN-7f3a what about the retry"
    r = daemon.cli("resume", sid, "--cwd", str(work), "--claude", env={**env, "NEXT_PROMPT": prompt}, timeout=120)
    assert f"placed 1 file of session {sid}" in r.stderr.decode()
    assert r.stdout.startswith(b"echo: ")  # Claude Code printed the fake model's answer to the turn
    sent = texts(request_with(api, prompt))
    for said in ("why is the build red", "a flaky test in test_io", "which one exactly",
                 "test_partial_write, it races the flush"):
        assert said in sent  # the old conversation went to the model with the new prompt
    placed = config / "projects" / sanitize(str(work)) / f"{sid}.jsonl"
    after = [json.loads(x) for x in placed.read_bytes().splitlines() if x.strip()]
    assert [e.get("uuid") for e in after[:len(old)]] == [e["uuid"] for e in old]  # the old file, untouched, first
    assert chained_onto(old, after, prompt)
    new_user = next(e for e in after[len(old):] if e["type"] == "user" and prompt in json.dumps(e["message"]))
    assert new_user["parentUuid"] == "a2" and new_user["sessionId"] == sid  # onto the old file's last entry
    assert new_user["cwd"] == str(work)  # run in the session's own directory


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_real_claude_resumes_the_fork_and_leaves_the_original(daemon, short_tmp, real_claude):
    from tests.agentsdk.conftest import chained_onto

    env, config, api = real_claude
    work = (short_tmp / "work").resolve()
    work.mkdir()
    sid, old = claude_session(daemon, work)
    original = main_path(daemon.root, str(work), sid).read_bytes()
    prompt = "NEXT-TURN-c41d and in the fork"
    r = daemon.cli("fork", sid, "--cwd", str(work), "--claude", env={**env, "NEXT_PROMPT": prompt}, timeout=120)
    new_id = r.stdout.decode().split()[0]
    assert new_id != sid
    sent = texts(request_with(api, prompt))
    assert "why is the build red" in sent and "test_partial_write, it races the flush" in sent
    project = config / "projects" / sanitize(str(work))
    forked_file = project / f"{new_id}.jsonl"
    forked = main_path(daemon.root, str(work), new_id).read_bytes().splitlines()
    after = [json.loads(x) for x in forked_file.read_bytes().splitlines() if x.strip()]
    before = [json.loads(x) for x in forked if x.strip()]
    assert after[:len(before)] == before  # the fork as sessiond made it, then Claude Code's turn
    assert chained_onto(before, after, prompt)
    new_user = next(e for e in after[len(before):] if e["type"] == "user" and prompt in json.dumps(e["message"]))
    last = [e for e in before if e.get("uuid")][-1]
    assert new_user["parentUuid"] == last["uuid"] and new_user["sessionId"] == new_id
    assert new_user["cwd"] == str(work)
    assert not (project / f"{sid}.jsonl").exists()
    assert main_path(daemon.root, str(work), sid).read_bytes() == original  # the original untouched
