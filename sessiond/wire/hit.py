"""What a search answers, in the lightest module of the package.

The wire messages carry ``Hit``s and every client decodes them, so this module
imports nothing but msgspec: a ``sessiond search`` process pays for the index's
query code only when it reads the index itself. The roles a doc can have are
named here too (the extraction assigns them, ``--role`` filters on them).
"""


from typing import Final

import msgspec

USER: Final = "user"
ASSISTANT: Final = "assistant"
TOOL: Final = "tool"
TITLE: Final = "title"
TAG: Final = "tag"
SUMMARY: Final = "summary"
ROLES: Final = (USER, ASSISTANT, TOOL, TITLE, TAG, SUMMARY)
"""Every role a doc can have."""
FILTER_ROLES: Final = (USER, ASSISTANT, TOOL)
"""The roles ``--role`` takes."""
MAX_LIMIT: Final = 1000
"""The most sessions one search answers."""


class Hit(msgspec.Struct, kw_only=True):
    """One matching session; ``msgspec.to_builtins`` of it is a ``search --json`` item."""

    sessionId: str
    project: str
    path: str
    title: str | None
    uuid: str | None
    timestamp: str | None
    role: str
    snippet: str
    score: float
    highlights: list[tuple[int, int]] = []
    """``[start, end)`` character ranges of ``snippet`` that matched."""
    sidechain: bool = False
    agentId: str | None = None
    file: str
    """The transcript that matched (the subagent file for a sidechain hit)."""
    cwd: str | None = None
