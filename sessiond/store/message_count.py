"""A session's whole message count, for a listing whose lite read could not say.

Why its own module: the lite read (``lite``) counts messages only when the whole
file fits its 64 KB head window, else takes Claude Code's own count from a
``turn_duration`` entry in the tail; a big file written by an older Claude Code,
the SDK or sessiond's clients has none, and ``list`` showed ``-``. This reads
the whole file, a chunk at a time, with the lite read's own counting rule
(``lite_tail.message_count``), so both say the same number; ``list`` calls it
only for the page it prints.
"""

from __future__ import annotations

import os

from .lite_tail import message_count
from .regular import open_regular

CHUNK = 1 << 20


def count_messages(path: str) -> int | None:
    """User and assistant messages (sidechains excluded) of the transcript at
    ``path``; None when it cannot be read."""
    try:
        fd = open_regular(path)
    except OSError:
        return None
    total = 0
    rest = b""
    try:
        with os.fdopen(fd, "rb", buffering=0) as f:
            while chunk := f.read(CHUNK):
                buf = rest + chunk
                cut = buf.rfind(b"\n") + 1
                if cut:
                    total += message_count(buf, 0, cut, True) or 0
                rest = buf[cut:]
            if rest.strip():
                total += message_count(rest, 0, len(rest), True) or 0
    except OSError:
        return None
    return total
