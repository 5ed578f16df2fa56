"""Reading resumed messages (the decoded JSON objects steps 7-8 work on), and
building the synthetic ones resume adds, shared by deserialize.py and repairs.py."""

from __future__ import annotations

import uuid as uuidlib
from typing import Any, Final

_SYNTHETIC_NS: Final = uuidlib.UUID("6f1c2f0e-5d3a-4c61-9a43-2b8f0d7c5e11")
_ENVELOPE: Final = ("isSidechain", "agentId", "userType", "cwd", "sessionId", "version", "gitBranch")


def content_blocks(m: dict[str, Any]) -> list[Any] | None:
    """The message's content blocks (None for string content or none)."""
    message = m.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else None


def block_type(block: Any) -> Any:
    return block.get("type") if isinstance(block, dict) else None


def message_id(m: dict[str, Any]) -> Any:
    message = m.get("message")
    return message.get("id") if isinstance(message, dict) else None


def synthetic_user(after: dict[str, Any], key: str, content: Any, **fields: Any) -> dict[str, Any]:
    """A user message resume adds after ``after``: its envelope, a uuid derived from
    ``key`` (loading twice gives the same message), ``"synthetic": true``."""
    out: dict[str, Any] = {"parentUuid": after.get("uuid")}
    for field in _ENVELOPE:
        if field in after:
            out[field] = after[field]
    out.update(type="user", message={"role": "user", "content": content}, **fields)
    out.update(uuid=str(uuidlib.uuid5(_SYNTHETIC_NS, key)), timestamp=after.get("timestamp"), synthetic=True)
    return out
