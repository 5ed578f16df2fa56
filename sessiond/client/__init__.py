"""sessiond.client: the libraries agent processes use, and the ``sessiond`` CLI.

``Client`` (blocking) and ``AsyncClient`` (anyio) speak the protocol; ``Session``
records a conversation; ``direct_append`` is the exit-path fallback.

The names are imported on first use, not with the package: the CLI lives under
this package, and a blocking command (``status``, ``append``, ``list``) must not
pay for anyio and asyncio, which only ``AsyncClient`` needs.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (every CLI run imports this package)
if TYPE_CHECKING:
    from typing import Any

    from sessiond.wire.errors import LeaseLost, SessionBusy

    from .async_client import AsyncClient
    from .connection import Client
    from .fallback import direct_append
    from .session import Session

_HOMES = {"AsyncClient": ".async_client", "Client": ".connection", "Session": ".session", "direct_append": ".fallback",
          "LeaseLost": "sessiond.wire.errors", "SessionBusy": "sessiond.wire.errors"}

__all__ = ["AsyncClient", "Client", "LeaseLost", "Session", "SessionBusy", "direct_append"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
