"""The key a request's scope (the project dirs a ``Search`` or ``Usage`` names)
is remembered under, by the search index's link and the spend book alike."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

Scope = bytes | None
"""A request's project dirs as the tables that remember scopes keep them
(``scope_key``); None: every project."""


def scope_key(projects: Iterable[str] | None) -> Scope:
    """A digest of the sorted project names (None: every project), so that a
    remembered scope costs the same whatever it names: a request may name
    thousands of dirs, dirs that do not exist included, and the names
    themselves, kept for each of a thousand scopes, would be hundreds of MB."""
    if projects is None:
        return None
    return hashlib.blake2b("\0".join(sorted(projects)).encode("utf-8", "surrogatepass"), digest_size=16).digest()
