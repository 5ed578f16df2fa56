"""What resume changes so that the model API accepts the conversation,
each change reported as a :class:`Repair` (``show --json``'s ``repairs``).

The file is never touched; only the returned messages are. Kinds:

- ``reordered``: a response's entries and the results answering it were moved
  together (order.py), ``detail`` says how many; or a user turn's tool_results
  moved to its start (text or a prompt before them, which the API refuses);
- ``lone_surrogate``: lone UTF-16 surrogates in the message's strings became U+FFFD;
- ``invalid_utf8``: bytes of the line that are not UTF-8 became U+FFFD, as
  Claude Code reads them (the file is not changed);
- ``empty_text_dropped``: empty or whitespace-only text blocks, which the API
  rejects, were dropped from the message;
- ``empty_message_dropped``: a message with nothing left to send (whitespace-only
  text, no blocks) was dropped;
- ``tool_result_synthesized``: a tool_use never answered although the conversation
  went on (a crash between call and result, then a resume) is answered by a
  synthetic error result placed first in the next turn. Chosen over dropping the
  call: the model learns that it made the call and that its outcome is unknown
  (a command may have half run), and nothing the model wrote disappears. It
  carries ``"synthetic": true`` and the call's envelope;
- ``tool_result_dropped``: a tool_result block that answers no tool_use of the turn
  before (its call is lost, or it answers the call a second time);
- ``tool_use_dropped``: a tool_use left unanswered at the END of the conversation,
  dropped as SPEC 4 step 7 says (the interrupted turn is then reported);
- ``thinking_dropped``: a thinking-only message orphaned by that (step 7).

Turns are built as an agent builds them: entries sharing ``message.id`` (consecutive)
make one assistant turn, consecutive user and attachment entries one user turn;
system entries are not sent.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from .msgdicts import block_type, content_blocks, message_id, synthetic_user

LOST_RESULT_TEXT: Final = (
    "This tool call was interrupted: the session ended before its result was recorded, "
    "so its outcome is unknown."
)


class Repair(msgspec.Struct):
    """One change resume made so the model API accepts the conversation (``kind``,
    see the module docstring), the entry it touched and how; listed in
    ``show --json``'s ``repairs``."""

    kind: str
    uuid: str | None
    """The entry repaired (the response's first entry for ``reordered``, the call's
    entry for ``tool_result_synthesized``)."""
    detail: str


def _empty_text(block: Any) -> bool:
    if type(block) is not dict or block.get("type") != "text":
        return False
    text = block.get("text")
    return not (text.strip() if type(text) is str else text)


def survey(msgs: list[dict[str, Any]]) -> tuple[list[int], bool]:
    """One pass over every message (it runs on every resume, so it only looks): the
    user/assistant messages holding empty text, and whether any tool block exists."""
    empty: list[int] = []
    tools = False
    for i, m in enumerate(msgs):
        kind = m.get("type")
        if kind != "user" and kind != "assistant":
            continue
        message = m.get("message")
        content = message.get("content") if type(message) is dict else None
        if type(content) is str:
            if not content.strip():
                empty.append(i)
        elif type(content) is list:
            has_empty = not content  # "content": [] — the API refuses a message with nothing in it
            for b in content:
                if type(b) is dict:
                    t = b.get("type")
                    if t == "text":
                        text = b.get("text")
                        if not (text.strip() if type(text) is str else text):
                            has_empty = True
                    elif t == "tool_use" or t == "tool_result":
                        tools = True
            if has_empty:
                empty.append(i)
        else:  # no message, or no content in it: nothing an agent could send
            empty.append(i)
    return empty, tools


def drop_empty_text(msgs: list[dict[str, Any]], repairs: list[Repair], empty: list[int]) -> list[dict[str, Any]]:
    """Drop empty/whitespace-only text blocks of the ``empty`` messages (from
    :func:`survey`), and the messages left with nothing to send."""
    if not empty:
        return msgs
    gone = set()
    for i in empty:
        m = msgs[i]
        message = m.get("message")
        content = message.get("content") if type(message) is dict else None
        if type(content) is not str and type(content) is not list:
            repairs.append(Repair("empty_message_dropped", m.get("uuid"), "no message content"))
            gone.add(i)
            continue
        if type(content) is str:
            repairs.append(Repair("empty_message_dropped", m.get("uuid"), "whitespace-only text"))
            gone.add(i)
            continue
        kept = [b for b in content if not _empty_text(b)]
        if not kept:
            why = "only empty text blocks" if content else "no content"
            repairs.append(Repair("empty_message_dropped", m.get("uuid"), why))
            gone.add(i)
            continue
        repairs.append(Repair("empty_text_dropped", m.get("uuid"), f"{len(content) - len(kept)} block(s)"))
        message["content"] = kept  # type: ignore[index]  # a dict: its content is a list
    return [m for i, m in enumerate(msgs) if i not in gone] if gone else msgs


def api_repairs(msgs: list[dict[str, Any]], repairs: list[Repair]) -> list[dict[str, Any]]:
    """Empty text dropped, then tool calls and results paired (see module docstring)."""
    empty, tools = survey(msgs)
    out = drop_empty_text(msgs, repairs, empty)
    return pair_tool_results(out, repairs) if tools else out


def turns(msgs: list[dict[str, Any]]) -> list[tuple[str, list[int]]]:
    """(role, indices into ``msgs``) of each turn an agent sends."""
    out: list[tuple[str, list[int]]] = []
    last_id: Any = None
    for i, m in enumerate(msgs):
        kind = m.get("type")
        if kind == "assistant":
            mid = message_id(m)
            if out and out[-1][0] == "assistant" and (mid is None or mid == last_id):
                out[-1][1].append(i)
            else:
                out.append(("assistant", [i]))
                last_id = mid
        elif kind in ("user", "attachment"):
            if out and out[-1][0] == "user":
                out[-1][1].append(i)
            else:
                out.append(("user", [i]))
    return out


def _uses(msgs: list[dict[str, Any]], indices: list[int]) -> list[tuple[str, int]]:
    return [
        (b.get("id"), i)
        for i in indices
        for b in content_blocks(msgs[i]) or ()
        if block_type(b) == "tool_use" and isinstance(b.get("id"), str)
    ]


def _drop_orphan_results(msgs: list[dict[str, Any]], indices: list[int], offered: set[str],
                         repairs: list[Repair]) -> set[int]:
    """Drop result blocks answering nothing offered (or answering twice); the
    indices of messages left empty."""
    emptied = set()
    answered: set[str] = set()
    for i in indices:
        m = msgs[i]
        blocks = content_blocks(m) if m.get("type") == "user" else None
        if not blocks:
            continue
        kept = []
        for b in blocks:
            if block_type(b) == "tool_result":
                tool_id = b.get("tool_use_id")
                if tool_id not in offered or tool_id in answered:
                    why = "answers it a second time" if tool_id in answered else "answers no call of the turn before"
                    repairs.append(Repair("tool_result_dropped", m.get("uuid"), f"{tool_id}: {why}"))
                    continue
                answered.add(tool_id)
            kept.append(b)
        if len(kept) != len(blocks):
            if kept:
                m["message"]["content"] = kept
            else:
                emptied.add(i)
    return emptied


def _result_rank(m: dict[str, Any]) -> int:
    """0: only tool_results; 1: tool_results, then other content; 2: the rest."""
    blocks = content_blocks(m) if m.get("type") == "user" else None
    if not blocks or block_type(blocks[0]) != "tool_result":
        return 2
    return 0 if all(block_type(b) == "tool_result" for b in blocks) else 1


def _results_first(msgs: list[dict[str, Any]], indices: list[int], repairs: list[Repair]) -> list[dict[str, Any]]:
    """The API wants a user turn that answers calls to START with its
    tool_results ("tool_result blocks must come first"): an entry holding text
    before its results, or a prompt typed while the tools ran (an entry before
    the results' entries, in versions that do not say which call a result
    answers, so order.py cannot tell), is moved after them. Only the order
    changes; ``msgs`` is copied when it does."""
    moved = 0
    for i in indices:
        blocks = content_blocks(msgs[i]) if msgs[i].get("type") == "user" else None
        ordered = sorted(blocks, key=lambda b: block_type(b) != "tool_result") if blocks else blocks
        if ordered != blocks:
            msgs[i]["message"]["content"] = ordered
            moved += 1
    entries = [msgs[i] for i in indices]
    ranked = sorted(entries, key=_result_rank)
    if ranked != entries:
        msgs = list(msgs)
        for i, m in zip(indices, ranked):
            msgs[i] = m
        moved += 1
    if moved:
        first = msgs[indices[0]]
        repairs.append(Repair("reordered", first.get("uuid"), "tool_results moved to the start of the user turn answering the calls"))
    return msgs


def synthetic_result(call: dict[str, Any], tool_id: str) -> dict[str, Any]:
    """The error result answering ``tool_id`` of the assistant entry ``call``
    (deterministic: loading twice gives the same message)."""
    block = {"type": "tool_result", "tool_use_id": tool_id, "content": LOST_RESULT_TEXT, "is_error": True}
    return synthetic_user(call, f"tool_result:{call.get('uuid')}:{tool_id}", [block],
                          toolUseResult=f"Error: {LOST_RESULT_TEXT}", sourceToolAssistantUUID=call.get("uuid"))


def pair_tool_results(msgs: list[dict[str, Any]], repairs: list[Repair]) -> list[dict[str, Any]]:
    """Every tool_use answered in the next turn, every tool_result answering the turn
    before: orphaned results dropped, calls the conversation went on without
    answered synthetically (at the end they are left to the step 7 filter)."""
    ts = turns(msgs)
    last_assistant = max((k for k, (role, _) in enumerate(ts) if role == "assistant"), default=-1)
    dropped: set[int] = set()
    inserts: dict[int, list[dict[str, Any]]] = {}
    for k, (role, indices) in enumerate(ts):
        if role == "user":
            prev = ts[k - 1] if k else None
            offered = {t for t, _ in _uses(msgs, prev[1])} if prev and prev[0] == "assistant" else set()
            if offered:
                msgs = _results_first(msgs, indices, repairs)
            dropped |= _drop_orphan_results(msgs, indices, offered, repairs)
            continue
        uses = _uses(msgs, indices)
        if not uses or k >= last_assistant:
            continue  # no call, or the conversation ends in this round (step 7)
        nxt = ts[k + 1][1] if ts[k + 1][0] == "user" else []
        answered = {
            b.get("tool_use_id") for i in nxt for b in content_blocks(msgs[i]) or () if block_type(b) == "tool_result"
        }
        lost = [(t, i) for t, i in uses if t not in answered]
        if lost:
            inserts[indices[-1]] = [synthetic_result(msgs[i], t) for t, i in lost]
            for t, i in lost:
                repairs.append(Repair("tool_result_synthesized", msgs[i].get("uuid"), t))
    if not dropped and not inserts:
        return msgs
    out = []
    for i, m in enumerate(msgs):
        if i in dropped:
            repairs.append(Repair("empty_message_dropped", m.get("uuid"), "no tool_result left"))
        else:
            out.append(m)
        out.extend(inserts.get(i, ()))
    return out
