"""The append fast path (C-level passes over a plain batch) against the general
per-entry loop: any sequence of batches leaves the same files-to-be, dedup sets,
chain ends, metadata and answers. The Registry and Writer are the daemon's own,
on a loop that is never run: nothing is drained, the queues are compared."""

from __future__ import annotations

import asyncio
import uuid as uuidlib

import msgspec
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sessiond.config import Settings
from sessiond.daemon.filequeue import Stats
from sessiond.daemon.routing import Batch
from sessiond.daemon.sessions import Registry
from sessiond.daemon.writer import Writer
from sessiond.store.entries import decode_headers

POOL = [str(uuidlib.UUID(int=i)) for i in range(40)]  # small enough that batches collide


def entry(kind: str, uid: str | None, side: bool | str, boundary: bool) -> bytes:
    obj: dict = {"type": kind}
    if uid is not None:
        obj["uuid"] = uid
    if kind in ("user", "assistant"):
        obj["message"] = {"role": kind, "content": "x"}
    if kind == "system" and boundary:
        obj["subtype"] = "compact_boundary"
    if kind == "custom-title":
        obj["customTitle"] = "t"
    if side:
        obj["isSidechain"] = True
        if side == "agent":
            obj["agentId"] = "a1"  # routed to the agent's file; else kept inline in the main one
    return msgspec.json.encode(obj)


entries = st.builds(
    entry,
    st.sampled_from(["user", "assistant", "system", "attachment"] * 3 + ["custom-title", "summary"]),
    st.sampled_from([None, *POOL]),
    st.sampled_from([False] * 6 + [True, "agent"]),  # a sidechain now and then, inline or an agent's
    st.booleans(),
)
batches = st.lists(st.one_of(st.lists(entries, min_size=0, max_size=6), st.none()), min_size=1, max_size=8)
"""None: the last client leaves (the metadata re-append, which resets what it tracks)."""


def run(batches: list[list[bytes]], fast: bool, root, sid: str) -> tuple:
    loop = asyncio.new_event_loop()
    cfg = Settings(root=root)
    writer = Writer(loop, cfg, Stats())
    try:
        registry = Registry(cfg, writer)
        registry.routing.fast_path = fast
        state = registry.get(sid, "/work/p")
        answers = []
        for lines in batches:
            if lines is None:
                registry.exit_cleanup(state)
                continue
            batch = Batch(state, decode_headers(lines), lines)
            assert not registry.routing.when_agents_ready(batch, lambda: None)  # the handlers' order
            r = registry.routing.accept(batch)
            answers.append((r.accepted, r.duplicates, sorted(str(q.path.name) for q in r.queues)))
        files = {str(p.name): list(q.lines) for p, q in writer.queues.items()}
        targets = {str(p.name): (sorted(t.uuids), t.last) for p, t in state.agents.items()}
        return (answers, files, targets, sorted(state.main.uuids), state.main.last, dict(state.metadata),
                state.dirty_since_meta, state.materialized, list(state.pending), sorted(state.side_uuids))
    finally:
        writer.close()
        loop.close()


def plain(kind: str, i: int) -> bytes:
    return entry(kind, POOL[i], False, False)


@settings(max_examples=150, deadline=None)
@given(batches)
@example([[plain("user", 0)], [plain("assistant", 1), plain("assistant", 1)]])  # a uuid twice in one batch
@example([[plain("user", 0)], None, [plain("assistant", 1)]])  # a batch after the re-append
def test_fast_path_matches_the_general_loop(tmp_path_factory, batches):
    root = tmp_path_factory.mktemp("root")
    sid = str(uuidlib.uuid4())
    slow = run(batches, False, root / "slow", sid)
    fast = run(batches, True, root / "fast", sid)
    assert fast == slow


def test_a_plain_batch_takes_the_fast_path(tmp_path):
    """Guard that the equivalence above is not vacuous: plain batches of a
    started session do go the fast way (the general loop is never entered)."""
    loop = asyncio.new_event_loop()
    cfg = Settings(root=tmp_path)
    writer = Writer(loop, cfg, Stats())
    try:
        registry = Registry(cfg, writer)
        state = registry.get(str(uuidlib.uuid4()), "/work/p")
        first = [entry("user", POOL[0], False, False)]
        registry.routing.accept(Batch(state, decode_headers(first), first))  # materializes: general path
        registry.routing._accept = None  # type: ignore[assignment]  # any fall-back would now fail
        plain = [entry("assistant", POOL[1], False, False), entry("system", POOL[2], False, False)]
        r = registry.routing.accept(Batch(state, decode_headers(plain), plain))
        assert r.accepted == 2 and state.main.last == POOL[2]
    finally:
        writer.close()
        loop.close()
