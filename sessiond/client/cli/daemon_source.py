"""Where a reading command's answer comes from, said when it is not the daemon.

Why its own module: ``list``, ``search``, ``tail -f``, ``watch`` (and
``export``'s flush) ask a running daemon first and read the files themselves
when it cannot answer. With no daemon that is the normal path and stays quiet;
but a daemon that runs and refuses (an ``io_error``, ``busy``, a path it will
not touch) or serves another root than ``--root`` would otherwise be hidden
behind an answer that looks like the daemon's. Each such fallback is said here,
in one line on stderr (stdout, ``--json`` included, stays the answer alone),
the same way for every command.
"""

from __future__ import annotations

import os

from .output import echo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sessiond.wire.errors import RemoteError

    from ..connection import Client
    from . import Context


def other_root(obj: Context, client: Client) -> str | None:
    """The root the daemon on ``client`` serves when ``--root`` names another
    (its files are not this command's), else None."""
    if obj.root is None:
        return None
    served = client.served_root or client.status().root  # (an older daemon's Welcome has no root)
    return None if os.path.realpath(served) == os.path.realpath(obj.root) else served


def refused(exc: RemoteError) -> str:
    """What the daemon said, for ``fell_back``."""
    return f"the daemon answered {exc.code}: {exc}"


def serves(obj: Context, root: str) -> str:
    """A daemon of another root, for ``fell_back``."""
    return f"the daemon on {obj.socket} serves {root}, not {obj.root}"


def fell_back(reason: str, instead: str) -> None:
    """One line on stderr: why the daemon's answer is not used (``refused``,
    ``serves``) and what was done instead."""
    echo(f"sessiond: {reason}; {instead}", err=True)
