"""The mirror's state file: which files a run left lagging, and whether it stopped cleanly.

Why it exists: the transcript files are the mirror's real queue, so a restart
loses no bytes, only the knowledge of *which* files still lag and from where.
This small JSON file keeps that between runs. A run that did not reach the end
of ``Mirror.close`` leaves it marked unclean, and the next run then also looks
at every transcript written since the last save (``recently_written``).

``StateFile`` is the running mirror's hold on it: marked changed as
watermarks move, rewritten at most every ``STATE_EVERY`` while so, read back
once at the start. What to do with what is read back is the ``Mirror``'s
business.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from sessiond.mirror.stream_format import file_ref
from sessiond.store.paths import check_inside
from sessiond.store.safeopen import open_regular
from sessiond.store.statefile import read_state
from sessiond.wire.core import StateFileProblem
from sessiond.wire.errors import SessiondError

if TYPE_CHECKING:
    from .tracking import TrackedFiles

log = logging.getLogger("sessiond")


RECOVERY_SLACK = 2.0
"""Seconds before the crashed run's last save that a file's mtime still counts."""
STATE_FILE = ".sessiond-mirror.json"
"""In the store root: the files a run left lagging, and their watermarks."""
MAX_STATE_BYTES = 16 * 1024 * 1024
"""The state file's cap: ``MAX_LAGGING_FILES`` paths of a few hundred bytes;
past it the file is set aside unread."""
MAX_LAGGING_FILES = 65_536
"""Lagging files taken from the state file at most (each one an open and a
stat at the start); past it, the rest are found by the recovery pass."""
STATE_EVERY = 2.0
"""How often the state file is rewritten while files lag (each rewrite is a write
and a rename)."""


class MirrorState(msgspec.Struct):
    """The mirror's state file as stored: whether the last run stopped cleanly, when
    it saved, and each lagging file's watermark (None: not known yet)."""

    clean: bool = False
    savedAt: float = 0.0
    files: dict[str, int | None] = {}


class StateFile:
    """The state file of a running mirror (none: ``path`` is None, as for
    ``push``): what it saves is the tracked files' lagging ones."""

    def __init__(self, path: Path | None, tracked: TrackedFiles) -> None:
        self.path = path
        self.tracked = tracked
        self.problems: list[StateFileProblem] = []
        """A state file found unusable by ``load`` (set aside; ``status``)."""
        self._dirty = False
        self._saved = 0.0

    def changed(self) -> None:
        """A watermark moved: the file is rewritten at the next ``save_due``."""
        self._dirty = True

    def save_due(self, now: float) -> None:
        """Rewrite the file if it changed and was last written ``STATE_EVERY`` before ``now``."""
        if self._dirty and now - self._saved >= STATE_EVERY:
            self._saved = now
            self.save()

    def save(self, clean: bool = False) -> None:
        """The lagging files and their watermarks, for the next run. ``clean``
        only at the end of ``Mirror.close``: a run that did not get there
        crashed, and the next one also looks at every file written since the
        last save."""
        self._dirty = False
        if self.path is not None:
            save_state(self.path, self.tracked.lagging(), clean=clean)

    def load(self) -> MirrorState | None:
        """What the previous run left (see ``load_state``); None without a file."""
        if self.path is None:
            return None
        return load_state(self.path, self.problems)


def save_state(state_file: Path, files: dict[str, int | None], *, clean: bool) -> None:
    """Replace ``state_file`` atomically with these lagging files (path ->
    acknowledged watermark). Never raises: a failure is logged."""
    state = MirrorState(clean=clean, savedAt=time.time(), files=files)
    tmp = state_file.with_name(state_file.name + ".tmp")
    try:
        # Never through a symlink, never into a FIFO: this runs on the loop.
        with os.fdopen(open_regular(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            f.write(msgspec.json.encode(state))
            os.fchmod(f.fileno(), 0o600)
        tmp.replace(state_file)
    except FileNotFoundError:
        pass  # no root yet: nothing written, nothing to remember
    except OSError as exc:
        log.warning("mirror: cannot save %s: %s", state_file, exc.strerror or exc)


def load_state(state_file: Path, problems: list[StateFileProblem]) -> MirrorState | None:
    """What the previous run saved, as far as it can be believed; None when
    there is nothing (usable: set aside, see ``read_state``). Its records are
    not trusted: only paths of transcripts inside ``<root>/projects`` that do
    not resolve out of it are kept (at most ``MAX_LAGGING_FILES``), and a save
    time that is no time (NaN, in the future) is taken as "check everything"."""
    state = read_state(state_file, MAX_STATE_BYTES, _decode, problems)
    if state is None:
        return None
    root = state_file.parent
    projects = root / "projects"
    kept: dict[str, int | None] = {}
    for path in state.files:
        if len(kept) >= MAX_LAGGING_FILES:
            log.warning("mirror: %s names more than %d files; the rest are left to the recovery pass",
                        state_file, MAX_LAGGING_FILES)
            state.clean = False
            break
        p = Path(path)
        if not p.is_absolute() or ".." in p.parts or file_ref(projects, p) is None:
            log.warning("mirror: %s: %r is not a transcript of this root; ignored", state_file, path[:200])
            continue
        try:
            check_inside(root, p)
        except SessiondError as exc:
            log.warning("mirror: %s: %s; ignored", state_file, exc.message)
            continue
        kept[path] = None  # only the path is used: the stream says where its copy ends
    state.files = kept
    if not 0 <= state.savedAt <= time.time() + RECOVERY_SLACK:  # NaN fails this too
        log.warning("mirror: %s: saved at %r, no time it could have been; every file is checked",
                    state_file, state.savedAt)
        state.savedAt = 0.0
    return state


def _decode(data: bytes) -> MirrorState:
    return msgspec.json.decode(data, type=MirrorState)


def recently_written(projects: Path, since: float) -> list[Path]:
    """Transcripts (main and agent files) modified at or after ``since``."""
    out: list[Path] = []
    try:
        dirs = list(os.scandir(projects))
    except FileNotFoundError:
        return out
    for d in dirs:
        if not d.is_dir(follow_symlinks=False):
            continue
        for path in Path(d.path).rglob("*.jsonl"):
            try:
                if path.stat(follow_symlinks=False).st_mtime >= since:
                    out.append(path)
            except OSError:
                continue
    return out
