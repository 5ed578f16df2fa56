"""Session metadata entries: which kinds the resume collects, and how they are reported.

Metadata lines (a title, a tag, the agent's name, a PR link ...) are not part of the
conversation: resume keeps the raw line of the latest entry of each kind over the
whole file (loader.py, also across history its skip discards) and reports their
values in ``show --json``'s ``metadata`` object (:func:`metadata_values`). The kinds
collected and the fields reported live side by side here: a kind added to one
belongs in the other (a test checks they match).
"""

from __future__ import annotations

from typing import Any, Final

from sessiond.store.entries import REAPPENDED_SET, decode_object

METADATA_KINDS: Final = REAPPENDED_SET | {"summary", "ai-title"}
"""Entry types whose latest occurrence is reported as session metadata."""

_METADATA_FIELDS: Final = {
    "summary": ("summary", "summary"),
    "custom-title": ("customTitle", "customTitle"),
    "ai-title": ("aiTitle", "aiTitle"),
    "tag": ("tag", "tag"),
    "agent-name": ("agentName", "agentName"),
    "agent-color": ("agentColor", "agentColor"),
    "agent-setting": ("agentSetting", "agentSetting"),
    "mode": ("mode", "mode"),
    "worktree-state": ("worktreeState", "worktreeSession"),
    "last-prompt": ("lastPrompt", "lastPrompt"),
}
_PR_LINK_FIELDS: Final = ("prNumber", "prUrl", "prRepository")


def metadata_values(raw: dict[str, bytes]) -> dict[str, Any]:
    """``{"customTitle": ..., "prLink": {...}, ...}`` from the latest line of each kind.

    A kind whose latest entry lacks its value field is left out (no older fallback:
    the latest entry is the current state).
    """
    out: dict[str, Any] = {}
    for kind in sorted(raw, key=_metadata_order):
        obj = decode_object(raw[kind])
        if obj is None:  # pragma: no cover - lines were parsed already
            continue
        if kind == "pr-link":
            link = {k: obj[k] for k in _PR_LINK_FIELDS if k in obj}
            if link:
                out["prLink"] = link
            continue
        key, field = _METADATA_FIELDS[kind]
        if field in obj:
            out[key] = obj[field]
    return out


_ORDER: Final = [*_METADATA_FIELDS, "pr-link"]


def _metadata_order(kind: str) -> int:
    return _ORDER.index(kind) if kind in _ORDER else len(_ORDER)
