"""The daemon's side of the lifecycle (SPEC 9): trash, restore, empty, import.

The file operations themselves are ``sessiond/store/trash.py`` and
``sessiond/store/importer.py``, the very functions the CLI runs when no
daemon does. What the daemon adds is that everything it holds learns of them
at once:

- a session being moved or imported is ``unavailable`` (requests for it get
  ``conflict``) while a worker thread does the moves, after its queued lines are
  written and its files closed, so no fd writes into a moved file and no reopen
  recreates one;
- a trashed session stays unavailable (``not_found``, "in the trash") until it is
  restored or the trash is emptied: an agent still attached to it (``rm
  --force``) gets that error on its next append instead of a new file
  silently growing where the old one was;
- the catalog drops or learns the file, so ``list`` is right on the next call.

Operations run one at a time (the trash lock) in the default executor; a
client waits for its answer, never the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sessiond.store import importer, trash, trash_recovery
from sessiond.wire.errors import SessiondError, conflict, not_found
from sessiond.wire.records import FileResult, SessionSource, TrashEntry

if TYPE_CHECKING:
    from .server import Daemon

log = logging.getLogger("sessiond")


def in_trash(session: str) -> SessiondError:
    return not_found(f"session {session} is in the trash (sessiond restore {session} brings it back)")


def busy(session: str) -> SessiondError:
    return conflict(f"session {session} is being moved or imported; try again")


class Lifecycle:
    """The daemon's side of rm, restore, trash empty and import: the store's file
    operations run in a worker while the session is held unavailable, then the
    registry and the catalog learn of them."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.root = daemon.settings.root

    async def start(self) -> None:
        """Finish or undo what a killed run left half-done, then refuse the
        trashed sessions. Runs before the socket serves, its file work in a
        worker: what the trash holds (a FIFO for a manifest) never stalls the loop."""
        recovered, trashed = await self.daemon.loop.run_in_executor(
            None, lambda: (trash_recovery.recover(self.root), trash.trashed_ids(self.root)))
        for r in recovered:
            if r.action == "skipped":
                trash.skipped(r.name, r.why)
                continue
            log.warning("trash: %s %s left by an interrupted %s", r.action, r.name,
                        "rm" if r.state == "trashing" else "restore" if r.state == "restoring" else "operation")
        unavailable = self.daemon.registry.unavailable
        for sid in trashed:
            unavailable.setdefault(sid, in_trash(sid))

    def refresh_trashed(self, still: set[str]) -> None:
        """The trashed ids are ``still`` (read in a worker: the loop never waits
        on the disk): refuse those, free the others."""
        unavailable = self.daemon.registry.unavailable
        for sid, err in list(unavailable.items()):
            if err.code == "not_found" and sid not in still:
                del unavailable[sid]
        for sid in still:
            unavailable.setdefault(sid, in_trash(sid))

    # --------------------------------------------------------------------- moves

    def hold(self, session: str, *, force: bool) -> Callable[[Callable[[SessiondError | None], None]], None]:
        """Make ``session`` unavailable and return a function that calls back
        once its queued lines are written (and synced, where a sync is owed)
        and its files closed. Raises
        ``conflict`` for a live session (clients attached) unless ``force``."""
        from .handlers.completion import after_all  # the handlers package imports this module

        registry, writer = self.daemon.registry, self.daemon.writer
        refused = registry.unavailable.get(session)
        if refused is not None and refused.code == "conflict":
            raise refused
        state = registry.sessions.get(session)
        if state is not None and state.clients and not force:
            n = len(state.clients)
            raise conflict(f"session {session} is live ({n} client{'s' if n != 1 else ''} attached); "
                           f"--force moves it anyway")
        if state is not None and state.pending:  # held before its first message (and spooled): not ours to drop
            raise conflict(f"session {session} has entries waiting for its first message; try again later")
        registry.unavailable[session] = busy(session)
        queues = registry.evict_for_move(state) if state is not None else []

        def when_closed(done: Callable[[SessiondError | None], None]) -> None:
            def closed(err: SessiondError | None) -> None:
                if err is None:  # a queue that failed to write keeps its lines (retried): never dropped
                    for q in queues:
                        writer.release(q)
                done(err)

            waiter = after_all(len(queues), closed)
            for q in queues:
                if q.sync_waiters or q.sync_queued or q.syncing:
                    # a sync is owed (a durable ack, the spool's deletion): done before the move, or the
                    # sync would reopen the file by the path it has left, fail, and its waiters with it
                    writer.when_durable(q, waiter)
                else:
                    writer.when_written(q, waiter)

        return when_closed

    def operate(self, session: str, work: Callable[[], Any], done: Callable[[Any, BaseException | None], None],
                *, after: SessiondError | None, force: bool = False, hold: bool = True) -> None:
        """``hold`` the session (unless the caller made it unavailable itself),
        run ``work`` in a worker, then call ``done(result, error)``; the session
        is unavailable with ``after`` from then on (available again when None,
        and after a failure: nothing moved)."""
        unavailable = self.daemon.registry.unavailable

        def run(err: SessiondError | None) -> None:
            if err is not None:
                unavailable.pop(session, None)
                done(None, err)
                return
            if self.daemon.mirror is None:
                start()
            else:
                task = self.daemon.loop.create_task(self._mirror_settled(session))
                task.add_done_callback(lambda _t: start())

        def start() -> None:
            fut = self.daemon.loop.run_in_executor(None, self._attempt, work)
            fut.add_done_callback(finished)

        def finished(f) -> None:
            result, exc, still = f.result()
            unavailable.pop(session, None)
            self._mirror_forget(session)
            if exc is None and after is not None:
                unavailable[session] = after
            elif exc is not None:
                self.refresh_trashed(still)  # whatever the failed operation left, as the trash says
            done(result, exc)

        if hold:
            self.hold(session, force=force)(run)
        else:
            run(None)

    def _attempt(self, work: Callable[[], Any]) -> tuple[Any, BaseException | None, set[str]]:
        """In a worker: ``work``'s result, or its error and the trash's ids then."""
        try:
            return work(), None, set()
        except Exception as exc:  # answered to the client as a typed error
            try:
                still = trash.trashed_ids(self.root)
            except OSError:
                still = set(sid for sid, e in self.daemon.registry.unavailable.items() if e.code == "not_found")
            return None, exc, still

    # ---------------------------------------------------------------- the mirror

    def _mirrored(self, session: str) -> list[Path]:
        """The session's files the mirror tracks (main and agent transcripts)."""
        mirror = self.daemon.mirror
        if mirror is None:
            return []
        return [p for p in mirror.files if p.name == f"{session}.jsonl" or session in p.parts[:-1]]

    async def _mirror_settled(self, session: str) -> None:
        """Give the mirror a moment (``shutdown_flush_s``, not while it is down)
        to publish what it still holds of the session, which it could not read
        back once the files moved."""
        mirror = self.daemon.mirror
        if mirror is None:
            return
        loop = self.daemon.loop
        deadline = loop.time() + mirror.cfg.shutdown_flush
        while loop.time() < deadline and mirror.healthy:
            if not any((f := mirror.files.get(p)) is not None and not f.broken and (f.lag or not f.resolved)
                       for p in self._mirrored(session)):
                return
            await asyncio.sleep(0.01)

    def _mirror_forget(self, session: str) -> None:
        """Stop tracking files that moved (or changed behind the writer): a file
        seen again later (restored, imported) is resolved against the stream as
        any file first seen at an offset > 0, and caught up from there."""
        mirror = self.daemon.mirror
        if mirror is None:
            return
        for p in self._mirrored(session):
            mirror.forget(p)

    def trashed(self, entry: TrashEntry) -> None:
        self.daemon.catalog.forget(self.root / entry.items[0].rel)

    def restore(self, session: str) -> TrashEntry:
        """In a worker: put the session back, and the catalog learns of it
        before the client hears (so its next ``list`` shows it)."""
        entry = trash.restore_session(self.root, session)
        self.daemon.catalog.learn(self.root / entry.items[0].rel)
        return entry

    def import_session(self, source: SessionSource, main: Path) -> list[FileResult]:
        """In a worker: copy the session's files in, then the catalog re-stats it."""
        results = importer.import_session(self.root, source)
        self.daemon.catalog.learn(main)
        return results
