"""Which tool calls and tool results an entry holds, read without building its content.

Resume needs this for two steps: the splice of parallel tool results (chain.py: does
an off-chain user entry hold a tool_result?) and the API order of a response's
entries (order.py: which results answer which calls). Both read only the blocks'
``type``, ``id`` and ``tool_use_id``; msgspec skips the rest (text, tool input,
result bodies) without building it. A line whose blocks do not have the expected
shape is read generically, so a surprising field never hides a call or a result.
"""

from __future__ import annotations

from typing import Any

import msgspec

from sessiond.store.entries import decode_object, readable_copy

from .chainentry import Entry


class _Block(msgspec.Struct, gc=False):
    type: Any = None
    id: Any = None
    tool_use_id: Any = None


class _Content(msgspec.Struct, gc=False):
    content: list[_Block] | str | None = None


class _Probe(msgspec.Struct, gc=False):
    message: _Content | None = None


_probe = msgspec.json.Decoder(_Probe)

NO_TOOLS: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())


def _from_blocks(blocks: list[Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    uses: list[str] = []
    results: list[str] = []
    for b in blocks:
        kind = b.get("type") if isinstance(b, dict) else getattr(b, "type", None)
        if kind == "tool_use":
            tool_id = b.get("id") if isinstance(b, dict) else b.id
            uses.append(tool_id if isinstance(tool_id, str) else "")
        elif kind == "tool_result":
            tool_id = b.get("tool_use_id") if isinstance(b, dict) else b.tool_use_id
            results.append(tool_id if isinstance(tool_id, str) else "")
    return (tuple(uses), tuple(results)) if uses or results else NO_TOOLS


def tool_blocks(e: Entry) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(tool_use ids, tool_result tool_use_ids) of the entry's message, in block order.

    An id that is not a string counts as ``""`` (it answers nothing, nothing answers it).
    """
    return _tool_blocks(e.raw_view, True)


def _tool_blocks(raw: bytes | memoryview, retry: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if not raw:
        return NO_TOOLS
    try:
        probe = _probe.decode(raw)
    except msgspec.ValidationError:
        obj = decode_object(raw)
        message = obj.get("message") if obj else None
        content = message.get("content") if isinstance(message, dict) else None
        return _from_blocks(content) if isinstance(content, list) else NO_TOOLS
    except msgspec.DecodeError:
        masked = readable_copy(raw) if retry else None  # a half emoji (or a BOM) hides no call
        return NO_TOOLS if masked is None else _tool_blocks(masked, False)
    except RecursionError:  # nested deeper than can be decoded: no block readable
        return NO_TOOLS
    content = probe.message.content if probe.message is not None else None
    return _from_blocks(content) if isinstance(content, list) else NO_TOOLS


def has_tool_result(e: Entry) -> bool:
    """Does the entry's message hold a tool_result block?"""
    return bool(tool_blocks(e)[1])
