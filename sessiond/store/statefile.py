"""Reading back the daemon's own state files without trusting them.

The daemon keeps small files of its own in the store root (the lease table,
the mirror's lagging files) and reads them back at its next start. Anything
may sit at those paths by then: a FIFO (a plain ``open`` blocks forever), a
symlink to ``/dev/zero`` (a plain ``read`` never ends), a directory, a sparse
file of gigabytes, or JSON someone edited. ``read_state`` reads each one as
the transcript files are read (``safeopen.read_regular``: no symlink, no
block, a regular file, a bound on the bytes) and a file that fails any of it
or does not decode is *set aside*: renamed to ``NAME.bad-<UTC time>`` in its
own directory (a rename neither opens nor follows anything, and nothing is
deleted), so the daemon starts without it, writes a fresh one, and says so in
``status`` (``StateFileProblem``). Values inside a file that decodes are each
range-checked by its reader: a bad entry is skipped, not the whole file.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import msgspec

from sessiond.wire.core import StateFileProblem

from .regular import NotRegularFile
from .safeopen import OversizedFile, UnsafePath, read_regular

log = logging.getLogger("sessiond")

T = TypeVar("T")


def read_state(path: Path, max_bytes: int, decode: Callable[[bytes], T],
               problems: list[StateFileProblem]) -> T | None:
    """``decode`` of the file at ``path``, or None: when there is none, or when
    it is not a regular file, holds more than ``max_bytes`` or does not decode
    (then it is set aside, and the problem appended to ``problems``)."""
    try:
        data = read_regular(path, max_bytes)
    except FileNotFoundError:
        return None
    except (UnsafePath, NotRegularFile, OversizedFile, IsADirectoryError) as exc:
        problems.append(set_aside(path, exc.strerror or str(exc)))
        return None
    except OSError as exc:
        problems.append(not_used(path, f"cannot read it: {exc.strerror or exc}"))
        return None
    try:
        return decode(data)
    except (msgspec.DecodeError, ValueError, TypeError) as exc:
        problems.append(set_aside(path, f"not a valid state file: {exc}"))
        return None


def rename_aside(path: Path) -> Path:
    """Rename ``path`` to ``NAME.bad-<UTC time>[.n]`` in its own directory and
    return the new path (``OSError`` when it cannot be). A rename moves a
    symlink itself, never what it points at, and never replaces a file set
    aside before: nothing is deleted."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = path.with_name(f"{path.name}.bad-{stamp}")
    n = 0
    while os.path.lexists(aside):  # an earlier one set aside this second: never replaced
        n += 1
        aside = path.with_name(f"{path.name}.bad-{stamp}.{n}")
    os.rename(path, aside)
    return aside


def set_aside(path: Path, problem: str) -> StateFileProblem:
    """Move an unusable state file out of the daemon's way, keeping it."""
    try:
        aside = rename_aside(path)
    except OSError as exc:
        return not_used(path, f"{problem}; could not set it aside: {exc.strerror or exc}")
    return not_used(path, problem, str(aside))


def not_used(path: Path, problem: str, aside: str | None = None) -> StateFileProblem:
    """Log and describe a state file the daemon does not use (``aside``: where
    it was moved; None: left where it is)."""
    log.warning("state file %s not used: %s%s", path, problem, f"; set aside as {aside}" if aside else "")
    return StateFileProblem(file=str(path), problem=problem, setAside=aside)
