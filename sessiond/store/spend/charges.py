"""The rules: which transcript lines are API responses, and each counted once.

Follows ccusage (github.com/ryoppippi/ccusage, ``rust/crates/ccusage/src``)
rule for rule, so the figures are the same to the token:

- a line counts only if it holds ``"usage":{`` and decodes as an entry with a
  ``timestamp`` (RFC 3339, ``date_utils.rs`` ``parse_ts_timestamp``) and a
  ``message.usage`` with ``input_tokens`` and ``output_tokens``, every field of
  the right type (``adapter/claude/mod.rs`` ``read_usage_file``);
- a line where ``id``, ``cwd``, ``model``, ``speed``, ``costUSD``, ``version``,
  ``sessionId``, ``requestId``, ``isApiErrorMessage`` or a cache count is
  ``null`` is skipped (``has_unsupported_null_field``), and so is one whose
  ``version`` does not start ``N.N.N`` or whose ``sessionId``, ``requestId``,
  ``message.id`` or model is empty (``is_valid_usage_entry``);
- Claude Code writes one line per content block, all with the same
  ``message.id``, ``requestId`` and usage: a response is counted once per
  (``message.id``, ``requestId``), keeping the copy with most tokens; a
  sidechain copy (``isSidechain``) of a message already counted under another
  request id is dropped, and a main copy replaces a sidechain one
  (``push_deduped_entry``); a line without ``message.id`` is never merged;
- files are taken in path order, subagent transcripts included (every
  ``*.jsonl`` under ``projects/``), ``usage_files``;
- the daily report also counts the responses of subagents that older Claude
  Code wrote inside the parent's ``progress`` lines (``data.message``), which
  the other reports do not (``adapter/claude/daily.rs``); ``Ledger(progress=True)``.

A response of the synthetic model (``<synthetic>``) counts its tokens (they are
zero) under no model. A ``costUSD`` in the entry is its cost (ccusage's
``auto`` mode); otherwise the tokens are priced (``prices``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Literal

import msgspec

Count = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]
SYNTHETIC = "<synthetic>"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
MARKER = b'"usage":{'
_NULLABLE_REFUSED = frozenset({
    b"id", b"cwd", b"model", b"speed", b"costUSD", b"version", b"sessionId", b"requestId",
    b"isApiErrorMessage", b"cache_read_input_tokens", b"cache_creation_input_tokens",
})


class _CacheSplit(msgspec.Struct):
    ephemeral_5m_input_tokens: Count = 0
    ephemeral_1h_input_tokens: Count = 0


class _Usage(msgspec.Struct):
    input_tokens: Count
    output_tokens: Count
    cache_creation_input_tokens: Count = 0
    cache_read_input_tokens: Count = 0
    speed: Literal["standard", "fast"] | None = None
    cache_creation: _CacheSplit | None = None


class _Message(msgspec.Struct):
    usage: _Usage
    model: str | None = None
    id: str | None = None


class _Line(msgspec.Struct, rename="camel"):
    timestamp: str
    message: _Message
    session_id: str | None = None
    version: str | None = None
    cost_usd: float | None = msgspec.field(default=None, name="costUSD")
    request_id: str | None = None
    is_sidechain: bool | None = None


class _ProgressMessage(msgspec.Struct, rename="camel"):
    timestamp: str
    message: _Message
    cost_usd: float | None = msgspec.field(default=None, name="costUSD")
    request_id: str | None = None
    is_sidechain: bool | None = None


class _ProgressData(msgspec.Struct):
    message: _ProgressMessage


class _Progress(msgspec.Struct):
    data: _ProgressData


_MODELS: dict[str, str] = {}
"""Model names seen, each kept once (a store names a few models in every response)."""


def _name(model: str) -> str:
    if len(_MODELS) < 4096:
        _MODELS[model] = model
    return model


_line = msgspec.json.Decoder(_Line)
_progress = msgspec.json.Decoder(_Progress)


class Charge(msgspec.Struct, array_like=True, gc=False):
    """One API response as the reports count it: when (ms since the epoch),
    its identity for the dedup, its model as reported (None for the synthetic
    one; ``-fast`` appended in fast mode), its tokens, the ``costUSD`` the
    entry carried, and the session and project its file belongs to."""

    ts: int
    message_id: str | None
    request_id: str | None
    sidechain: bool
    model: str | None
    raw_model: str | None
    input: int
    output: int
    cache_5m: int
    cache_1h: int
    cache_read: int
    split: bool
    fast: bool
    speed_set: bool
    cost_usd: float | None
    session: str
    project: str

    @property
    def cache_creation(self) -> int:
        return self.cache_5m + self.cache_1h

    @property
    def total(self) -> int:
        return self.input + self.output + self.cache_5m + self.cache_1h + self.cache_read


_HOURS: dict[str, int] = {}
"""The first millisecond of each hour seen (``2025-01-01T12``), for the usual
shape (``2025-01-01T12:34:56.789Z``): one ``fromisoformat`` an hour, not a line."""


def parse_timestamp(value: str) -> int | None:
    """Milliseconds since the epoch of an RFC 3339 timestamp of the shapes
    ccusage takes (seconds, or milliseconds, then ``Z`` or ``±hh:mm``), else None."""
    n = len(value)
    if n == 24 and value[23] == "Z":  # the usual shape: its hour's start, known, and the rest
        hour = _HOURS.get(value[:13])
        rest = value[14:16] + value[17:19] + value[20:23]
        if hour is not None and value[13] == ":" and value[16] == ":" and value[19] == "." and rest.isascii() \
                and rest.isdigit() and value[14] < "6" and value[17] < "6":
            return hour + int(rest[:2]) * 60_000 + int(rest[2:4]) * 1000 + int(rest[4:])
    if n in (20, 25):
        if value[19] not in "Z+-":
            return None
    elif n in (24, 29):
        if value[19] != "." or not value[20:23].isdigit():
            return None
    else:
        return None
    if value[4] != "-" or value[7] != "-" or value[10] != "T" or value[13] != ":" or value[16] != ":":
        return None
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        return None
    if dt.tzinfo is None:
        return None
    ms = (dt - _EPOCH) // _MS
    if n == 24 and value[23] == "Z" and len(_HOURS) < 65536:
        _HOURS[value[:13]] = ms - ms % 3_600_000
    return ms


def _refused_null(line: bytes) -> bool:
    """Whether a field ccusage refuses to see null is null (``has_unsupported_null_field``):
    the name is what lies between the two quotes last before a ``:null``."""
    offset = 0
    find, rfind = line.find, line.rfind
    while (at := find(b":null", offset)) >= 0:
        end = rfind(b'"', 0, at)
        if end > 0:
            start = rfind(b'"', 0, end)
            if start >= 0 and line[start + 1:end] in _NULLABLE_REFUSED:
                return True
        offset = at + 5
    return False


_VERSIONS: dict[str, bool] = {}
"""``_semver_prefix`` of the versions seen (a store names a few in every line)."""


def _semver_prefix(value: str) -> bool:
    known = _VERSIONS.get(value)
    if known is None:
        known = _semver_parts(value)
        if len(_VERSIONS) < 4096:
            _VERSIONS[value] = known
    return known


def _semver_parts(value: str) -> bool:
    parts = value.split(".", 2)
    return len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit() and parts[2][:1].isdigit() \
        and parts[0].isascii() and parts[1].isascii() and parts[2][:1].isascii()


def session_of(relative: tuple[str, ...]) -> tuple[str, str]:
    """(session id, project) of a transcript from its path's parts below
    ``projects/``, as ccusage derives them (``extract_session_parts``): a
    subagent file belongs to its parent session."""
    last = relative[-1] if relative else ""
    file_session = last[:-len(".jsonl")] if last.endswith(".jsonl") else None
    if len(relative) == 2 and file_session:
        return file_session, relative[0]
    if len(relative) >= 4 and relative[-2] == "subagents":
        project = "/".join(relative[:-3])
        return relative[-3], project or "Unknown Project"
    session = relative[-2] if len(relative) >= 2 else (relative[0] if relative else "unknown")
    project = "/".join(relative[:-2]) if len(relative) > 2 else "Unknown Project"
    return session, project


def charge_of_line(line: bytes, session: str, project: str, progress: bool = False) -> Charge | None:
    """The response a line records, or None when ccusage would not count it.
    ``progress``: also a subagent response inside a ``progress`` line (daily)."""
    if MARKER not in line or _refused_null(line):
        return None
    try:
        entry: _Line | _ProgressMessage = _line.decode(line)
        version = entry.version  # type: ignore[union-attr]
        session_id = entry.session_id  # type: ignore[union-attr]
    except msgspec.DecodeError:
        if not progress:
            return None
        try:
            entry = _progress.decode(line).data.message
        except msgspec.DecodeError:
            return None
        version = session_id = None
    ts = parse_timestamp(entry.timestamp)
    if ts is None:
        return None
    message = entry.message
    if (version is not None and not _semver_prefix(version)) or session_id == "" or entry.request_id == "" \
            or message.id == "" or message.model == "":
        return None
    usage = message.usage
    fast = usage.speed == "fast"
    if usage.cache_creation is not None:
        c5, c1, split = usage.cache_creation.ephemeral_5m_input_tokens, usage.cache_creation.ephemeral_1h_input_tokens, True
    else:
        c5, c1, split = usage.cache_creation_input_tokens, 0, False
    raw = message.model
    if raw is not None:
        raw = _MODELS.get(raw) or _name(raw)
    model = None if raw is None or raw == SYNTHETIC else (raw + "-fast" if fast else raw)
    return Charge(ts, message.id, entry.request_id, entry.is_sidechain is True, model, raw,
                  usage.input_tokens, usage.output_tokens, c5, c1, usage.cache_read_input_tokens, split, fast,
                  usage.speed is not None, entry.cost_usd, session, project)


def charge_and_kind(line: bytes, session: str, project: str) -> tuple[Charge, bool] | None:
    """The response a line records for the daily report, and whether only the
    daily report counts it (a subagent's response inside a ``progress`` line)."""
    charge = charge_of_line(line, session, project)
    if charge is not None:
        return charge, False
    charge = charge_of_line(line, session, project, progress=True)
    return None if charge is None else (charge, True)


def charges_of_file(path: Path, relative: tuple[str, ...], progress: bool = False) -> Iterator[Charge]:
    """Every countable response in one transcript, in line order (before the dedup)."""
    from ..jsonl import iter_line_views

    session, project = session_of(relative)
    for view in iter_line_views(path, containing=MARKER):
        if view:
            charge = charge_of_line(bytes(view), session, project, progress)
            if charge is not None:
                yield charge


class Ledger:
    """The responses counted once: feed it charges in ccusage's order (files in
    path order, lines in file order) and read ``charges``. ``progress`` picks
    the daily loader's variant (it does not re-index a replaced entry).

    Its memory is one small record per API response and two index entries:
    what the daemon keeps per response is bounded by the store it serves."""

    def __init__(self, progress: bool = False) -> None:
        self.progress = progress
        self.charges: list[Charge] = []
        self._exact: dict[tuple[str, str | None], list[int]] = {}
        self._by_message: dict[str, list[int]] = {}

    @staticmethod
    def replaces(new: Charge, old: Charge) -> bool:
        """Whether ``new``, a copy of the response ``old`` was counted from,
        is the one to keep (``should_replace_deduped_entry``)."""
        if new.sidechain != old.sidechain:
            return old.sidechain
        if new.total != old.total:
            return new.total > old.total
        return new.speed_set and not old.speed_set

    def add(self, charge: Charge) -> None:
        """Count ``charge``, or merge it into the copy already counted."""
        mid = charge.message_id
        if mid is None:
            self.charges.append(charge)
            return
        key = (mid, charge.request_id)
        charges = self.charges
        exact = self._exact.get(key)
        by_message = self._by_message.get(mid)
        if exact is None and by_message is None:  # a response not seen before: the common case
            self._exact[key] = [len(charges)]
            self._by_message[mid] = [len(charges)]
            charges.append(charge)
            return
        found = next((i for i in exact or () if charges[i].message_id == mid
                      and charges[i].request_id == charge.request_id), None)
        if found is None:
            found = next((i for i in by_message or () if charge.sidechain or charges[i].sidechain), None)
        if found is not None:
            if self.replaces(charge, charges[found]):
                charges[found] = charge
                if not self.progress:
                    self._index(key, mid, found)
            return
        charges.append(charge)
        self._index(key, mid, len(charges) - 1)

    def _index(self, key: tuple[str, str | None], mid: str, index: int) -> None:
        for slot in (self._exact.setdefault(key, []), self._by_message.setdefault(mid, [])):
            if index not in slot:
                slot.append(index)

    def extend(self, charges: Iterable[Charge]) -> None:
        for charge in charges:
            self.add(charge)


def transcripts(projects: Path) -> list[tuple[Path, tuple[str, ...]]]:
    """Every ``*.jsonl`` under ``projects`` (symlinked dirs not followed), in
    ccusage's order (by path string), each with its parts below ``projects``."""
    import os

    found: list[str] = []
    stack = [str(projects)]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    elif e.name.endswith(".jsonl") and e.is_file(follow_symlinks=False):
                        found.append(e.path)
        except OSError:
            continue
    found.sort()
    base = len(projects.parts)
    return [(Path(p), Path(p).parts[base:]) for p in found]


PARALLEL_FROM = 64 << 20
"""Bytes of transcripts from which ``load`` reads them in worker processes."""
MAX_WORKERS = 8
"""Worker processes at most: past a few, counting their runs here is the bound."""
PART = 8 << 20
"""Bytes of transcripts a worker reads at a time (a run of whole files, in path order)."""
_charges = msgspec.msgpack.Decoder(list[Charge])


def _charges_of_part(part: list[tuple[str, tuple[str, ...]]], progress: bool) -> bytes:
    """The responses of a run of files, in order, as msgpack (a worker's answer)."""
    found: list[Charge] = []
    for path, relative in part:
        try:
            found.extend(charges_of_file(Path(path), relative, progress))
        except OSError:
            continue
    return msgspec.msgpack.encode(found)


def _parts(files: list[tuple[Path, tuple[str, ...]]]) -> list[tuple[list[tuple[str, tuple[str, ...]]], int]]:
    """``files`` cut into runs of about ``PART`` bytes, in path order, each with its size."""
    import os

    parts: list[tuple[list[tuple[str, tuple[str, ...]]], int]] = []
    run: list[tuple[str, tuple[str, ...]]] = []
    size = 0
    for path, relative in files:
        try:
            size += os.stat(path).st_size
        except OSError:
            pass
        run.append((str(path), relative))
        if size >= PART:
            parts.append((run, size))
            run, size = [], 0
    if run:
        parts.append((run, size))
    return parts


def load(projects: Path, progress: bool = False, keep: Callable[[tuple[str, ...]], bool] | None = None,
         workers: int = 1, read: Callable[[int, int], None] | None = None) -> Ledger:
    """The ledger of a whole ``projects/`` tree; ``keep(relative)`` may leave files out.

    ``workers`` > 1: a tree of ``PARALLEL_FROM`` bytes or more is read by that
    many forked processes, a run of files each at a time (the reading and the
    rules are most of the work, and the GIL holds them to one core), and
    counted here in path order as the runs come back, so the ledger is the
    one a single reader makes. Only for a single-threaded caller (a fork of a
    threaded process may inherit a held lock): the CLI. ``read(done, total)``
    is told the bytes read so far, for a progress line."""
    files = [(path, relative) for path, relative in transcripts(projects) if keep is None or keep(relative)]
    ledger = Ledger(progress)
    if workers > 1:
        import threading

        parts = _parts(files)
        total = sum(size for _, size in parts)
        if total >= PARALLEL_FROM and len(parts) > 1 and threading.active_count() == 1:
            import functools
            import multiprocessing

            from ..jsonl import iter_line_views  # noqa: F401  (imported once here, not in every worker)

            done = 0
            with multiprocessing.get_context("fork").Pool(min(workers, len(parts), MAX_WORKERS)) as pool:
                answers = pool.imap(functools.partial(_charges_of_part, progress=progress), [run for run, _ in parts])
                for (_, size), answer in zip(parts, answers, strict=True):
                    ledger.extend(_charges.decode(answer))
                    done += size
                    if read is not None:
                        read(done, total)
            return ledger
    for path, relative in files:
        try:
            ledger.extend(charges_of_file(path, relative, progress))
        except OSError:
            continue
    return ledger
