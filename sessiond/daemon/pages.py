"""List answers kept ready and patched with what changed, made in a worker.

Why: a List made from scratch sorts all the files again (one write anywhere
makes the order stale), walks them in Python in a read-pool thread (holding the
GIL against the event loop at each step), and has the loop encode an answer of
megabytes; a client listing thousands of sessions in a loop would then slow
every other client's appends. Here each List scope (its tuple of project dirs) keeps
its answer: the files newest first with their encoded records. A List applies
only what the catalog logged since (usually the one session being written: one
bisect out, one in), reads the lite info of just the files that changed, slices
its page and encodes the whole frame, all in the worker and, past the patch, in
C; the loop only sends the bytes.

The files stay the truth: a view is rebuilt from the catalog whenever the
catalog's change log no longer reaches back to it, and at most
``max_list_views`` scopes are kept (least recently listed go first).
"""

from __future__ import annotations

import os
import threading
from bisect import bisect_left
from collections import OrderedDict
from typing import TYPE_CHECKING

import msgspec
from msgspec.structs import replace

from sessiond.wire import messages as m
from sessiond.wire.framing import encode
from sessiond.wire.fsnames import pack, unpack
from sessiond.wire.session_info import SessionInfo

if TYPE_CHECKING:
    from .catalog import Catalog, _File

_info_decoder = msgspec.msgpack.Decoder(SessionInfo)
_encoder = msgspec.msgpack.Encoder()


class _View:
    """One scope's listable sessions, newest first; ``records[i]`` is None
    until the page that reaches it reads the file's lite info."""

    __slots__ = ("dirs", "every", "versions", "keys", "files", "records", "unresolved", "by_path", "retry", "lock")

    def __init__(self, dirs: tuple[str, ...], every: bool = False) -> None:
        self.dirs = dirs
        self.every = every
        """Metadata-only sessions too (``List.every``)."""
        self.versions: list[int] | None = None  # None: not built yet
        self.keys: list[tuple[int, str]] = []  # (-mtime_ns, path): ascending is newest first
        self.files: list[_File] = []
        self.records: list[msgspec.Raw | None] = []
        self.unresolved = 0
        self.by_path: dict[str, tuple[int, str]] = {}
        self.retry: dict[str, _File] = {}
        """Files whose lite read failed: tried again at the next List."""
        self.lock = threading.Lock()

    def build(self, candidates: list[tuple[int, str, _File]], versions: list[int]) -> None:
        live = [c for c in candidates if c[2].size]
        self.keys = [(-mtime, path) for mtime, path, _ in live]
        self.files = [f for _, _, f in live]
        self.records = [None] * len(live)
        self.unresolved = len(live)
        self.by_path = dict(zip((path for _, path, _ in live), self.keys))
        self.retry.clear()
        self.versions = versions

    def remove(self, path: str) -> None:
        key = self.by_path.pop(path, None)
        if key is None:
            return
        i = bisect_left(self.keys, key)
        del self.keys[i], self.files[i]
        if self.records.pop(i) is None:
            self.unresolved -= 1

    def insert(self, path: str, f: _File) -> None:
        key = (-f.mtime_ns, path)
        i = bisect_left(self.keys, key)
        self.keys.insert(i, key)
        self.files.insert(i, f)
        self.records.insert(i, None)
        self.unresolved += 1
        self.by_path[path] = key


class Pages:
    """The ``List`` answers kept per scope and patched with the catalog's changes,
    made and encoded in a worker so that the event loop only sends the bytes."""

    def __init__(self, catalog: Catalog, max_views: int) -> None:
        self.catalog = catalog
        self.max_views = max_views
        self._views: OrderedDict[tuple[bool, tuple[str, ...]], _View] = OrderedDict()
        self._lock = threading.Lock()

    def frame(self, rid: int, dirs: list[str], limit: int | None, offset: int,
              live: dict[str, dict[str, str | int]], every: bool = False) -> bytes:
        """The ``Listed`` frame answering request ``rid`` (worker thread);
        ``live``: the sessions a client holds now, each its ``live`` value;
        ``every``: metadata-only sessions too (a view of its own)."""
        view = self._view(tuple(dirs), every)
        with view.lock:
            self._update(view)
            sessions = self._page(view, limit, offset)
            if live:
                self._mark_live(view, sessions, offset, live)
        return encode(m.Listed(id=rid, sessions=sessions))  # type: ignore[arg-type]  # records, encoded

    def status(self) -> tuple[int, int]:
        """(scopes kept, sessions they hold)."""
        with self._lock:
            views = list(self._views.values())
        return len(views), sum(len(v.keys) for v in views)

    def _view(self, dirs: tuple[str, ...], every: bool) -> _View:
        key = (every, dirs)
        with self._lock:
            view = self._views.get(key)
            if view is None:
                view = self._views[key] = _View(dirs, every)
                while len(self._views) > self.max_views:
                    self._views.popitem(last=False)
            else:
                self._views.move_to_end(key)
            return view

    def _update(self, view: _View) -> None:
        dirs = list(view.dirs)
        found = None if view.versions is None else self.catalog.changes(dirs, view.versions)
        if found is None:
            view.build(*self.catalog.candidates(dirs))
            return
        changed, view.versions = found
        if view.retry:
            changed += [(path, f) for path, f in view.retry.items() if path not in view.by_path]
            view.retry.clear()
        for path, f in changed:
            view.remove(path)
            if f is not None and f.size:
                view.insert(path, f)

    def _page(self, view: _View, limit: int | None, offset: int) -> list[msgspec.Raw]:
        """Records ``offset`` to ``offset + limit``, the lite info of those not
        read yet read now (a file that is not listed leaves the view)."""
        records = view.records
        i = 0
        while view.unresolved:
            stop = len(records) if limit is None else min(len(records), offset + limit)
            try:
                i = records.index(None, i, stop)
            except ValueError:
                break
            path, f = view.keys[i][1], view.files[i]
            try:
                record = self.catalog.record_of(path, f, view.every)
            except OSError:
                view.retry[path] = f
                record = None
            if record is None:
                view.remove(path)
            else:
                records[i] = record
                view.unresolved -= 1
                i += 1
        stop = len(records) if limit is None else offset + limit
        return records[offset:stop]  # type: ignore[return-value]  # resolved up to stop

    def _mark_live(self, view: _View, sessions: list[msgspec.Raw], offset: int,
                   live: dict[str, dict[str, str | int]]) -> None:
        """Mark the page's sessions a client is writing now: only those records
        are decoded, marked and encoded again."""
        for sid, value in live.items():
            for d in view.dirs:
                key = view.by_path.get(os.path.join(d, f"{sid}.jsonl"))
                if key is None:
                    continue
                j = bisect_left(view.keys, key) - offset
                if 0 <= j < len(sessions):
                    info = unpack(_info_decoder, sessions[j])
                    sessions[j] = msgspec.Raw(pack(_encoder, replace(info, live=value)))
