"""Length-prefixed frames: a 4-byte big-endian length, then the body; and the
protocol's major version.

Apart from ``framing.py`` (msgspec's encoder and typed decoders) so that what
only splits frames (the daemon's byte budgets, a relay) imports no msgspec:
the daemon and both clients feed the same ``FrameBuffer``, so there is one
framing implementation.
"""

from __future__ import annotations

import struct

from .errors import FrameTooLarge

HEADER = struct.Struct(">I")
HEADER_SIZE = HEADER.size
DEFAULT_MAX_FRAME = 64 * 1024 * 1024

PROTOCOL_VERSION = 1

MAX_COUNT = 2**63 - 1
"""The largest count, byte offset or request id a request may carry: what an
off_t and an SQLite integer hold (``core.Count``)."""
"""Major version: peers with different values refuse each other in the handshake."""


class FrameBuffer:
    """Incremental splitter of a byte stream into frame bodies."""

    __slots__ = ("_buf", "_pos", "max_frame", "announced")

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self._buf = bytearray()
        self._pos = 0
        self.max_frame = max_frame
        self.announced = 0
        """Body length the incomplete frame's header announced (0: no header yet
        or nothing pending): what the frame will weigh once it is all here."""

    def feed(self, data: bytes | memoryview) -> list[bytes | memoryview]:
        """Add bytes; return every complete body now available, in order.

        A body may be a view of ``data`` (or of this buffer's bytes, which it
        then gives up): it is only decoded, and holds what it saw as long as
        ``data`` is not changed. A caller feeding a buffer it reuses decodes
        the bodies before it reads into that buffer again.

        Raises ``FrameTooLarge`` as soon as a header announces more than the cap.
        """
        buf = self._buf
        if self._pos and self._pos == len(buf):
            buf.clear()
            self._pos = 0
        if not buf:
            return self._feed_fresh(data)
        buf += data
        out: list[bytes | memoryview] = []
        pos = self._pos
        end = len(buf)
        if pos == 0 and end > HEADER_SIZE and end - HEADER_SIZE == HEADER.unpack_from(buf, 0)[0] <= self.max_frame:
            # The buffer is one whole frame (how a big frame ends): hand the
            # buffer itself out as the body, and start a fresh one, so the
            # frame is never held twice.
            self._buf = bytearray()
            self.announced = 0
            return [memoryview(buf)[HEADER_SIZE:]]
        while end - pos >= HEADER_SIZE:
            (size,) = HEADER.unpack_from(buf, pos)
            if size > self.max_frame:
                raise FrameTooLarge(f"frame of {size} bytes exceeds the {self.max_frame}-byte cap")
            if end - pos - HEADER_SIZE < size:
                break
            start = pos + HEADER_SIZE
            with memoryview(buf) as view:  # one copy of the body, not two
                out.append(bytes(view[start : start + size]))
            pos = start + size
        if pos == end:
            buf.clear()
            pos = 0
        elif pos > 1 << 20:
            del buf[:pos]
            pos = 0
        self._pos = pos
        self._announce(buf, pos, len(buf))
        return out

    def _announce(self, buf: bytes | bytearray | memoryview, pos: int, end: int) -> None:
        self.announced = HEADER.unpack_from(buf, pos)[0] if end - pos >= HEADER_SIZE else 0

    def _feed_fresh(self, data: bytes | memoryview) -> list[bytes | memoryview]:
        """``feed`` with nothing buffered, the usual case: the bodies are views
        of ``data`` (no copy: a watcher's frame of a hundred entries is copied
        once, by its decoding, not two more times on its way there) and only
        an incomplete frame at the end is kept (copied)."""
        out: list[bytes | memoryview] = []
        view = memoryview(data)
        pos = 0
        end = len(view)
        while end - pos >= HEADER_SIZE:
            (size,) = HEADER.unpack_from(data, pos)
            if size > self.max_frame:
                raise FrameTooLarge(f"frame of {size} bytes exceeds the {self.max_frame}-byte cap")
            start = pos + HEADER_SIZE
            if end - start < size:
                break
            out.append(view[start : start + size])
            pos = start + size
        if pos < end:
            self._buf += view[pos:]
        self._announce(view, pos, end)
        return out

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held: non-zero at EOF means a truncated frame."""
        return len(self._buf) - self._pos
