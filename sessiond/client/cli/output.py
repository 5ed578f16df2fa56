"""The one way the CLI writes human text, and the pieces of it: sizes, ages,
durations, a progress counter.

Every line a command prints for a person goes through ``echo``, which shows
terminal controls instead of obeying them (``printable``): a field of any
origin (a cwd, a project directory's name, a title, a branch, a lease
holder's name, a daemon's error message, a file name that was not UTF-8)
cannot clear the screen, set the window title or reorder what is shown. Only
text this package rendered itself, its fields already escaped and its styles
added after (``show``'s colours, a progress line's CR), is written with
``raw=True``; bytes (``--json``, an export) are written as they are, their
encoding being their own escaping. ``tests/client/test_output_layer.py``
holds every module of ``sessiond/client/cli`` to this.

Click-free (``sessiond-hook`` prints through it too): ``echo`` writes what
``click.echo`` writes for plain text and bytes, so both paths print alike."""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import re
    from datetime import date


def echo(message: str | bytes = "", *, err: bool = False, nl: bool = True, raw: bool = False) -> None:
    """One line (or ``nl=False``: a piece) to stdout or stderr, flushed, as
    ``click.echo`` does for text without styles, its controls shown
    (``printable``) unless ``raw`` (text this package rendered and escaped
    itself); bytes go to the binary buffer as they are."""
    stream = sys.stderr if err else sys.stdout
    if isinstance(message, bytes):
        write_all(message + b"\n" if nl else message, stream)
    else:
        text = (message if raw else printable(message)) + ("\n" if nl else "")
        if len(text) > 8192 and hasattr(stream, "buffer"):  # big: see write_all
            write_all(text.encode(stream.encoding, stream.errors or "strict"), stream)
        else:
            stream.write(text)
            stream.flush()


def page(text: str, color: bool) -> None:
    """Rendered text (``raw``: its fields already went through ``printable``,
    its colours are this package's) through the user's pager."""
    import click

    click.echo_via_pager(text, color=color)


def paged(text: str, *, color: bool = False, pager: bool = True) -> None:
    """Rendered ``text`` (its fields already through ``printable``) for a
    person: through ``$PAGER`` (``less`` by default) when stdout and stdin are a
    terminal and it is longer than the screen, else written whole. What
    ``show`` and ``list`` page with."""
    import shutil

    if pager and sys.stdout.isatty() and sys.stdin.isatty() and text.count("\n") + 1 > shutil.get_terminal_size().lines:
        # less: quit if it fits (-F), colours through (-R), the screen left as
        # it was (-X), as git pages; a LESS of the person's own is theirs.
        # A pager quit early (q) is fine: click drops the broken pipe.
        os.environ.setdefault("LESS", "FRX")
        page(text, color=color)
    else:
        rendered(text)


def rendered(text: str) -> None:
    """Text this package drew for a person, written whole (or a broken pipe):
    ``show``'s conversation, ``list``'s table, what ``tail`` and ``watch``
    draw with ``render.terminal`` (rich, into a string). Its transcript
    fields went through ``printable`` before they were drawn; its only escape
    sequences are the colours the drawing added."""
    echo(text, raw=True)


def write_all(data: bytes, stream=None) -> None:
    """Every byte of ``data`` to ``stream`` (stdout), or ``BrokenPipeError``.
    One ``buffer.write`` of more than the pipe holds returns a short count,
    without an error, when the reader leaves mid-write (the kernel's SIGPIPE
    interrupts it), and ``TextIOWrapper`` ignores that count: ``show --json |
    head -1`` exited 0 having silently written 64 KiB. Looping makes the next
    write fail as it should, so the exit is 141 like every other command."""
    stream = stream or sys.stdout
    stream.flush()
    view = memoryview(data)
    while view:
        n = stream.buffer.write(view)
        view = view[n or 0:] if n is not None else view[:0]
    stream.buffer.flush()


def colour_on() -> bool:
    """Whether a command colours its output: stdout is a terminal, ``NO_COLOR``
    is unset or empty (no-color.org) and ``TERM`` is not ``dumb``. Every
    command that colours asks here (show, resume, continue, search)."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def terminal_columns(fallback: int = 80) -> int:
    """``shutil.get_terminal_size((fallback, 24)).columns`` (``COLUMNS`` first,
    then the terminal on stdout), without importing shutil and the compression
    modules it brings."""
    try:
        columns = int(os.environ.get("COLUMNS", 0))
    except ValueError:
        columns = 0
    if columns <= 0:
        stdout = sys.__stdout__
        try:
            columns = os.get_terminal_size(stdout.fileno()).columns if stdout is not None else 0
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or fallback


def echo_json(obj) -> None:
    """``--json`` output: one JSON document on one line (msgspec imported only
    when a command prints one). A name that is not UTF-8 has each of its
    undecodable bytes as ``\\udcXX`` (``sessiond/wire/fsnames.py``)."""
    from sessiond.wire.fsnames import json_bytes

    echo(json_bytes(obj))


def duration(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


_FORMAT_CHARS = ((0xAD, 0xAD), (0x600, 0x605), (0x61C, 0x61C), (0x6DD, 0x6DD), (0x70F, 0x70F), (0x890, 0x891),
                 (0x8E2, 0x8E2), (0x180E, 0x180E), (0x200B, 0x200B), (0x200E, 0x200F), (0x2028, 0x202E),
                 (0x2060, 0x2064), (0x2066, 0x206F), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD),
                 (0x110CD, 0x110CD), (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001),
                 (0xE0020, 0xE007F))
"""The invisible format characters (Unicode category Cf) and the line and
paragraph separators, but for ZWNJ and ZWJ (U+200C, U+200D; see ``printable``):
bidirectional marks, embeddings, overrides and isolates reorder what is shown,
the others are zero-width, so ``ma\\u200bin`` would look like ``main``."""

_SHOWN: re.Pattern[str] | None = None  # what printable() replaces, compiled on first use
_JOINERS: re.Pattern[str] | None = None  # a ZWNJ or ZWJ not between two non-ASCII characters


def _shown(match: re.Match[str]) -> str:
    """How ``printable`` shows the one character it matched."""
    c = ord(match.group())
    if c < 0x20:
        return f"^{chr(c + 64)}"
    if c == 0x7F:
        return "^?"
    if 0xDC80 <= c <= 0xDCFF:  # surrogateescape's form of a byte that is not UTF-8
        return f"\\x{c - 0xDC00:02x}"
    return f"\\u{c:04x}" if c < 0x10000 else f"\\U{c:08x}"


def printable(text: str) -> str:
    """``text`` with every terminal control shown, not obeyed. A transcript
    holds whatever a tool printed or a file contained: an escape sequence in a
    tool result, a prompt or a branch name (ESC [2J clears the screen, an OSC
    sets the window title or writes the clipboard, a bare CR hides what came
    before it on the line) must not act on the terminal of whoever reads it.
    C0 controls other than tab and newline become ``^X`` (ESC is ``^[``), DEL
    ``^?``; C1 controls (U+0080-U+009F, 8-bit CSI/OSC to some terminals), the
    invisible format characters (``_FORMAT_CHARS``: bidi controls, zero-width
    ones) ``\\uXXXX``; a lone surrogate, what ``surrogateescape`` makes of a
    byte of a file name that is not UTF-8, ``\\xNN`` (the byte). ZWNJ and ZWJ
    stay between two non-ASCII characters (an emoji sequence, Persian, Indic
    scripts need them) and are shown anywhere else. ``--json`` output is the
    entries' own text, unchanged."""
    if text.isprintable():
        return text
    global _SHOWN, _JOINERS
    if _SHOWN is None or _JOINERS is None:
        import re

        ranges = [(0, 8), (0xB, 0x1F), (0x7F, 0x9F), *_FORMAT_CHARS, (0xD800, 0xDFFF)]
        _SHOWN = re.compile("[" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges) + "]")
        _JOINERS = re.compile(r"(?<![^\x00-\x7f])[\u200c\u200d]|[\u200c\u200d](?![^\x00-\x7f])")
    text = _SHOWN.sub(_shown, text)
    if "\u200c" in text or "\u200d" in text:
        text = _JOINERS.sub(_shown, text)
    return text


def printable_name(name: str) -> str:
    """A name (a path, a model's id) on one line, every character of it told
    apart: ``printable``, and its line breaks and tabs shown too (``^J``,
    ``^I``). A directory's name may hold them, and a cwd in a listing's row,
    a table's cell or a ``du`` line that broke would make a second row out
    of the rest of it; a title's whitespace is folded to spaces instead
    (``clip``), a name's is kept."""
    text = printable(name)
    return text.replace("\n", "^J").replace("\t", "^I") if "\n" in text or "\t" in text else text


def shell_word(text: str) -> str:
    """``text`` as one shell word of a command a person is told to copy
    (``cd <cwd> && sessiond resume <id>``): ``shlex.quote``'s form when every
    character of it shows as itself on one line, else ``$'...'`` (bash, zsh,
    ksh, POSIX.1-2024 sh) with each character that would not (a control, a
    line break, a bidi or zero-width one, a byte of a name that is not
    UTF-8) as the ``\\xNN`` of its bytes. Shown, it stays one visible line;
    pasted, it names exactly that file or directory, where ``printable`` of a
    quoted word would name another (``^[`` is two characters, not an ESC)."""
    import shlex

    if printable_name(text) == text:
        return shlex.quote(text)
    out = []
    for ch in text:
        if ch in "'\\":
            out.append("\\" + ch)
        elif printable_name(ch) == ch:
            out.append(ch)
        else:
            try:
                data = ch.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:  # a lone surrogate no file name's byte made
                data = ch.encode("utf-8", "surrogatepass")
            out.append("".join(f"\\x{b:02x}" for b in data))
    return "$'" + "".join(out) + "'"


def cells(text: str) -> int:
    """The terminal cells ``text`` takes: an East Asian Wide or Fullwidth
    character (CJK, most emoji) 2, a combining mark or a zero-width one (a
    variation selector, ZWJ) 0, anything else 1. A table padded by ``len``
    is misaligned by every Chinese title."""
    if text.isascii():
        return len(text)
    return sum(map(_cell, text))


def _cell(ch: str) -> int:
    import unicodedata  # only for text that is not ASCII

    if ch < "\u0300":  # Latin-1 and below: one cell (what is printed went through printable())
        return 1
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def pad(text: str, width: int, right: bool = False) -> str:
    """``text`` padded with spaces to ``width`` cells (on the left: ``right``),
    a table's cell: on one line (``printable_name``)."""
    text = printable_name(text)
    fill = " " * max(0, width - cells(text))
    return fill + text if right else text + fill


def _fit(chars, room: int) -> list[str]:
    """The leading chars of ``chars`` that fit in ``room`` cells; a wide char
    that does not fit whole is left out (never half of one), the zero-width
    marks of a char kept stay with it."""
    kept: list[str] = []
    used = 0
    for ch in chars:
        w = _cell(ch)
        if used + w > room:
            break
        kept.append(ch)
        used += w
    return kept


def clip(text: str, width: int) -> str:
    """``text`` on one line in at most ``width`` cells, cut with "…"."""
    text = printable(" ".join(text.split()))
    if cells(text) <= width:
        return text
    return "".join(_fit(text, width - 1)) + "…"


def clip_left(text: str, width: int) -> str:
    """A path on one line (``printable_name``) in at most ``width`` cells: the
    end of a path is what tells projects apart, so it is cut from the left."""
    text = printable_name(text)
    if cells(text) <= width:
        return text
    tail = _fit(reversed(text), width - 1)
    while tail and _cell(tail[-1]) == 0:  # a mark without its base char: drop it
        tail.pop()
    return "…" + "".join(reversed(tail))


def home_relative(path: str) -> str:
    home = os.path.expanduser("~")
    return "~" + path[len(home):] if home != "/" and (path == home or path.startswith(home + "/")) else path


def project_label(cwd: str | None, folder: str | None = None) -> str:
    """A project as every command names it: its working directory, under
    ``~`` when in the home directory (``~/src/app``); the project dir's
    encoded name (``-home-dev-app``) only when no entry says the cwd; ``?``
    when neither. On one line, shown (``printable_name``): a cwd is any
    directory's name."""
    if cwd:
        return printable_name(home_relative(cwd))
    return printable_name(folder or "?")


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``1 session``, ``2 sessions``, ``0 entries`` (``plural`` when adding an
    s is wrong): every count the CLI prints for a person goes through here."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def skipped_lines(numbers: list[int], shown: int = 5) -> str:
    """``3 lines skipped (2, 7, 9)``: one summary for any number of bad lines."""
    n = len(numbers)
    listed = ", ".join(map(str, numbers[:shown])) + (", …" if n > shown else "")
    return f"{count(n, 'line')} skipped ({'line' if n == 1 else 'lines'} {listed})"


def local_time(iso: str | None, today: date | None = None, *, seconds: bool = False) -> str:
    """An entry's ISO-8601 UTC timestamp in the local time zone (``TZ``): the time
    alone when it is today, else the date too, so a jump from last year to today
    shows. ``?`` for a missing or unreadable timestamp. ``seconds``: always the
    date and the time to the second (an export: a document read on other days)."""
    from datetime import datetime  # imported by what prints a time, not by every run

    from sessiond.store.entries import entry_time

    parsed = entry_time(iso)
    if parsed is None:
        return "?"
    when = parsed.astimezone()
    if seconds:
        return when.strftime("%Y-%m-%d %H:%M:%S")
    if when.date() == (today or datetime.now().astimezone().date()):
        return when.strftime("%H:%M:%S")
    return when.strftime("%Y-%m-%d %H:%M")


RECENT = 86400
"""Seconds within which ``when`` says how long ago rather than the date."""


def when(iso: str | None, now: float | None = None) -> str:
    """When something happened, as every listing shows it (list's CREATED and
    ACTIVE, search's hits, the trash, prune, du, rm): how long ago while
    recent (``just now``, ``5m ago``, ``3h ago``: under ``RECENT``), else the
    local date and time (``2026-01-31 09:30``, ``TZ``). ``?`` for a missing or
    unreadable timestamp. ``--json`` keeps the ISO-8601 form with its zone.
    Times within a conversation (show, tail, watch, export) are
    ``local_time``'s: there the time of day is what is read."""
    from sessiond.store.entries import entry_time

    then = entry_time(iso)
    if then is None:
        return "?"
    secs = (time.time() if now is None else now) - then.timestamp()
    if -60 < secs < RECENT:  # a minute ahead is a clock's skew, not the future
        secs = max(0, int(secs))
        return f"{secs // 3600}h ago" if secs >= 3600 else f"{secs // 60}m ago" if secs >= 60 else "just now"
    return then.astimezone().strftime("%Y-%m-%d %H:%M")


class Progress:
    """A one-line counter on stderr for long runs (a few thousand files and more),
    only when stdout is a terminal (a person is watching; piped output and
    scripts see nothing), redrawn at most ten times a second."""

    THRESHOLD = 2000

    def __init__(self, total: int, what: str) -> None:
        self.total = total
        self.what = what
        self.n = 0
        self.shown = False
        self.last = 0.0
        self.on = sys.stdout.isatty()

    def update(self, done: int, total: int) -> None:
        self.n, self.total = done, total
        if not self.on or total < self.THRESHOLD:
            return
        now = time.monotonic()
        if now - self.last >= 0.1 or done == total:
            self.last = now
            self.shown = True
            echo(f"\r{printable(self.what)} {done}/{total}", err=True, nl=False, raw=True)

    def step(self) -> None:
        self.update(self.n + 1, self.total)

    def done(self) -> None:
        if self.shown:
            echo("\r" + " " * 40 + "\r", err=True, nl=False, raw=True)

    finish = done

    @classmethod
    def callback(cls, what: str) -> Progress:
        return cls(0, what)

    def __call__(self, done: int, total: int) -> None:
        self.update(done, total)


