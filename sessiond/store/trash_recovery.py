"""Settling what a killed ``rm`` or ``restore`` left (see ``sessiond/store/trash.py``).

The manifest of an interrupted operation says which one was under way
(``trashing`` or ``restoring``) and where every item belongs; the items
themselves say how far it got. An operation whose moves all happened is
completed, one cut short is rolled back, so nothing stays half-moved. Entries
left by a killed ``trash empty`` (renamed ``.deleting-…``) are deleted.

An entry whose manifest cannot be used (``trash.read_manifest``), or whose
moves would leave the root, is skipped with a warning and left as it is: the
daemon starts and serves whatever the trash holds.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Literal

import msgspec

from sessiond.wire.records import TrashEntry

from .safeopen import StoreRoot
from .trash import (
    DELETING,
    discard,
    lexists_in,
    move,
    read_manifest,
    reason,
    shown,
    trash_lock,
    trash_root,
    write_manifest,
)
from .usage import tree_stats


class Recovered(msgspec.Struct):
    """What recovery at start did with one trash entry a killed operation left:
    completed, rolled back, removed, or skipped (and why)."""

    name: str
    action: Literal["completed", "rolled-back", "removed", "skipped"]
    state: str
    why: str = ""
    """Why it was skipped (its manifest unusable, or a move would leave the root)."""


def recover(root: Path) -> list[Recovered]:
    """Finish or undo what a killed ``rm``/``restore`` left: an operation whose
    moves all happened is completed, one cut short is rolled back. Entries
    left alone are reported ``skipped`` (the caller says so or not: the CLI's
    own listing warns of them anyway)."""
    root = Path(root)
    base = trash_root(root)
    if not base.is_dir():
        return []
    out: list[Recovered] = []
    with trash_lock(root), StoreRoot(root) as store:
        for n in sorted(os.listdir(base)):
            entry_dir = base / n
            try:
                is_dir = stat.S_ISDIR(os.lstat(entry_dir).st_mode)  # a symlink is never followed
            except FileNotFoundError:
                continue
            if n.startswith(DELETING):
                if is_dir:
                    shutil.rmtree(entry_dir, ignore_errors=True)
                continue
            if n.startswith("."):
                continue
            if not is_dir:
                out.append(_skipped(n, "not a directory (a symlink is never followed)"))
                continue
            try:
                entry = read_manifest(entry_dir)
            except FileNotFoundError:
                # Killed before its manifest was in place: nothing was moved yet.
                if tree_stats(entry_dir / "files")[1] == 0:
                    shutil.rmtree(entry_dir, ignore_errors=True)
                    out.append(Recovered(name=n, action="removed", state="none"))
                continue
            except (OSError, ValueError, msgspec.DecodeError) as exc:
                out.append(_skipped(n, exc))
                continue
            if entry.state == "trashed":
                continue
            try:
                out.append(_recover_entry(store, root, entry_dir, entry))
            except OSError as exc:
                out.append(_skipped(n, exc))
    return out


def _skipped(name: str, why: BaseException | str) -> Recovered:
    return Recovered(name=shown(name), action="skipped", state="none", why=reason(why))


def _recover_entry(store: StoreRoot, root: Path, entry_dir: Path, entry: TrashEntry) -> Recovered:
    state = entry.state
    in_trash = [lexists_in(store, entry_dir / "files" / i.rel) for i in entry.items]
    if state == "trashing":
        if all(in_trash):
            entry.state = "trashed"
            write_manifest(entry_dir, entry)
            return Recovered(name=entry.name, action="completed", state=state)
        kept = []
        for item, there in zip(entry.items, in_trash):
            if there:
                try:
                    move(store, entry_dir / "files" / item.rel, root / item.rel)
                except FileExistsError:
                    kept.append(item)  # a new file took its place meanwhile: both are kept
        if kept:
            entry.items, entry.state = kept, "trashed"
            entry.bytes = sum(i.bytes for i in kept)
            entry.files = sum(i.files for i in kept)
            write_manifest(entry_dir, entry)
        else:
            discard(entry_dir)
        return Recovered(name=entry.name, action="rolled-back", state=state)
    # restoring
    if not any(in_trash):
        discard(entry_dir)
        return Recovered(name=entry.name, action="completed", state=state)
    for item, there in zip(entry.items, in_trash):
        if not there:
            move(store, root / item.rel, entry_dir / "files" / item.rel)
    entry.state = "trashed"
    write_manifest(entry_dir, entry)
    return Recovered(name=entry.name, action="rolled-back", state=state)
