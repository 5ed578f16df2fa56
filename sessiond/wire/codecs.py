"""The two codecs a client can speak the wire with, as one shape.

A ``Codec`` is the message classes (a namespace with ``Hello``, ``Status``,
``Error`` ... and ``PROTOCOL_VERSION``), ``encode`` (a message to a whole frame)
and ``decode_response`` (a body to an answer). ``msgspec_codec`` is the typed
Structs of ``messages.py`` with ``framing.py``: every message, what every
client uses. ``lite_codec`` is ``lite.py``: the hot commands' few messages
without importing msgspec. The blocking client takes either, so dialing, the
handshake, timeouts and errors stay one implementation; only the codec differs.
Each is built on first use and imports its side only then.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any


class Codec:
    __slots__ = ("messages", "encode", "decode_response", "lite")

    def __init__(self, messages: ModuleType, encode: Callable[[Any], bytes], decode_response: Callable[[bytes | memoryview], Any],
                 lite: bool) -> None:
        self.messages = messages
        """``messages.py`` or ``lite.py``: the same message names, duck-typed alike."""
        self.encode = encode
        self.decode_response = decode_response
        self.lite = lite
        """True for the lite codec, whose ``decode_response`` may raise ``lite.NotLite``."""


_built: dict[str, Codec] = {}


def msgspec_codec() -> Codec:
    codec = _built.get("msgspec")
    if codec is None:
        from . import framing, messages

        codec = _built["msgspec"] = Codec(messages, framing.encode, framing.decode_response, lite=False)
    return codec


def lite_codec() -> Codec:
    codec = _built.get("lite")
    if codec is None:
        from . import lite

        codec = _built["lite"] = Codec(lite, lite.encode, lite.decode_response, lite=True)
    return codec
