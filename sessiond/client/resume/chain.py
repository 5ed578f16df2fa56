"""SPEC 4 steps 4-6: choose the leaf, walk to the root, recover parallel tool results
(the order inside a response is order.py's).

- Leaf: the latest entry of type user/assistant/system/attachment by ``timestamp``
  (file order breaks ties, the later line wins; a missing or unreadable timestamp
  sorts first), as Claude Code's ``--resume ID`` picks it (``getLastSessionLog``:
  ``findLatestMessage`` of the non-sidechain messages). Timestamps are compared as
  times, as its ``Date.parse`` does: one C-level ``max`` over the strings when
  they all have ``toISOString``'s shape (every file Claude Code writes) and the
  latest is a date, parsed otherwise (``2026-01-01T10:00:00+02:00`` is earlier
  than ``...T09:00:00.000Z``; ``T-1:59:59`` is no time and sorts first).
  Then, beyond Claude Code, the leaf is followed DOWN to the newest leaf under it
  (:func:`_descend`): an entry written after the latest one in the file, hanging
  off it, with an older timestamp (a clock that stepped back; real case: daaain
  3680252d, whose root is 12 ms younger than its two children, resumed as one
  message by Claude Code, as three here), is part of the same conversation, and
  leaving it out would lose it. The conversation returned therefore always holds
  Claude Code's, and differs only by what it would lose. Claude Code's ``/resume``
  picker (``loadFullLog``) takes the newest leaf instead and walks a trailing
  system or attachment entry back to its message; SPEC 4 keeps them (an
  attachment at the end is an interrupted turn), so this follows ``--resume``.
  Sidechain entries are not candidates unless the whole file is a subagent
  transcript (``sidechain_only``). progress and unknown types never are. In a file
  named by a session id that another session's writer got into (its entries
  newer), the leaf is the file's own latest message (``session``; only the
  leaf's ``sessionId`` is read, and the others' only then: chainentry.session_of).
- Walk: ``parentUuid`` from the leaf until ``null`` or a uuid already walked (cycle
  guard). A parent that is not in the map (DANGLING), or one already walked (a
  cycle), is met as Claude Code meets it (``buildConversationChain``'s timestamp
  fallback, 2.1.3xx): the child is linked to the entry with the latest timestamp
  not after its own, of its own side (sidechain or not), not walked yet, not a
  ``file_snapshot`` system entry nor progress, when that entry is at most
  :data:`CLAUDE_BRIDGE_MS` older (of equal times, the first in the file), and
  reported as a :class:`Bridge`; otherwise the conversation STARTS at the child,
  and the missing parent is reported in ``cuts`` (the earlier part is still in
  the file). A wider bridge is never silent: ``wide=True`` (``show --bridge``)
  is the explicit repair that joins a cut to the nearest earlier entry in file
  order (of the child's own session first: interleaved writers), reported as a
  Bridge with ``repair="wide"``. progress entries are walked through (older
  versions chain through them).
- Parallel tool results: Claude Code writes one content block per entry, and each
  tool_result hangs off the entry holding its tool_use, so one walk passes a single
  branch of a parallel call. For every ``message.id`` group on the chain, the group's
  off-chain entries and the off-chain tool_results answering any member (child through
  ``parentUuid`` or ``sourceToolAssistantUUID``, and actually holding a tool_result
  block) are spliced in, in file order, right after the group's last entry on the
  chain — where Claude Code splices them. Beyond SPEC and Claude Code, the off-chain
  ``attachment`` entries hanging off a recovered tool_result (hook output, reminders:
  context the model saw) come back with it; without them the turn_duration check
  reports messages missing (real case: daaain ef958aa1, delta -6 → 0). Where they
  go decides only WHICH entries the chain holds: order.py then orders each
  response for the model API.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from datetime import datetime
from functools import partial
from itertools import islice, takewhile
from operator import attrgetter, is_not

import msgspec

from sessiond.store.entries import TRANSCRIPT_TYPES

from .chainentry import Entry, session_of
from .toolblocks import has_tool_result

_timestamp = attrgetter("timestamp")
_parent = attrgetter("parentUuid")
_is_entry = partial(is_not, None)


CLAUDE_BRIDGE_MS = 5000
"""How much older an entry may be for Claude Code to link a child whose parent
line is missing to it (its ``buildConversationChain`` timestamp fallback)."""


class Bridge(msgspec.Struct, omit_defaults=True):
    """A parent line the walk did not find: where the walk went on (a bridge)
    or where the conversation starts (a cut); ``show --json`` reports both."""

    at: str
    """uuid of the entry whose parent is missing."""
    missingParent: str
    repair: str | None = None
    """None: Claude Code's own link (or cut); ``"wide"``: the explicit repair
    ``show --bridge`` asked for, beyond what Claude Code restores."""


def choose_leaf(entries: dict[str, Entry], *, sidechain_only: bool = False, session: str | None = None) -> Entry | None:
    """The entry resume walks back from (see the module docstring). ``session``:
    the session the file is (its name), whose own latest message is the leaf when
    entries of another session are newer (:func:`_own_session`)."""
    values = entries.values()
    latest = _latest_iso(values)  # usually a candidate
    if latest is None or latest.type not in TRANSCRIPT_TYPES or not (sidechain_only or not latest.isSidechain):
        latest = _latest_by_time(values, sidechain_only)
    if session is not None and latest is not None and session_of(latest) not in (None, session):
        latest = _own_session(values, latest, sidechain_only, session)
    return _descend(entries, latest, sidechain_only)


_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_ISO_SHAPE = b"0000-00-00T00:00:00.000Z\n"
"""``toISOString``'s shape, the only one Claude Code writes, with its digits as 0."""


def _latest_iso(values) -> Entry | None:
    """The latest entry by timestamp (the later line of equals) when every
    timestamp has ``toISOString``'s shape, found by one C-level ``max`` over the
    strings: in that shape string order is time order. None when one has another
    shape (the same width is not enough: ``2026-01-01 10:00:00.000Z`` sorts before
    ``...T09:...``) or the latest string is no date (``T-1:59:59``, month 13: it
    sorts first as a time): the caller parses them all."""
    if not values:
        return None
    try:
        # One line per timestamp, its digits as 0: equal to the shape repeated
        # exactly when each has the shape (a line break inside one shifts them).
        shapes = ("\n".join(map(_timestamp, values)) + "\n").encode("ascii").translate(_DIGITS)
    except (TypeError, UnicodeEncodeError):  # a missing timestamp (None), a non-ASCII one
        return None
    if shapes != _ISO_SHAPE * len(values):
        return None
    latest = max(reversed(values), key=_timestamp)  # reversed: max keeps the first of equals
    return latest if _instant(latest.timestamp) != float("-inf") else None


def _own_session(values, latest: Entry, sidechain_only: bool, session: str) -> Entry:
    """The latest message of ``session`` when the file has any (its others, or
    none, are another session's: two writers on one file, files joined), else
    ``latest``: a copy under a new name whose entries all keep the old id (Claude
    Code's older resumes and forks wrote such files) is resumed as it is."""
    mine = [e for e in values if _is_candidate(e, sidechain_only) and session_of(e) in (None, session)]
    if not any(session_of(e) == session for e in mine):
        return latest
    return _latest_by_time(mine, sidechain_only) or latest


def _instant(ts: str | None) -> float:
    """A timestamp as seconds, the way ``Date.parse`` reads ISO-8601 (no offset:
    local time); -inf when it is missing or not a date."""
    if not ts:
        return float("-inf")
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError, OSError):
        return float("-inf")


def _is_candidate(e: Entry, sidechain_only: bool) -> bool:
    return e.type in TRANSCRIPT_TYPES and (sidechain_only or not e.isSidechain)


def _latest_by_time(values, sidechain_only: bool) -> Entry | None:
    """The latest candidate by parsed time, the later line on a tie."""
    best: Entry | None = None
    best_t = float("-inf")
    for e in values:
        if _is_candidate(e, sidechain_only):
            t = _instant(e.timestamp)
            if best is None or t >= best_t:
                best, best_t = e, t
    return best


def _descend(entries: dict[str, Entry], latest: Entry | None, sidechain_only: bool) -> Entry | None:
    """The newest leaf hanging (directly or through progress and other entries)
    off ``latest`` among the lines after it; ``latest`` itself when none does.

    Only the lines after it are looked at, so the usual file, whose latest
    entry is its last, costs nothing here: an entry is written after its parent
    (a child written BEFORE its parent is damage that only the dangling-parent
    bridge can meet)."""
    if latest is None:
        return None
    after = list(takewhile(partial(is_not, latest), reversed(entries.values())))
    if not after:
        return latest
    below = {latest.uuid}
    subtree: list[Entry] = []
    for e in reversed(after):  # file order: a parent comes before its children
        if e.parentUuid in below and e.uuid not in below:
            below.add(e.uuid)
            subtree.append(e)
    # A candidate is a leaf when nothing under it is one (a progress line
    # hanging off it, or a sidechain, does not make it an inner node).
    reaching: set[str | None] = set()  # uuids with a candidate below them (a root's parent: None)
    leaves: list[Entry] = []
    for e in reversed(subtree):  # children before their parents
        if _is_candidate(e, sidechain_only):
            if e.uuid not in reaching:
                leaves.append(e)
            reaching.add(e.parentUuid)
        elif e.uuid in reaching:
            reaching.add(e.parentUuid)
    if not leaves:
        return latest
    return max(leaves, key=lambda e: (_instant(e.timestamp), e.index))


class _FileOrder:
    """Entries by file position, built only when a walk meets a dangling parent."""

    def __init__(self, entries: dict[str, Entry]) -> None:
        self.order = list(entries.values())
        self.positions = [e.index for e in self.order]
        self._timed: dict[bool | None, list[tuple[float, int, Entry]]] = {}

    def nearest_before(self, at: Entry, seen: set[str | None], sidechain_only: bool) -> Entry | None:
        """The nearest earlier entry of ``at``'s own session, else of any: a lost
        line of one session is not bridged into another's conversation written
        between (interleaved writers), but a conversation whose earlier part
        carries an older session id (an older resume's copy) still is."""
        own = session_of(at)
        other = None
        i = bisect_left(self.positions, at.index)
        while i > 0:
            i -= 1
            e = self.order[i]
            if e.uuid not in seen and (sidechain_only or not e.isSidechain):
                if own is None or session_of(e) in (None, own):
                    return e
                if other is None:
                    other = e
        return other

    def claude_link(self, at: Entry, seen: set[str | None]) -> Entry | None:
        """Claude Code's timestamp fallback: the entry of ``at``'s side with the
        latest time not after ``at``'s, not walked, at most CLAUDE_BRIDGE_MS
        older; of equal times the first in the file. None when there is none."""
        t = _instant(at.timestamp)
        if t == float("-inf"):
            return None
        side = at.isSidechain  # Claude Code groups by the value: an entry without the field is of neither side
        timed = self._timed.get(side)
        if timed is None:
            timed = sorted(
                ((ti, -e.index, e) for e in self.order
                 if e.isSidechain == side and e.type in TRANSCRIPT_TYPES
                 and not (e.type == "system" and e.subtype == "file_snapshot")
                 and (ti := _instant(e.timestamp)) != float("-inf")),
                key=lambda x: (x[0], x[1]))
            self._timed[side] = timed
        i = bisect_right(timed, (t, 0), key=lambda x: (x[0], x[1]))
        while i > 0:
            i -= 1
            ti, _, e = timed[i]
            if e.uuid in seen:
                continue
            return e if (t - ti) * 1000 <= CLAUDE_BRIDGE_MS else None
        return None


def walk(
    entries: dict[str, Entry], leaf: Entry | None, *, sidechain_only: bool = False, wide: bool = False
) -> tuple[list[Entry], list[Bridge], list[Bridge]]:
    """Chronological chain ending at ``leaf``, the bridges it took and the
    cuts where it started at an entry whose parent is missing (see the module
    docstring; ``wide``: join cuts too, a named repair)."""
    chain = _plain_walk(entries, leaf)
    if chain is not None:
        return chain, [], []
    return _guarded_walk(entries, leaf, sidechain_only, wide)


def _plain_walk(entries: dict[str, Entry], leaf: Entry | None) -> list[Entry] | None:
    """The walk when it meets neither a cycle nor a dangling parent (None otherwise),
    in C and without the cycle guard's set.

    The chain is extended while it is read: ``map`` over the growing list looks up
    the parent of each entry as it is appended, ``takewhile`` stops at the first
    parent the map lacks (a root's None or "", or a dangling uuid) and ``islice``
    after ``len(entries)`` parents, which only a cycle reaches: a walk that ends at
    a root within that many steps has visited no entry twice.
    """
    if leaf is None:
        return []
    chain = [leaf]
    parents = map(entries.get, map(_parent, chain))  # None at a root's parent or a dangling one
    chain.extend(islice(takewhile(_is_entry, parents), len(entries)))  # type: ignore[arg-type]  # Nones cut off
    if chain[-1].parentUuid:  # dangling, or a cycle
        return None
    chain.reverse()
    return chain


def _guarded_walk(
    entries: dict[str, Entry], leaf: Entry | None, sidechain_only: bool, wide: bool = False
) -> tuple[list[Entry], list[Bridge], list[Bridge]]:
    chain: list[Entry] = []
    bridges: list[Bridge] = []
    cuts: list[Bridge] = []
    seen: set[str | None] = set()
    order: _FileOrder | None = None
    cur = leaf
    while cur is not None and cur.uuid not in seen:
        seen.add(cur.uuid)
        chain.append(cur)
        parent = cur.parentUuid
        if not parent:
            break
        nxt = entries.get(parent)
        if nxt is None or nxt.uuid in seen:
            if order is None:
                order = _FileOrder(entries)
            missing = Bridge(at=cur.uuid, missingParent=parent)  # type: ignore[arg-type]  # a walked entry has one
            nxt = order.claude_link(cur, seen)
            if nxt is None and wide:
                nxt = order.nearest_before(cur, seen, sidechain_only)
                missing.repair = "wide"
            (bridges if nxt is not None else cuts).append(missing)
        cur = nxt
    chain.reverse()
    bridges.reverse()
    cuts.reverse()
    return chain, bridges, cuts


def _add_attachments(
    parent: Entry, attached: dict[str | None, list[Entry]], seen: set[str | None], found: dict[str | None, Entry]
) -> None:
    todo = [parent]
    while todo:
        for child in attached.get(todo.pop().uuid, ()):
            if child.uuid not in seen and child.uuid not in found:
                found[child.uuid] = child
                todo.append(child)


def recover_parallel_tool_results(
    entries: dict[str, Entry], chain: list[Entry], *, sidechain_only: bool = False
) -> list[Entry]:
    """``chain`` with the off-chain siblings and tool_results of its message.id groups."""
    if len(chain) == len(entries):
        return chain  # every entry is on the chain (its entries are distinct): nothing is off it
    last_on_chain: dict[str, Entry] = {}
    for e in chain:
        if e.type == "assistant":
            mid = e.msg_id
            if mid:
                last_on_chain[mid] = e
    if not last_on_chain:
        return chain
    seen = {e.uuid for e in chain}
    groups: dict[str, list[Entry]] = defaultdict(list)
    answers: dict[str | None, list[Entry]] = defaultdict(list)
    attached: dict[str | None, list[Entry]] = defaultdict(list)
    for e in entries.values():
        if e.isSidechain and not sidechain_only:
            continue
        if e.type == "assistant":
            mid = e.msg_id
            if mid in last_on_chain:
                groups[mid].append(e)
        elif e.type == "user" and e.uuid not in seen:
            if e.parentUuid:
                answers[e.parentUuid].append(e)
            src = e.sourceToolAssistantUUID
            if src and src != e.parentUuid:
                answers[src].append(e)
        elif e.type == "attachment" and e.parentUuid and e.uuid not in seen:
            attached[e.parentUuid].append(e)
    inserts: dict[str | None, list[Entry]] = {}
    for mid, anchor in last_on_chain.items():
        found: dict[str | None, Entry] = {}
        for member in groups[mid]:
            if member.uuid not in seen:
                found[member.uuid] = member
            for child in answers.get(member.uuid, ()):
                if child.uuid not in seen and child.uuid not in found and has_tool_result(child):
                    found[child.uuid] = child
                    _add_attachments(child, attached, seen, found)
        if found:
            seen.update(found)
            inserts[anchor.uuid] = sorted(found.values(), key=lambda x: x.index)
    if not inserts:
        return chain
    out: list[Entry] = []
    for e in chain:
        out.append(e)
        extra = inserts.get(e.uuid)
        if extra:
            out.extend(extra)
    return out
