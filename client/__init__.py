"""sessiond.client: the libraries agent processes use, and the ``sessiond`` CLI.

``Client`` (blocking) and ``AsyncClient`` (anyio) speak the protocol; ``Session``
records a conversation; ``direct_append`` is the exit-path fallback.
"""

from .async_client import AsyncClient
from .connection import Client
from .fallback import direct_append
from .session import Session

__all__ = ["AsyncClient", "Client", "Session", "direct_append"]
