"""One listed session, as ``list --json`` prints it and the daemon's ``List``
answers it.

Why its own module: the wire messages carry it, and every client imports the
messages; the lite reader that fills it (``lite.py``, with its regexes and
decoders) is needed only by whoever reads files.
"""


import msgspec


class SessionInfo(msgspec.Struct):
    """One listed session; ``msgspec.to_builtins`` of it is the ``list --json`` object."""

    sessionId: str
    path: str
    title: str | None
    firstPrompt: str | None
    lastPrompt: str | None
    customTitle: str | None
    aiTitle: str | None
    summary: str | None
    tag: str | None
    createdAt: str | None
    modifiedAt: str
    size: int
    cwd: str | None
    gitBranch: str | None
    lastEntryAt: str | None = None
    """The newest entry's own ``timestamp`` in the tail window: when the session
    was last written to, which a copied or imported file's mtime does not say."""
    messageCount: int | None = None
    """User and assistant messages: counted when the whole file is in the head
    window, else Claude Code's count at its last turn (``turn_duration``) when
    the tail window has one; None when neither says."""
    live: dict[str, str | int] | None = None
    """``{pid, client, since}`` of the client writing it now (SPEC 7); only a
    running daemon knows, so offline listings say null."""
    forkedFrom: str | None = None
    """The session this one was forked from (``sessiond fork``: the
    ``forkedFrom.sessionId`` its first entries carry); null for one that was not."""
