"""The mirror's state file: which files a run left lagging, and whether it stopped cleanly.

Why it exists: the transcript files are the mirror's real queue, so a restart
loses no bytes, only the knowledge of *which* files still lag and from where.
This small JSON file keeps that between runs. A run that did not reach the end
of ``Mirror.close`` leaves it marked unclean, and the next run then also looks
at every transcript written since the last save (``recently_written``).

Only reading and writing the file lives here; what to put in it and what to do
with what is read back is the ``Mirror``'s business.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import msgspec

from sessiond.protocol.transcript.safeopen import open_regular

log = logging.getLogger("sessiond")


RECOVERY_SLACK = 2.0
"""Seconds before the crashed run's last save that a file's mtime still counts."""
STATE_FILE = ".sessiond-mirror.json"
"""In the store root: the files a run left lagging, and their watermarks."""


class MirrorState(msgspec.Struct):
    clean: bool = False
    savedAt: float = 0.0
    files: dict[str, int | None] = {}


def save_state(state_file: Path, files: dict[str, int], *, clean: bool) -> None:
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


def load_state(state_file: Path) -> MirrorState | None:
    """What the previous run saved; None when there is nothing (usable)."""
    try:
        with os.fdopen(open_regular(state_file, os.O_RDONLY), "rb") as f:
            return msgspec.json.decode(f.read(), type=MirrorState)
    except FileNotFoundError:
        return None
    except (OSError, msgspec.DecodeError) as exc:
        log.warning("mirror: ignoring %s: %s", state_file, exc)
        return None


def recently_written(projects: Path, since: float) -> list[Path]:
    """Transcripts (main and agent files) modified at or after ``since``."""
    out = []
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
