"""Three agent processes on one real daemon at once: the Python SDK and the
TypeScript SDK on sessions of their own, and one more whose turn runs a
subagent (Claude Code writes the sidechain to a file of its own); the daemon
SIGKILLed and restarted in the middle of all three turns. What each agent's
Claude Code wrote locally is in sessiond exactly once: the SDK's retry and
the adapters' reconnect-and-resend deliver what was owed, the daemon's uuid
dedup keeps a resent entry from being written twice."""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk._internal.transcript_mirror_batcher import MIRROR_APPEND_BACKOFF_S

from tests.agentsdk.conftest import (
    LOCAL_ONLY,
    Agent,
    NodeAgent,
    entries,
    entries_so_far,
    mirrored,
    session_of,
    wait_for,
    waiting_prompt,
)
from tests.agentsdk.fake_api import FakeAPI
from tests.conftest import DaemonProc

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _files(projects: Path, project: str, read: Callable[[Path], list[dict[str, Any]]] = entries) -> dict[str, list[dict[str, Any]]]:
    """Every transcript of ``project`` under ``projects`` (sessions and their
    subagents' files), by path relative to the project dir."""
    base = projects / project
    return {str(p.relative_to(base)): read(p) for p in sorted(base.rglob("*.jsonl"))}


def _local(agent: Agent) -> dict[str, list[dict[str, Any]]]:
    return _files(agent.config / "projects", agent.project)


def _mirror(agent: Agent) -> dict[str, list[dict[str, Any]]]:
    return _files(agent.daemon.root / "projects", agent.project)


def _called(agent: Agent, tool: str, *, sidechain: bool) -> bool:
    """Whether sessiond has a call of ``tool`` from the agent's main chain (or
    a subagent's), mirrored so far (asked while the daemon writes: whole lines only)."""
    mirrored = _files(agent.daemon.root / "projects", agent.project, entries_so_far)
    return any(e.get("isSidechain", False) == sidechain and b.get("name") == tool
               for es in mirrored.values() for e in es if e["type"] == "assistant"
               for b in e["message"]["content"] if isinstance(b, dict) and b.get("type") == "tool_use")


def _turn_ended(agent: Agent) -> bool:
    """Whether Claude Code wrote the main chain's last answer locally (the
    fake model's ``done:`` after the last tool result)."""
    return any(not e.get("isSidechain") and e["type"] == "assistant" and '"text": "done: ' in json.dumps(e["message"])
               for es in _local(agent).values() for e in es)


def _metadata_as_sidecar(agent: Agent, name: str, got: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A subagent's mirrored entries less its ``agent_metadata``: Claude Code
    keeps that in a sidecar (``agent-<id>.meta.json``) and the SDK hands it to
    the store as entries of the subagent's file, one each time it changes (so
    never the same one twice); the last is the sidecar as it ended."""
    meta = [e for e in got if e["type"] == "agent_metadata"]
    sidecar = json.loads((agent.config / "projects" / agent.project / name.replace(".jsonl", ".meta.json")).read_text())
    assert meta and {**meta[-1], "type": None} == {**sidecar, "type": None}, name
    assert len({json.dumps(e, sort_keys=True) for e in meta}) == len(meta), f"{name}: metadata written twice"
    return [e for e in got if e["type"] != "agent_metadata"]


def _assert_each_once(agent: Agent) -> None:
    """The agent's local files and sessiond's hold the same entries: each one
    with a uuid once (and equal), those without one as many times."""
    local, mirror = _local(agent), _mirror(agent)
    assert sorted(mirror) == sorted(local)
    for name, written in local.items():
        want, got = mirrored(written), mirror[name]
        if "/subagents/" in name:
            got = _metadata_as_sidecar(agent, name, got)
        uuids = [e["uuid"] for e in got if "uuid" in e]
        assert len(uuids) == len(set(uuids)), f"{name}: an entry written twice"
        assert {e["uuid"]: e for e in got if "uuid" in e} == {e["uuid"]: e for e in want if "uuid" in e}, name
        plain = Counter(json.dumps(e, sort_keys=True) for e in got if "uuid" not in e)
        assert plain == Counter(json.dumps(e, sort_keys=True) for e in want if "uuid" not in e), name


def _waiting(agent: Agent, word: str) -> bool:
    """Whether the agent's Claude Code has written all it writes before the
    held answer to its Bash result (``finished-<word>``): the request carrying
    that result recorded after it (its ``api-request``, in the file of the
    chain that made it), and each main transcript's session metadata naming
    its last message (the ``last-prompt`` Claude Code appends, with
    ``atis-latch`` and ``api-request-route``, after a request's messages).
    Claude Code writes these after the request has gone out, so a held
    request does not yet say that its agent is done writing."""
    try:
        files = _local(agent)
    except ValueError:  # a line half written
        return False
    recorded = any(any(later["type"] == "api-request" for later in es[i + 1:])
                   for es in files.values() for i, e in enumerate(es) if _carries_result(e, word))
    mains = [es for name, es in files.items() if "/subagents/" not in name]
    return recorded and bool(mains) and all(_metadata_after_last_message(es) for es in mains)


def _carries_result(entry: dict[str, Any], word: str) -> bool:
    """Whether ``entry`` is the user message with the Bash result ``finished-<word>``."""
    content = entry["message"]["content"] if entry["type"] == "user" else None
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result"
                                             and f"finished-{word}" in json.dumps(b) for b in content)


def _metadata_after_last_message(written: list[dict[str, Any]]) -> bool:
    """Whether a transcript's last ``last-prompt`` names its last entry with a uuid."""
    messages = [e["uuid"] for e in written if "uuid" in e]
    leaves = [e.get("leafUuid") for e in written if e["type"] == "last-prompt"]
    return bool(messages and leaves) and leaves[-1] == messages[-1]


def _caught_up(agent: Agent) -> bool:
    """Whether sessiond has all the agent's Claude Code has written so far."""
    try:
        _assert_each_once(agent)
    except (AssertionError, ValueError, FileNotFoundError):  # behind, or a line half written
        return False
    return True


def test_python_and_node_agents_and_subagents_at_once_across_a_daemon_crash(short_tmp: Path, api: FakeAPI,
                                                                            daemon: DaemonProc) -> None:
    """The Python agent and one Node agent each run a subagent (the fake
    model's Agent call), whose Bash call waits for the test; another Node agent
    runs that Bash call itself. Once all three have called it, every answer to
    a tool result is held (the fake API), so all three are mid-turn and idle
    when the daemon is killed: the rest of each turn (the subagents' ends, the
    main chains' next API requests and answers) is written while there is no
    daemon, for longer than the SDK's own retries span."""
    agents = []
    for name in ("python", "node", "nodesub"):
        (short_tmp / name).mkdir()
        agents.append(Agent(short_tmp / name, api, daemon))
    py, node, sub = agents
    words = [f"{name}{uuid.uuid4().hex[:8]}" for name in ("lynx", "ibis", "mole")]
    (py_prompt, py_go), (node_prompt, node_go), (sub_prompt, sub_go) = (
        waiting_prompt(a, w) for a, w in zip(agents, words, strict=True))
    tools = ["Agent", "Bash", "Read"]
    api.hold()
    done: dict[str, Any] = {}
    py_turn = threading.Thread(target=lambda: done.update(messages=py.run(f"SPAWN: {py_prompt}", 150, allowed_tools=tools)))
    py_turn.start()
    node_run = NodeAgent(node, [{"op": "query", "prompt": node_prompt}])
    sub_run = NodeAgent(sub, [{"op": "query", "prompt": f"SPAWN: {sub_prompt}", "tools": tools}])
    try:
        # all three mid-turn, their tool calls in sessiond: the subagents' in their own files
        wait_for(lambda: _called(py, "Agent", sidechain=False) and _called(py, "Bash", sidechain=True)
                 and _called(node, "Bash", sidechain=False)
                 and _called(sub, "Agent", sidechain=False) and _called(sub, "Bash", sidechain=True), timeout=90)
        for go in (py_go, node_go, sub_go):
            go.touch()
        # each Bash call has ended and its answer is held: the agents wait, and once they have
        # written the held request's own entries, write nothing more
        wait_for(lambda: api.held == 3, timeout=60)
        wait_for(lambda: all(_waiting(a, w) for a, w in zip(agents, words, strict=True)), timeout=60)
        # once sessiond has it all, no append is in flight when the daemon dies (one that is may
        # lose an entry without a uuid: see docs/agent-sdk.md)
        wait_for(lambda: all(_caught_up(a) for a in agents), timeout=60)
        daemon.signal(signal.SIGKILL)
        daemon.wait()
        api.release()
        wait_for(lambda: all(_turn_ended(a) for a in agents), timeout=60)
        # no daemon for longer than the SDK's own retries span: what lands was held by the adapters
        time.sleep(sum(MIRROR_APPEND_BACKOFF_S) + 0.5)
        daemon.start()
    finally:
        api.release()
        for go in (py_go, node_go, sub_go):
            go.touch()
        py_turn.join(90)
        node_answers = node_run.wait(90)
        sub_answers = sub_run.wait(90)
    assert session_of(done["messages"])
    assert node_answers[0]["result"] == f"done: finished-{words[1]}"
    assert sub_answers[0]["result"].startswith("done: ")
    for a, word in ((py, words[0]), (sub, words[2])):
        subagent_files = [n for n in _local(a) if "/subagents/" in n]
        assert len(subagent_files) == 1 and f"finished-{word}" in json.dumps(_local(a)[subagent_files[0]])
    for a in agents:
        _assert_each_once(a)
    assert any(e["type"] in LOCAL_ONLY for a in agents for es in _local(a).values() for e in es)
