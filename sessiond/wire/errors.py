"""The one small tree of errors both sides raise, and the stable codes on the wire.

    SessiondError                 anything sessiond raises on purpose
    ├── ProtocolError             bytes that are not a valid frame or message
    │   └── FrameTooLarge         announced length over the cap (body never read)
    │       └── EntryTooLarge     one entry no frame under the cap can hold (client side)
    ├── VersionMismatch           the peers speak different major protocol versions
    ├── DaemonUnavailable         no daemon answers on the socket (client side)
    │   └── UnsafeSocketDir       the socket's directory or lock is not ours alone
    ├── RootHeld                  a daemon holds the store root's lock (``sessiond/store/rootlock.py``)
    ├── WrongRoot                 the daemon on the socket serves another root (client side)
    └── RemoteError(code)         the daemon answered with an ``Error`` frame
        └── SessionBusy           another client holds the session (``holder``)
            └── LeaseLost         this client held it and it was taken over

The daemon turns a raised ``SessiondError`` into an ``Error{id, code, message}``
frame; the client turns that frame back into ``RemoteError``; the CLI turns any of
them into one line on stderr. Codes are part of the protocol: never rename one.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: the lite client path imports this
if TYPE_CHECKING:
    from typing import Final

BAD_REQUEST: Final = "bad_request"
NOT_FOUND: Final = "not_found"
TOO_LARGE: Final = "too_large"
PERMISSION_DENIED: Final = "permission_denied"
IO_ERROR: Final = "io_error"
SHUTTING_DOWN: Final = "shutting_down"
VERSION_MISMATCH: Final = "version_mismatch"
INTERNAL: Final = "internal"
MIRROR_UNAVAILABLE: Final = "mirror_unavailable"
"""An append refused because the required remote mirror cannot take it (SPEC 6)."""
BUSY: Final = "busy"
"""A request refused because a bound is full: a daemon-wide memory budget (see
``sessiond/daemon/bounds.py``) or its client's share of the read pool (too much work
waiting). Nothing of the request was accepted; retry later."""

CONFLICT: Final = "conflict"
"""A lifecycle operation refused because it would overwrite or disturb something:
a restore whose path exists again, an ``rm`` of a session a client is writing."""

SESSION_BUSY: Final = "session_busy"
"""Chain entries (or a lease claim) for a session another client holds (SPEC 7);
the error carries the holder."""
LEASE_LOST: Final = "lease_lost"
"""Chain entries from a client whose lease was taken over: never written."""

CODES: Final = frozenset(
    {BAD_REQUEST, NOT_FOUND, TOO_LARGE, PERMISSION_DENIED, IO_ERROR, SHUTTING_DOWN, VERSION_MISMATCH, INTERNAL,
     MIRROR_UNAVAILABLE, BUSY, CONFLICT, SESSION_BUSY, LEASE_LOST}
)


class SessiondError(Exception):
    """Base of every error sessiond raises on purpose; ``code`` is its wire code."""

    code: str = INTERNAL

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self)


class ProtocolError(SessiondError):
    """Bytes from the peer that are not a valid frame or message (malformed msgpack,
    an unknown or misshapen request, a Hello out of place): ``bad_request``."""

    code = BAD_REQUEST


class FrameTooLarge(ProtocolError):
    """A frame whose announced length is over the cap: refused before its body is
    read, so a bogus length never makes the reader buffer it."""

    code = TOO_LARGE


class EntryTooLarge(FrameTooLarge):
    """An entry that cannot fit in any frame the daemon accepts: refused by the
    client before it is sent (it would never be stored, however often resent)."""


class VersionMismatch(SessiondError):
    """The peers speak different protocol versions: the daemon answers the Hello
    with it and closes, so neither side misreads the other's messages."""

    code = VERSION_MISMATCH


class DaemonUnavailable(SessiondError):
    """No daemon answers on the socket (none runs and autostart is off, one started
    cannot be reached, or the socket is not ours): ``Session.close`` then appends to
    the file directly, and the CLI says so in one line."""

    code = "unavailable"


class UnsafeSocketDir(DaemonUnavailable):
    """The socket directory (or the lock file in it) is a symlink, someone
    else's, or open to others: nothing in it is trusted, no daemon is started
    there. Not retried: waiting does not make it ours."""

    code = PERMISSION_DENIED


class RootHeld(SessiondError):
    """The store root's lock is held by a daemon (``holder``: its pid and
    socket, when it could be read): a second daemon does not start on that root
    and a direct writer does not write behind it. Not on the wire."""

    code = "root_held"

    def __init__(self, message: str, *, holder: object = None) -> None:
        super().__init__(message)
        self.holder = holder


class WrongRoot(SessiondError):
    """The daemon on the socket serves another store root than the client
    named (``--root``, ``SESSIOND_ROOT``): its files are not the client's, so
    nothing is sent to it. Not retried, not a reason to write directly (the
    daemon is alive). Not on the wire."""

    code = "wrong_root"


class RemoteError(SessiondError):
    """An ``Error`` frame from the daemon; ``code`` is one of ``CODES``."""

    holder: object = None
    """The session's holder, for ``session_busy`` and ``lease_lost``."""


class SessionBusy(RemoteError):
    """Another client holds the session; ``holder`` (a ``LeaseHolder``) says who.
    Raised by the daemon too, which turns ``holder`` into the frame's."""

    code = SESSION_BUSY

    def __init__(self, message: str, *, holder: object = None, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.holder = holder


class LeaseLost(SessionBusy):
    """This client's lease was taken over on purpose: what it sends from now on is
    refused, never written into the new holder's chain."""

    code = LEASE_LOST


def bad_request(message: str) -> SessiondError:
    return SessiondError(message, code=BAD_REQUEST)


def not_found(message: str) -> SessiondError:
    return SessiondError(message, code=NOT_FOUND)


def too_large(message: str) -> SessiondError:
    return SessiondError(message, code=TOO_LARGE)


def io_error(message: str) -> SessiondError:
    return SessiondError(message, code=IO_ERROR)


def permission_denied(message: str) -> SessiondError:
    return SessiondError(message, code=PERMISSION_DENIED)


def busy(message: str) -> SessiondError:
    return SessiondError(message, code=BUSY)


def conflict(message: str) -> SessiondError:
    return SessiondError(message, code=CONFLICT)
