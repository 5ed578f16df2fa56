"""Shared pieces of human output: sizes, ages, durations, a progress counter."""

from __future__ import annotations

import sys
import time
from datetime import datetime

import click


def duration(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def age(now: float, iso: str | None) -> str:
    if not iso:
        return "?"
    try:
        then = datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return "?"
    secs = max(0, int(now - then))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit} ago"
    return "just now"


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
            click.echo(f"\r{self.what} {done}/{total}", err=True, nl=False)

    def step(self) -> None:
        self.update(self.n + 1, self.total)

    def done(self) -> None:
        if self.shown:
            click.echo("\r" + " " * 40 + "\r", err=True, nl=False)

    finish = done

    @classmethod
    def callback(cls, what: str) -> "Progress":
        return cls(0, what)

    def __call__(self, done: int, total: int) -> None:
        self.update(done, total)


