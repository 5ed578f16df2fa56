"""Length-prefixed msgpack frames: a 4-byte big-endian length, then the body.

Two small pieces, apart from typing (as pueue splits send_bytes/send_message):
``encode`` makes one frame in a NEW buffer (asyncio keeps views of unsent bytes on
3.12+, so a reused buffer would corrupt queued frames), and ``FrameBuffer`` splits a
byte stream into bodies, refusing an announced length over the cap BEFORE it
allocates or waits for the body. The daemon, the blocking client and the async
client all feed the same ``FrameBuffer``, so there is one framing implementation.
"""

from __future__ import annotations

import struct
from typing import Any

import msgspec

from .errors import FrameTooLarge, ProtocolError
from .messages import Request, Response

HEADER = struct.Struct(">I")
HEADER_SIZE = HEADER.size
DEFAULT_MAX_FRAME = 64 * 1024 * 1024

_encoder = msgspec.msgpack.Encoder()
_decoders: dict[str, msgspec.msgpack.Decoder] = {}
"""The typed decoder of each union, built on its first decode: a client decodes
only responses and the daemon only requests, and building one resolves the
types of every message in its union (a few ms of every CLI run)."""


def encode(message: Any) -> bytes:
    """One complete frame for ``message`` in a fresh buffer."""
    body = _encoder.encode(message)
    return HEADER.pack(len(body)) + body


def decode_request(body: bytes | memoryview) -> Request:
    decoder = _decoders.get("request") or _decoders.setdefault("request", msgspec.msgpack.Decoder(Request))
    return _decode(decoder, body, "request")


def decode_response(body: bytes | memoryview) -> Response:
    decoder = _decoders.get("response") or _decoders.setdefault("response", msgspec.msgpack.Decoder(Response))
    return _decode(decoder, body, "response")


def _decode(decoder: msgspec.msgpack.Decoder, body: bytes | memoryview, what: str) -> Any:
    """The one typed decode of a body. msgspec raises RecursionError (it stops
    at the interpreter's recursion limit, cleanly) for a body nested deeper than
    that: it is a malformed message like any other, never an internal error."""
    try:
        return decoder.decode(body)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError subclass
        raise ProtocolError(f"malformed {what}: {exc}") from None
    except RecursionError:
        raise ProtocolError(f"malformed {what}: nested too deeply") from None


class _IdOnly(msgspec.Struct):
    """The one field an error answer needs: msgspec skips every other field
    without building it, so finding the id of a bad 64 MiB body costs no memory."""

    id: int = 0


_id_decoder = msgspec.msgpack.Decoder(_IdOnly)


def request_id_of(body: bytes | memoryview) -> int:
    """Best-effort id of a body that failed to decode, so its error can echo it;
    0 when the body is not a map with an integer ``id``."""
    try:
        rid = _id_decoder.decode(body).id
    except (msgspec.DecodeError, RecursionError):
        return 0
    return rid if 0 <= rid < 2**63 else 0


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

    def feed(self, data: bytes) -> list[bytes | memoryview]:
        """Add bytes; return every complete body now available, in order (a
        memoryview when it is the whole buffer: it is only decoded).

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

    def _announce(self, buf: bytes | bytearray, pos: int, end: int) -> None:
        self.announced = HEADER.unpack_from(buf, pos)[0] if end - pos >= HEADER_SIZE else 0

    def _feed_fresh(self, data: bytes) -> list[bytes | memoryview]:
        """``feed`` with nothing buffered, the usual case: bodies are sliced
        straight out of ``data`` (one copy, not two through the bytearray) and
        only an incomplete frame at the end is kept."""
        out: list[bytes | memoryview] = []
        pos = 0
        end = len(data)
        while end - pos >= HEADER_SIZE:
            (size,) = HEADER.unpack_from(data, pos)
            if size > self.max_frame:
                raise FrameTooLarge(f"frame of {size} bytes exceeds the {self.max_frame}-byte cap")
            start = pos + HEADER_SIZE
            if end - start < size:
                break
            out.append(data[start : start + size])
            pos = start + size
        if pos < end:
            self._buf += data[pos:] if pos else data
        self._announce(data, pos, end)
        return out

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held: non-zero at EOF means a truncated frame."""
        return len(self._buf) - self._pos
