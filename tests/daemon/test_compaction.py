"""The pure-Python dedup sets are packed in the background once a session goes
quiet, and dedup works the same before and after (a real daemon, real appends);
the compiled sets the daemon uses when built have nothing to pack. Tests of
packing run the daemon with ``SESSIOND_UUIDSET=python``."""

from __future__ import annotations

import uuid

import pytest

from sessiond.wire import messages as m
from tests.daemon.test_uuidset import CompiledUuidSet, compiled
from tests.helpers import line, main_path, read_entries, user, wait_until

CWD = "/work/compact"


@pytest.fixture
def python_sets(monkeypatch):
    """Daemons started in this test make the pure-Python dedup set."""
    monkeypatch.setenv("SESSIOND_UUIDSET", "python")


@pytest.fixture(params=["python", pytest.param("compiled", marks=compiled)])
def either_sets(request, monkeypatch):
    """The test runs with each dedup set the daemon can make."""
    if request.param == "python":
        monkeypatch.setenv("SESSIOND_UUIDSET", "python")
    else:
        monkeypatch.delenv("SESSIOND_UUIDSET", raising=False)
    return request.param


def test_a_quiet_sessions_uuids_are_packed_and_still_deduplicated(daemon_factory, short_tmp, python_sets):
    cfg = short_tmp / "c.toml"
    cfg.write_text("idle_evict_s = 2\n")  # sweeps every second
    d = daemon_factory("--config", str(cfg)).start()
    sid = str(uuid.uuid4())
    entries = [line(user(f"m{i}")) for i in range(600)]
    legacy = line({"type": "user", "uuid": "MSG-Not-A-Uuid", "message": {"role": "user", "content": "old"}})
    with d.client() as c:
        def append(lines):
            return c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=lines, durability="written"))

        for i in range(0, 600, 50):
            assert append(entries[i:i + 50]).accepted == 50
        assert append([legacy]).accepted == 1
        assert c.status().memory["uuidsUnpacked"] == 601

        def packed() -> bool:
            mem = c.status().memory
            return mem["uuids"] == 601 and mem["uuidsUnpacked"] == 1 and mem["packedUuidBytes"] > 0
        wait_until(packed, "the quiet session's uuids to be packed", timeout=30)
        again = append([*entries[::7], legacy])
        assert (again.accepted, again.duplicates) == (0, len(entries[::7]) + 1)
        fresh = append([line(user("new"))])
        assert (fresh.accepted, fresh.duplicates) == (1, 0)
        assert c.status().memory["uuids"] == 602
    assert len(read_entries(main_path(d.root, CWD, sid))) == 602


def _append(c, sid, lines):
    return c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=lines, durability="written"))


def test_a_busy_sessions_uuids_are_packed_while_it_is_still_written(python_sets, daemon):
    """A session that never goes quiet (an agent recording all afternoon) is
    packed in steps once its unpacked uuids pass ``HOT_MIN``: its strings do not
    pile up in the heap until it stops."""
    sid = str(uuid.uuid4())
    entries = [line(user(f"m{i}")) for i in range(2500)]
    with daemon.client() as c:
        for i in range(0, len(entries), 100):
            assert _append(c, sid, entries[i:i + 100]).accepted == 100

        def packed_while_busy() -> bool:
            assert _append(c, sid, [line(user("still busy"))]).accepted == 1  # the session is never quiet
            mem = c.status().memory
            return mem["uuidsUnpacked"] < 1024 and mem["packedUuidBytes"] > 0
        wait_until(packed_while_busy, "a busy session's uuids to be packed", timeout=30, every=0.2)
        again = _append(c, sid, entries[::5])
        assert (again.accepted, again.duplicates) == (0, len(entries[::5]))


def test_packed_uuids_take_little_memory(daemon_factory, short_tmp, either_sets):
    """``memory.packedUuidBytes`` is what the packed sets (the compiled sets'
    tables) take as allocated (objects and spare capacity too): a bound on it
    per uuid held."""
    cfg = short_tmp / "c.toml"
    # The sweep that packs quiet sets runs every half of idle_evict (10 s at
    # most); the sessions stay attached to the client, so none is evicted.
    cfg.write_text("idle_evict_s = 2\n")
    d = daemon_factory("--config", str(cfg)).start()
    sids = [str(uuid.uuid4()) for _ in range(4)]
    with d.client() as c:
        for sid in sids:
            lines = [line(user(f"m{i}")) for i in range(5000)]
            answers = c.pipeline(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=lines[i:i + 250])
                                 for i in range(0, len(lines), 250))
            assert sum(a.accepted for a in answers) == 5000

        def all_packed() -> bool:
            mem = c.status().memory
            return mem["uuids"] == 20_000 and mem["uuidsUnpacked"] == 0
        wait_until(all_packed, "every set to be packed", timeout=60, every=0.2)
        mem = c.status().memory
        assert mem["packedUuidBytes"] / mem["uuids"] <= 36  # 24 of record, ~3 of filter, spare capacity
        # nothing waits; nothing was packed on the loop (compiled sets: nothing packs)
        assert (mem.get("packingBacklog", 0), mem.get("packedInline", 0)) == (0, 0)
        assert ("packingBacklog" in mem) == (either_sets == "python")


def test_dedup_is_exact_after_packing_eviction_and_reload(daemon_factory, short_tmp, either_sets):
    cfg = short_tmp / "c.toml"
    cfg.write_text("idle_evict_s = 1\n")  # sweeps every half second
    d = daemon_factory("--config", str(cfg)).start()
    sid = str(uuid.uuid4())
    entries = [line(user(f"m{i}")) for i in range(3000)]
    with d.client() as c:
        for i in range(0, len(entries), 250):
            assert _append(c, sid, entries[i:i + 250]).accepted == 250
        wait_until(lambda: c.status().memory["uuidsUnpacked"] == 0, "the session to be packed", timeout=30, every=0.2)
        packed = _append(c, sid, entries[1::3])
        assert (packed.accepted, packed.duplicates) == (0, 1000)
        c.call(m.Close(id=c.next_id(), session=sid))
        wait_until(lambda: not c.status().sessions, "the session to be evicted", timeout=30, every=0.2)
        assert c.status().memory["uuids"] == 0
        new = line(user("after eviction"))
        reloaded = _append(c, sid, [*entries, new])  # the file is scanned again
        assert (reloaded.accepted, reloaded.duplicates) == (1, 3000)
    lines = [e for e in read_entries(main_path(d.root, CWD, sid)) if e.get("type") == "user"]
    assert len(lines) == 3001 and len({e["uuid"] for e in lines}) == 3001


@compiled
def test_a_compiled_set_holds_its_uuids_at_once_and_starts_no_packing(daemon_factory, short_tmp, monkeypatch):
    """With the compiled set (what the daemon makes when it was built) a uuid
    is in the table as soon as its append is accepted: only the strings that
    are no canonical uuid count as unpacked, no packing job ever starts, and
    the log says which set runs."""
    monkeypatch.delenv("SESSIOND_UUIDSET", raising=False)
    assert CompiledUuidSet is not None
    d = daemon_factory().start()
    sid = str(uuid.uuid4())
    entries = [line(user(f"m{i}")) for i in range(2000)]
    legacy = line({"type": "user", "uuid": "MSG-Not-A-Uuid", "message": {"role": "user", "content": "old"}})
    with d.client() as c:
        for i in range(0, len(entries), 100):
            assert _append(c, sid, entries[i:i + 100]).accepted == 100
        assert _append(c, sid, [legacy]).accepted == 1
        mem = c.status().memory
        assert (mem["uuids"], mem["uuidsUnpacked"]) == (2001, 1)
        assert 2000 * 16 <= mem["packedUuidBytes"] <= 2000 * 43
        assert "packingBacklog" not in mem  # no compactor: nothing to pack
        again = _append(c, sid, [*entries[::3], legacy])
        assert (again.accepted, again.duplicates) == (0, len(entries[::3]) + 1)
    assert "dedup sets compiled" in d.log.read_text()


def test_a_busy_set_is_packed_on_the_spot_when_packing_falls_behind():
    """Uuids waiting in packing jobs are bounded (``BACKLOG_MAX``): past it a
    busy set is packed at once instead of queueing its strings, and the sets
    queued before are packed once the pool is free; dedup is exact for all."""
    import asyncio
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from sessiond.daemon import compaction
    from sessiond.daemon.uuidset import UuidSet
    from sessiond.daemon.workers import BACKGROUND, FairShare

    loop = asyncio.new_event_loop()
    pool = ThreadPoolExecutor(1)
    gate = threading.Event()
    try:
        fair = FairShare(loop, pool, 1, 1, 8, 1024)
        fair.submit(gate.wait, 30, owner=BACKGROUND)  # the pool is busy: jobs only queue
        packer = compaction.Compactor(fair)
        per_set = compaction.HOT_MIN + 100
        queued = -(-compaction.BACKLOG_MAX // per_set)  # jobs until the backlog is full
        sets = [UuidSet() for _ in range(queued + 3)]
        held = []
        for s in sets:
            ids = {str(uuid.uuid4()) for _ in range(per_set)}
            held.append(ids)
            s.add_new(ids)
            packer.hot(s)
        assert packer.backlog <= compaction.BACKLOG_MAX + per_set
        assert packer.inline == 3 and all(s.packed == per_set and not s.recent for s in sets[-3:])
        gate.set()

        async def drained() -> None:
            while packer.jobs:
                await asyncio.sleep(0.01)
        loop.run_until_complete(asyncio.wait_for(drained(), 60))
        assert packer.backlog == 0
        for s, ids in zip(sets, held):
            assert s.packed == per_set and not s.recent
            assert all(u in s for u in ids) and s.isdisjoint({str(uuid.uuid4()) for _ in range(50)})
    finally:
        gate.set()
        pool.shutdown(wait=True)
        loop.close()
