"""SIGHUP: what a running daemon takes from a changed config file.

Why its own module: which settings can change at run time (``RELOADABLE``, and
``MIRROR_RELOADABLE`` in the ``[mirror]`` table) is a property of the daemon's
parts that read them at each use, not of the file; the daemon's server is its
one caller, while ``build`` also serves the CLI (``serve``, ``pull``/``push``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from sessiond.config import MirrorSettings, Settings, build
from sessiond.store.locations import config_path

RELOADABLE = ("flush_interval", "fsync", "group_sync", "log_level")
"""Settings the daemon's parts read at each use (the writer's drain and sync
policy, the log level): a SIGHUP sets them on the running settings. The one
list of them: ``reload`` takes their values from the freshly built settings,
checked and converted as at a start, and names every other changed key."""
MIRROR_RELOADABLE = ("required", "ack_timeout", "queue_bytes", "shutdown_flush")
"""Mirror keys the running mirror reads at each use; the others (where and how it
connects, the stream and subjects its state refers to) need a restart."""


class Reloaded(msgspec.Struct):
    """What a SIGHUP did: the keys applied, as (name, before, after), and the
    keys that differ in the file but only take effect at the next start."""

    applied: list[tuple[str, Any, Any]]
    at_restart: list[str]


def reread(settings: Settings, flags: dict[str, Any]) -> Settings:
    """SIGHUP, first half, in a worker thread (it reads a file): the settings
    the file gives now (flags and env still win); ``ConfigError`` when bad."""
    return build(flags, settings.config_file or config_path(), required=False)


def reload(settings: Settings, fresh: Settings) -> Reloaded:
    """SIGHUP, second half, where ``settings`` are used: apply the keys of
    ``fresh`` (``reread``) that can change at run time, and name the others
    that changed, which cannot."""
    out = Reloaded([], [])
    names = [k for k in Settings.__struct_fields__ if k not in ("config_file", "mirror")]
    _take(settings, fresh, names, RELOADABLE, "", out)
    old, new = settings.mirror, fresh.mirror
    if (old is None) != (new is None):
        out.at_restart.append("mirror")
    elif old is not None and new is not None:  # the running mirror holds ``old``: its keys are set on it
        _take(old, new, MirrorSettings.__struct_fields__, MIRROR_RELOADABLE, "mirror.", out)
    return out


def _take(running: Any, fresh: Any, names, reloadable: tuple[str, ...], prefix: str, out: Reloaded) -> None:
    """Each of ``names`` that differs in ``fresh``: set on ``running`` when it
    is ``reloadable`` (into ``out.applied``), else named in ``out.at_restart``."""
    for k in names:
        was, now = getattr(running, k), getattr(fresh, k)
        if was == now:
            continue
        if k in reloadable:
            setattr(running, k, now)
            out.applied.append((f"{prefix}{k}", was, now))
        else:
            out.at_restart.append(f"{prefix}{k}")
