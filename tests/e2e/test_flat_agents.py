"""Claude Code 2.0.x's flat agent files are their session's (issue 29).

2.0.x kept each subagent transcript as ``agent-<id>.jsonl`` beside the
sessions in the project dir, where only its entries (``sessionId``) say whose
it is. A real 2.0.74 tree from the corpus (session b3edadab and its two agent
files, copied in before the daemon starts, as Claude Code left them): ``show``
lists its subagents, ``export`` renders them, ``du`` counts them, and a search
hit in one points at the session and names the agent, as for the 2.1
``<session>/subagents/`` layout.
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import CORPUS
from tests.helpers import line

SID = "b3edadab-bca0-4054-9b41-f7ffa6941260"
PREFIX = "kfischer-okarin__scripts-and-tools__"
AGENTS = ["a434715", "a86dcdc"]
CWD = "/Users/user/project"
PROJECT = "-Users-user-project"
OTHER_SID = "cb2e607c-c758-415a-8b45-c49e4631906a"  # daaain's 2.0.37 session, with agent ea02459f


@pytest.fixture
def tree(daemon_factory):
    d = daemon_factory()
    proj = d.root / "projects" / PROJECT
    proj.mkdir(parents=True)
    shutil.copy(CORPUS / f"{PREFIX}{SID}.jsonl", proj / f"{SID}.jsonl")
    for a in AGENTS:
        shutil.copy(CORPUS / f"{PREFIX}agent-{a}.jsonl", proj / f"agent-{a}.jsonl")
    # Another session's flat agent in the same dir is not this session's.
    shutil.copy(CORPUS / "daaain__claude-code-log__agent-ea02459f.jsonl", proj / "agent-ea02459f.jsonl")
    # A flat agent with a word no other file holds, to see where its search hit points.
    entry = {"parentUuid": None, "isSidechain": True, "userType": "external", "cwd": CWD, "sessionId": SID,
             "version": "2.0.74", "agentId": "f1a7c0de", "type": "user",
             "message": {"role": "user", "content": "find the marmalade zeppelin in the logs"},
             "uuid": "5f3c1c1e-0000-4000-8000-000000000001", "timestamp": "2025-12-20T09:00:00.000Z"}
    (proj / "agent-f1a7c0de.jsonl").write_bytes(line(entry) + b"\n")
    d.start()
    return d, proj


def test_show_lists_the_flat_agents_of_its_session(tree):
    d, proj = tree
    shown = json.loads(d.cli("show", str(proj / f"{SID}.jsonl"), "--json").stdout)
    assert shown["subagents"] == sorted([*AGENTS, "f1a7c0de"])
    human = d.cli("show", str(proj / f"{SID}.jsonl"), "--no-pager").stdout.decode()
    assert "subagents: a434715, a86dcdc, f1a7c0de" in human
    agent = json.loads(d.cli("show", str(proj / "agent-a434715.jsonl"), "--json").stdout)
    assert agent["subagents"] == []  # an agent file's siblings are not its subagents


def test_export_renders_the_flat_agents(tree):
    d, proj = tree
    md = d.cli("export", str(proj / f"{SID}.jsonl"), "--format", "markdown").stdout.decode()
    assert "- Subagents: [a434715](#subagent-a434715), [a86dcdc](#subagent-a86dcdc)" in md
    assert "Read the file at /Users/user/project/test-file.txt" in md.split("subagent-a434715", 2)[-1]
    assert "ea02459f" not in md


def test_du_counts_the_flat_agents(tree):
    d, proj = tree
    rows = json.loads(d.cli("du", "--all", "--json").stdout)
    sessions = rows["sessions"] if isinstance(rows, dict) else rows
    mine = next(s for s in sessions if s["sessionId"] == SID)
    assert mine["files"] == 4
    assert mine["bytes"] == sum(p.stat().st_size for p in proj.iterdir() if p.name != "agent-ea02459f.jsonl")


def test_a_search_hit_in_a_flat_agent_points_at_its_session(tree):
    d, proj = tree
    hits = json.loads(d.cli("search", "--all", "--json", "marmalade zeppelin").stdout)
    assert [(h["sessionId"], h["agentId"], h["file"]) for h in hits] == [
        (SID, "f1a7c0de", str(proj / "agent-f1a7c0de.jsonl"))]
    assert hits[0]["path"] == str(proj / f"{SID}.jsonl")
    env = {"SESSIOND_SOCKET": str(d.socket) + ".none"}  # the offline scan, no daemon, no index
    offline = d.base / "scan-root"
    shutil.copytree(d.root / "projects", offline / "projects")
    r = d.cli("--root", str(offline), "search", "--all", "--json", "marmalade zeppelin", env=env)
    assert [(h["sessionId"], h["agentId"]) for h in json.loads(r.stdout)] == [(SID, "f1a7c0de")]
