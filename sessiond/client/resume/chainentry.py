"""Resume's view of a transcript line (:class:`Entry`), and decoding lines into it.

The loader (loader.py) reads a file as blocks of lines (blocks.py) and hands each
block to :func:`decode_block`; steps 3-8 (relink, chain, deserialize) then work on
the :class:`Entry` values. This module owns the shape of an entry and the tolerant,
fast way lines become entries; what a pass keeps of them is loader.py's.

Why it is built this way:

- Every line is decoded with ONE typed msgspec decoder of the few header fields the
  chain needs (:class:`Entry`); msgspec skips everything else without building it.
  Only the entries that end up in the resumed conversation are ever decoded into
  dicts (deserialize.materialize).
- Lines are decoded ``_RUN`` (256) at a time by ONE ``Decoder.decode_lines`` call
  instead of one call each. That call does not tell where lines are, and it accepts
  glued values (``{..}{..}``) and values spread over lines, so a run of lines takes
  that path only when each of its lines is known to be one value: every line starts
  with ``{`` and ends with ``}`` (then each newline lies between two top-level
  values: a ``}`` ending a line is structural, as JSON strings cannot hold a raw
  newline, and no ``{`` may follow it inside a value), the run decodes, and it
  yields exactly one value per line. Any other line (torn, blank, not an object)
  is decoded on its own, and a run that fails (a glued line: one value too many;
  a field of a surprising type) line by line. Real transcripts have glued lines
  (one in the 6,706 lines of the corpus).
- A torn or glued line (not exactly one JSON object) is skipped and counted, never
  fatal. A line that IS a JSON object but has a field of a surprising type (a numeric
  ``uuid``, a string ``message`` ...) is not thrown away: it is re-read generically and
  only the fields of the right type are kept (:func:`_lenient`).
"""

from __future__ import annotations

import mmap
from array import array
from typing import Any, Final

import msgspec

from sessiond.store.entries import COMPACT_BOUNDARY, decode_object, readable_copy
from sessiond.store.linecap import MAX_LINE

from .blocks import Block, Lines


class MessageHeader(msgspec.Struct, gc=False):
    """The one field of ``message`` the chain needs: ``message.id``, shared by the
    entries of one assistant response."""

    id: str | None = None


class PreservedMessages(msgspec.Struct, gc=False):
    """``compactMetadata.preservedMessages``: the uuids a compaction kept, in order,
    and the anchor the first of them hangs off (SPEC 4 step 3)."""

    anchorUuid: str | None = None
    uuids: list[str] | None = None


class PreservedSegment(msgspec.Struct, gc=False):
    """``compactMetadata.preservedSegment``: a kept run of messages named by its head
    and tail, relinked onto the anchor (SPEC 4 step 3)."""

    headUuid: str | None = None
    anchorUuid: str | None = None
    tailUuid: str | None = None


class CompactMetadata(msgspec.Struct, gc=False):
    """A compact boundary's ``compactMetadata``: which messages the compaction
    preserved, if any (``relink.py`` relinks them after the summary)."""

    preservedMessages: PreservedMessages | None = None
    preservedSegment: PreservedSegment | None = None

    @property
    def preserves(self) -> bool:
        return self.preservedMessages is not None or self.preservedSegment is not None


class SnipMetadata(msgspec.Struct, gc=False):
    """An entry's ``snipMetadata``: the uuids of the messages a snip removed, which
    resume drops, relinking their children."""

    removedUuids: list[str] | None = None


class Entry(msgspec.Struct, gc=False, rename={"src": "~sessiond.src", "index": "~sessiond.index"}):
    """The chain fields of one uuid-bearing line; everything else stays in ``raw``.

    ``parentUuid`` is mutable on purpose: step 3 relinks in memory. ``src`` and
    ``index`` (line number in the file) are filled by the loader, never from JSON:
    ``src`` is the block of lines the line was read into (or the line's own bytes);
    only transcript messages get one.
    """

    type: str | None = None
    subtype: str | None = None
    uuid: str | None = None
    parentUuid: str | None = None
    logicalParentUuid: str | None = None
    isSidechain: bool | None = None
    timestamp: str | None = None
    message: MessageHeader | str | None = None
    sourceToolAssistantUUID: str | None = None
    compactMetadata: CompactMetadata | None = None
    snipMetadata: SnipMetadata | None = None
    messageCount: int | None = None
    src: Any = None
    index: int = 0

    @property
    def raw(self) -> bytes:
        """The line's bytes (transcript messages; ``b""`` for other entries)."""
        src = self.src
        if type(src) is Lines:
            return src.line(self.index)
        return src if type(src) is bytes else b""

    @raw.setter
    def raw(self, line: bytes) -> None:
        self.src = line

    @property
    def raw_view(self) -> memoryview | bytes:
        """``raw`` without copying it out of the read buffer: for decoders."""
        src = self.src
        if type(src) is Lines:
            return src.view(self.index)
        return src if type(src) is bytes else b""

    @property
    def msg_id(self) -> str | None:
        m = self.message
        return m.id if type(m) is MessageHeader else None

    @property
    def is_compact_boundary(self) -> bool:
        return self.type == "system" and self.subtype == COMPACT_BOUNDARY


decoder = msgspec.json.Decoder(Entry)
"""The typed decoder of one line (no fallback: :func:`parse_line` has it)."""


class _SessionField(msgspec.Struct, gc=False):
    sessionId: Any = None


_session_decoder = msgspec.json.Decoder(_SessionField)


def session_of(e: Entry) -> str | None:
    """The ``sessionId`` of a transcript message (None: it has none, or it is no
    string). Not part of :class:`Entry`: one more string decoded on every line
    would cost every load, and only a file holding two sessions' entries (two
    writers on one file, files joined by ``cat``) needs it, for a few entries."""
    raw = e.raw_view
    if not raw:
        return None
    try:
        value = _session_decoder.decode(raw).sessionId
    except msgspec.DecodeError:
        copy = readable_copy(raw)
        try:
            value = None if copy is None else _session_decoder.decode(copy).sessionId
        except (msgspec.DecodeError, RecursionError):
            return None
    except RecursionError:
        return None
    return value if type(value) is str else None


def _typed(value: Any, kind: type) -> Any:
    return value if isinstance(value, kind) and not (kind is int and isinstance(value, bool)) else None


def _convert(value: Any, kind: type) -> Any:
    if not isinstance(value, dict):
        return None
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError:
        return None


def _lenient(line: bytes | memoryview) -> Entry | None:
    """A JSON object whose fields did not all have the expected types: keep what fits."""
    obj = decode_object(line)
    if obj is None:
        return None
    message = obj.get("message")
    if isinstance(message, dict):
        header: MessageHeader | str | None = MessageHeader(_typed(message.get("id"), str))
    else:
        header = _typed(message, str)
    return Entry(
        type=_typed(obj.get("type"), str),
        subtype=_typed(obj.get("subtype"), str),
        uuid=_typed(obj.get("uuid"), str),
        parentUuid=_typed(obj.get("parentUuid"), str),
        logicalParentUuid=_typed(obj.get("logicalParentUuid"), str),
        isSidechain=_typed(obj.get("isSidechain"), bool),
        timestamp=_typed(obj.get("timestamp"), str),
        message=header,
        sourceToolAssistantUUID=_typed(obj.get("sourceToolAssistantUUID"), str),
        compactMetadata=_convert(obj.get("compactMetadata"), CompactMetadata),
        snipMetadata=_convert(obj.get("snipMetadata"), SnipMetadata),
        messageCount=_typed(obj.get("messageCount"), int),
    )


def parse_line(line: bytes | memoryview) -> Entry | None:
    """The header of one line, or None when the line is not one JSON object."""
    try:
        return decoder.decode(line)
    except msgspec.ValidationError:
        return _lenient(line)
    except msgspec.DecodeError:
        masked = readable_copy(line)
        return None if masked is None else parse_line(masked)
    except RecursionError:
        return None


SKIPPED: Final = Entry()
"""Stands for a line that is not one JSON object in a decoded block: no type, no uuid."""
_BLANK: Final = Entry()
"""Stands for a whitespace-only line (not counted as skipped)."""


def _scan(buf: mmap.mmap | bytes, start: int, stop: int) -> tuple[array, list[int]]:
    """Where the lines of ``buf[start:stop]`` end (a blank line too), and which of
    them do not start with ``{`` and end with ``}``, or are longer than the
    shared cap (``linecap.MAX_LINE``): those are never decoded in a batch."""
    ends: list[int] = []
    odd: list[int] = []
    append = ends.append
    find = buf.find
    s = start
    while (n := find(b"\n", s, stop)) >= 0:
        if buf[s] != 123 or buf[n - 1] != 125 or n - s > MAX_LINE:  # b"{", b"}" (a blank line fails the first)
            odd.append(len(ends))
        append(n)
        s = n + 1
    if s < stop:  # the last line of the file, without a newline
        if buf[s] != 123 or buf[stop - 1] != 125 or stop - s > MAX_LINE:
            odd.append(len(ends))
        append(stop)
    return array("q", ends), odd  # kept with the block: 8 bytes a line, not 40


_RUN: Final = 256
"""Lines decoded per call: a damaged line sends only its run of lines back to
one call per line. (Halving a failed run down to the damage cost more: the parts
that decode are decoded again at every level.)"""


def _one(line: memoryview) -> Entry:
    """One line as parse_line reads it; ``SKIPPED``/``_BLANK`` when it is not an object."""
    try:
        return decoder.decode(line)
    except msgspec.ValidationError:
        e = _lenient(line)  # valid JSON, unexpected shape
        return SKIPPED if e is None else e  # None: not an object at all (an array ...)
    except msgspec.DecodeError:
        masked = readable_copy(line)
        if masked is not None:
            return _one(memoryview(masked))  # the header only: raw stays the file's bytes
        return SKIPPED if bytes(line).strip() else _BLANK
    except RecursionError:
        return SKIPPED


def _batch(view: memoryview, ends: array, start: int, stop: int, a: int, b: int) -> list[Entry]:
    """Lines ``a`` to ``b - 1`` of a block (``start``: where line 0 begins; ``stop``:
    its end), each starting with ``{`` and ending with ``}``: decoded ``_RUN`` lines
    per call where that yields one value per line, else line by line."""
    values: list[Entry] = []
    decode_lines = decoder.decode_lines
    for i in range(a, b, _RUN):
        j = min(i + _RUN, b)
        lo = ends[i - 1] + 1 if i else start
        try:
            run = decode_lines(view[lo : min(ends[j - 1] + 1, stop)])
        except (msgspec.DecodeError, RecursionError):  # ValidationError too: a field of a surprising type
            run = None
        if run is not None and len(run) == j - i:
            values += run
        else:
            values += [_one(view[ends[k - 1] + 1 if k else start : ends[k]]) for k in range(i, j)]
    return values


def decode_block(block: Block, first: int) -> tuple[list[Entry], Lines]:
    """The block's lines decoded (``SKIPPED``/``_BLANK`` for a line that is not
    an object) and where they are; ``first`` is the number of its first line.

    Runs of lines that each start with ``{`` and end with ``}`` are decoded in
    one call (:func:`_batch`), any other line on its own. A blank line is not a
    line (it gets no number)."""
    buf, view, start, stop = block.buf, block.view, block.start, block.stop
    ends, odd = _scan(buf, start, stop)
    if not odd:
        return _batch(view, ends, start, stop, 0, len(ends)), Lines(buf, first, start, ends)
    values: list[Entry] = []
    blank = False
    a = 0
    for i in (*odd, len(ends)):
        if i > a:
            values += _batch(view, ends, start, stop, a, i)
        if i < len(ends):
            s = ends[i - 1] + 1 if i else start
            if ends[i] - s > MAX_LINE:  # not decoded: a damaged line, like one that is no object
                values.append(SKIPPED)
            elif ends[i] > s:
                values.append(_one(view[s : ends[i]]))
            else:
                blank = True
        a = i + 1
    if not blank:
        return values, Lines(buf, first, start, ends)
    spans = [(ends[i - 1] + 1 if i else start, end) for i, end in enumerate(ends)]
    spans = [(s, e) for s, e in spans if e > s]
    return values, Lines(buf, first, [s for s, _ in spans], [e for _, e in spans])
