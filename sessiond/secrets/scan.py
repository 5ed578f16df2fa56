"""Finding and redacting secrets in text and in transcript lines.

A transcript line is JSON, and a secret in it sits inside a string value (a
tool's result, a prompt, a command): ``redact_line`` finds the line's string
tokens, decodes only those that may hold one, runs the rules on the decoded
text (where a ``.env`` dump's ``\\n`` is a real line break and escaped JSON is
plain JSON again) and writes a redacted token back, so the line stays valid
JSON and every byte outside the changed strings stays as it was. Object keys
and the values a resume needs byte for byte are never touched: a thinking
block's ``signature``, ``uuid``/``parentUuid`` and every other id.

Cost: one pass of a prefilter (``rules.maybe_secret``) over each line;
only a line it matches is tokenized, and only a string it matches is decoded
and given to the rules.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import json
import re
from collections.abc import Iterator
from typing import Any

import msgspec

from .rules import RULES, hit_positions, maybe_secret, secret_name, strong_value


class Finding(msgspec.Struct, frozen=True):
    """One secret found: its kind, where it is (character offsets in the text
    given, or in the decoded string of a line's ``field``) and a fingerprint
    that tells two secrets apart without showing either."""

    kind: str
    fingerprint: str
    start: int
    end: int
    field: str | None = None
    """The JSON key the string holding it sits under (lines only)."""


def fingerprint(value: str) -> str:
    """The first 8 hex digits of the SHA-256 of ``value``: the same secret gets
    the same fingerprint in every file and export, two secrets differ, and the
    value cannot be read back from it (32 bits can only confirm a guess)."""
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def marker(kind: str, fp: str) -> str:
    """The text a redacted secret is replaced with. It holds no quote, no
    backslash and no control character, so it is valid inside any JSON string."""
    return f"[REDACTED:{kind}:{fp}]"


def find(text: str) -> list[Finding]:
    """Every secret in ``text``, in order, none overlapping (where two rules
    match the same text, the one listed first in ``RULES`` wins)."""
    if not maybe_secret(text.encode("utf-8", "surrogatepass")):
        return []
    return _find(text)


@functools.cache
def _caseless(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """A lowercase rule's pattern for text whose lowercasing changes its length
    (a few letters lowercase to two characters): the same match, case-insensitive."""
    return re.compile(pattern.pattern, pattern.flags | re.IGNORECASE)


def _word_char(c: str) -> bool:
    return c.isalnum() or c == "_"


def _named(text: str, at: int) -> bool:
    """Whether the name a ``named`` rule matched at ``at`` is a compound or upper case."""
    return (at > 0 and text[at - 1] in "_-.") or text[at:at + 3].isupper()


def literal_prefix(pattern: str) -> str:
    """The characters every match of ``pattern`` starts with (up to its first
    special character), lowercased: a text without them cannot match."""
    out = []
    for c in pattern:
        if c in "\\[](){}.*+?|^$":
            break
        out.append(c)
    if out and pattern[len(out):len(out) + 1] in ("?", "*", "{"):
        out.pop()  # the last one is optional or repeated
    return "".join(out).lower()


_NEEDLES = tuple(literal_prefix(rule.pattern.pattern) for rule in RULES)
"""Per rule, what the lowercased text must hold for it to be run at all."""


def _find(text: str) -> list[Finding]:
    lowered = text.lower()
    same = len(lowered) == len(text)
    spans: list[tuple[int, int, int, str]] = []
    for order, rule in enumerate(RULES):
        if _NEEDLES[order] not in lowered or rule.context is not None and not rule.context.search(lowered):
            continue
        if rule.lowered:
            matches = rule.pattern.finditer(lowered) if same else _caseless(rule.pattern).finditer(text)
        else:
            matches = rule.pattern.finditer(text)
        for m in matches:
            start, end = m.span(rule.group)
            if start < 0 or end <= start:
                continue
            if rule.bounded and start and _word_char(text[start - 1]):
                continue
            if rule.named and not _named(text, m.start()):
                continue
            if rule.gate is not None and not rule.gate(text[start:end]):
                continue
            spans.append((start, order, end, rule.kind))
    spans.sort()
    out: list[Finding] = []
    last = -1
    for start, _, end, kind in spans:
        if start < last:
            continue
        out.append(Finding(kind, fingerprint(text[start:end]), start, end))
        last = end
    return out


def _apply(text: str, found: list[Finding]) -> str:
    parts = []
    at = 0
    for f in found:
        parts.append(text[at:f.start])
        parts.append(marker(f.kind, f.fingerprint))
        at = f.end
    parts.append(text[at:])
    return "".join(parts)


def redact_text(text: str) -> str:
    """``text`` with every secret replaced by its marker (``marker``)."""
    found = find(text)
    return _apply(text, found) if found else text


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
"""One JSON string token, escapes included (the unrolled form: no backtracking blow-up)."""
_COLON = re.compile(rb"\s*:")

PROTECTED = frozenset({"signature", "uuid", "parentUuid", "logicalParentUuid", "leafUuid", "id", "sessionId",
                       "requestId", "messageId", "tool_use_id", "toolUseID", "sourceToolUseID", "promptId", "agentId",
                       "parentToolUseID", "sourceToolAssistantUUID", "type", "data", "media_type"})
"""JSON keys whose string values are never rewritten: what a resume needs byte
for byte (a thinking block's signature is checked by the API; ids link the
chain), an entry's type, and base64 payloads (an image's ``data``)."""


def _protected(key: str | None) -> bool:
    return key is not None and (key in PROTECTED or key.endswith(("Id", "ID", "Uuid", "UUID", "_id")))


def _encode(text: str) -> bytes:
    """``text`` as a JSON string token, escaped the way Claude Code's
    ``JSON.stringify`` does (quotes, backslashes, control characters; other
    characters as they are), lone surrogates as ``\\uXXXX``."""
    try:
        return json.dumps(text, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return json.dumps(text).encode()


def _named_value(value: str, key: str | None) -> list[Finding]:
    """A whole string value that is a secret by its key's name (``"apiKey": "..."``)
    and passes the assignments' entropy gate."""
    if key and len(value) <= 512 and secret_name(key) and strong_value(value):
        return [Finding("secret-assignment", fingerprint(value), 0, len(value))]
    return []


def _key(token: bytes) -> str | None:
    """An object key's text (most are plain ASCII: no decoder needed)."""
    if b"\\" not in token and token.isascii():
        return token[1:-1].decode()
    try:
        key = json.loads(token)
    except ValueError:
        return None
    return key if isinstance(key, str) else None


def _strings_to_read(line: bytes) -> Iterator[tuple[re.Match[bytes], str | None]]:
    """The string values of a JSON line that may hold a secret, with the key
    each sits under: those a prefilter hit falls in, or under a secret-named
    key; never an object key or a protected field."""
    key: str | None = None
    hits = hit_positions(line)
    for m in _STRING.finditer(line):
        if _COLON.match(line, m.end()) is not None:
            key = _key(m.group())
            continue
        i = bisect.bisect_left(hits, m.start())
        if _protected(key) or not (i < len(hits) and hits[i] < m.end()) and not (key and secret_name(key)):
            continue
        yield m, key


def _line_findings(line: bytes, redact: bool) -> tuple[bytes, list[Finding]]:
    if not maybe_secret(line):
        return line, []
    stripped = line.strip()
    if not (stripped.startswith(b"{") and stripped.endswith(b"}")):
        text = line.decode("utf-8", "surrogateescape")
        plain = _find(text)
        return (_apply(text, plain).encode("utf-8", "surrogateescape") if redact and plain else line), plain
    found: list[Finding] = []
    out: list[bytes] = []
    at = 0
    for m, key in _strings_to_read(line):
        token = m.group()
        try:
            value = json.loads(token)
        except ValueError:
            continue
        if not isinstance(value, str):
            continue
        here = _find(value) or _named_value(value, key)
        if not here:
            continue
        found.extend(Finding(f.kind, f.fingerprint, f.start, f.end, key) for f in here)
        if redact:
            out.append(line[at:m.start()])
            out.append(_encode(_apply(value, here)))
            at = m.end()
    if not redact or not out:
        return line, found
    out.append(line[at:])
    return b"".join(out), found


def scan_line(line: bytes) -> list[Finding]:
    """The secrets in one transcript line (JSON: inside its string values, never
    in a protected field; anything else: as text)."""
    return _line_findings(line, False)[1]


def redact_line(line: bytes) -> tuple[bytes, list[Finding]]:
    """One transcript line with its secrets redacted, and what was found. The
    same bytes when nothing was; otherwise only the strings that held a secret
    change, and a JSON line stays valid JSON."""
    return _line_findings(line, True)


def redact_value(value: Any, key: str | None = None) -> tuple[Any, list[Finding]]:
    """A decoded JSON value (an entry, a message) with the secrets in its strings
    redacted, and what was found; the same rules as ``redact_line``: object
    keys and protected fields are left alone, a secret-named key's strong value
    is one. The value given is not changed; unchanged parts are shared."""
    if isinstance(value, str):
        if _protected(key):
            return value, []
        here = find(value) or _named_value(value, key)
        return (_apply(value, here), [Finding(f.kind, f.fingerprint, f.start, f.end, key) for f in here]) if here else (value, [])
    if isinstance(value, dict | list):
        found: list[Finding] = []
        copy: Any = None
        for slot, v in (value.items() if isinstance(value, dict) else enumerate(value)):
            child = (slot if isinstance(slot, str) else None) if isinstance(value, dict) else key
            new, here = redact_value(v, child)
            if here:
                found.extend(here)
                if copy is None:
                    copy = dict(value) if isinstance(value, dict) else list(value)
                copy[slot] = new
        return (value if copy is None else copy), found
    return value, []


def _mask(kind: str, fp: str, size: int) -> str:
    """A marker of exactly ``size`` ASCII characters: the whole one padded with
    ``*``, else ``[REDACTED:<fingerprint>]`` padded, else ``*`` only."""
    for text in (marker(kind, fp), f"[REDACTED:{fp}]"):
        if len(text) <= size:
            return text + "*" * (size - len(text))
    return "*" * size


def _mask_raw(raw: str, found: list[Finding]) -> str:
    """``raw`` with each finding's span replaced by a mask of its byte length."""
    parts = []
    at = 0
    for f in found:
        parts.append(raw[at:f.start])
        parts.append(_mask(f.kind, f.fingerprint, len(raw[f.start:f.end].encode("utf-8", "surrogateescape"))))
        at = f.end
    parts.append(raw[at:])
    return "".join(parts)


def mask_line(line: bytes) -> bytes:
    """``line`` with its secrets masked in place, keeping its length byte for
    byte (what the mirror sends: its stream is byte ranges at the files'
    offsets). The rules run on the line as written (escapes and all), inside
    its JSON strings only and never in a protected field, as ``redact_line``;
    a string whose masking would break an escape is masked whole. A piece of a
    line (a line longer than one message) is masked as text."""
    if not maybe_secret(line):
        return line
    stripped = line.strip()
    if not (stripped.startswith(b"{") and stripped.endswith(b"}")):
        raw = line.decode("utf-8", "surrogateescape")
        found = _find(raw)
        return _mask_raw(raw, found).encode("utf-8", "surrogateescape") if found else line
    out = bytearray(line)
    for m, key in _strings_to_read(line):
        token = m.group()
        raw = token[1:-1].decode("utf-8", "surrogateescape")
        found = _find(raw)
        if not found:
            try:
                value = json.loads(token)
            except ValueError:
                continue
            named = _named_value(value, key) if isinstance(value, str) else []
            if not named:
                continue
            found = [Finding(named[0].kind, named[0].fingerprint, 0, len(raw))]
        masked = _mask_raw(raw, found).encode("utf-8", "surrogateescape")
        try:
            json.loads(b'"' + masked + b'"')
        except ValueError:  # a span began inside an escape: the whole string instead
            masked = _mask(found[0].kind, found[0].fingerprint, len(token) - 2).encode()
        out[m.start() + 1:m.end() - 1] = masked
    return bytes(out)


def mask_lines(data: bytes) -> bytes:
    """``mask_line`` on every line of ``data`` (whole lines, or the pieces of
    one at either end): the same length, byte for byte."""
    if not maybe_secret(data):
        return data
    return b"\n".join(mask_line(piece) for piece in data.split(b"\n"))
