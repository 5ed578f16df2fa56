"""Typed partial decodes of one transcript line, for the lite read's windows.

Why its own module: the head and the tail windows each decode lines into a
small msgspec Struct naming only the fields they need (the rest is skipped
without building objects); both need the same fallbacks for lines Claude Code
never writes but a file may hold: a field of an unexpected type (keep what
fits instead of losing the line), a lone surrogate (masked, then decoded), a
torn or nested-too-deep line (None).
"""

from __future__ import annotations

import functools
from typing import Any, Final, Literal, get_args

import msgspec

from .entries import decode_object, readable_copy

NULL: Final = msgspec.Raw(b"null")
"""The default of a ``msgspec.Raw`` field a line does not carry."""

_Kind = Literal["raw", "bool", "str"]


@functools.cache
def _field_kinds(cls: type) -> tuple[tuple[str, _Kind], ...]:
    """Each field of ``cls`` and what it takes: a raw JSON object, a bool or a string."""
    out: list[tuple[str, _Kind]] = []
    for field in msgspec.structs.fields(cls):
        if field.type is msgspec.Raw:
            out.append((field.name, "raw"))
        elif bool in get_args(field.type):
            out.append((field.name, "bool"))
        else:
            out.append((field.name, "str"))
    return tuple(out)


def _loose(line: bytes, cls: type) -> Any:
    """Slow path for a line whose fields have unexpected types: keep what fits."""
    obj = decode_object(line)
    if obj is None:
        return None
    kw: dict[str, Any] = {}
    for name, kind in _field_kinds(cls):
        v = obj.get(name)
        if kind == "raw":
            if isinstance(v, dict):
                kw[name] = msgspec.Raw(msgspec.json.encode(v))
        elif kind == "bool":
            if isinstance(v, bool):
                kw[name] = v
        elif isinstance(v, str):
            kw[name] = v
    return cls(**kw)


def decode_line(dec: msgspec.json.Decoder[Any], cls: type, line: bytes) -> Any:
    """The typed view of one line (``dec`` decodes ``cls``), or None for a
    torn/unparseable line."""
    try:
        return dec.decode(line)
    except msgspec.ValidationError:
        return _loose(line, cls)
    except msgspec.DecodeError:
        masked = readable_copy(line)
        return None if masked is None else decode_line(dec, cls, masked)
    except RecursionError:
        return None
