"""The hot commands' wire codec without msgspec: plain classes for the few
messages ``status``, ``list`` and ``append`` exchange, over ``purepack``.

A fresh ``sessiond status`` spends more CPU importing msgspec and building the
~60 message Structs than the interpreter takes to start. This module offers,
under the same names as ``messages.py`` (``Hello``, ``Status``, ``Error`` ...),
classes built from ``lite_table`` (the Structs' fields and defaults, held equal
to them by a test), so the blocking client runs unchanged on either codec
(``codecs.py``):

- a request encodes to the bytes msgspec writes for the Struct (tag first,
  fields in order, defaults left out: ``omit_defaults``), so the daemon decodes
  it as it decodes any client's;
- an answer decodes into an object with the Struct's attributes, the fields the
  daemon left out as defaults filled in, nested Structs (a listed session, a
  lease holder) as objects too.

It does not type-check what it reads as msgspec's typed decoder does. Whatever
it does not take as certainly right (bytes that are not MessagePack, an answer
it has no class for, a required field missing, an error naming a lease holder,
an answer over ``MAX_BODY``) raises ``NotLite``: the command then runs again from the start on the msgspec
codec, whose answer, or typed error, is today's word for word.
"""

from __future__ import annotations

from .frames import HEADER, PROTOCOL_VERSION
from .lite_table import FIELDS, NESTED, REQUIRED, TAGGED
from .purepack import DecodeError, packb, unpackb

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from typing import Any

__all__ = ["MAX_BODY", "PROTOCOL_VERSION", "NotLite", "LiteMessage", "encode", "decode_response", *FIELDS]

MAX_BODY = 128 * 1024
"""The largest answer decoded here. Pure Python reads some 6 MB/s (a listed
session in about 80 us, against 10 us for msgspec), so past about this size
importing msgspec (some 30 ms) and asking again is the cheaper way: a ``list``
of thousands of sessions goes there, ``status`` (1 KB) and a page of 20
sessions (12 KB) never do."""


class NotLite(Exception):
    """An answer the lite codec does not handle: run the command on msgspec.
    Deliberately not a ``SessiondError``: it is never a command's verdict."""


class LiteMessage:
    """A message (or nested record) with the fields of its Struct, as attributes."""

    FIELDS: tuple[tuple[str, object], ...] = ()
    NESTED: dict[str, type[LiteMessage]] = {}

    def __init__(self, **values: object) -> None:
        for name, default in self.FIELDS:
            if name in values:
                value = values.pop(name)
            elif default is REQUIRED:
                raise TypeError(f"Missing required argument '{name}'")
            else:
                value = default.copy() if type(default) in (list, dict) else default  # type: ignore[attr-defined]  # a list or a dict: type(default) is checked
            setattr(self, name, value)
        if values:
            raise TypeError(f"Unexpected keyword argument '{next(iter(values))}'")

    def to_wire(self) -> dict[str, object]:
        """The map msgspec encodes for the Struct: ``op`` first, then every field
        that is not its default, in order."""
        out: dict[str, object] = {"op": type(self).__name__}
        for name, default in self.FIELDS:
            value = getattr(self, name)
            if default is REQUIRED or value != default or type(value) is not type(default):
                out[name] = value
        return out

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> LiteMessage:
        """The object for a decoded map: unknown keys ignored (as the Structs'
        ``forbid_unknown_fields=False``), defaults filled in."""
        values = {}
        for name, default in cls.FIELDS:
            if name in raw:
                value = raw[name]
                nested = cls.NESTED.get(name)
                if nested is not None and value is not None:
                    value = [nested._record(v) for v in value] if type(value) is list else nested._record(value)
                values[name] = value
            elif default is REQUIRED:
                raise NotLite(f"{cls.__name__} without its {name}")
        return cls(**values)

    @classmethod
    def _record(cls, raw: object) -> LiteMessage:
        if type(raw) is not dict:
            raise NotLite(f"a {cls.__name__} that is not a map")
        return cls.from_wire(raw)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(self) == vars(other)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"


def _build() -> dict[str, type[LiteMessage]]:
    classes: dict[str, type[LiteMessage]] = {name: type(name, (LiteMessage,), {"FIELDS": fields, "__module__": __name__})
                                             for name, fields in FIELDS.items()}
    for name, nested in NESTED.items():
        classes[name].NESTED = {field: classes[kind] for field, kind in nested.items()}
    return classes


_CLASSES = _build()
globals().update(_CLASSES)
_TAGGED = {name: _CLASSES[name] for name in TAGGED}


def encode(message: LiteMessage) -> bytes:
    """One complete frame (header and body) for ``message``."""
    body = packb(message.to_wire())
    return HEADER.pack(len(body)) + body


def decode_response(body: bytes | memoryview) -> LiteMessage:
    """The answer in ``body``, or ``NotLite`` for anything not certainly one
    this codec handles."""
    if len(body) > MAX_BODY:
        raise NotLite(f"an answer of {len(body)} bytes (msgspec decodes it faster)")
    try:
        raw = unpackb(body)
    except DecodeError as exc:
        raise NotLite(f"malformed response: {exc}") from None
    if type(raw) is not dict:
        raise NotLite("a response that is not a map")
    cls = _TAGGED.get(raw.get("op"))  # type: ignore[arg-type]  # any op a peer sent: one not a str finds no class
    if cls is None:
        raise NotLite(f"no lite class for {raw.get('op')!r}")
    if type(raw.get("id")) is not int:
        raise NotLite("a response without an integer id")
    if raw.get("holder") is not None:
        raise NotLite("an error naming a lease holder (its text comes from LeaseHolder)")
    return cls.from_wire(raw)
