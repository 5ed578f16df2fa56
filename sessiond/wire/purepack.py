"""MessagePack in pure Python, for the builtins the wire uses: None, bool, int,
float, str, bytes, list, dict.

Why it exists: importing msgspec costs a hook's ``sessiond status`` or
``append`` about as much CPU as the interpreter's own start (its C core
imports ``typing``, ``uuid``, ``decimal``, ``datetime``), and the few small
frames those commands exchange are quick to code by hand. ``packb`` writes the
bytes ``msgspec.msgpack.encode`` writes for the same value (the smallest form
of each int, str, bin, array and map header; floats as float64), so a peer
cannot tell the two apart; ``unpackb`` reads every form the format has for
these types (the differential tests hold both to msgspec).

It reads a peer's bytes, so decoding is bounded: nesting deeper than
``MAX_DEPTH`` is refused, and a length is checked against the bytes left
before anything of that size is built (an array of a billion elements needs a
billion bytes to announce honestly). Ext types (msgspec's timestamps) are not
the wire's and are refused. No I/O here.
"""

from __future__ import annotations

import struct

from .errors import ProtocolError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from typing import Any

MAX_DEPTH = 32
"""Nesting the wire's messages never come near (a listed session's ``live``
map inside its list inside the answer is 4 levels)."""

_B = struct.Struct(">B")
_H = struct.Struct(">H")
_I = struct.Struct(">I")
_Q = struct.Struct(">Q")
_b = struct.Struct(">b")
_h = struct.Struct(">h")
_i = struct.Struct(">i")
_q = struct.Struct(">q")
_f = struct.Struct(">f")
_d = struct.Struct(">d")


class DecodeError(ProtocolError):
    """Bytes that are not one MessagePack value of the supported types."""


class TooDeep(DecodeError):
    """Nested deeper than ``MAX_DEPTH`` (msgspec itself goes to the recursion limit)."""


# ---------------------------------------------------------------------- encode


def packb(obj: object) -> bytes:
    """``obj`` as MessagePack, byte for byte what msgspec writes for it.
    TypeError for a type outside the supported ones, ValueError for a
    structure nested deeper than ``MAX_DEPTH`` (a cycle), OverflowError for an
    int outside [-2**63, 2**64)."""
    out = bytearray()
    _pack(obj, out, 0)
    return bytes(out)


def _pack(obj: object, out: bytearray, depth: int) -> None:
    kind = type(obj)
    if kind is str:
        data = obj.encode("utf-8")  # type: ignore[attr-defined]  # type(obj) is checked above, which mypy does not narrow
        _header(out, len(data), 0xA0, 32, 0xD9, 0xDA, 0xDB)
        out += data
    elif obj is None:
        out.append(0xC0)
    elif obj is True:
        out.append(0xC3)
    elif obj is False:
        out.append(0xC2)
    elif kind is int:
        _pack_int(obj, out)  # type: ignore[arg-type]  # type(obj) is int, which mypy does not narrow
    elif kind is float:
        out.append(0xCB)
        out += _d.pack(obj)
    elif kind in (bytes, bytearray, memoryview):
        data = bytes(obj)  # type: ignore[call-overload]  # type(obj) is a bytes-like, which mypy does not narrow
        _header(out, len(data), None, 0, 0xC4, 0xC5, 0xC6)
        out += data
    elif kind in (list, tuple):
        if depth >= MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        _header(out, len(obj), 0x90, 16, None, 0xDC, 0xDD)  # type: ignore[arg-type]  # type(obj) is checked above, which mypy does not narrow
        for item in obj:  # type: ignore[attr-defined]  # type(obj) is checked above, which mypy does not narrow
            _pack(item, out, depth + 1)
    elif kind is dict:
        if depth >= MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        _header(out, len(obj), 0x80, 16, None, 0xDE, 0xDF)  # type: ignore[arg-type]  # type(obj) is checked above, which mypy does not narrow
        for key, value in obj.items():  # type: ignore[attr-defined]  # type(obj) is checked above, which mypy does not narrow
            _pack(key, out, depth + 1)
            _pack(value, out, depth + 1)
    else:
        raise TypeError(f"cannot encode {kind.__name__} as MessagePack here")


def _header(out: bytearray, n: int, fix: int | None, fix_limit: int, c8: int | None, c16: int, c32: int) -> None:
    """A length header in its smallest form (fix, 8-, 16- or 32-bit)."""
    if fix is not None and n < fix_limit:
        out.append(fix | n)
    elif c8 is not None and n < 0x100:
        out.append(c8)
        out.append(n)
    elif n < 0x10000:
        out.append(c16)
        out += _H.pack(n)
    elif n < 0x100000000:
        out.append(c32)
        out += _I.pack(n)
    else:
        raise ValueError("too long for MessagePack")


def _pack_int(n: int, out: bytearray) -> None:
    if 0 <= n < 0x80:
        out.append(n)
    elif n >= 0:
        for code, limit, fmt in ((0xCC, 0x100, _B), (0xCD, 0x10000, _H), (0xCE, 0x100000000, _I), (0xCF, 1 << 64, _Q)):
            if n < limit:
                out.append(code)
                out += fmt.pack(n)
                return
        raise OverflowError("int too big for MessagePack")
    elif n >= -32:
        out.append(n & 0xFF)
    else:
        for code, limit, fmt in ((0xD0, -0x80, _b), (0xD1, -0x8000, _h), (0xD2, -0x80000000, _i), (0xD3, -(1 << 63), _q)):
            if n >= limit:
                out.append(code)
                out += fmt.pack(n)
                return
        raise OverflowError("int too small for MessagePack")


# ---------------------------------------------------------------------- decode


def unpackb(data: bytes | bytearray | memoryview) -> object:
    """The one value ``data`` holds. ``DecodeError`` (a ``ProtocolError``) for
    anything else: truncated, trailing bytes, a reserved or ext type, a str
    that is not UTF-8, a map key that cannot be one, nesting over ``MAX_DEPTH``."""
    buf = bytes(data)
    try:
        obj, pos = _unpack(buf, 0, 0)
    except (IndexError, struct.error):
        raise DecodeError("truncated MessagePack") from None
    if pos != len(buf):
        raise DecodeError(f"{len(buf) - pos} bytes after the value")
    return obj


_FIXED = {0xCC: _B, 0xCD: _H, 0xCE: _I, 0xCF: _Q, 0xD0: _b, 0xD1: _h, 0xD2: _i, 0xD3: _q, 0xCA: _f, 0xCB: _d}
_LENGTH = {0xD9: _B, 0xDA: _H, 0xDB: _I, 0xC4: _B, 0xC5: _H, 0xC6: _I, 0xDC: _H, 0xDD: _I, 0xDE: _H, 0xDF: _I}


def _unpack(buf: bytes, pos: int, depth: int) -> tuple[object, int]:
    code = buf[pos]
    pos += 1
    if code < 0x80:
        return code, pos
    if code >= 0xE0:
        return code - 0x100, pos
    if 0xA0 <= code <= 0xBF:
        return _text(buf, pos, code & 0x1F)
    if 0x90 <= code <= 0x9F:
        return _array(buf, pos, code & 0x0F, depth)
    if 0x80 <= code <= 0x8F:
        return _map(buf, pos, code & 0x0F, depth)
    if code == 0xC0:
        return None, pos
    if code == 0xC2:
        return False, pos
    if code == 0xC3:
        return True, pos
    fmt = _FIXED.get(code)
    if fmt is not None:
        return fmt.unpack_from(buf, pos)[0], pos + fmt.size
    fmt = _LENGTH.get(code)
    if fmt is None:
        raise DecodeError(f"unsupported MessagePack type 0x{code:02x}")
    n = fmt.unpack_from(buf, pos)[0]
    pos += fmt.size
    if code >= 0xDC:
        return (_array if code <= 0xDD else _map)(buf, pos, n, depth)
    if code >= 0xD9:
        return _text(buf, pos, n)
    return _bin(buf, pos, n)


def _take(buf: bytes, pos: int, n: int) -> int:
    end = pos + n
    if end > len(buf):
        raise DecodeError("truncated MessagePack")
    return end


def _text(buf: bytes, pos: int, n: int) -> tuple[str, int]:
    end = _take(buf, pos, n)
    try:
        return buf[pos:end].decode("utf-8"), end
    except UnicodeDecodeError:
        raise DecodeError("str that is not UTF-8") from None


def _bin(buf: bytes, pos: int, n: int) -> tuple[bytes, int]:
    end = _take(buf, pos, n)
    return buf[pos:end], end


def _array(buf: bytes, pos: int, n: int, depth: int) -> tuple[list[Any], int]:
    if depth >= MAX_DEPTH:
        raise TooDeep(f"nested deeper than {MAX_DEPTH} levels")
    _take(buf, pos, n)  # each element is at least one byte: the length is bounded by the input
    out = []
    for _ in range(n):
        item, pos = _unpack(buf, pos, depth + 1)
        out.append(item)
    return out, pos


def _map(buf: bytes, pos: int, n: int, depth: int) -> tuple[dict[Any, Any], int]:
    if depth >= MAX_DEPTH:
        raise TooDeep(f"nested deeper than {MAX_DEPTH} levels")
    _take(buf, pos, 2 * n)
    out: dict[Any, Any] = {}
    for _ in range(n):
        key, pos = _unpack(buf, pos, depth + 1)
        if type(key) is list:
            key = _frozen(key)  # msgspec reads an array key as a tuple
        elif type(key) is dict:
            raise DecodeError("a map as a map key")
        out[key], pos = _unpack(buf, pos, depth + 1)
    return out, pos


def _frozen(items: list[Any]) -> tuple[Any, ...]:
    out = []
    for item in items:
        if type(item) is dict:
            raise DecodeError("a map inside a map key")
        out.append(_frozen(item) if type(item) is list else item)
    return tuple(out)
