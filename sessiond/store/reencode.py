"""Decoding an entry into an object and encoding it back without losing what
JavaScript's JSON accepts and msgspec refuses.

Recording rebuilds some entries (one that already carries ``parentUuid``, and on
the client every message it stamps with the envelope). msgspec cannot hold a
number out of its range (``1e400``, a 30-digit integer) nor a lone surrogate
(``"\\ud83d"``, which JSON.stringify writes when a string is cut inside an
emoji): both are valid JSON to the writing side. For those lines only, the
standard library's parser reads the entry with every number kept as its
original text (``msgspec.Raw``) and strings as Python strings (lone surrogates
included); on the way out, a string holding a lone surrogate is written as the
same escape. What cannot be read at all is a ``bad_request`` naming why, never
an internal error.
"""

from __future__ import annotations

from typing import Any

import msgspec

from sessiond.wire.errors import bad_request

_encode = msgspec.json.Encoder().encode


def _raw_number(text: str) -> msgspec.Raw:
    return msgspec.Raw(text.encode())


def _int(text: str) -> int | msgspec.Raw:
    """An int msgspec can encode stays an int (readers type-check counts); a bigger
    one keeps its digits."""
    if len(text) < 19:
        return int(text)
    value = int(text) if len(text) < 4000 else None
    return value if value is not None and -(2**63) <= value < 2**64 else _raw_number(text)


def loads_exact(data: bytes | memoryview) -> Any:
    """The standard library's reading of ``data``, every non-integer number kept as
    its text (so ``1e400`` is written back as ``1e400``), as are integers msgspec
    cannot hold. Raises ValueError or RecursionError."""
    import json  # the fallback's only: a hook's append never needs it

    return json.loads(bytes(data), parse_float=_raw_number, parse_int=_int, parse_constant=_refuse)


def decode_entry(raw: bytes | memoryview) -> dict[str, Any]:
    """The entry as a dict; numbers msgspec cannot hold stay as their text."""
    try:
        obj = msgspec.json.decode(raw)
    except RecursionError:
        raise bad_request("entry is nested too deeply to be re-encoded (about 1,000 levels at most)") from None
    except msgspec.DecodeError:
        try:
            obj = loads_exact(raw)
        except RecursionError:
            raise bad_request("entry is nested too deeply to be re-encoded (about 1,000 levels at most)") from None
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, a constant refused
            raise bad_request(f"entry is not one JSON object: {exc}") from None
    if not isinstance(obj, dict):
        raise bad_request("entry must be a JSON object")
    return obj


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def encode_entry(obj: Any) -> bytes:
    """``obj`` as compact JSON; a string with a lone surrogate keeps its escape."""
    try:
        return _encode(obj)
    except UnicodeEncodeError:
        return _encode(_escape_surrogates(obj))
    except RecursionError:
        raise bad_request("entry is nested too deeply to be encoded (about 1,000 levels at most)") from None


def _escape_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            import json

            return msgspec.Raw(json.dumps(value).encode())  # ASCII with \\uXXXX escapes: the same string
        return value
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(k, str):
                try:
                    k.encode("utf-8")
                except UnicodeEncodeError:
                    raise bad_request("an entry key holds a lone surrogate") from None
            out[k] = _escape_surrogates(v)
        return out
    if isinstance(value, list):
        return [_escape_surrogates(v) for v in value]
    return value
