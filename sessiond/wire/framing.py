"""Length-prefixed msgpack frames: a 4-byte big-endian length, then the body.

Two small pieces, apart from typing (as pueue splits send_bytes/send_message):
``encode`` makes one frame in a NEW buffer (asyncio keeps views of unsent bytes on
3.12+, so a reused buffer would corrupt queued frames), and ``FrameBuffer``
(``frames.py``, re-exported here) splits a byte stream into bodies, refusing an
announced length over the cap BEFORE it allocates or waits for the body. The
daemon, the blocking client and the async client all feed the same
``FrameBuffer``, so there is one framing implementation; this module adds
msgspec's typed encoding and decoding of the messages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from .core import Responses
from .errors import ProtocolError
from .frames import DEFAULT_MAX_FRAME, HEADER, HEADER_SIZE, FrameBuffer
from .fsnames import pack, unpack

if TYPE_CHECKING:
    from .messages import Request, Response

__all__ = ["DEFAULT_MAX_FRAME", "HEADER", "HEADER_SIZE", "FrameBuffer", "encode", "decode_request", "decode_response",
           "request_id_of"]

T = TypeVar("T")

_encoder = msgspec.msgpack.Encoder()
_decoders: dict[str, msgspec.msgpack.Decoder[Any]] = {}
"""The typed decoder of each union, built on its first decode: a client decodes
only responses and the daemon only requests, and building one resolves the
types of every message in its union (a few ms of every CLI run)."""


def encode(message: Any) -> bytes:
    """One complete frame for ``message`` in a fresh buffer."""
    try:
        body = _encoder.encode(message)  # every answer of the append path: one C call
    except UnicodeEncodeError:  # a name that is not UTF-8, as ``fsnames`` packs it
        body = pack(_encoder, message)
    return HEADER.pack(len(body)) + body


def decode_request(body: bytes | memoryview) -> Request:
    decoder: msgspec.msgpack.Decoder[Request] | None = _decoders.get("request")
    if decoder is None:  # the first request: the import (a call into importlib) only then
        from .messages import Request

        decoder = _decoders.setdefault("request", msgspec.msgpack.Decoder(Request))
    try:
        return decoder.decode(body)  # every request of the append path: one C call
    except (msgspec.DecodeError, RecursionError):
        return _decode(decoder, body, "request")  # a name that is not UTF-8, or the error to tell


def decode_response(body: bytes | memoryview) -> Response:
    """The answer in ``body``: one of ``core.Responses`` when it is one (an
    unknown tag is refused at the tag, before anything is built), else
    decoded with every answer's union, whose error is the one raised. Once
    that union is built it decodes every answer itself (it holds the core's
    too): a stream of answers outside the core (a watcher's ``Entries``) would
    otherwise pay a failed decode and its exception for every frame."""
    full: msgspec.msgpack.Decoder[Response] | None = _decoders.get("response")
    if full is not None:
        return _decode(full, body, "response")
    core: msgspec.msgpack.Decoder[Responses] = _decoders.get("core") or _decoders.setdefault("core", msgspec.msgpack.Decoder(Responses))
    try:
        return unpack(core, body)
    except (msgspec.DecodeError, RecursionError):
        pass
    from .messages import Response

    decoder: msgspec.msgpack.Decoder[Response] = _decoders.get("response") or _decoders.setdefault("response", msgspec.msgpack.Decoder(Response))
    return _decode(decoder, body, "response")


def _decode(decoder: msgspec.msgpack.Decoder[T], body: bytes | memoryview, what: str) -> T:
    """The one typed decode of a body. msgspec raises RecursionError (it stops
    at the interpreter's recursion limit, cleanly) for a body nested deeper than
    that: it is a malformed message like any other, never an internal error."""
    try:
        return unpack(decoder, body)
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
