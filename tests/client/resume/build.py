"""Hand-built transcripts for the resume tests: Claude Code's shapes, small and readable.

``Conv`` appends entries the way Claude Code writes them (one content block per
assistant entry, tool_results hanging off their tool_use entry through
``sourceToolAssistantUUID``), with a clock that ticks one second per entry.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SID = "5b7f5415-6e0d-4f41-a0a6-a778b4a02e11"
CHAIN_TYPES = {"user", "assistant", "system", "attachment", "progress"}
LAST = object()


def text(t: str) -> dict:
    return {"type": "text", "text": t}


def tool_use(tool_id: str) -> dict:
    return {"type": "tool_use", "id": tool_id, "name": "Bash", "input": {"command": "ls"}}


def thinking() -> dict:
    return {"type": "thinking", "thinking": "hmm", "signature": "sig"}


def stamp(second: int) -> str:
    return f"2026-01-01T{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}.000Z"


class Conv:
    def __init__(self, sid: str = SID) -> None:
        self.sid = sid
        self.lines: list[Any] = []
        self.clock = 0
        self.last: str | None = None

    def entry(self, kind: str, uuid: str, parent: Any = LAST, *, ts: str | None = None, **fields: Any) -> dict:
        if parent is LAST:
            parent = self.last
        if ts is None:
            self.clock += 1
            ts = stamp(self.clock)
        d = {"parentUuid": parent, "isSidechain": False, "type": kind, "uuid": uuid, "timestamp": ts,
             "sessionId": self.sid, "cwd": "/tmp/p", "version": "2.1.170", **fields}
        self.lines.append(d)
        self.last = uuid
        return d

    def user(self, uuid: str, content: Any = "hello", parent: Any = LAST, **kw: Any) -> dict:
        return self.entry("user", uuid, parent, message={"role": "user", "content": content}, **kw)

    def assistant(self, uuid: str, *blocks: dict, mid: str | None = None, parent: Any = LAST, **kw: Any) -> dict:
        message = {"role": "assistant", "id": mid or f"msg_{uuid}", "content": list(blocks) or [text("ok")],
                   "usage": {"input_tokens": 100, "output_tokens": 5, "cache_read_input_tokens": 7,
                             "cache_creation": {"ephemeral_5m_input_tokens": 3}, "service_tier": "standard"}}
        return self.entry("assistant", uuid, parent, message=message, **kw)

    def result(self, uuid: str, tool_id: str, source: str, parent: Any = None, **kw: Any) -> dict:
        block = {"type": "tool_result", "tool_use_id": tool_id, "content": "done"}
        return self.entry("user", uuid, parent or source, message={"role": "user", "content": [block]},
                          sourceToolAssistantUUID=source, toolUseResult={"stdout": "done"}, **kw)

    def attachment(self, uuid: str, parent: Any = LAST, **kw: Any) -> dict:
        return self.entry("attachment", uuid, parent, attachment={"type": "task_reminder", "content": []}, **kw)

    def system(self, uuid: str, subtype: str, parent: Any = LAST, **kw: Any) -> dict:
        return self.entry("system", uuid, parent, subtype=subtype, content="", level="info", **kw)

    def progress(self, uuid: str, parent: Any = LAST, **kw: Any) -> dict:
        return self.entry("progress", uuid, parent, data={"type": "hook_progress"}, toolUseID="t", **kw)

    def boundary(self, uuid: str, logical: str | None = None, **meta: Any) -> dict:
        return self.system(uuid, "compact_boundary", None, logicalParentUuid=logical or self.last,
                           compactMetadata={"trigger": "manual", "preTokens": 1000, **meta})

    def summary_msg(self, uuid: str, parent: Any = LAST) -> dict:
        return self.user(uuid, "This session is being continued from a previous conversation.", parent,
                         isCompactSummary=True)

    def meta(self, kind: str, **fields: Any) -> dict:
        d = {"type": kind, **fields, "sessionId": self.sid}
        self.lines.append(d)
        return d

    def raw(self, line: bytes | str) -> None:
        self.lines.append(line.encode() if isinstance(line, str) else line)

    def data(self, trailing_newline: bool = True) -> bytes:
        out = []
        for line in self.lines:
            out.append(line if isinstance(line, bytes) else json.dumps(line, separators=(",", ":")).encode())
        return b"\n".join(out) + (b"\n" if trailing_newline and out else b"")

    def write(self, path: Path, trailing_newline: bool = True) -> Path:
        path.write_bytes(self.data(trailing_newline))
        return path
