"""The optional larger engine: Kingfisher's rule catalog (``kingfisher-secret-scanner``).

The built-in rules are a curated few kinds, chosen so that a transcript full of
code, hashes and ids gives no false positive. A user who wants more recall (a
provider the built-in rules do not know) installs the ``secrets-extra`` extra
and runs ``sessiond secrets --engine kingfisher``: each line is scanned by
both, Kingfisher's Rust engine and its few hundred bundled rules in process,
offline, validation never called (scanning never touches the network; the
wheel's validation and revocation APIs are not used).

A Kingfisher finding is reported under the kind ``kingfisher:<rule id>``, in
the JSON string field it falls in; one in a protected field (a signature, an
id) or in an object key is dropped, as the built-in rules never look there.
A secret both engines find is reported once, as the built-in kind (the same
secret has the same fingerprint whichever engine found it).
"""

from __future__ import annotations

import bisect
import functools
import json
from typing import Any

from .scan import _STRING, Finding, _key, _protected, fingerprint, scan_line

INSTALL = "pip install 'sessiond[secrets-extra]'"
"""How to get the engine (the wheel is ``kingfisher-secret-scanner``, imported as ``kingfisher_sdk``)."""


class EngineMissing(Exception):
    """The Kingfisher wheel is not installed, or its native library does not load."""


def available() -> bool:
    """Whether ``kingfisher_sdk`` imports here."""
    try:
        _sdk()
    except EngineMissing:
        return False
    return True


def _sdk() -> Any:
    try:
        import kingfisher_sdk  # type: ignore[import-not-found,unused-ignore]
    except ImportError as e:  # absent, or a native library that does not load
        raise EngineMissing(f"the kingfisher engine is not installed ({e}): {INSTALL}") from None
    return kingfisher_sdk


@functools.cache
def _scanner() -> Any:
    """One scanner per process: compiling the catalog takes seconds (cached by
    the wheel on disk for the next process). Base64 decoding off: a transcript's base64
    is images and signatures, not encoded keys."""
    sdk = _sdk()
    return sdk.Scanner(sdk.Rules(), base64=False, redact=False)


def _fields(line: bytes) -> tuple[list[int], list[tuple[int, int, str | None, bool]]]:
    """The line's string tokens, sorted by start: (start, end, the key it sits
    under, whether it is an object key)."""
    tokens: list[tuple[int, int, str | None, bool]] = []
    key: str | None = None
    for m in _STRING.finditer(line):
        is_key = line[m.end():m.end() + 64].lstrip()[:1] == b":"
        if is_key:
            key = _key(m.group())
        tokens.append((m.start(), m.end(), key, is_key))
    return [t[0] for t in tokens], tokens


def _decoded(secret: str) -> str:
    """A secret as it reads decoded (Kingfisher reads the line as written:
    ``\\n`` and ``\\"`` escaped), so its fingerprint is the built-in engine's."""
    try:
        value = json.loads(f'"{secret}"')
    except ValueError:
        return secret
    return value if isinstance(value, str) else secret


def scan_line_extra(line: bytes) -> list[Finding]:
    """``scan_line``'s findings and Kingfisher's on one transcript line. Offsets
    of Kingfisher's findings are byte offsets in the line as written."""
    found = scan_line(line)
    scanner = _scanner()
    seen = {f.fingerprint for f in found}
    starts: list[int] | None = None
    tokens: list[tuple[int, int, str | None, bool]] = []
    stripped = line.strip()
    is_json = stripped.startswith(b"{") and stripped.endswith(b"}")
    for k in scanner.scan(line):
        if not k.visible:
            continue
        start, end = k.location["start_offset"], k.location["end_offset"]
        field: str | None = None
        if is_json:
            if starts is None:
                starts, tokens = _fields(line)
            i = bisect.bisect_right(starts, start) - 1
            if i < 0 or end > tokens[i][1]:
                continue  # outside any string (a number, JSON's own syntax)
            _, _, field, is_key = tokens[i]
            if is_key or _protected(field):
                continue
        fp = fingerprint(_decoded(k.secret))
        if fp in seen:
            continue
        seen.add(fp)
        found.append(Finding(f"kingfisher:{k.rule_id}", fp, start, end, field))
    return found


__all__ = ["INSTALL", "EngineMissing", "available", "scan_line_extra"]
