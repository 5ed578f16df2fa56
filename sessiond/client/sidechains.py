"""Subagent conversations written inside the main transcript, as Claude Code
1.0.x wrote them: no file of their own, every entry marked ``isSidechain``,
each conversation a tree of its own under a root whose ``parentUuid`` is null.
(Claude Code 2.x writes each subagent to ``<id>/subagents/agent-<id>.jsonl``,
``export.agent_files``.)

``inline_sidechains`` gives each such conversation as the resume loader reads
a subagent's file (``load_transcript``: the same chain, repairs and
skipped-line counts), so the exports show it after the main conversation as
they show a 2.x subagent. A conversation is named by the Task call that
started it when its first prompt is that call's ``prompt`` (1.0.x records no
agent id), and that call's result is given the name as its ``agentId``, which
is how the exports link a call to its subagent; else by its root's uuid.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import msgspec

from sessiond.store.entries import try_header
from sessiond.store.jsonl import iter_line_views

from .resume.pipeline import Resumed, load_transcript

MAX_SIDECHAINS = 1000
"""Inline conversations read from one transcript at most (each is a load of its own)."""


def inline_sidechains(main: Resumed, known: Collection[str] = ()) -> list[tuple[str, Resumed]]:
    """(name, conversation) of each sidechain inside ``main``'s file, in file
    order, but for one whose root names an agent of ``known`` (it has a file of
    its own); ``main.messages`` gain the link from each Task call to its own."""
    trees = [(root, agent, lines) for root, agent, lines in _trees(Path(main.path)) if agent not in known]
    if not trees:
        return []
    calls = _task_calls(main.messages)
    out: list[tuple[str, Resumed]] = []
    with tempfile.TemporaryDirectory(prefix="sessiond-sidechain-") as tmp:
        for n, (root, agent, lines) in enumerate(trees):
            part = Path(tmp) / f"{n}.jsonl"
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(b"".join(line + b"\n" for line in lines))
            sub = msgspec.structs.replace(load_transcript(part), path=main.path)
            call = calls.get(_first_prompt(sub.messages) or "")
            name = agent or call or f"sidechain-{root[:8]}"
            if call is not None:
                _link(main.messages, call)
            out.append((name, sub))
    return out


def _trees(path: Path) -> list[tuple[str, str | None, list[bytes]]]:
    """The sidechain entries of the file grouped by the root each descends from
    (its ``parentUuid`` chain among them), roots in file order with the agent
    id the root names if any; entries whose root is not in the file are left out."""
    roots: list[str] = []
    agents: dict[str, str | None] = {}
    parent: dict[str, str | None] = {}
    lines: dict[str, list[bytes]] = {}
    for view in _marked(path):
        line = bytes(view)  # a copy: the reader's buffer is reused for the next line
        h = try_header(line)
        if h is None or not h.isSidechain or not h.uuid or h.uuid in parent:
            continue
        up = h.parentUuid if isinstance(h.parentUuid, str) else None
        parent[h.uuid] = up
        if up is None:
            if len(roots) >= MAX_SIDECHAINS:
                continue
            roots.append(h.uuid)
            agents[h.uuid] = h.agentId
        lines.setdefault(h.uuid, []).append(line)
    found: dict[str, list[bytes]] = {r: [] for r in roots}
    root_of: dict[str, str | None] = {}
    for uuid, kept in lines.items():
        top = _root(uuid, parent, root_of)
        if top is not None and top in found:
            found[top] += kept
    return [(r, agents[r], found[r]) for r in roots]


def _marked(path: Path) -> Iterator[memoryview]:
    """The lines that say ``"isSidechain":true`` as JSON.stringify writes it
    (a 2.x main transcript says ``false`` on every line: those are never
    decoded), or, in a file with none, as a writer that puts a space writes it."""
    found = False
    for view in iter_line_views(path, containing=b'"isSidechain":true'):
        found = True
        yield view
    if not found:
        yield from iter_line_views(path, containing=b'"isSidechain": true')


def _root(uuid: str, parent: dict[str, str | None], memo: dict[str, str | None]) -> str | None:
    """The root ``uuid`` descends from through ``parent``; None for a chain that
    leaves the sidechain entries or loops."""
    trail: list[str] = []
    on_trail: set[str] = set()
    at = uuid
    while True:
        if at in memo:
            top = memo[at]
            break
        if at not in parent or at in on_trail:
            top = None
            break
        trail.append(at)
        on_trail.add(at)
        up = parent[at]
        if up is None:
            top = at
            break
        at = up
    for u in trail:
        memo[u] = top
    return top


def _task_calls(messages: list[dict[str, Any]]) -> dict[str, str]:
    """The prompt of each Task (or Agent) call of the conversation, to its call id."""
    calls: dict[str, str] = {}
    for m in messages:
        if m.get("type") != "assistant":
            continue
        content = (m.get("message") or {}).get("content")
        for b in content if isinstance(content, list) else ():
            if (isinstance(b, dict) and b.get("type") == "tool_use" and b.get("name") in ("Task", "Agent")
                    and isinstance(b.get("id"), str) and isinstance(prompt := (b.get("input") or {}).get("prompt"), str)):
                calls.setdefault(prompt, b["id"])
    return calls


def _first_prompt(messages: list[dict[str, Any]]) -> str | None:
    """The text of a conversation's first user message."""
    for m in messages:
        if m.get("type") != "user":
            continue
        content = (m.get("message") or {}).get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            texts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
            return "".join(t for t in texts if isinstance(t, str)) or None
        return None
    return None


def _link(messages: list[dict[str, Any]], call: str) -> None:
    """Name the subagent of call ``call`` in its result (``toolUseResult.agentId``,
    where Claude Code 2.x records it): the exports link the call to it."""
    for m in messages:
        content = (m.get("message") or {}).get("content") if m.get("type") == "user" else None
        if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result"
                                             and b.get("tool_use_id") == call for b in content):
            result = m.get("toolUseResult")
            m["toolUseResult"] = {**(result if isinstance(result, dict) else {}), "agentId": call}
            return


__all__ = ["MAX_SIDECHAINS", "inline_sidechains"]
