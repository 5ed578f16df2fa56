"""SPEC 4 step 6, the order: each response as ONE turn, answered in the next.

The walk and the splice (chain.py) choose WHICH entries make the conversation; this
module only changes their order, and only where the model API needs it. An agent
merges the entries sharing a ``message.id`` into one assistant turn and consecutive
user entries into one user turn; the API refuses the conversation unless every
tool_use is answered by a tool_result in the very next turn. Claude Code runs tools
while the response still streams, so its files interleave a response's blocks with
the results of its earlier calls (tool_use A, tool_use B, result B, tool_use C,
result C ... result A), and the splice puts results that were off the walked branch
after the group's last entry. Neither order is reliably valid (real cases:
entireio 48 is invalid after the splice; in others plain file order is).

So, walking the chain: at the first entry of a response, the response's entries
are emitted together (in chain order), up to the next entry of another response,
then every later entry holding a tool_result for one of its calls (in chain order),
then everything else as it was (hook attachments, progress, system entries, the
next prompt). A response that reappears after another response began is a new
turn (it is never pulled across another response). Results that answer no call
of the chain stay where they are (deserialize reports and drops them).

Cost: the blocks are only read (toolblocks.py) when the chain may need it (a result
carrying ``sourceToolAssistantUUID``, an attachment, or a ``message.id`` shared by
two entries); a plain chat is returned as it came, after C-level passes over its
headers.
"""

from __future__ import annotations

from functools import partial
from operator import attrgetter

from .chainentry import Entry, MessageHeader
from .repairs import Repair
from .toolblocks import NO_TOOLS, tool_blocks

_MESSAGES = frozenset({"user", "assistant", "attachment"})
_source = attrgetter("sourceToolAssistantUUID")
_message = attrgetter("message")
_type = attrgetter("type")
_id = attrgetter("id")
_is_header = partial(type.__instancecheck__, MessageHeader)


def _has_tool_rounds(chain: list[Entry]) -> bool:
    """A result carrying ``sourceToolAssistantUUID``, an attachment (hook output may
    sit between a call and its result), or a message.id shared by two entries
    (C-level passes: this runs on every resume)."""
    if any(map(_source, chain)) or "attachment" in map(_type, chain):
        return True
    ids = list(filter(None, map(_id, filter(_is_header, map(_message, chain)))))
    return len(ids) != len(set(ids))


def _key(e: Entry) -> str:
    return e.msg_id or "\0" + (e.uuid or "")


def order_responses(chain: list[Entry]) -> tuple[list[Entry], list[Repair]]:
    """``chain`` in API order (see module docstring), and a ``reordered`` repair for
    each response moved."""
    if not _has_tool_rounds(chain):
        return chain, []
    n = len(chain)
    tools = [tool_blocks(e) if e.type in ("assistant", "user") else NO_TOOLS for e in chain]
    answers: dict[str, list[int]] = {}
    for i, e in enumerate(chain):
        if e.type == "user":
            for tool_id in tools[i][1]:
                answers.setdefault(tool_id, []).append(i)
    emitted = [False] * n
    messages = [0]  # messages (user, assistant, attachment) before each position
    for e in chain:
        messages.append(messages[-1] + (e.type in _MESSAGES))
    out: list[Entry] = []
    moved: list[Repair] = []
    for i, e in enumerate(chain):
        if emitted[i]:
            continue
        if e.type != "assistant":
            emitted[i] = True
            out.append(e)
            continue
        key = _key(e)
        members = []
        j = i
        while j < n:
            f = chain[j]
            if f.type == "assistant" and not emitted[j]:
                if _key(f) != key:
                    break
                members.append(j)
            j += 1
        results = sorted({a for m in members for tool_id in tools[m][0] for a in answers.get(tool_id, ()) if not emitted[a]})
        group = members + results
        for k in group:
            emitted[k] = True
            out.append(chain[k])
        # moved: out of order, or another message lay among them
        last = max(members[-1], results[-1]) if results else members[-1]
        if (results and results[0] < members[-1]) or messages[last + 1] - messages[i] != len(group):
            detail = f"response {e.msg_id}: {len(members)} entries, then the {len(results)} results answering them"
            moved.append(Repair("reordered", e.uuid, detail))
    return out, moved
