"""What ``SessiondSessionStore`` and the requests it uses promise, each on a
real daemon: ``Append.exact`` and ``Append.project``, the dedup of a retried
batch, ``List.every``, ``Trash.agent``, and the key mapping."""

from __future__ import annotations

import json
import signal
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from sessiond.client.agentsdk import SessiondSessionStore, store_file_id, store_session_id
from sessiond.store import trash
from sessiond.wire import messages as m
from sessiond.wire.errors import DaemonUnavailable, RemoteError
from tests.conftest import DaemonProc

PROJECT = "-home-me-project"


def _line(entry: dict[str, Any]) -> bytes:
    return json.dumps(entry, separators=(",", ":")).encode()


def _store(daemon: DaemonProc) -> SessiondSessionStore:
    return SessiondSessionStore(socket=daemon.socket, root=daemon.root, autostart=False)


def _main(daemon: DaemonProc, sid: str, project: str = PROJECT) -> Path:
    return daemon.root / "projects" / project / f"{sid}.jsonl"


def _append(daemon: DaemonProc, sid: str, entries: list[dict[str, Any]], **kw: Any) -> m.Response:
    kw.setdefault("project", PROJECT)
    with daemon.client() as c:
        resp = c.call(m.Append(id=c.next_id(), session=sid, cwd="/", entries=[_line(e) for e in entries],
                               durability="written", **kw))
        c.call(m.Close(id=c.next_id(), session=sid))  # the last client leaves: the exit cleanup has run
    return resp


def test_file_ids_round_trip() -> None:
    sid = str(uuid.uuid4())
    assert store_file_id(PROJECT, sid.upper()) == sid  # Claude Code's ids are their file names
    assert store_session_id(PROJECT, sid) == sid
    for short in ("a", "sess", "never-appended", "Z_9-xxxxxxxxxxx"):
        fid = store_file_id(PROJECT, short)
        assert uuid.UUID(fid).version == 8 and store_session_id(PROJECT, fid) == short
        assert store_file_id("other", short) != fid  # one short id in two projects: two sessions
        assert store_session_id("other", fid) == fid  # not this project's: shown as it is
    for bad in ("x" * 16, "a/b", "", "é"):
        with pytest.raises(ValueError):
            store_file_id(PROJECT, bad)


def test_exact_writes_at_once_and_adds_nothing(daemon: DaemonProc) -> None:
    """A mirror's entries are never held for a first message, and the exit
    cleanup re-appends no metadata: the file is the batch, line for line."""
    entries = [{"type": "custom-title", "customTitle": "t"}, {"type": "user", "uuid": "u1", "message": {}},
               {"type": "last-prompt", "lastPrompt": "p"}, {"type": "assistant", "uuid": "a1", "message": {}}]
    exact = str(uuid.uuid4())
    held = _append(daemon, exact, entries[:1], exact=True)
    assert isinstance(held, m.Appended) and held.pending == 0 and _main(daemon, exact).read_bytes() == _line(entries[0]) + b"\n"
    _append(daemon, exact, entries[1:], exact=True)
    assert _main(daemon, exact).read_bytes() == b"".join(_line(e) + b"\n" for e in entries)

    plain = str(uuid.uuid4())  # the same without exact: the title held, and dropped as its client left
    assert _append(daemon, plain, entries[:1]).pending == 1  # type: ignore[union-attr]
    _append(daemon, plain, entries[1:])  # then the last prompt re-appended at exit
    assert _main(daemon, plain).read_bytes() == b"".join(_line(e) + b"\n" for e in [*entries[1:], entries[2]])


def test_exact_keeps_a_sidechain_entry_in_the_file_it_names(daemon: DaemonProc) -> None:
    sid = str(uuid.uuid4())
    entry = {"type": "user", "uuid": "s1", "isSidechain": True, "agentId": "a1", "message": {}}
    _append(daemon, sid, [entry], exact=True)
    assert _main(daemon, sid).read_bytes() == _line(entry) + b"\n"
    assert not (_main(daemon, sid).parent / sid).exists()


def test_project_names_the_dir(daemon: DaemonProc) -> None:
    sid = str(uuid.uuid4())
    _append(daemon, sid, [{"type": "x"}], exact=True, project="A")
    assert _main(daemon, sid, "A").is_file()
    with pytest.raises(RemoteError) as err:
        _append(daemon, sid, [{"type": "x"}], exact=True, project="B")  # a session lives in one project dir
    assert err.value.code == "bad_request"
    for bad in ("..", "a/b", ".trash", ""):
        with pytest.raises(RemoteError) as err:
            _append(daemon, str(uuid.uuid4()), [{"type": "x"}], exact=True, project=bad)
        assert err.value.code == "bad_request"
    assert sorted(p.name for p in (daemon.root / "projects").iterdir()) == ["A"]


def test_a_retried_batch_is_written_once_and_entries_without_uuid_each_time(daemon: DaemonProc) -> None:
    store = _store(daemon)
    key = {"project_key": PROJECT, "session_id": str(uuid.uuid4())}
    batch = [{"type": "user", "uuid": "u1", "n": 1}, {"type": "tag", "tag": "x"}]

    async def go() -> list[Any] | None:
        await store.append(key, batch)
        await store.append(key, batch)  # the SDK's retry of a batch whose answer it lost
        return await store.load(key)

    assert anyio.run(go) == [batch[0], batch[1], batch[1]]


def test_what_json_round_trips_is_stored_and_loaded_back_equal(daemon: DaemonProc) -> None:
    """The SDK's one promise of a store: what ``json.dumps``/``json.loads``
    round-trips comes back equal. A lone surrogate (``json.loads`` of a string
    JSON.stringify cut inside an emoji) and an integer past 64 bits are such
    values; a line Claude Code wrote that way loads too, and one damaged line
    does not make the session unloadable."""
    store = _store(daemon)
    sid = str(uuid.uuid4())
    key = {"project_key": PROJECT, "session_id": sid}
    odd = {"type": "assistant", "uuid": "a1", "message": {"content": "cut \ud83d", "n": 2**70, "ok": "\u2028é"}}
    odd = json.loads(json.dumps(odd).replace("\\\\u", "\\u"))  # the escapes as JSON.stringify writes them
    assert odd["message"]["content"] == "cut \ud83d"
    plain = {"type": "user", "uuid": "u1", "message": {"content": "hi"}}

    async def go() -> list[Any] | None:
        await store.append(key, [plain, odd])
        return await store.load(key)

    assert anyio.run(go) == [plain, odd]
    raw = _main(daemon, sid).read_bytes().splitlines()[1]
    assert b"\\ud83d" in raw and json.loads(raw) == odd  # on disk as JSON.stringify writes it
    with _main(daemon, sid).open("ab") as f:  # a line with bytes that are not UTF-8, then a torn one
        f.write(b'{"type":"user","uuid":"u2","message":{"content":"caf\xe9"}}\n{"type":"us')

    async def load() -> list[Any] | None:
        return await store.load(key)

    loaded = anyio.run(load)
    assert loaded is not None and loaded[:2] == [plain, odd] and len(loaded) == 3
    assert loaded[2]["message"]["content"] == "caf\ufffd"  # as Claude Code's reader decodes it


def test_list_every_includes_metadata_only_sessions(daemon: DaemonProc) -> None:
    plain, meta = str(uuid.uuid4()), str(uuid.uuid4())
    _append(daemon, plain, [{"type": "user", "uuid": "u", "message": {"role": "user", "content": "hi"}}], exact=True)
    _append(daemon, meta, [{"type": "custom-title", "customTitle": "only a title"}], exact=True)
    d = str(daemon.root / "projects" / PROJECT)
    with daemon.client() as c:
        listed = c.call(m.List(id=c.next_id(), dirs=[d]))
        every = c.call(m.List(id=c.next_id(), dirs=[d], every=True))
    assert [s.sessionId for s in listed.sessions] == [plain]  # type: ignore[union-attr]
    assert sorted(s.sessionId for s in every.sessions) == sorted([plain, meta])  # type: ignore[union-attr]


def test_summaries_follow_writes(daemon: DaemonProc) -> None:
    store = _store(daemon)
    key = {"project_key": PROJECT, "session_id": str(uuid.uuid4())}

    async def go() -> tuple[list[Any], list[Any]]:
        await store.append(key, [{"type": "user", "uuid": "u", "timestamp": "2026-01-01T00:00:00.000Z",
                                  "message": {"role": "user", "content": "fix the parser"}}])
        first = await store.list_session_summaries(PROJECT)
        await store.append(key, [{"type": "custom-title", "customTitle": "Parser", "sessionId": key["session_id"]}])
        return first, await store.list_session_summaries(PROJECT)

    first, second = anyio.run(go)
    assert first[0]["data"]["first_prompt"] == "fix the parser" and "custom_title" not in first[0]["data"]
    assert second[0]["data"]["custom_title"] == "Parser" and second[0]["mtime"] >= first[0]["mtime"]


def test_delete_moves_into_the_trash_and_restore_brings_back(daemon: DaemonProc) -> None:
    store = _store(daemon)
    key = {"project_key": PROJECT, "session_id": str(uuid.uuid4())}
    sub = {**key, "subpath": "subagents/agent-a1"}
    agent = str(uuid.uuid4())  # an agent id that is a UUID: its trash entry's name ends like a session's
    other = {**key, "subpath": f"subagents/workflows/r1/agent-{agent}"}

    async def fill() -> None:
        await store.append(key, [{"type": "x", "n": 1}])
        await store.append(sub, [{"type": "x", "n": 2}])
        await store.append(other, [{"type": "x", "n": 3}])
        assert await store.list_subkeys(key) == ["subagents/agent-a1", other["subpath"]]
        await store.delete(other)

    anyio.run(fill)
    assert anyio.run(store.load, other) is None and anyio.run(store.load, sub) == [{"type": "x", "n": 2}]
    assert trash.trashed_ids(daemon.root) == set()  # one agent file: no session is in the trash
    daemon.cli("restore", key["session_id"], timeout=30)
    assert anyio.run(store.load, other) == [{"type": "x", "n": 3}]

    anyio.run(store.delete, key)
    assert anyio.run(store.load, key) is None and anyio.run(store.load, sub) is None
    assert key["session_id"] in trash.trashed_ids(daemon.root)
    entries = json.loads(daemon.cli("trash", "--json", timeout=30).stdout)
    assert [e["session"] for e in entries] == [key["session_id"]]  # the agent entry went back out
    daemon.cli("restore", key["session_id"], timeout=30)
    assert anyio.run(store.load, key) == [{"type": "x", "n": 1}]


def test_no_key_reads_outside_the_store(daemon: DaemonProc, tmp_path: Path) -> None:
    store = _store(daemon)
    sid = str(uuid.uuid4())
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / f"{sid}.jsonl").write_text('{"type":"secret"}\n')
    (daemon.root / "projects").mkdir(parents=True, exist_ok=True)
    (daemon.root / "projects" / "linked").symlink_to(outside)
    escape = f"..-..-{outside}".replace("/", "-")
    assert anyio.run(store.load, {"project_key": "../../" + str(outside), "session_id": sid}) is None
    assert anyio.run(store.load, {"project_key": escape, "session_id": sid}) is None
    with pytest.raises(ValueError):
        anyio.run(store.append, {"project_key": "../x", "session_id": sid}, [{"type": "x"}])
    with pytest.raises(OSError):  # a project dir linked out of the root is refused, not read
        anyio.run(store.load, {"project_key": "linked", "session_id": sid})


def test_an_append_made_while_the_daemon_is_down_is_written_whole(daemon: DaemonProc) -> None:
    """Claude Code writes some entries without a uuid again and again, byte
    for byte (one ``api-request-route`` per API request). An append that found
    no daemon was never sent: once one is back it is a first send, so an
    identical line already in the file does not make it a duplicate."""
    store, sid = _store(daemon), str(uuid.uuid4())
    key = {"project_key": PROJECT, "session_id": sid}
    again = {"type": "api-request-route", "provider": "customEndpoint", "sessionId": sid}
    anyio.run(store.append, key, [again])
    daemon.signal(signal.SIGKILL)
    daemon.wait()

    async def while_down() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(store.append, key, [again, {"type": "user", "uuid": str(uuid.uuid4())}])
            await anyio.sleep(0.3)  # the append is retrying: no daemon to take it
            await anyio.to_thread.run_sync(daemon.start)

    anyio.run(while_down)
    assert [e["type"] for e in anyio.run(store.load, key)] == ["api-request-route", "api-request-route", "user"]
def _clients(observer: Any) -> int:
    """Connections the daemon holds, ``observer``'s own among them. Asked
    twice: a connection a client closed before the first question is gone
    from the daemon's count by the second answer."""
    observer.status()
    return observer.status().clients


def test_one_connection_for_every_call_and_a_new_one_after_a_restart(daemon: DaemonProc) -> None:
    """The store keeps its connection between calls (every method on one),
    and after the daemon is stopped and started again its next calls go on a
    new one; nothing is lost or doubled, and an entry without uuid sent after
    the restart is not taken for a resend of the same line before it."""
    store = _store(daemon)
    sid = str(uuid.uuid4())
    key = {"project_key": PROJECT, "session_id": sid}
    mode = {"type": "permission-mode", "permissionMode": "default", "sessionId": sid}  # no uuid: repeats each turn
    counts: list[int] = []
    observers = [daemon.client()]

    def restart() -> None:
        observers[0].close()
        daemon.stop()
        daemon.start()
        observers[0] = daemon.client()

    async def go() -> list[Any] | None:
        for i in range(3):
            await store.append(key, [{"type": "user", "uuid": f"u{i}", "n": i}])
            await store.load(key)
            await store.list_sessions(PROJECT)
            await store.list_session_summaries(PROJECT)
            await store.list_subkeys(key)
            counts.append(await anyio.to_thread.run_sync(_clients, observers[0]))
        await store.append(key, [mode])
        await anyio.to_thread.run_sync(restart)
        await store.append(key, [mode, {"type": "user", "uuid": "u3", "n": 3}])
        loaded = await store.load(key)
        counts.append(await anyio.to_thread.run_sync(_clients, observers[0]))
        return loaded

    loaded = anyio.run(go)
    assert counts == [2, 2, 2, 2]  # the observer and the store's one connection, between calls and after the restart
    assert _clients(observers[0]) == 1  # the store's connection ended with its event loop
    observers[0].close()
    assert loaded == [{"type": "user", "uuid": f"u{i}", "n": i} for i in range(3)] + [
        mode, mode, {"type": "user", "uuid": "u3", "n": 3}]


def test_one_store_on_many_tasks_and_one_loop_after_another(daemon: DaemonProc) -> None:
    """Concurrent calls of many tasks share the store's connection; a store
    used again on a new event loop (each ``asyncio.run`` of an agent) gets a
    connection there."""
    store = _store(daemon)
    keys = [{"project_key": PROJECT, "session_id": str(uuid.uuid4())} for _ in range(8)]
    observer = daemon.client()

    async def write(n: int) -> int:
        async with anyio.create_task_group() as tg:
            for i, key in enumerate(keys):
                tg.start_soon(store.append, key, [{"type": "user", "uuid": f"u{n}-{i}", "n": n}])
        return await anyio.to_thread.run_sync(_clients, observer)

    assert [anyio.run(write, n) for n in range(2)] == [2, 2]

    async def read() -> list[list[Any] | None]:
        return [await store.load(key) for key in keys]

    assert anyio.run(read) == [[{"type": "user", "uuid": f"u{n}-{i}", "n": n} for n in range(2)] for i in range(len(keys))]
    observer.close()


def test_a_store_writing_many_sessions_holds_few_of_them(daemon_factory, short_tmp: Path) -> None:
    """The store's one connection stays in only the sessions it appended to
    last (``KEEP_OPEN``): a long-lived store writing many sessions is not
    refused by the daemon's bound on the sessions one connection holds."""
    from sessiond.client.agentsdk import KEEP_OPEN

    cfg = short_tmp / "c.toml"
    cfg.write_text(f"max_sessions = {4 * (KEEP_OPEN + 4)}\n")  # one connection may hold KEEP_OPEN + 4
    d = daemon_factory().start("--config", str(cfg))
    store = _store(d)
    keys = [{"project_key": PROJECT, "session_id": str(uuid.uuid4())} for _ in range(3 * KEEP_OPEN)]

    async def go() -> list[list[Any] | None]:
        for i, key in enumerate(keys):
            await store.append(key, [{"type": "user", "uuid": f"u{i}", "n": i}])
        return [await store.load(key) for key in keys]

    assert anyio.run(go) == [[{"type": "user", "uuid": f"u{i}", "n": i}] for i in range(len(keys))]


@pytest.mark.timeout(60)
def test_a_stalled_daemon_costs_each_call_one_handshake_not_a_delivery(daemon: DaemonProc) -> None:
    """Against a daemon that is alive but answers nothing (SIGSTOP), the first
    call fails on its live connection (its entries said not delivered), and
    every later one on the handshake of a new connection, which got no answer:
    that connection is not handed out. Handed out, each later append also
    connected again and tried to deliver, each waiting the timeout again (three
    times it in all: 90 s for the default 30, past the SDK's own 60 s for an
    append), and failed saying its entries were not delivered."""
    store = SessiondSessionStore(socket=daemon.socket, root=daemon.root, autostart=False, timeout=2.0)
    key = {"project_key": PROJECT, "session_id": str(uuid.uuid4())}

    def entry() -> list[dict[str, Any]]:
        return [{"type": "user", "uuid": str(uuid.uuid4()), "message": {"role": "user", "content": "hi"}}]

    async def go() -> list[str]:
        await store.append(key, entry())
        calls = [lambda: store.append(key, entry()), lambda: store.append(key, entry()),
                 lambda: store.list_sessions(PROJECT), lambda: store.load(key), lambda: store.append(key, entry())]
        failed = []
        daemon.signal(signal.SIGSTOP)
        try:
            for call in calls:
                with anyio.fail_after(60), pytest.raises(DaemonUnavailable) as lost:  # a bound on the wait, not a measure
                    await call()
                failed.append(str(lost.value))
        finally:
            daemon.signal(signal.SIGCONT)
        return failed

    failed = anyio.run(go)
    assert len(failed) == 5 and all("did not answer within 2s" in f for f in failed), failed
    assert "not delivered" in failed[0], failed[0]  # sent on the live connection
    assert not any("not delivered" in f for f in failed[1:]), failed  # no delivery tried past a failed handshake


@pytest.mark.timeout(90)
def test_a_batch_retried_after_a_stall_is_written_once(daemon: DaemonProc) -> None:
    """The SDK retries an append the store failed (3 tries, 0.2 and 0.8 s apart).
    When the daemon stalled (SIGSTOP) past the store's ``timeout``, the tries
    reach it all the same once it runs again: the retries go as resends, so
    the batch is written once, entries without a uuid included."""
    store = SessiondSessionStore(socket=daemon.socket, root=daemon.root, autostart=False, timeout=1.0)
    key = {"project_key": PROJECT, "session_id": str(uuid.uuid4())}
    other = {**key, "subpath": "subagents/agent-s1"}
    first = [{"type": "user", "uuid": str(uuid.uuid4()), "message": {"role": "user", "content": "hi"}}]
    batch = [{"type": "x-mode", "mode": "plan"}, {"type": "assistant", "uuid": str(uuid.uuid4())}, {"type": "x-progress", "n": 1}]

    async def go() -> tuple[int, list[Any] | None, list[Any] | None, list[Any] | None]:
        await store.append(key, first)
        failures = 0
        daemon.signal(signal.SIGSTOP)
        try:
            for backoff in (0.2, 0.8, None):
                try:
                    with anyio.fail_after(60):
                        await store.append(key, batch)
                    break
                except DaemonUnavailable:
                    failures += 1
                    if failures == 2:
                        daemon.signal(signal.SIGCONT)  # the third try finds it running
                    if backoff is None:
                        raise
                    await anyio.sleep(backoff)
        finally:
            daemon.signal(signal.SIGCONT)
        await store.append(other, batch)  # another file: not a retry
        loaded = await store.load(key)
        await store.append(key, batch[:1])  # appended anew after a success: written again
        return failures, loaded, await store.load(key), await store.load(other)

    failures, loaded, again, sub = anyio.run(go)
    assert failures == 2
    assert loaded == [*first, *batch]
    assert again == [*first, *batch, batch[0]]
    assert sub == batch
