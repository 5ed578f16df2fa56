"""``sessiond export`` on the renderer, through the real CLI: ``-o`` picks the
format from the file name, a contradicting ``--format`` is refused in one line
(exit 2, nothing written), HTML to a terminal is refused with a hint while
piped HTML and Markdown to a terminal are written."""

from __future__ import annotations

import pytest

from tests.conftest import CORPUS, DaemonProc
from tests.helpers import in_terminal

SHORT = CORPUS / "dagster-io__erk__8425536d-8181-4524-9ea2-c2148a31dcb0.jsonl"  # commands, caveats, tool calls


@pytest.fixture
def daemon(shared_daemon: DaemonProc) -> DaemonProc:
    return shared_daemon


@pytest.mark.parametrize(("name", "start"), [("chat.html", b"<!DOCTYPE html>"), ("chat.HTM", b"<!DOCTYPE html>"),
                                             ("chat.md", b"# "), ("chat.jsonl", SHORT.read_bytes()[:40]),
                                             ("chat.txt", b"# ")])
def test_the_file_name_picks_the_format(daemon: DaemonProc, short_tmp, name, start):
    out = short_tmp / name
    r = daemon.cli("export", str(SHORT), "-o", str(out), "--no-redact")
    assert out.read_bytes().startswith(start)
    assert r.stderr.decode().splitlines()[-1].startswith(f"wrote {out} (")


def test_a_format_that_contradicts_the_name_is_refused(daemon: DaemonProc, short_tmp):
    out = short_tmp / "chat.md"
    r = daemon.cli("export", str(SHORT), "--format", "html", "-o", str(out), check=False)
    err = r.stderr.decode().splitlines()
    assert r.returncode == 2 and len(err) == 1 and not out.exists(), err
    assert err[0].startswith("sessiond: export: --format html does not match chat.md (a markdown file name)")
    # agreeing, or a name that names no format, is fine
    assert daemon.cli("export", str(SHORT), "--format", "markdown", "-o", str(out)).returncode == 0
    assert daemon.cli("export", str(SHORT), "--format", "html", "-o", str(short_tmp / "chat.page")).returncode == 0


def test_html_to_a_terminal_is_refused_with_a_hint(daemon: DaemonProc):
    env = {**daemon.env, "TERM": "xterm", "PAGER": "cat"}
    status, out = in_terminal(["export", str(SHORT), "--format", "html"], env)
    assert status == 2 and b"<html" not in out and b"<!DOCTYPE" not in out
    assert out.strip().splitlines() == [b"sessiond: export: HTML is a page for a browser, not a terminal: "
                                        b"write it with -o FILE.html, or pipe it"]
    status, out = in_terminal(["export", str(SHORT)], env)  # Markdown is text: fine on a terminal
    assert status == 0 and out.startswith(b"# ")
    piped = daemon.cli("export", str(SHORT), "--format", "html")  # piped HTML is written
    assert piped.stdout.startswith(b"<!DOCTYPE html>")
    for raw in (b"command-name", b"local-command-caveat", b"system-reminder"):  # notices, not markup (escaped or not)
        assert raw not in piped.stdout, raw
