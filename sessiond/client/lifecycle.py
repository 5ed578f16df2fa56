"""Lifecycle operations (SPEC 9) from a client: through the daemon when one runs,
else directly on the files with the very functions the daemon uses.

Why both: the daemon must learn of a move at once (its open files, sessions and
catalog), so when it runs it does the work; when none runs nobody holds
anything, and the CLI does the same file operations under the same locks,
after finishing or undoing whatever a killed operation left (``trash_recovery.recover``).
A daemon that is alive but does not answer is never worked around: it may still
hold files open. Nor is a daemon of this root on another socket: working directly
means holding the root's lock (``sessiond/store/rootlock.py``) shared, and when that
daemon holds it, it is found through its lock and does the work.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path

from sessiond.store import importer, trash, trash_recovery
from sessiond.store.appendfile import locked_append, open_append
from sessiond.store.listing import project_dirs, session_candidates
from sessiond.store.locations import daemon_holds_lock
from sessiond.store.rootlock import Holder, direct_writer
from sessiond.store.usage import usage
from sessiond.wire import messages as m
from sessiond.wire.errors import DaemonUnavailable, RootHeld, SessiondError
from sessiond.wire.lease import LeaseHolder
from sessiond.wire.records import FileResult, SessionSource, TrashEntry, Usage, path_text

from .connection import Client


class Lifecycle:
    """One CLI run's view of the store: ``client`` when a daemon serves ``root``."""

    def __init__(self, root: Path, socket: Path, *, timeout: float = 120.0) -> None:
        self.root = Path(root)
        self.client: Client | None = None
        self._held = ExitStack()
        try:
            client = Client(socket, root=root, autostart=False, timeout=timeout, name="sessiond-cli",
                            other_root_ok=True).connect()
        except DaemonUnavailable:
            if daemon_holds_lock(socket):
                raise DaemonUnavailable(f"a daemon holds {socket} but does not answer; not touching its files") from None
            client = None
        if client is not None and not client.serves_own_root():
            client.close()  # a daemon of another store: these files are not its business
            client = None
        if client is None:
            try:
                self._held.enter_context(direct_writer(self.root, "not touching its files"))
            except RootHeld as exc:
                client = self._root_daemon(exc, timeout)
        self.client = client
        if client is None:
            trash_recovery.recover(self.root)

    def _root_daemon(self, held: RootHeld, timeout: float) -> Client:
        """The daemon that holds the root (on another socket than ours): it does
        the work. ``held`` itself when it cannot be reached there."""
        if not isinstance(held.holder, Holder):
            raise held
        try:
            return Client(held.holder.socket, root=self.root, autostart=False, timeout=timeout,
                          name="sessiond-cli").connect()
        except (DaemonUnavailable, SessiondError):
            raise held from None

    def __enter__(self) -> Lifecycle:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.client is not None:
            self.client.close()
        self._held.close()

    @property
    def direct(self) -> bool:
        return self.client is None

    def _call(self, req: m.Request) -> m.Response:
        assert self.client is not None
        return self.client.call(req)

    # --------------------------------------------------------------------- trash

    def trash(self, session: str, path: Path, *, force: bool = False, reason: str = "rm") -> TrashEntry:
        if self.client is not None:
            text, raw = path_text(str(path))
            resp = self._call(m.Trash(id=self.client.next_id(), session=session, path=text, raw_path=raw, force=force,
                                      reason=reason))
            return resp.entries[0]  # type: ignore[union-attr]  # the answer to a Trash: TrashChanged
        return trash.trash_session(self.root, path, reason=reason)

    def restore(self, session: str) -> TrashEntry:
        if self.client is not None:
            return self._call(m.Restore(id=self.client.next_id(), session=session)).entries[0]  # type: ignore[union-attr]  # the answer to a Restore: TrashChanged
        return trash.restore_session(self.root, session)

    def empty(self, older_than: float | None, dry_run: bool) -> list[TrashEntry]:
        if self.client is not None:
            resp = self._call(m.EmptyTrash(id=self.client.next_id(), older_than=older_than, dry_run=dry_run))
            return resp.entries  # type: ignore[union-attr]  # the answer to an EmptyTrash: TrashChanged
        return trash.empty_trash(self.root, older_than=older_than, dry_run=dry_run)

    # -------------------------------------------------------------------- import

    def import_sessions(self, sources: Iterable[SessionSource],
                        progress: Callable[[], None] = lambda: None) -> Iterator[tuple[SessionSource, list[FileResult]]]:
        """Each session's file results, in order, as they complete."""
        sources = list(sources)
        if self.client is None:
            trashed = trash.trashed_ids(self.root)
            for s in sources:
                if s.session in trashed:
                    results = [FileResult(rel=f.rel, status="busy", error="the session is in the trash")
                               for f in s.files]
                elif importer.inside_store(self.root, s):
                    results = [FileResult(rel=f.rel, status="unchanged") for f in s.files]
                else:
                    results = importer.import_session(self.root, s)
                progress()
                yield s, results
            return
        client = self.client
        reqs = [m.Import(id=client.next_id(), source=s, catalog_only=importer.inside_store(self.root, s)) for s in sources]
        for chunk in _windows(reqs):
            for req in chunk:
                client.send(req)
            for req in chunk:
                resp = client.receive(req.id)
                if isinstance(resp, m.Error):
                    raise SessiondError(resp.message, code=resp.code)
                progress()
                imported: m.Imported = resp  # type: ignore[assignment]  # not an Error: the answer to an Import
                yield req.source, imported.files

    # ---------------------------------------------------------------------- live

    def live(self) -> dict[str, LeaseHolder]:
        """The sessions a client of the daemon holds (SPEC 7), by id; none
        without a daemon (nobody holds anything then)."""
        if self.client is None:
            return {}
        return {h.session: h for h in self.client.status().live}

    # ---------------------------------------------------------------------- usage

    def usage(self, dirs: list[Path] | None) -> Usage:
        """``dirs`` None: every project."""
        if self.client is not None:
            req = m.Usage(id=self.client.next_id(), dirs=[str(d) for d in dirs or []], all=dirs is None)
            return self._call(req).usage  # type: ignore[union-attr]  # the answer to a Usage: UsageResult
        scan = project_dirs(self.root) if dirs is None else dirs
        return usage((path, size, mtime) for mtime, path, size in session_candidates(scan, stat=True))

    # ------------------------------------------------------------------ metadata

    def set_metadata(self, session: str, path: Path, cwd: str, entry: bytes) -> None:
        """Append one metadata entry (custom title, tag) on the synchronous path:
        answered once it is on disk (SPEC 3.3)."""
        if self.client is not None:
            client = self.client
            client.call(m.Adopt(id=client.next_id(), session=session, path=str(path)))
            client.call(m.Append(id=client.next_id(), session=session, cwd=cwd, entries=[entry], durability="durable"))
            client.call(m.Close(id=client.next_id(), session=session))
            return
        if not path.is_file():
            raise SessiondError(f"no transcript at {path}", code="not_found")
        fd, _ = open_append(path)
        try:
            locked_append(fd, path, entry + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)


IMPORT_WINDOW = 4
"""Import requests in flight at once: the daemon copies one at a time anyway."""


def _windows(reqs: list[m.Import]) -> Iterator[list[m.Import]]:
    """``reqs`` in order, a few at a time, never two of one session together:
    the daemon holds a session while it imports it, and would answer the second
    (the same id in another project dir: a repo that moved) ``busy``."""
    chunk: list[m.Import] = []
    for req in reqs:
        if len(chunk) == IMPORT_WINDOW or any(r.source.session == req.source.session for r in chunk):
            yield chunk
            chunk = []
        chunk.append(req)
    if chunk:
        yield chunk


def parse_size(text: str) -> int:
    """``500K``, ``10M``, ``1.5G``, ``2GB`` (binary units) or plain bytes."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    try:
        value = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except (ValueError, IndexError):
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"not a size: {text!r} (use e.g. 500K, 10M, 1G)")
    if value < 0:
        raise ValueError(f"a size cannot be negative: {text!r}")
    return int(value)
