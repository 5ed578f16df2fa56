"""How Claude Code itself picks the conversation ``claude --resume ID`` restores,
restated in Python for the tests (tests only): ``loadTranscriptFile`` keeps the
transcript messages (user, assistant, attachment, system) in a Map by uuid, a
later line replacing an earlier one's value but not its place, and bridges
legacy progress entries; ``getLastSessionLog`` takes ``findLatestMessage`` of
the non-sidechain ones (``Date.parse`` of ``timestamp``, strictly greater, so the
FIRST of equal timestamps; an unparseable one never wins) and
``buildConversationChain`` walks ``parentUuid`` up from it (cycle guard).
What sessiond must hold at least: tests/client/resume/test_leaf.py.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path

MESSAGE_TYPES = {"user", "assistant", "attachment", "system"}


def _date_parse(ts: object) -> float:
    if not isinstance(ts, str):
        return math.nan
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return math.nan


def load_messages(path: Path) -> dict[str, dict]:
    messages: dict[str, dict] = {}
    bridge: dict[str, str | None] = {}
    for raw in path.read_bytes().split(b"\n"):
        try:
            e = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(e, dict) or not isinstance(e.get("uuid"), str):
            continue
        if e.get("type") == "progress":
            parent = e.get("parentUuid")
            bridge[e["uuid"]] = bridge.get(parent, parent) if parent in bridge else parent
            continue
        if e.get("type") in MESSAGE_TYPES:
            if e.get("parentUuid") in bridge:
                e["parentUuid"] = bridge[e["parentUuid"]]
            messages[e["uuid"]] = e  # a dict, like a Map, keeps the first place of a key
    return messages


def resume_leaf(messages: dict[str, dict]) -> dict | None:
    latest, most = None, -math.inf
    for m in messages.values():
        if m.get("isSidechain"):
            continue
        t = _date_parse(m.get("timestamp"))
        if t > most:
            latest, most = m, t
    return latest


def resume_chain(path: Path) -> list[str]:
    """uuids of the conversation ``claude --resume`` restores, root first
    (before its parallel-result splice, which sessiond does too)."""
    messages = load_messages(path)
    cur = resume_leaf(messages)
    chain: list[str] = []
    seen: set[str] = set()
    while cur is not None and cur["uuid"] not in seen:
        seen.add(cur["uuid"])
        chain.append(cur["uuid"])
        parent = cur.get("parentUuid")
        cur = messages.get(parent) if parent else None
    chain.reverse()
    return chain
