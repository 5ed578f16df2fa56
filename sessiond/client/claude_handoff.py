"""Back into Claude Code in one step: ``resume --claude`` and ``fork --claude``.

Why: a session kept (or forked) by sessiond is only useful to a Claude Code
user if ``claude --resume ID`` can open it, and Claude Code reads sessions
from one place only, ``$CLAUDE_CONFIG_DIR/projects`` (default
``~/.claude/projects``), in the project dir its working directory names, and
only from that working directory. So the hand-off is: the session's file is
where that Claude Code reads it (already, when the store is that dir; else
it is placed there first, byte for byte, with its subagent files, by the
importer: new files whole, a copy there already grown or merged by uuid,
never overwritten), then ``claude --resume ID`` runs in the session's own
working directory. Where ``claude`` is not on PATH, one line says how to do
it by hand (the file is placed all the same).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import msgspec

from sessiond.store import importer
from sessiond.store.lite import read_lite
from sessiond.store.paths import canonical_cwd, projects_dir, sanitize
from sessiond.wire.errors import SessiondError


class Handoff(msgspec.Struct):
    """Where Claude Code will read the session, and what was done to put it there."""

    session: str
    cwd: str
    path: str
    """The main transcript in Claude Code's projects dir."""
    placed: list[str]
    """Files copied (or grown, merged) into Claude Code's dir; [] when it already read the store."""
    command: list[str]
    """``claude --resume ID``, to run in ``cwd``."""

    def by_hand(self) -> str:
        """The command to run it by hand, to be shown and copied: the cwd as one
        shell word that shows as one line (``shell_word``)."""
        from sessiond.client.cli.output import shell_word

        return f"cd {shell_word(self.cwd)} && {' '.join(map(shell_word, self.command))}"


def claude_root() -> Path:
    """Claude Code's config dir: ``$CLAUDE_CONFIG_DIR``, else ``~/.claude``."""
    env = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(env) if env else Path.home() / ".claude"


def prepare(main: Path, session: str, program: str = "claude") -> Handoff:
    """Make ``session`` (its main transcript: ``main``) readable by Claude Code,
    and say how to open it there."""
    cwd = read_lite(main).cwd
    if not cwd or not os.path.isabs(cwd):
        raise SessiondError(f"{main} records no working directory: Claude Code could not find it", code="bad_request")
    target_root = claude_root()
    project = sanitize(canonical_cwd(cwd))
    target = projects_dir(target_root) / project / f"{session}.jsonl"
    placed: list[str] = []
    if os.path.realpath(main) != os.path.realpath(target):
        sources, _ = importer.plan([main])
        for source in sources:
            if source.session != session:
                continue
            source.project = project
            for result in importer.import_session(target_root, source):
                if result.status in ("diverged", "unreadable", "busy"):
                    raise SessiondError(f"could not place {result.rel} into {target.parent}: "
                                        f"{result.status}: {result.error or ''}".rstrip(": "), code="io_error")
                if result.status != "unchanged":
                    placed.append(result.rel)
    return Handoff(session=session, cwd=cwd, path=str(target), placed=placed,
                   command=[program, "--resume", session])


def program_path(program: str = "claude") -> str | None:
    return shutil.which(program)
