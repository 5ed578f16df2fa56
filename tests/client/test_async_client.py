"""The async client is as safe as the blocking one, against real daemons:
SIGKILL mid-stream and restart, autostart, and the direct-append fallback."""

from __future__ import annotations

import json
import uuid
from collections import Counter

import anyio
import pytest

from sessiond.client import AsyncClient
from sessiond.store.locations import LOG_NAME
from sessiond.wire.errors import DaemonUnavailable
from tests.helpers import api_request_lines, assistant, main_path, read_entries, user

CWD = "/work/project"

pytestmark = pytest.mark.anyio


def uuids_on_disk(d, sid: str) -> Counter[str]:
    return Counter(e["uuid"] for e in read_entries(main_path(d.root, CWD, sid)))


@pytest.mark.parametrize("end", ["kill", "stop"])
async def test_sigkill_mid_stream_and_restart_leave_every_entry_exactly_once(daemon_factory, end):
    """Tasks stream entries at every durability into three sessions while the
    daemon is SIGKILLed (entries it held queued die with it), or stopped (it
    answers ``shutting_down`` while it drains), and restarted: every entry
    whose append returned is on disk exactly once."""
    d = daemon_factory("--flush-interval", "300").start()  # queued entries wait in memory: a kill loses them
    sids = [str(uuid.uuid4()) for _ in range(3)]
    acked: dict[str, list[str]] = {sid: [] for sid in sids}
    levels = ("queued", "queued", "written", "queued", "durable")
    kills = 0
    async with AsyncClient(d.socket, root=d.root, autostart=False, timeout=10, reconnect_timeout=60) as c:
        async def stream(sid: str) -> None:
            for i in range(150):
                e = user(f"{sid[:4]}-{i}")
                await c.append(sid, CWD, [e], durability=levels[i % len(levels)])
                acked[sid].append(e["uuid"])

        async def killer() -> None:
            nonlocal kills
            for _ in range(2):
                while sum(map(len, acked.values())) < 120 * (kills + 1):
                    await anyio.sleep(0.01)
                await anyio.to_thread.run_sync(d.kill if end == "kill" else d.stop)
                kills += 1
                await anyio.sleep(0.3)  # appends wait, reconnecting, meanwhile
                await anyio.to_thread.run_sync(d.start)

        async with anyio.create_task_group() as tg:
            for sid in sids:
                tg.start_soon(stream, sid)
            tg.start_soon(killer)
        for sid in sids:
            assert await c.close_session(sid) is None  # through the daemon: no fallback
    assert kills == 2
    for sid in sids:
        on_disk = uuids_on_disk(d, sid)
        assert len(acked[sid]) == 150
        assert {u: on_disk[u] for u in acked[sid]} == dict.fromkeys(acked[sid], 1)
        assert sum(on_disk.values()) == 150


async def test_a_killed_daemons_queued_entries_are_written_at_exit_without_a_daemon(daemon_factory):
    d = daemon_factory("--flush-interval", "60000").start()
    sid = str(uuid.uuid4())
    entries = [user("one"), assistant("two"), user("three")]
    async with AsyncClient(d.socket, root=d.root, autostart=False, reconnect_timeout=0.5) as c:
        r = await c.append(sid, CWD, entries)  # queued: only in the daemon's memory
        assert r.accepted == 3
        d.kill()
        assert not main_path(d.root, CWD, sid).exists()
    assert read_entries(main_path(d.root, CWD, sid)) == entries  # the exit wrote them directly, once


async def test_with_no_daemon_append_writes_the_files_directly(short_tmp):
    root, sock = short_tmp / "root", short_tmp / "run" / "s.sock"
    (short_tmp / "run").mkdir(mode=0o700)
    sid = str(uuid.uuid4())
    title = {"type": "custom-title", "customTitle": "offline", "sessionId": sid}
    side = {**assistant("sub"), "isSidechain": True, "agentId": "ag1"}
    first = [title, user("hello"), side]
    async with AsyncClient(sock, root=root, autostart=False, reconnect_timeout=0.3) as c:
        r = await c.append(sid, CWD, first, durability="written")
        assert (r.accepted, r.duplicates) == (3, 0)
        again = await c.append(sid, CWD, [first[1], assistant("next")])  # a retried entry is not written twice
        assert (again.accepted, again.duplicates) == (1, 1)
        assert await c.close_session(sid) is not None  # the fallback's result: the daemon is gone
        with pytest.raises(DaemonUnavailable):
            await c.status()
    path = main_path(root, CWD, sid)
    assert [e.get("message", {}).get("content") for e in read_entries(path)][:2] == [None, "hello"]
    assert len(read_entries(path)) == 3
    assert read_entries(path.with_suffix("") / "subagents" / "agent-ag1.jsonl") == [side]
    assert not sock.exists()


async def test_when_no_daemon_can_run_an_autostarting_client_writes_the_files_directly(daemon_factory, monkeypatch):
    """Autostart on, and every daemon it starts exits at once (its configuration
    is refused): the appends and the close are written directly all the same,
    and the daemon that can run later dedups against them."""
    d = daemon_factory()  # not started: its root and socket only
    monkeypatch.setenv("SESSIOND_FLUSH_INTERVAL_MS", "never")  # a daemon started from here exits 2 on it
    sid = str(uuid.uuid4())
    entries = [user("hello"), assistant("offline")]
    async with AsyncClient(d.socket, root=d.root, timeout=20, reconnect_timeout=0.3) as c:
        assert c.autostart
        r = await c.append(sid, CWD, entries, durability="written")
        assert (r.accepted, r.duplicates) == (2, 0)
        assert await c.close_session(sid) is not None  # the fallback's result
    assert "SESSIOND_FLUSH_INTERVAL_MS" in (d.socket.parent / LOG_NAME).read_text()  # a daemon was started, and refused
    assert not d.socket.exists()
    assert read_entries(main_path(d.root, CWD, sid)) == entries
    monkeypatch.delenv("SESSIOND_FLUSH_INTERVAL_MS")
    d.start()
    later = user("online")
    async with AsyncClient(d.socket, root=d.root, autostart=False) as c:
        r = await c.append(sid, CWD, [*entries, later], durability="written")
        assert (r.accepted, r.duplicates) == (1, 2)
    assert read_entries(main_path(d.root, CWD, sid)) == [*entries, later]


async def test_the_async_client_autostarts_a_daemon_and_again_after_a_kill(daemon_factory):
    d = daemon_factory()  # not started: the client starts it
    sid = str(uuid.uuid4())
    first, second = user("first"), assistant("second")
    async with AsyncClient(d.socket, root=d.root, timeout=20) as c:
        assert c.daemon_pid
        await c.append(sid, CWD, [first])  # queued
        pid = (await c.status()).pid
        import os
        import signal

        os.kill(pid, signal.SIGKILL)  # started by the client: not ours to wait for
        await c.append(sid, CWD, [second], durability="written")  # a new daemon, started again; first resent
        assert (await c.status()).pid != pid
        await c.close_session(sid)
    assert d.cli("stop").returncode == 0
    assert [e["uuid"] for e in read_entries(main_path(d.root, CWD, sid))] == [first["uuid"], second["uuid"]]


async def test_the_public_api_keeps_its_names_and_answers(daemon):
    """What the Agent SDK adapter builds on: ``call``/``next_id`` for any
    request, ``append`` with the Append fields as keywords, ``flush``."""
    from sessiond.wire import messages as m

    sid = str(uuid.uuid4())
    async with AsyncClient(daemon.socket, root=daemon.root, autostart=False) as c:
        r = await c.append(sid, CWD, [json.dumps(user("raw")).encode()], durability="durable", lease=True)
        assert isinstance(r, m.Appended) and r.accepted == 1
        assert isinstance(await c.flush(sid, durable=True), m.Flushed)
        assert isinstance(await c.flush(), m.Flushed)
        listed = await c.call(m.List(id=c.next_id(), all=True))
        assert sid in [s.sessionId for s in listed.sessions]
        await c.close_session(sid)


async def test_what_the_client_keeps_for_resending_is_bounded_across_sessions(daemon_factory):
    d = daemon_factory("--flush-interval", "60000").start()  # nothing is written unless asked: all stays queued
    sids = [str(uuid.uuid4()) for _ in range(20)]
    async with AsyncClient(d.socket, root=d.root, autostart=False) as c:
        c.max_unconfirmed = 50_000
        for i in range(10):
            for sid in sids:
                await c.append(sid, CWD, [user(f"{i} " + "x" * 1000)])
                assert c.unconfirmed_bytes <= 50_000
        assert c.unconfirmed_bytes > 30_000  # it flushed only what it had to
    for sid in sids:
        assert len(read_entries(main_path(d.root, CWD, sid))) == 10


async def test_a_batch_lost_queued_keeps_its_lines_that_repeat_an_earlier_requests(daemon_factory):
    """What Claude Code writes at each API request, as the Agent SDK's store
    sends it: a ``last-prompt`` naming the newest entry, then ``atis-latch`` and
    ``api-request-route``, the same bytes every time. The second request's batch
    is held queued when the daemon is SIGKILLed; the client resends it to the
    next daemon, which keeps all three (the two repeated lines come after a
    line the file lacks, so the lost daemon cannot have written them)."""
    d = daemon_factory("--flush-interval", "60000").start()
    sid = str(uuid.uuid4())

    first, second = user("first"), assistant("second")
    async with AsyncClient(d.socket, root=d.root, autostart=False, timeout=10) as c:
        await c.append(sid, CWD, [first, *api_request_lines(sid, first["uuid"])], durability="written")
        await c.append(sid, CWD, [second], durability="written")
        held = await c.append(sid, CWD, api_request_lines(sid, second["uuid"]))  # queued: in the daemon's memory only
        assert held.accepted == 3
        await anyio.to_thread.run_sync(d.kill)
        await anyio.to_thread.run_sync(d.start)
        await c.flush(sid)  # reconnects, resends what the killed daemon held, then has it written
    kinds = Counter(e["type"] for e in read_entries(main_path(d.root, CWD, sid)))
    assert kinds == {"user": 1, "assistant": 1, "last-prompt": 2, "atis-latch": 2, "api-request-route": 2}, kinds
