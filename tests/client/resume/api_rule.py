"""The model API's rule for a conversation, as test infrastructure (issue 16).

An agent does not send the resumed entries one by one: it builds the API's message
list from them. Claude Code writes ONE content block per assistant entry, so the
entries of one response (one ``message.id``) are merged back into one assistant turn,
and consecutive user-side entries (user messages, attachments, which reach the model
as user text) into one user turn. The API then refuses (HTTP 400, "tool_use ids were
found without tool_result blocks immediately after") a conversation in which

- a tool_use is not answered by a tool_result in the very NEXT turn, or
- a tool_result does not answer a tool_use of the turn just BEFORE it (or answers
  one a second time), or
- the user turn answering tool_uses does not start with its tool_results (text
  first, results after: "tool_result blocks must come first"), or
- a text block is empty or whitespace only ("text content blocks must be non-empty"),
- a turn has no content at all ("all messages must have non-empty content except
  for the optional final assistant message"),
- a string holds a lone surrogate (not encodable as UTF-8 JSON: the request fails).

:func:`violations` returns each broken rule as a readable line (empty: the API
accepts the conversation); :func:`turns` shows the message list it checked.

What is not sent: ``system`` entries (compact boundaries, turn durations, local
command bookkeeping Claude Code renders itself) and ``progress``. A tool_use left
unanswered at the very END of the list is not a violation here: resume either drops
it (the deserialize filters) or the agent answers it in the next request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Turn:
    role: str
    blocks: list[dict[str, Any]] = field(default_factory=list)
    uuids: list[str] = field(default_factory=list)
    message_id: str | None = None


def _content(m: dict[str, Any]) -> Any:
    message = m.get("message")
    return message.get("content") if isinstance(message, dict) else None


def _as_blocks(m: dict[str, Any]) -> list[dict[str, Any]]:
    if m.get("type") == "attachment":
        return [{"type": "text", "text": "<attachment>"}]  # Claude Code renders it as user text
    content = _content(m)
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _message_id(m: dict[str, Any]) -> str | None:
    message = m.get("message")
    mid = message.get("id") if isinstance(message, dict) else None
    return mid if isinstance(mid, str) else None


def turns(messages: list[dict[str, Any]]) -> list[Turn]:
    """The API message list an agent builds from resumed messages."""
    out: list[Turn] = []
    for m in messages:
        kind = m.get("type")
        if kind == "assistant":
            mid = _message_id(m)
            last = out[-1] if out else None
            if last is not None and last.role == "assistant" and (mid is None or last.message_id == mid):
                pass  # same response (or an id-less continuation of it)
            else:
                last = Turn("assistant", message_id=mid)
                out.append(last)
        elif kind in ("user", "attachment"):
            last = out[-1] if out else None
            if last is None or last.role != "user":
                last = Turn("user")
                out.append(last)
        else:
            continue
        last.blocks.extend(_as_blocks(m))
        last.uuids.append(str(m.get("uuid")))
    return out


def _lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_lone_surrogate(k) or _lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_lone_surrogate(v) for v in value)
    return False


def _ids(turn: Turn, kind: str, key: str) -> list[Any]:
    return [b.get(key) for b in turn.blocks if b.get("type") == kind]


def violations(messages: list[dict[str, Any]]) -> list[str]:
    """Every way the message list built from ``messages`` breaks the API's rule."""
    found: list[str] = []
    ts = turns(messages)
    for i, turn in enumerate(ts):
        where = f"turn {i} ({turn.role}, first entry {turn.uuids[0]})"
        if turn.role == "assistant":
            uses = _ids(turn, "tool_use", "id")
            nxt = ts[i + 1] if i + 1 < len(ts) else None
            if uses and nxt is not None:
                answered = set(_ids(nxt, "tool_result", "tool_use_id"))
                for tool_id in uses:
                    if tool_id not in answered:
                        found.append(f"{where}: tool_use {tool_id} not answered in the next turn")
        else:
            results = _ids(turn, "tool_result", "tool_use_id")
            prev = ts[i - 1] if i > 0 else None
            offered = set(_ids(prev, "tool_use", "id")) if prev is not None and prev.role == "assistant" else set()
            if len(results) != len(set(results)):
                found.append(f"{where}: a tool_use answered twice")
            for tool_id in results:
                if tool_id not in offered:
                    found.append(f"{where}: tool_result {tool_id} answers no tool_use of the turn before")
            if results:
                kinds = [b.get("type") for b in turn.blocks]
                first_other = next((k for k, t in enumerate(kinds) if t != "tool_result"), len(kinds))
                if "tool_result" in kinds[first_other:]:
                    found.append(f"{where}: a tool_result after other content in the turn")
        if not turn.blocks and not (turn.role == "assistant" and i == len(ts) - 1):
            found.append(f"{where}: a message with no content")
        for b in turn.blocks:
            if b.get("type") == "text" and not str(b.get("text") or "").strip():
                found.append(f"{where}: empty or whitespace-only text block")
        if _lone_surrogate(turn.blocks):
            found.append(f"{where}: a lone surrogate (not encodable as UTF-8)")
    return found


def split_responses(messages: list[dict[str, Any]]) -> list[str]:
    """message.ids whose entries do not form one turn (a response cut in two)."""
    seen: dict[str, int] = {}
    split = []
    for i, t in enumerate(turns(messages)):
        if t.role == "assistant" and t.message_id:
            if t.message_id in seen and seen[t.message_id] != i:
                split.append(t.message_id)
            seen.setdefault(t.message_id, i)
    return split


def report(paths: list) -> dict[str, Any]:
    """The validator run over ``paths`` (docs/guarantees.md's figures)."""
    from collections import Counter

    from sessiond.client.resume.pipeline import load_transcript

    kinds: Counter[str] = Counter()
    out: dict[str, Any] = {"files": 0, "conversations": 0, "messages": 0, "turns": 0, "tool_uses": 0,
                           "refused": 0, "violations": 0}
    for path in paths:
        resumed = load_transcript(path)
        out["files"] += 1
        if not resumed.messages:
            continue
        ts = turns(resumed.messages)
        bad = violations(resumed.messages)
        out["conversations"] += 1
        out["messages"] += len(resumed.messages)
        out["turns"] += len(ts)
        out["tool_uses"] += sum(1 for t in ts for b in t.blocks if b.get("type") == "tool_use")
        out["refused"] += bool(bad)
        out["violations"] += len(bad)
        kinds.update(r.kind for r in resumed.repairs)
    out["repairs"] = dict(sorted(kinds.items()))
    return out


if __name__ == "__main__":  # python -m tests.client.resume.api_rule DIR...
    import json
    import sys
    from pathlib import Path

    files = sorted(p for d in sys.argv[1:] for p in Path(d).glob("*.jsonl"))
    print(json.dumps(report(files), indent=1))
