"""Text holding names that are not UTF-8, carried losslessly over msgpack and JSON.

A Linux file name is bytes. Python gives one that is not UTF-8 as a str with
lone surrogates (``os.fsdecode``'s surrogateescape: byte 0xff is U+DCFF), and
that str is what the daemon and the CLI pass around, so such a file is listed,
searched, imported and shown like any other. But msgpack's str and JSON text are
UTF-8: msgspec refuses to encode a lone surrogate (``UnicodeEncodeError``), and a
typed decoder refuses anything but a str where a str is expected. A value holding
one is therefore encoded a second way, only when the first one fails:

- msgpack (the wire, the catalog's records, the indexer's pipe): each str with a
  lone surrogate becomes the extension ``EXT_TEXT``, whose data is the str's
  UTF-8 with the surrogates passed through ('surrogatepass', so every str, not
  only surrogateescape's U+DC80-U+DCFF, comes back as it was). ``unpack``, when
  the typed decode meets one, decodes untyped with that extension turned back
  into the str and converts to the type.
- JSON (``--json``): each lone surrogate is written as the escape ``\\udcXX``
  (JSON's own ``\\u`` escape; Python's ``json.loads`` then ``os.fsencode``
  gives back the name's bytes).

Everything else (nearly every message) takes the one-step path both ways,
byte-identical on the wire to what it always was.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

EXT_TEXT = 1
"""The msgpack extension code of a str that is not valid UTF-8."""

_BUILTINS = (bytes, bytearray, memoryview, msgspec.Raw)


def _as_ext(value: Any) -> Any:
    """``value`` (builtins only) with every str that UTF-8 cannot hold as an ``EXT_TEXT``."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return msgspec.msgpack.Ext(EXT_TEXT, value.encode("utf-8", "surrogatepass"))
        return value
    if isinstance(value, dict):
        return {_as_ext(k): _as_ext(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_ext(v) for v in value]
    return value


def _ext_hook(code: int, data: memoryview) -> Any:
    if code != EXT_TEXT:
        raise msgspec.DecodeError(f"unknown msgpack extension {code}")
    return bytes(data).decode("utf-8", "surrogatepass")


def pack(encoder: msgspec.msgpack.Encoder, value: Any) -> bytes:
    """``value`` as msgpack; a str holding a name that is not UTF-8 as ``EXT_TEXT``."""
    try:
        return encoder.encode(value)
    except UnicodeEncodeError:
        return encoder.encode(_as_ext(msgspec.to_builtins(value, builtin_types=_BUILTINS)))


T = TypeVar("T")


def unpack(decoder: msgspec.msgpack.Decoder[T], body: bytes | memoryview) -> T:
    """``body`` decoded by ``decoder``, ``EXT_TEXT`` strs included (raises as the
    decoder does for anything else)."""
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        if "got `ext`" not in str(exc):
            raise
    try:
        value = msgspec.msgpack.decode(body, ext_hook=_ext_hook)
    except UnicodeDecodeError as exc:  # an extension's data is not what ``pack`` writes
        raise msgspec.DecodeError(f"malformed text extension: {exc}") from None
    converted: T = msgspec.convert(value, decoder.type)  # the decoder's own type: what decoder.decode returns
    return converted


def json_bytes(value: Any) -> bytes:
    """``value`` as one line of JSON; a lone surrogate as the escape ``\\udcXX``."""
    try:
        return msgspec.json.encode(value)
    except UnicodeEncodeError:
        import json  # only for such a name: a hook's run never needs it

        text = json.dumps(msgspec.to_builtins(value), ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8", "backslashreplace")
