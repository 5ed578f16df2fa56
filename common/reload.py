"""SIGHUP: what a running daemon takes from a changed config file.

Why its own module: which settings can change at run time (``RELOADABLE``, and
``MIRROR_RELOADABLE`` in the ``[mirror]`` table) is a property of the daemon's
parts that read them at each use, not of the file; the daemon's server is its
one caller, while ``build`` also serves the CLI (``serve``, ``pull``/``push``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from sessiond.protocol.locations import config_path

from .config import MirrorSettings, Settings, apply, build

RELOADABLE = ("flush_interval", "fsync", "group_sync", "log_level")
MIRROR_RELOADABLE = ("required", "ack_timeout", "queue_bytes", "shutdown_flush")
"""Mirror keys the running mirror reads at each use; the others (where and how it
connects, the stream and subjects its state refers to) need a restart."""


class Reloaded(msgspec.Struct):
    """What a SIGHUP did: the keys applied, as (name, before, after), and the
    keys that differ in the file but only take effect at the next start."""

    applied: list[tuple[str, Any, Any]]
    at_restart: list[str]


def reload(settings: Settings, flags: dict[str, Any]) -> Reloaded:
    """SIGHUP: re-read the file (flags and env still win), apply the keys that can
    change at run time, and name the others that changed, which cannot."""
    fresh = build(flags, settings.config_file or config_path(), required=False)
    before = {k: getattr(settings, k) for k in RELOADABLE}
    names = apply(settings, {
        "flush_interval_ms": fresh.flush_interval * 1000,
        "fsync": fresh.fsync,
        "group_sync": fresh.group_sync,
        "log_level": fresh.log_level,
    })
    out = Reloaded([(k, before[k], getattr(settings, k)) for k in names], [])
    skip = {*RELOADABLE, "config_file", "mirror"}
    out.at_restart = [k for k in Settings.__struct_fields__
                      if k not in skip and getattr(fresh, k) != getattr(settings, k)]
    old, new = settings.mirror, fresh.mirror
    if (old is None) != (new is None):
        out.at_restart.append("mirror")
    elif old is not None and new is not None:
        for k in MirrorSettings.__struct_fields__:
            was, now = getattr(old, k), getattr(new, k)
            if was == now:
                continue
            if k in MIRROR_RELOADABLE:
                setattr(old, k, now)  # the running mirror holds this very object
                out.applied.append((f"mirror.{k}", was, now))
            else:
                out.at_restart.append(f"mirror.{k}")
    return out
