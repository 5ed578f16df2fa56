"""``sessiond check``: what is wrong with a transcript file, without changing it.

Unhealthy is reserved for what loses or confuses data: a torn last line (a
writer died mid-line; ``repair`` moves it aside), unparseable lines in the
middle (their content is lost to every reader), duplicate uuids (within the main
chain or within the sidechains: two writers, or a bug). A dangling parent (a
``parentUuid`` naming no entry of the file) is a warning: resume links it to a
message at most 5 s older as Claude Code does (else starts after it; ``show
--bridge`` joins the rest), and Claude Code's own files have them (entries it never writes, such as progress lines). Entries of
another session in a file named by a session id are a warning too (two writers
on one file, or files joined with ``cat``): resume takes the file's own session.
Tool uses without a result, and messages with nothing to send (no content, or
whitespace only: resume leaves them out, the API refuses them) are
informational: every interrupted turn ends with the first, and Claude Code
writes the second when a response is cut off before its first word.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from sessiond.store.appendfile import TornTail, cut_torn_tail, file_lock
from sessiond.store.entries import decode_object, readable_copy
from sessiond.store.jsonl import iter_lines
from sessiond.store.paths import check_session_id, is_session_id
from sessiond.store.regular import open_regular


class _Block(msgspec.Struct):
    type: str | None = None
    id: str | None = None
    tool_use_id: str | None = None
    text: str | None = None


class _Message(msgspec.Struct):
    content: str | list[_Block | str] | None = None


class _Entry(msgspec.Struct):
    type: str | None = None
    uuid: str | None = None
    parentUuid: str | None = None
    isSidechain: bool | None = None
    sessionId: str | None = None
    message: _Message | None = None


def _nothing_to_send(message: _Message) -> bool:
    content = message.content
    if content is None or isinstance(content, str):
        return not (content or "").strip()
    return all(isinstance(b, _Block) and b.type == "text" and not (b.text or "").strip() for b in content)


_decode = msgspec.json.Decoder(_Entry).decode


def _lenient(raw: bytes) -> _Entry | None:
    """What fits of an object whose fields have surprising types (a string
    ``message``, a numeric ``uuid``), as the resume loader reads it; None when
    the line is no object at all."""
    obj = decode_object(raw)
    if obj is None:
        return None
    kw = {k: v for k in ("type", "uuid", "parentUuid", "sessionId") if isinstance(v := obj.get(k), str)}
    side = obj.get("isSidechain")
    try:
        message = msgspec.convert(obj.get("message"), _Message) if isinstance(obj.get("message"), dict) else None
    except msgspec.ValidationError:
        message = _Message()
    return _Entry(isSidechain=side if isinstance(side, bool) else None, message=message, **kw)


class Health(msgspec.Struct):
    """What ``sessiond check`` finds in one transcript (``--json`` prints it): its size,
    each kind of problem with where it is, and a verdict."""

    path: str
    bytes: int
    lines: int
    tornTail: bool
    unparseableLines: list[int]
    duplicateUuids: list[str]
    danglingParents: list[str]
    unansweredToolUses: list[str]
    emptyMessages: list[str]
    """uuids of user/assistant messages with nothing to send (resume drops them)."""
    otherSessions: list[str]
    """Session ids other than the file's (``<uuid>.jsonl``) that entries carry."""
    parentCycles: list[str]
    """One uuid of each loop of ``parentUuid`` links (A's parent B, B's parent A):
    a chain walked from there never reaches its start."""
    healthy: bool
    """Nothing lost or confused: no torn tail, unparseable line or duplicate uuid."""
    verdict: str = "ok"
    """``ok``; ``warning``: healthy, with something resume repairs on the fly
    (dangling parents, bridged); ``unhealthy``."""


def check_file(path: Path | str) -> Health:
    path = Path(path)
    with os.fdopen(open_regular(path), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size:
            f.seek(size - 1)
            torn = f.read(1) != b"\n"
        else:
            torn = False
    lines = 0
    bad: list[int] = []
    seen: set[tuple[bool, str]] = set()
    dups: list[str] = []
    parents: list[str] = []
    parent_of: dict[str, str] = {}
    uses: dict[str, None] = {}
    results: set[str] = set()
    empty: list[str] = []
    stem = path.name.removesuffix(".jsonl")
    own = check_session_id(stem) if is_session_id(stem) else None
    others: dict[str, None] = {}
    for lines, raw in enumerate(iter_lines(path), 1):
        try:
            e = _decode(raw)
        except msgspec.ValidationError:  # one JSON object, a field of a surprising type: readers keep it
            lenient = _lenient(raw)
            if lenient is None:
                bad.append(lines)
                continue
            e = lenient
        except msgspec.DecodeError:
            masked = readable_copy(raw)  # JSON.parse reads a lone surrogate: so do we; and a BOM is no damage
            try:
                if masked is None:
                    raise
                e = _decode(masked)
            except (msgspec.DecodeError, RecursionError):
                bad.append(lines)
                continue
        except RecursionError:
            bad.append(lines)
            continue
        if e.uuid is not None:
            key = (bool(e.isSidechain), e.uuid)
            if key in seen:
                dups.append(e.uuid)
            seen.add(key)
        if e.parentUuid is not None:
            parents.append(e.parentUuid)
            if e.uuid is not None:
                parent_of[e.uuid] = e.parentUuid
        if own is not None and e.sessionId and e.sessionId != own and e.uuid is not None:
            others[e.sessionId] = None
        if e.type in ("user", "assistant") and e.uuid and (e.message is None or _nothing_to_send(e.message)):
            empty.append(e.uuid)
        content = e.message.content if e.message is not None else None
        if isinstance(content, list):
            for block in content:
                if isinstance(block, _Block):
                    if block.type == "tool_use" and block.id:
                        uses[block.id] = None
                    elif block.type == "tool_result" and block.tool_use_id:
                        results.add(block.tool_use_id)
    # A last line without its newline is torn only if it does not parse (a
    # complete entry just missing "\n" is completed, not moved, by the writer).
    if torn and bad and bad[-1] == lines:
        bad.pop()  # the torn tail is reported as such, not as a bad line
    else:
        torn = False
    uuids = {u for _, u in seen}
    dangling = [p for p in parents if p not in uuids]
    cycles = _cycles(parent_of)
    unanswered = [u for u in uses if u not in results]
    healthy = not (torn or bad or dups)
    return Health(
        path=str(path),
        bytes=size,
        lines=lines,
        tornTail=torn,
        unparseableLines=bad,
        duplicateUuids=dups,
        danglingParents=dangling,
        unansweredToolUses=unanswered,
        emptyMessages=empty,
        otherSessions=list(others),
        parentCycles=cycles,
        healthy=healthy,
        verdict="unhealthy" if not healthy else "warning" if dangling or others or cycles else "ok",
    )


def _cycles(parent_of: dict[str, str]) -> list[str]:
    """One uuid of each loop of ``parent_of`` links, in the order met (each link
    followed once: linear in the entries)."""
    state: dict[str, int] = {}  # 1: on the walk now, 2: done
    found: list[str] = []
    for start in parent_of:
        walk: list[str] = []
        at: str | None = start
        while at is not None and at not in state:
            state[at] = 1
            walk.append(at)
            at = parent_of.get(at)
        if at is not None and state.get(at) == 1:
            found.append(at)  # the walk came back to itself
        for u in walk:
            state[u] = 2
    return found


class Repair(msgspec.Struct):
    """What ``sessiond repair`` did to one transcript (a torn tail moved aside, a
    missing last newline added) and what ``check`` finds in it afterwards."""

    path: str
    movedTornTail: TornTail | None
    """The fragment moved to ``<file>.torn``, if there was one."""
    completedLastLine: bool
    """The last line was whole but lacked its newline: one was added."""
    remaining: Health
    """What ``check`` says afterwards (problems repair cannot fix without
    losing or inventing bytes: dangling parents, duplicates, mid-file junk)."""


def repair_file(path: Path | str) -> Repair:
    """Fix what can be fixed without losing a byte, under the same lock the
    daemon's writer takes (so it is safe while a daemon runs)."""
    path = Path(path)
    fd = open_regular(path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW)
    try:
        with file_lock(fd):
            before = os.fstat(fd).st_size
            torn = cut_torn_tail(fd, path, before)
            after = os.fstat(fd).st_size
    finally:
        os.close(fd)
    return Repair(str(path), torn, torn is None and after != before, check_file(path))
