"""Reading JSONL transcripts: chunked line iteration and the session scan.

Pure readers over files, shared by the daemon (lazy uuid loading) and offline
tools. A torn line (no trailing newline, or not one JSON object) is skipped and
counted, never fatal.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec

from .entries import REAPPENDED_SET, try_header, is_chain_participant

CHUNK = 1 << 20


def iter_lines(path: Path | str, chunk: int = CHUNK) -> Iterator[bytes]:
    """Every line of the file without its newline, read in ``chunk``-sized pieces.

    A final line without a newline is yielded too; callers that care (torn tails)
    check whether it parses.
    """
    with open(path, "rb", buffering=0) as f:
        rest = b""
        while True:
            block = f.read(chunk)
            if not block:
                break
            data = rest + block if rest else block
            lines = data.split(b"\n")
            rest = lines.pop()
            for line in lines:
                if line:
                    yield line
        if rest:
            yield rest


class _MetaProbe(msgspec.Struct):
    type: str | None = None


class SessionScan(msgspec.Struct):
    """What the daemon needs to know about an existing transcript before appending."""

    uuids: set[str]
    """uuids of non-sidechain entries (the dedup set)."""
    sidechain_uuids: set[str]
    """uuids of inline sidechain entries (1.0.x files keep them in the main file)."""
    last_participant: str | None
    """uuid of the last non-sidechain chain participant: where recording continues."""
    metadata: dict[str, bytes]
    """Latest raw line of each re-appended metadata kind."""
    lines: int
    skipped: int


def scan_session(path: Path | str) -> SessionScan:
    uuids: set[str] = set()
    side: set[str] = set()
    meta: dict[str, bytes] = {}
    last: str | None = None
    lines = skipped = 0
    for line in iter_lines(path):
        lines += 1
        header = try_header(line)
        if header is None:
            skipped += 1
            continue
        if header.type in REAPPENDED_SET:
            meta[header.type] = line
        if header.uuid is None:
            continue
        if header.isSidechain:
            side.add(header.uuid)
            continue
        uuids.add(header.uuid)
        if is_chain_participant(header):
            last = header.uuid
    return SessionScan(uuids, side, last, meta, lines, skipped)


def scan_uuids(path: Path | str) -> set[str]:
    """Every uuid in a file (agent transcripts: their own dedup set)."""
    out: set[str] = set()
    for line in iter_lines(path):
        header = try_header(line)
        if header is not None and header.uuid is not None:
            out.add(header.uuid)
    return out
