"""``SessiondSessionStore``: the Claude Agent SDK's ``SessionStore`` on sessiond.

The SDK mirrors every transcript entry Claude Code writes to its store and can
resume, continue, fork, list, rename, tag and delete sessions from it. This
adapter makes the daemon that store, so the mirror lands in the same files every
Claude Code tool reads, with sessiond's dedup, crash safety, watching and search::

    from claude_agent_sdk import ClaudeAgentOptions
    from sessiond.client.agentsdk import SessiondSessionStore
    options = ClaudeAgentOptions(session_store=SessiondSessionStore())

How a key maps onto the store (``docs/agent-sdk.md``):

- ``project_key`` is the project dir's name under ``projects/`` (the SDK's
  default key is Claude Code's sanitized cwd: the very dir Claude Code writes).
- ``session_id`` is the transcript ``<session_id>.jsonl``. Claude Code's ids are
  UUIDs and are their file names as they are; any other id (up to 15 characters
  of ``[A-Za-z0-9_-]``, as the SDK's conformance suite uses) is packed, with a
  hash of its project, into a UUID of version 8 (``store_file_id``), which the
  listings unpack: the daemon's sessions are UUIDs, one project dir each.
- ``subpath`` ``subagents/[workflows/<run>/]agent-<id>`` is that agent file.

Entries travel as JSON lines in ``Append.exact`` batches: written at once (never
held for a first message), byte for byte, nothing added by the daemon; entries
with a ``uuid`` are deduplicated (a retried batch is written once), others never.
``delete`` moves the session into the trash; summaries come from the daemon's
catalog, which follows every write (the lite info of each file, re-read only
when the file changed), never from a read of the transcript per listing.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import os
import re
import uuid as uuidlib
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import anyio
import msgspec

from sessiond.store.locations import default_root
from sessiond.store.paths import PROJECT_RE, agent_file, check_session_id, is_session_id, projects_dir
from sessiond.store.reencode import encode_entry
from sessiond.store.safeopen import StoreRoot
from sessiond.wire import messages as m
from sessiond.wire.errors import DaemonUnavailable, RemoteError, UnsafeSocketDir
from sessiond.wire.session_info import SessionInfo

from .async_client import AsyncClient

__all__ = ["SessiondSessionStore", "store_file_id", "store_session_id"]

_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
_INDEX = {c: i for i, c in enumerate(_ALPHABET)}
_SHORT_ID = re.compile(r"[A-Za-z0-9_-]{1,15}")
_TAG = 0b1010  # the payload's last 4 bits: a version-8 UUID made here
_SUBPATH = re.compile(r"subagents/(?:workflows/(?P<run>[A-Za-z0-9_-]{1,128})/)?agent-(?P<agent>[A-Za-z0-9_-]{1,128})")
_decode_fast = msgspec.json.Decoder().decode
log = logging.getLogger("sessiond")
RECONNECT_PAUSE = 0.05
"""Seconds between tries to reach a lost daemon."""
RECONNECT_TIMEOUT = 10.0
"""How long the store's client waits for a lost daemon (the AsyncClient's
default), at most the store's ``timeout``."""
UNCERTAIN_PER_FILE = 8
UNCERTAIN_FILES = 256
"""Appends of unknown outcome remembered, per file and files (``_uncertain``)."""
KEEP_OPEN = 16
"""Sessions the store's connection stays in (an append joins its session on the
daemon's side); past this many, the least recently appended is closed, so a
long-lived store writing many sessions holds no more of the daemon than this."""
T = TypeVar("T")


def _project_hash(project_key: str) -> int:
    return int.from_bytes(hashlib.sha256(project_key.encode()).digest()[:3], "big")


def store_file_id(project_key: str, session_id: str) -> str:
    """The daemon's session (and file name) for an SDK session id: the id
    itself when it is a UUID; else the id (1 to 15 characters of
    ``[A-Za-z0-9_-]``) and a 24-bit hash of its project packed into the 122
    free bits of a version-8 UUID, so one short id can live in several projects
    (the daemon's session ids are UUIDs, each in one project dir). ``ValueError``
    for any other id."""
    if is_session_id(session_id):
        return check_session_id(session_id)
    if not _SHORT_ID.fullmatch(session_id):
        raise ValueError(f"sessiond stores a session id that is a UUID or 1 to 15 characters of [A-Za-z0-9_-], "
                         f"not {session_id[:80]!r}")
    chars = 0
    for char in session_id.ljust(15, "A"):
        chars = chars << 6 | _INDEX[char]
    payload = ((len(session_id) - 1) << 118 | chars << 28 | _project_hash(project_key) << 4 | _TAG)
    a, b, c = payload >> 74, (payload >> 62) & 0xFFF, payload & ((1 << 62) - 1)
    return str(uuidlib.UUID(int=a << 80 | 8 << 76 | b << 64 | 0b10 << 62 | c))


def store_session_id(project_key: str, file_id: str) -> str:
    """The SDK session id of a file of ``project_key`` (``store_file_id``'s inverse)."""
    value = uuidlib.UUID(file_id).int
    if value >> 76 & 0xF != 8 or value >> 62 & 0b11 != 0b10:
        return file_id
    payload = (value >> 80) << 74 | (value >> 64 & 0xFFF) << 62 | value & ((1 << 62) - 1)
    if payload & 0xF != _TAG or payload >> 4 & 0xFFFFFF != _project_hash(project_key):
        return file_id
    length = (payload >> 118) + 1
    chars = payload >> 28 & ((1 << 90) - 1)
    text = "".join(_ALPHABET[chars >> (6 * (14 - i)) & 63] for i in range(15))
    return text[:length]


def _subpath_route(subpath: str | None) -> tuple[str | None, str | None]:
    """(agent, run) of a key's subpath; (None, None) for the main transcript."""
    if subpath is None:
        return None, None
    found = _SUBPATH.fullmatch(subpath)
    if found is None:
        raise ValueError(f"sessiond stores subpaths subagents/[workflows/<run>/]agent-<id>, not {subpath[:200]!r}")
    return found["agent"], found["run"]


def _epoch_ms(iso: str | None) -> int | None:
    if not iso:
        return None
    try:
        return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def _summary_data(info: SessionInfo) -> dict[str, Any]:
    """The SDK's summary state (``fold_session_summary``'s keys) from the
    daemon's listing record of the session."""
    data: dict[str, Any] = {"is_sidechain": False}
    created = _epoch_ms(info.createdAt)
    if created is not None:
        data["created_at"] = created
    if info.cwd:
        data["cwd"] = info.cwd
    if info.firstPrompt:
        data["first_prompt"] = info.firstPrompt
        data["first_prompt_locked"] = True
    for key, value in (("custom_title", info.customTitle), ("ai_title", info.aiTitle),
                       ("last_prompt", info.lastPrompt), ("summary_hint", info.summary),
                       ("git_branch", info.gitBranch), ("tag", info.tag)):
        if value:
            data[key] = value
    return data


def _digests(entries: list[Any]) -> list[bytes]:
    """One digest per entry (what tells a retried batch from another)."""
    return [hashlib.sha256(e if isinstance(e, bytes) else encode_entry(e)).digest() for e in entries]


def _starts_with(digests: list[bytes], first: list[bytes]) -> bool:
    return len(first) <= len(digests) and digests[:len(first)] == first


class SessiondSessionStore:
    """The Agent SDK's ``SessionStore`` (every method, required and optional)
    on the daemon serving ``root`` at ``socket`` (the defaults: the user's
    daemon, started on first use unless ``autostart=False``).

    The store keeps one ``AsyncClient`` connection per event loop it is used
    on (the SDK calls it from several tasks, and a connection and handshake
    per call cost more than a small batch's append): it is opened on first
    use, shared by every task of that loop, and closed when the loop ends (or
    ``aclose``). A call that loses its daemon is made again on a new
    connection (the daemon autostarted, or waited for) for up to ``timeout``
    seconds. Outside asyncio (trio) each call has a connection of its own.
    ``durability``: when an append returns (``written`` by default: the SDK's
    own copy is already on disk)."""

    def __init__(self, socket: Path | str | None = None, root: Path | str | None = None, *,
                 durability: m.Durability = "written", autostart: bool = True, timeout: float = 30.0) -> None:
        self.socket = socket
        self.root = Path(root) if root is not None else None
        self.durability: m.Durability = durability
        self.autostart = autostart
        self.timeout = timeout
        self._held: _Held | None = None
        self._uncertain: OrderedDict[tuple[str, str | None, str | None], list[list[bytes]]] = OrderedDict()
        """Per file: the line digests of appends that failed after they were sent
        (the daemon may have written them: a stall past ``timeout``). An append
        that begins with one of them is its retry (the SDK retries a failed
        batch as it is): sent with ``resend``, so it is not written twice."""

    def _client(self) -> Callable[[], AsyncClient]:
        """What makes the store's client (holding no reference to the store,
        so a store dropped while its connection is open can be collected)."""
        return functools.partial(AsyncClient, self.socket, root=self.root, autostart=self.autostart,
                                 timeout=self.timeout, reconnect_timeout=min(self.timeout, RECONNECT_TIMEOUT),
                                 name="sessiond-agentsdk")

    async def _with_daemon(self, work: Callable[[AsyncClient, bool], Awaitable[T]]) -> T:
        """``work(client, again)`` on the store's connection; when the daemon is
        lost (killed, restarting) it is done again on a new connection, with
        ``again`` True, until ``timeout`` has passed: every request of the
        store is idempotent (an append is sent again with ``resend``, so what
        the lost daemon already wrote is not written twice). A connection
        found lost before the request was sent, or one that could not be
        made, is replaced without ``again`` (nothing of this call reached a
        daemon: an entry without uuid is then never taken for a resent one). The SDK's own three tries
        within one second are too short for a daemon to restart."""
        deadline = anyio.current_time() + self.timeout
        again = False
        while True:
            held, sent = None, False
            try:
                held = self._connection()
                if held is None:  # not on asyncio: a connection for this call only
                    async with self._client()() as client:
                        sent = True
                        return await work(client, again)
                client = await held.client()
                sent = True
                return await work(client, again)
            except UnsafeSocketDir:
                raise
            except (DaemonUnavailable, ConnectionError) as exc:
                lost: Exception = exc
            except RemoteError as exc:
                if exc.code != "shutting_down":
                    raise
                lost = exc
            if held is not None:
                self._drop(held)
            if anyio.current_time() >= deadline:
                raise lost
            # Only a request that may have reached the lost daemon is a resend: one
            # that found no daemon was never sent, and a resend drops an entry without
            # a uuid whose line is already in the file (Claude Code writes some such
            # lines again and again, byte for byte).
            again = again or sent
            await anyio.sleep(RECONNECT_PAUSE)

    def _connection(self) -> _Held | None:
        """The live connection of the running event loop, opening one (its
        handshake is awaited by ``client``); None outside asyncio."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        held = self._held
        if held is not None and held.loop is loop and held.usable():
            return held
        if held is not None:
            self._drop(held)
        held = self._held = _Held(loop, self._client())
        held.on_drop = weakref.finalize(self, held.close)  # a store dropped mid-loop does not keep its connection
        return held

    def _drop(self, held: _Held) -> None:
        held.close()
        if self._held is held:
            self._held = None

    async def aclose(self) -> None:
        """Close the store's connection now (it closes by itself when its
        event loop ends; the store opens a new one if used again)."""
        held, self._held = self._held, None
        if held is not None:
            held.close()
            await held.closed()

    def _root(self, client: AsyncClient) -> Path:
        return Path(client.served_root) if client.served_root else self.root or default_root()

    # ------------------------------------------------------------------ required

    async def append(self, key: Any, entries: list[Any]) -> None:
        """Mirror a batch: the entries in call order, each one JSON line of the
        key's file; a uuid already in the file is not written again.
        ``ValueError`` for a key the store cannot name (see the module doc)."""
        if not entries:
            return
        k = _Key.of(key)
        file = (k.file_id, k.agent, k.run)
        earlier = self._uncertain.get(file)
        digests = _digests(entries) if earlier else []
        retry = earlier is not None and any(_starts_with(digests, d) for d in earlier)
        sent = False

        async def send(client: AsyncClient, again: bool) -> None:
            nonlocal sent
            sent = True
            await client.append(k.file_id, "/", entries, durability=self.durability, agent=k.agent, run=k.run,
                                exact=True, project=k.project, resend=again or retry)
            held = self._held
            if held is not None and held.holds(client):
                await held.attached(client, k.file_id)

        try:
            await self._with_daemon(send)
        except RemoteError as exc:
            if sent and exc.code == "shutting_down":
                self._remember(file, digests or _digests(entries))
            raise
        except Exception:
            if sent:  # it may have reached a daemon that writes it yet: a retry of it is a resend
                self._remember(file, digests or _digests(entries))
            raise
        if retry:
            self._forget(file, digests)

    def _remember(self, file: tuple[str, str | None, str | None], digests: list[bytes]) -> None:
        batches = self._uncertain.pop(file, [])
        batches = [*batches, digests][-UNCERTAIN_PER_FILE:]
        self._uncertain[file] = batches
        while len(self._uncertain) > UNCERTAIN_FILES:
            self._uncertain.popitem(last=False)

    def _forget(self, file: tuple[str, str | None, str | None], digests: list[bytes]) -> None:
        batches = [d for d in self._uncertain.get(file, []) if not _starts_with(digests, d)]
        if batches:
            self._uncertain[file] = batches
        else:
            self._uncertain.pop(file, None)

    async def load(self, key: Any) -> list[Any] | None:
        """Every entry of the key's file, in order; None when it has none."""
        try:
            k = _Key.of(key)
        except ValueError:
            return None  # a key append refuses was never written

        async def flushed(client: AsyncClient, _again: bool) -> Path:
            await client.flush(k.file_id)  # whatever another client had queued for it is in the file
            return self._root(client)

        root = await self._with_daemon(flushed)
        data = await anyio.to_thread.run_sync(_read, root, k.path(projects_dir(root)))
        if not data:
            return None
        *lines, tail = data.split(b"\n")  # ``tail``: after the last newline, a line a writer may be in the middle of
        loaded = [obj for line in lines if line.strip() and (obj := _decode_line(line)) is not None]
        if tail.strip() and (obj := _decode_line(tail, torn_ok=True)) is not None:
            loaded.append(obj)
        return loaded

    # ------------------------------------------------------------------ optional

    async def list_sessions(self, project_key: str) -> list[dict[str, Any]]:
        """The project's sessions with their mtime (epoch ms), subagents aside."""
        return [{"session_id": s["session_id"], "mtime": s["mtime"]} for s in await self.list_session_summaries(project_key)]

    async def list_session_summaries(self, project_key: str) -> list[dict[str, Any]]:
        """Every session of the project with its summary, from the daemon's
        catalog (one ``List``, kept up to date by the daemon as files are
        written; no transcript is read for it here)."""
        if not PROJECT_RE.fullmatch(project_key):
            return []  # no session can be stored there

        async def listed(client: AsyncClient, _again: bool) -> list[SessionInfo]:
            d = projects_dir(self._root(client)) / project_key
            if not await anyio.to_thread.run_sync(d.is_dir):
                return []
            answer = await client.call(m.List(id=client.next_id(), dirs=[str(d)], every=True))
            assert isinstance(answer, m.Listed)
            return answer.sessions

        out = []
        for info in await self._with_daemon(listed):
            mtime = _epoch_ms(info.modifiedAt)
            if mtime is None:
                continue
            out.append({"session_id": store_session_id(project_key, info.sessionId), "mtime": mtime,
                        "data": _summary_data(info)})
        return out

    async def delete(self, key: Any) -> None:
        """Move the session (its main transcript and every agent file), or the
        one agent file its subpath names, into the trash; nothing is unlinked,
        and ``sessiond restore`` brings it back."""
        try:
            k = _Key.of(key)
        except ValueError:
            return  # never written

        async def trash(client: AsyncClient, _again: bool) -> None:
            main = projects_dir(self._root(client)) / k.project / f"{k.file_id}.jsonl"
            try:
                await client.call(m.Trash(id=client.next_id(), session=k.file_id, path=str(main), force=True,
                                          agent=k.agent, run=k.run))
            except RemoteError as exc:
                if exc.code != "not_found":  # never written, or already deleted
                    raise

        await self._with_daemon(trash)

    async def list_subkeys(self, key: Any) -> list[str]:
        """The subpaths of the session's agent files."""
        try:
            k = _Key.of({"project_key": key["project_key"], "session_id": key["session_id"]})
        except ValueError:
            return []

        async def flushed(client: AsyncClient, _again: bool) -> Path:
            await client.flush(k.file_id)
            return self._root(client)

        root = await self._with_daemon(flushed)
        return await anyio.to_thread.run_sync(_subkeys, root, projects_dir(root) / k.project / k.file_id / "subagents")


class _Held:
    """One ``AsyncClient`` kept open for a store by a task of its own on one
    event loop: the client's task group must be left by the task that entered
    it, while the store is called from whichever task the SDK runs (and the
    connection must outlive each of them). The task ends, closing the
    connection, on ``close`` or when the loop cancels it at its end."""

    def __init__(self, loop: asyncio.AbstractEventLoop, make: Callable[[], AsyncClient]) -> None:
        self.loop = loop
        self._client: AsyncClient | None = None
        self._error: BaseException | None = None
        self._opened = asyncio.Event()
        self._done = asyncio.Event()
        self._task = loop.create_task(self._hold(make), name="sessiond-agentsdk connection")
        self.on_drop: weakref.finalize | None = None
        """Closes this connection when its store is collected (set by the store)."""
        self._sessions: OrderedDict[str, None] = OrderedDict()

    async def _hold(self, make: Callable[[], AsyncClient]) -> None:
        try:
            async with make() as client:
                self._client = client
                self._opened.set()
                await self._done.wait()
        except Exception as exc:  # handed to the caller waiting to open; a close's error is of no use
            self._error = exc
        finally:
            self._opened.set()

    async def client(self) -> AsyncClient:
        """The connected client (``DaemonUnavailable`` and the like when it
        could not connect, or has been closed). A client whose first handshake
        got no answer is not handed out: its requests would each connect and
        wait as long again (a stalled daemon), where the store's call is to end
        within its ``timeout``."""
        await self._opened.wait()
        if self._client is None or self._done.is_set():
            raise self._error or DaemonUnavailable("the store's connection was closed")
        if (unreachable := self._client.unreachable) is not None:
            raise unreachable
        return self._client

    def holds(self, client: AsyncClient) -> bool:
        return client is self._client

    async def attached(self, client: AsyncClient, session: str) -> None:
        """``session`` was just appended to on this connection: the least
        recently appended past ``KEEP_OPEN`` are closed (a failure to close
        is left: a lost connection has left them all)."""
        self._sessions[session] = None
        self._sessions.move_to_end(session)
        while len(self._sessions) > KEEP_OPEN:
            old, _ = self._sessions.popitem(last=False)
            try:
                await client.close_session(old)
            except RemoteError:
                continue  # not in it any more (closed by a call of another task)
            except (DaemonUnavailable, ConnectionError):
                return

    def usable(self) -> bool:
        """Not known to be lost: still opening, or open and its reader has
        seen no end of the connection."""
        if self._done.is_set() or self._task.done():
            return False
        return self._client is None or self._client.unreachable is None

    def close(self) -> None:
        """Let the task close the connection (from any thread; a no-op once
        the loop is gone)."""
        if self.on_drop is not None:
            self.on_drop.detach()
        try:
            self.loop.call_soon_threadsafe(self._done.set)
        except RuntimeError:
            pass  # the loop is closed: its end already cancelled the task

    async def closed(self) -> None:
        """Wait for the connection to be closed (on its own loop)."""
        if asyncio.get_running_loop() is self.loop:
            await asyncio.wait([self._task])


class _Key:
    """An SDK key as the store names it: project dir, file id, agent and run."""

    __slots__ = ("project", "file_id", "agent", "run")

    def __init__(self, project: str, file_id: str, agent: str | None, run: str | None) -> None:
        self.project, self.file_id, self.agent, self.run = project, file_id, agent, run

    @classmethod
    def of(cls, key: Any) -> _Key:
        """``ValueError`` for a key no file of the store can hold."""
        project = key["project_key"]
        if not isinstance(project, str) or not PROJECT_RE.fullmatch(project):
            raise ValueError(f"a project key is a project dir's name ([A-Za-z0-9_-]{{1,255}}), not {str(project)[:200]!r}")
        return cls(project, store_file_id(project, key["session_id"]), *_subpath_route(key.get("subpath")))

    def path(self, projects: Path) -> Path:
        if self.agent is None:
            return projects / self.project / f"{self.file_id}.jsonl"
        return agent_file(projects / self.project, self.file_id, self.agent, self.run)


def _decode_line(line: bytes, torn_ok: bool = False) -> Any:
    """One line of a file as the SDK's own stores give it back (``json.loads``):
    msgspec's decode; a line it refuses that the standard library reads (a
    lone surrogate escape, which JSON.stringify writes when a string is cut
    inside an emoji, or a number msgspec cannot hold) as the standard library
    reads it, so what was appended comes back equal. A line no reader takes
    as JSON (a torn fragment, bytes that are not UTF-8) is read the way every
    reader of the store reads it (``decode_object``: BOM and bad bytes
    replaced), and a line that is no JSON object at all is left out, said in
    the log (``torn_ok``: not for the bytes after the last newline, a write
    still under way): one damaged line does not make the session unloadable."""
    try:
        return _decode_fast(line)
    except (msgspec.DecodeError, RecursionError):
        pass
    import json

    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        pass
    from sessiond.store.entries import decode_object

    obj = decode_object(line)
    if obj is None and not torn_ok:
        log.warning("session store: a line that is not a JSON object was left out of a load (%d bytes)", len(line))
    return obj


def _read(root: Path, path: Path) -> bytes:
    """The file's bytes, opened through the root (no symlink followed on the
    way, nothing but a regular file); b"" when there is none."""
    try:
        with StoreRoot(root) as store:
            fd = store.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return b""
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _subkeys(root: Path, sub: Path) -> list[str]:
    """The subpaths of the agent files under ``sub`` (a session's
    ``subagents`` dir), found through the root like ``_read``."""
    out: list[str] = []
    with StoreRoot(root) as store:
        for rel in ("", *(f"workflows/{d}" for d in _names(store, sub / "workflows", dirs=True))):
            prefix = f"subagents/{rel}/" if rel else "subagents/"
            out += [prefix + n[:-6] for n in sorted(_names(store, sub / rel if rel else sub, dirs=False))
                    if n.startswith("agent-") and n.endswith(".jsonl")]
    return out


def _names(store: StoreRoot, d: Path, *, dirs: bool) -> list[str]:
    """Names of the subdirs (or of the regular files) of ``d``; none when it is missing."""
    try:
        fd = store.open_dir(d)
    except (FileNotFoundError, NotADirectoryError):
        return []
    try:
        with os.scandir(fd) as it:
            return [e.name for e in it if (e.is_dir(follow_symlinks=False) if dirs else e.is_file(follow_symlinks=False))]
    finally:
        os.close(fd)
