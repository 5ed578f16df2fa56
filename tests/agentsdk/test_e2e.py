"""End to end: the Agent SDK running its bundled Claude Code offline, with
``SessiondSessionStore`` on a real daemon as its session store."""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from typing import Any

import anyio
import pytest
from claude_agent_sdk import (
    delete_session_via_store,
    fork_session_via_store,
    list_sessions_from_store,
    rename_session_via_store,
    tag_session_via_store,
)
from claude_agent_sdk._internal.transcript_mirror_batcher import MIRROR_APPEND_BACKOFF_S

from tests.agentsdk.conftest import (
    Agent,
    Lines,
    assert_turn_mirrored,
    chained_onto,
    cli_args,
    entries,
    mirrored,
    search_hit,
    session_of,
    wait_for,
    waiting_prompt,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def test_a_turn_with_a_tool_call_lands_live_and_equals_the_local_file(agent: Agent) -> None:
    word = f"zebra{uuid.uuid4().hex[:8]}"
    prompt, go = waiting_prompt(agent, word)
    done: dict[str, Any] = {}
    turn = threading.Thread(target=lambda: done.update(messages=agent.run(prompt)))
    turn.start()
    watch = None
    try:
        # While the tool runs (the turn is not over), the prompt and the tool call are in sessiond already.
        hit = wait_for(lambda: search_hit(agent, word))
        sid = hit["sessionId"]
        watch = Lines(cli_args("watch", sid, "--json", "--cwd", str(agent.work)), agent.daemon.env)
        wait_for(lambda: watch.seen(b'"name":"Bash"'))
        assert "messages" not in done  # still mid-turn
    finally:
        go.touch()
        turn.join(60)
    try:
        assert session_of(done["messages"]) == sid
        wait_for(lambda: watch.seen(f"done: finished-{word}".encode()))  # the rest streams to the watcher
    finally:
        watch.stop()
    assert_turn_mirrored(agent, sid, word)


def test_resume_from_sessiond_then_continue_fork_rename_tag_delete(agent: Agent) -> None:
    first = agent.run(f"remember the word otter{uuid.uuid4().hex[:6]}")
    sid = session_of(first)
    before = entries(agent.mirror_file(sid))
    agent.local_file(sid).unlink()  # only sessiond has it now

    resumed = agent.run("what was the word?", resume=sid)
    assert session_of(resumed) == sid
    after = entries(agent.mirror_file(sid))
    assert after[:len(before)] == before  # the old turn is not written again
    assert chained_onto(before, after, "what was the word?")  # chained onto the old turn
    assert any(e["type"] == "assistant" and "echo: what was the word?" in json.dumps(e["message"])
               for e in after[len(before):])

    continued = agent.run("and again", continue_conversation=True)
    assert session_of(continued) == sid  # the newest session in sessiond
    assert "and again" in json.dumps(entries(agent.mirror_file(sid)))

    async def lifecycle() -> str:
        forked = await fork_session_via_store(agent.store, sid, directory=str(agent.work), title="forked")
        await rename_session_via_store(agent.store, sid, "Renamed in sessiond", directory=str(agent.work))
        await tag_session_via_store(agent.store, sid, "sdk-tag", directory=str(agent.work))
        infos = {i.session_id: i for i in await list_sessions_from_store(agent.store, directory=str(agent.work))}
        assert infos[sid].custom_title == "Renamed in sessiond" and infos[sid].tag == "sdk-tag"
        assert infos[forked.session_id].custom_title == "forked"
        return forked.session_id

    fork = anyio.run(lifecycle)
    listed = agent.listed()
    assert listed[sid]["customTitle"] == "Renamed in sessiond" and listed[sid]["tag"] == "sdk-tag"
    assert listed[fork]["title"] == "forked"

    anyio.run(lambda: delete_session_via_store(agent.store, sid, directory=str(agent.work)))
    assert sid not in agent.listed() and fork in agent.listed()
    assert not agent.mirror_file(sid).exists()
    trash = json.loads(agent.daemon.cli("trash", "--json", timeout=30).stdout)
    assert [e["session"] for e in trash] == [sid]  # in the trash, not unlinked
    assert anyio.run(agent.store.load, {"project_key": agent.project, "session_id": sid}) is None


def test_daemon_killed_and_restarted_mid_turn_leaves_every_entry_once(agent: Agent) -> None:
    word = f"kiwi{uuid.uuid4().hex[:8]}"
    prompt, go = waiting_prompt(agent, word)
    done: dict[str, Any] = {}
    turn = threading.Thread(target=lambda: done.update(messages=agent.run(prompt)))
    turn.start()
    daemon = agent.daemon
    try:
        sid = wait_for(lambda: search_hit(agent, word))["sessionId"]
        daemon.signal(signal.SIGKILL)
        daemon.wait()
        go.touch()  # the turn goes on: its next batches find no daemon
        wait_for(lambda: not turn.is_alive() or b"finished" in agent.local_file(sid).read_bytes(), timeout=30)
        time.sleep(sum(MIRROR_APPEND_BACKOFF_S) + 0.5)  # down for longer than the SDK's own retries span
        daemon.start()
    finally:
        go.touch()
        turn.join(60)
    assert session_of(done["messages"]) == sid
    local, mirror = mirrored(entries(agent.local_file(sid))), entries(agent.mirror_file(sid))
    assert mirror == local  # every entry exactly once, in order
    assert len({e["uuid"] for e in mirror if "uuid" in e}) == sum(1 for e in mirror if "uuid" in e)
