"""``sessiond --help`` without click: the same bytes click prints, from data.

The group's description and global options' help are defined here and given
to the click group (``group.py``), so both read one text; each command's short
help is its docstring's first sentence, copied into ``SHORT_HELP`` (a click-free
table: reading the docstrings means importing every command module, and click).
A test holds the fast output equal to click's, byte for byte, at several
widths; if a command is added without an entry here, the fast path declines
and click prints the help.
"""

from __future__ import annotations

DESCRIPTION = "sessiond: one daemon that owns every AI-agent transcript file."

GLOBAL_OPTION_HELP = {
    "--root": "Store root (default ~/.local/share/sessiond).",
    "--socket": "Daemon socket path.",
    "--no-autostart": "Never start a daemon on demand.",
    "--timeout": "Seconds to wait for the daemon's answer (default 30).",
}

OPTION_ROWS = (
    ("--root PATH", GLOBAL_OPTION_HELP["--root"]),
    ("--socket PATH", GLOBAL_OPTION_HELP["--socket"]),
    ("--no-autostart", GLOBAL_OPTION_HELP["--no-autostart"]),
    ("--timeout SECONDS", GLOBAL_OPTION_HELP["--timeout"]),
    ("--version", "Show the version and exit."),
    ("-h, --help", "Show this message and exit."),
)
"""The Options section as click renders the group's options (metavars, the
range it appends, its own --version and --help)."""

SHORT_HELP = {
    "append": 'Store raw entries (one JSON object per line) from SOURCE or stdin.',
    "check": 'Report damage in transcripts (default: every one under the root).',
    "continue": 'Resume the most recent session of the project.',
    "du": 'Bytes per project and per session, subagent files included.',
    "export": "The conversation as Markdown or one self-contained HTML page; jsonl: the transcript's original lines.",
    "flush": 'Wait until everything accepted so far is written (and synced with --durable).',
    "fork": "Start a new session seeded with the old one's chain; prints the new id.",
    "import": 'Copy existing sessions in, every file as it is (default ~/.claude/projects).',
    "install-service": 'Write the service files for this user: this executable, store and socket.',
    "list": 'List sessions, newest first, reading only what the page needs.',
    "prune": 'Move old (and large) sessions into the trash.',
    "pull": 'Hydrate sessions (subagent files included) from the mirror, byte-identical.',
    "push": 'Backfill a local session into the mirror (only what the stream lacks).',
    "record": 'Record messages (one JSON object per line), chaining their parents (SPEC 3.1).',
    "reindex": "Rebuild the search index from the files (the project's, or --all).",
    "rename": 'Give a session a title (a custom-title entry, on disk when this returns).',
    "repair": 'Fix what can be fixed without losing a byte (a torn tail goes to FILE.torn).',
    "restore": 'Put a trashed session back where it was, byte for byte.',
    "resume": 'Resume a session: show it and make the daemon adopt its file.',
    "rm": 'Move sessions (transcript, subagent files, meta files) into the trash.',
    "search": 'Find conversations: words (all must match), "quoted phrases", prefix*.',
    "serve": 'Run the daemon in the foreground (flags > env > config file > defaults).',
    "show": 'Show the conversation a resume would restore (never starts a daemon).',
    "start": 'Start the daemon in the background (no-op when one runs).',
    "status": "Show the running daemon's figures; exit 1 when none runs.",
    "stop": 'Stop the daemon: it drains every queue first.',
    "tag": 'Tag a session (a tag entry, on disk when this returns; "" removes it).',
    "tail": 'The last entries of a transcript, and with -f the new ones as they arrive.',
    "trash": 'What is in the trash, with sizes and dates (`trash empty` deletes).',
    "uninstall-service": 'Remove the service files install-service wrote (transcripts are untouched).',
    "watch": 'The conversation as it happens: the last N turns, then each new entry.',
}

USAGE = "Usage: sessiond [OPTIONS] COMMAND [ARGS]..."
INDENT = 2
COL_MAX = 30
COL_SPACING = 2


def help_text(command_names, columns: int) -> str:
    """The whole top-level help for a terminal ``columns`` wide, as click's
    ``HelpFormatter`` lays it out (width: the terminal's, at most 80, minus 2,
    at least 50), with the trailing newline ``click.echo`` adds."""
    from textwrap import TextWrapper

    width = max(min(columns, 80) - 2, 50)
    out = [USAGE, "\n", "\n"]
    out.append(TextWrapper(width, initial_indent=" " * INDENT, subsequent_indent=" " * INDENT,
                           replace_whitespace=False).fill(DESCRIPTION))
    out.append("\n")
    for heading, rows in (("Options", OPTION_ROWS), ("Commands", [(n, SHORT_HELP[n]) for n in command_names])):
        out += ["\n", f"{heading}:\n"]
        out += _definition_list(rows, width)
    return "".join(out).rstrip("\n") + "\n"


def _definition_list(rows, width: int) -> list[str]:
    """click's ``write_dl`` at one indent level: terms in a column of at most
    COL_MAX, each text wrapped beside it (under a term too long for the column)."""
    from textwrap import TextWrapper

    first_col = min(max(len(term) for term, _ in rows), COL_MAX) + COL_SPACING
    wrapper = TextWrapper(max(width - first_col - 2, 10), replace_whitespace=False)
    out: list[str] = []
    for term, text in rows:
        out.append(" " * INDENT + term)
        if len(term) <= first_col - COL_SPACING:
            out.append(" " * (first_col - len(term)))
        else:
            out += ["\n", " " * (first_col + INDENT)]
        lines = wrapper.fill(text).splitlines()
        out.append(f"{lines[0]}\n")
        out += [f"{' ' * (first_col + INDENT)}{line}\n" for line in lines[1:]]
    return out
