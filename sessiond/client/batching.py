"""Fitting entries into the frames the daemon accepts.

The daemon refuses a frame over its cap (``max_frame_bytes``, announced in
``Welcome``) from its header alone and closes the connection. A client that sent
one anyway would see a dead connection, reconnect and resend the same frame
until it gave up. So the client sizes every request before sending it: a batch
over the cap is split across several requests (every entry that fits is
stored), and one entry that cannot fit in any frame is refused at once with
``EntryTooLarge`` naming its size and the cap; it never enters the resend buffer.
"""

from __future__ import annotations

from sessiond.wire.core import Append, Record
from sessiond.wire.errors import EntryTooLarge
from sessiond.wire.framing import encode

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: sessiond-hook imports this
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

ENTRY_OVERHEAD = 5
"""The most msgpack adds to an entry's bytes in a request (a bin 32 header)."""


def request_overhead(req: Append | Record) -> int:
    """Bytes of ``req``'s frame other than its entries (the request encoded empty,
    plus room for the largest id)."""
    empty: Append | Record
    if isinstance(req, Record):
        empty = Record(id=2**63 - 1, session=req.session, cwd=req.cwd, messages=[], parent=req.parent or "",
                       durability=req.durability, agent=req.agent, run=req.run, resend=True)
    else:
        empty = Append(id=2**63 - 1, session=req.session, cwd=req.cwd, entries=[], durability=req.durability,
                       agent=req.agent, run=req.run, resend=True)
    return len(encode(empty)) + 64  # a parent uuid set later, the list's own header


def check_entry(size: int, overhead: int, cap: int, what: str = "entry") -> None:
    if overhead + size + ENTRY_OVERHEAD > cap:
        raise EntryTooLarge(
            f"{what} of {size:,} bytes is over the daemon's frame cap of {cap:,} bytes "
            f"({cap - overhead - ENTRY_OVERHEAD:,} bytes at most for one entry); not sent"
        )


def pack(lines: Iterable[bytes], budget: int, max_entries: int | None = None) -> Iterator[list[bytes]]:
    """Consecutive runs of ``lines`` holding at most ``budget`` bytes of entries
    (their msgpack headers counted) and ``max_entries`` entries; a line that is
    alone over the budget is a run of its own (``check_entry`` refuses those)."""
    batch: list[bytes] = []
    used = 0
    for line in lines:
        cost = len(line) + ENTRY_OVERHEAD
        if batch and used + cost > budget:
            yield batch
            batch, used = [], 0
        batch.append(line)
        used += cost
        if len(batch) == max_entries:  # full: out now, not when the next line comes (streamed input)
            yield batch
            batch, used = [], 0
    if batch:
        yield batch


def split(lines: list[bytes], overhead: int, cap: int) -> list[list[bytes]]:
    """``lines`` in order, as batches whose frames fit under ``cap``. Raises
    ``EntryTooLarge`` (and splits nothing) when one entry cannot fit."""
    for line in lines:
        check_entry(len(line), overhead, cap)
    return list(pack(lines, cap - overhead)) or [[]]
