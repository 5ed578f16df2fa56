"""The fields of the wire messages the lite codec (``lite.py``) speaks, with
their defaults, in the order ``messages.py`` declares them.

Data only, read without msgspec. It is not a second definition that may drift:
``tests/protocol/test_lite_wire.py`` derives this table from
``msgspec.structs.fields`` of every Struct named here (and the nested Structs
from the field types) and fails, printing the table it expects, when the two
differ. ``REQUIRED`` marks a field without a default.
"""

from __future__ import annotations


class Required:
    """The marker of a field without a default (a class, so ``repr`` reads back)."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = Required()

TAGGED = ("Hello", "Status", "List", "Append", "Close", "Welcome", "StatusResult", "Listed", "Appended", "Done", "Error")
"""The messages (tagged with their class name in ``op``): the hot commands'
requests and every answer they can get."""

FIELDS: dict[str, tuple[tuple[str, object], ...]] = {
    "Hello": (("id", REQUIRED), ("protocol_version", REQUIRED), ("client", ""), ("pid", 0)),
    "Status": (("id", REQUIRED),),
    "List": (("id", REQUIRED), ("dirs", []), ("all", False), ("limit", None), ("offset", 0)),
    "Append": (("id", REQUIRED), ("session", REQUIRED), ("cwd", REQUIRED), ("entries", REQUIRED), ("durability", "queued"),
               ("agent", None), ("run", None), ("resend", False), ("lease", False)),
    "Close": (("id", REQUIRED), ("session", REQUIRED)),
    "Welcome": (("id", REQUIRED), ("protocol_version", REQUIRED), ("daemon_version", REQUIRED), ("pid", REQUIRED),
                ("max_frame_bytes", 0), ("root", "")),
    "StatusResult": (("id", REQUIRED), ("pid", REQUIRED), ("version", REQUIRED), ("root", REQUIRED), ("socket", REQUIRED),
                     ("uptime", REQUIRED), ("sessions", REQUIRED), ("materialized", REQUIRED), ("clients", REQUIRED),
                     ("queuedEntries", REQUIRED), ("queuedBytes", REQUIRED), ("pendingEntries", REQUIRED), ("writes", REQUIRED),
                     ("bytesWritten", REQUIRED), ("fsyncs", REQUIRED), ("errors", REQUIRED), ("config", REQUIRED),
                     ("mirror", None), ("spooledBytes", 0), ("pendingBytes", 0), ("budgets", None), ("workers", None),
                     ("memory", None), ("index", None), ("live", []), ("watchers", 0), ("follow", None),
                     ("stateFiles", [])),
    "Listed": (("id", REQUIRED), ("sessions", REQUIRED)),
    "Appended": (("id", REQUIRED), ("accepted", REQUIRED), ("duplicates", 0), ("last", None), ("pending", 0)),
    "Done": (("id", REQUIRED),),
    "Error": (("id", REQUIRED), ("code", REQUIRED), ("message", REQUIRED), ("holder", None)),
    "SessionInfo": (("sessionId", REQUIRED), ("path", REQUIRED), ("title", REQUIRED), ("firstPrompt", REQUIRED),
                    ("lastPrompt", REQUIRED), ("customTitle", REQUIRED), ("aiTitle", REQUIRED), ("summary", REQUIRED),
                    ("tag", REQUIRED), ("createdAt", REQUIRED), ("modifiedAt", REQUIRED), ("size", REQUIRED), ("cwd", REQUIRED),
                    ("gitBranch", REQUIRED), ("lastEntryAt", None), ("messageCount", None), ("live", None)),
    "LeaseHolder": (("session", REQUIRED), ("pid", REQUIRED), ("client", REQUIRED), ("since", REQUIRED), ("lastWrite", None),
                    ("reconnecting", False)),
    "StateFileProblem": (("file", REQUIRED), ("problem", REQUIRED), ("setAside", None)),
}

NESTED: dict[str, dict[str, str]] = {
    "StatusResult": {"live": "LeaseHolder", "stateFiles": "StateFileProblem"},
    "Listed": {"sessions": "SessionInfo"},
    "Error": {"holder": "LeaseHolder"},
}
"""Fields that hold a Struct (or a list of them), by the Struct's name."""
