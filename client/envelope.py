"""Stamping the envelope of SPEC 2 on messages a client records.

The recording side fills what a message lacks: ``isSidechain``, ``agentId``,
``userType``, ``cwd``, ``sessionId``, ``version``, ``gitBranch`` (when the cwd is a
git checkout), ``uuid`` and ``timestamp``. Fields the message already has win.
``parentUuid`` is left to the daemon, which alone knows the chain; it puts it first.
"""

from __future__ import annotations

import functools
import os
import uuid as uuidlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sessiond.protocol import __version__
from sessiond.protocol.transcript.entries import TRANSCRIPT_TYPES

_ENVELOPE_ORDER = ("isSidechain", "agentId", "userType", "cwd", "sessionId", "version", "gitBranch")


def now_iso() -> str:
    """ISO-8601 UTC with milliseconds and ``Z``, as Claude Code writes timestamps."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@functools.lru_cache(maxsize=256)
def git_branch(cwd: str) -> str | None:
    """The checked-out branch of the repository containing ``cwd`` ("HEAD" when
    detached), read from ``.git/HEAD`` without running git; None outside a repo."""
    d = Path(cwd)
    for directory in (d, *d.parents):
        dotgit = directory / ".git"
        try:
            if dotgit.is_dir():
                head = (dotgit / "HEAD").read_text()
            elif dotgit.is_file():
                text = dotgit.read_text().strip()
                if not text.startswith("gitdir:"):
                    return None
                gitdir = Path(text[len("gitdir:") :].strip())
                if not gitdir.is_absolute():
                    gitdir = directory / gitdir
                head = (gitdir / "HEAD").read_text()
            else:
                continue
        except OSError:
            return None
        head = head.strip()
        prefix = "ref: refs/heads/"
        return head[len(prefix) :] if head.startswith(prefix) else "HEAD"
    return None


def stamp(
    message: dict[str, Any],
    *,
    session_id: str,
    cwd: str,
    agent: str | None = None,
    version: str = __version__,
    user_type: str = "external",
) -> dict[str, Any]:
    """The message with its envelope; ``parentUuid`` removed (the daemon sets it)."""
    fill: dict[str, Any] = {
        "isSidechain": agent is not None,
        "agentId": agent,
        "userType": user_type,
        "cwd": cwd,
        "sessionId": session_id,
        "version": version,
        "gitBranch": git_branch(cwd) if os.path.isabs(cwd) else None,
    }
    out: dict[str, Any] = {}
    for key in _ENVELOPE_ORDER:
        if key in message:
            out[key] = message[key]
        elif fill[key] is not None:
            out[key] = fill[key]
    for key, value in message.items():
        if key not in out and key not in ("parentUuid", "logicalParentUuid"):
            out[key] = value
    if message.get("type") in TRANSCRIPT_TYPES and "uuid" not in out:
        out["uuid"] = str(uuidlib.uuid4())
    if "timestamp" not in out:
        out["timestamp"] = now_iso()
    return out
