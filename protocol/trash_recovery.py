"""Settling what a killed ``rm`` or ``restore`` left (see ``protocol/trash.py``).

The manifest of an interrupted operation says which one was under way
(``trashing`` or ``restoring``) and where every item belongs; the items
themselves say how far it got. An operation whose moves all happened is
completed, one cut short is rolled back, so nothing stays half-moved. Entries
left by a killed ``trash empty`` (renamed ``.deleting-…``) are deleted.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Literal

import msgspec

from .transcript.appendfile import ensure_dir
from .transcript.usage import tree_stats
from .trash import DELETING, TrashEntry, discard, write_manifest, read_manifest, rename_noreplace, trash_lock, trash_root


class Recovered(msgspec.Struct):
    name: str
    action: Literal["completed", "rolled-back", "removed"]
    state: str


def recover(root: Path) -> list[Recovered]:
    """Finish or undo what a killed ``rm``/``restore`` left: an operation whose
    moves all happened is completed, one cut short is rolled back."""
    root = Path(root)
    base = trash_root(root)
    if not base.is_dir():
        return []
    out: list[Recovered] = []
    with trash_lock(root):
        for n in sorted(os.listdir(base)):
            entry_dir = base / n
            if n.startswith(DELETING):
                shutil.rmtree(entry_dir, ignore_errors=True)
                continue
            if n.startswith(".") or not entry_dir.is_dir():
                continue
            try:
                entry = read_manifest(entry_dir)
            except FileNotFoundError:
                # Killed before its manifest was in place: nothing was moved yet.
                if tree_stats(entry_dir / "files")[1] == 0:
                    shutil.rmtree(entry_dir, ignore_errors=True)
                    out.append(Recovered(name=n, action="removed", state="none"))
                continue
            except (OSError, msgspec.DecodeError, msgspec.ValidationError):
                continue
            if entry.state == "trashed":
                continue
            out.append(_recover_entry(root, entry_dir, entry))
    return out


def _recover_entry(root: Path, entry_dir: Path, entry: TrashEntry) -> Recovered:
    state = entry.state
    in_trash = [os.path.lexists(entry_dir / "files" / i.path) for i in entry.items]
    if state == "trashing":
        if all(in_trash):
            entry.state = "trashed"
            write_manifest(entry_dir, entry)
            return Recovered(name=entry.name, action="completed", state=state)
        kept = []
        for item, there in zip(entry.items, in_trash):
            if there:
                try:
                    ensure_dir((root / item.path).parent)
                    rename_noreplace(entry_dir / "files" / item.path, root / item.path)
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
            os.rename(root / item.path, entry_dir / "files" / item.path)
    entry.state = "trashed"
    write_manifest(entry_dir, entry)
    return Recovered(name=entry.name, action="rolled-back", state=state)
