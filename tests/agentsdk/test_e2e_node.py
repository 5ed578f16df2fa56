"""End to end in TypeScript: the npm Agent SDK running Claude Code offline
(``client/node/test/agent.ts``, one Node process per run), with the npm
``sessiond`` package's ``SessiondSessionStore`` on a real daemon as its session
store; what the Python SDK's end to end (test_e2e.py) checks, through Node."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.agentsdk.conftest import (
    Agent,
    Lines,
    NodeAgent,
    assert_turn_mirrored,
    chained_onto,
    cli_args,
    entries,
    search_hit,
    wait_for,
    waiting_prompt,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_a_turn_with_a_tool_call_lands_live_and_equals_the_local_file(agent: Agent) -> None:
    word = f"heron{uuid.uuid4().hex[:8]}"
    prompt, go = waiting_prompt(agent, word)
    run = NodeAgent(agent, [{"op": "query", "prompt": prompt}])
    watch = None
    try:
        # While the tool runs (the turn is not over), the prompt and the tool call are in sessiond already.
        sid = wait_for(lambda: search_hit(agent, word), timeout=60)["sessionId"]
        watch = Lines(cli_args("watch", sid, "--json", "--cwd", str(agent.work)), agent.daemon.env)
        wait_for(lambda: watch.seen(b'"name":"Bash"'))
        assert run.proc.poll() is None and not run.lines  # still mid-turn
    finally:
        go.touch()
        answers = run.wait()
    try:
        assert answers == [{"op": "query", "sessionId": sid, "result": f"done: finished-{word}"}]
        wait_for(lambda: watch.seen(f"done: finished-{word}".encode()))  # the rest streams to the watcher
    finally:
        watch.stop()
    assert_turn_mirrored(agent, sid, word)


def test_resume_from_sessiond_then_continue_fork_rename_tag_delete(agent: Agent) -> None:
    [first] = NodeAgent.run(agent, {"op": "query", "prompt": f"remember the word puffin{uuid.uuid4().hex[:6]}"})
    sid = first["sessionId"]
    before = entries(agent.mirror_file(sid))
    agent.local_file(sid).unlink()  # only sessiond has it now

    resumed, continued, fork, *_, infos = NodeAgent.run(
        agent,
        {"op": "query", "prompt": "what was the word?", "resume": sid},
        {"op": "query", "prompt": "and again", "continue": True},
        {"op": "fork", "sessionId": sid, "title": "forked"},
        {"op": "rename", "sessionId": sid, "title": "Renamed in sessiond"},
        {"op": "tag", "sessionId": sid, "tag": "sdk-tag"},
        {"op": "list"},
        timeout=90,
    )
    assert resumed == {"op": "query", "sessionId": sid, "result": "echo: what was the word?"}
    after = entries(agent.mirror_file(sid))
    assert after[:len(before)] == before  # the old turn is not written again
    assert chained_onto(before, after, "what was the word?")  # the next turn went on from the old one
    assert continued["sessionId"] == sid  # the newest session in sessiond
    assert "and again" in json.dumps(after)
    by_id = {i["sessionId"]: i for i in infos["sessions"]}  # the SDK's listSessions, from the store
    assert by_id[sid]["customTitle"] == "Renamed in sessiond" and by_id[sid]["tag"] == "sdk-tag"
    assert by_id[fork["sessionId"]]["customTitle"] == "forked"
    listed = agent.listed()
    assert listed[sid]["customTitle"] == "Renamed in sessiond" and listed[sid]["tag"] == "sdk-tag"
    assert listed[fork["sessionId"]]["title"] == "forked"

    _, left = NodeAgent.run(agent, {"op": "delete", "sessionId": sid}, {"op": "list"})
    assert [i["sessionId"] for i in left["sessions"]] == [fork["sessionId"]]
    assert sid not in agent.listed() and fork["sessionId"] in agent.listed()
    assert not agent.mirror_file(sid).exists()
    trash = json.loads(agent.daemon.cli("trash", "--json", timeout=30).stdout)
    assert [e["session"] for e in trash] == [sid]  # in the trash, not unlinked
