"""Everything before a compaction stays reachable (issue 29): ``show`` stays
what a resume restores, ``show --history`` adds the turns before the last
compaction, marked, and ``export`` includes them, marked (collapsed in HTML).

On a real transcript compacted twice (dagster-io/erk 41140470): its first
prompt, the ``/erk:plan-implement`` command, lies before both compactions;
the resumed conversation starts at the last boundary and its summary.
"""

from __future__ import annotations

import json

from tests.conftest import CORPUS

FILE = CORPUS / "dagster-io__erk__41140470-f3f6-4945-bf7f-884c4a037ab0.jsonl"
FIRST_PROMPT = "erk:plan-implement is running"
SHOWN_FIRST_PROMPT = "· command: /erk:plan-implement 8107"
EXPORTED_FIRST_PROMPT = {"markdown": "*command: /erk:plan-implement 8107*",
                         "html": '<span class="label">command</span>/erk:plan-implement 8107'}
"""How ``export`` shows it: the same notice as ``show``, never the raw markup."""
"""How ``show`` prints that prompt: its ``<command-message>`` markup as the command it records."""
BEFORE_BANNER = "══ before compaction: "
AFTER_BANNER = "══ after compaction: what a resume restores"


def test_show_is_what_a_resume_restores_and_history_adds_the_rest(daemon_factory):
    d = daemon_factory()  # never started: show reads the file itself
    plain = d.cli("show", str(FILE), "--no-pager").stdout.decode()
    assert SHOWN_FIRST_PROMPT not in plain and BEFORE_BANNER not in plain
    assert "earlier turns were compacted: `show --history` shows them too" in plain
    full = d.cli("show", str(FILE), "--no-pager", "--history").stdout.decode()
    before, _, after = full.partition(AFTER_BANNER)
    assert BEFORE_BANNER in before and SHOWN_FIRST_PROMPT in before and SHOWN_FIRST_PROMPT not in after
    assert after.count("This session is being continued") == 1  # the last summary, after the banner
    shown = json.loads(d.cli("show", str(FILE), "--json").stdout)
    assert "history" not in shown
    with_history = json.loads(d.cli("show", str(FILE), "--json", "--history").stdout)
    assert {k: v for k, v in with_history.items() if k != "history"} == shown
    history = with_history["history"]
    assert not {m["uuid"] for m in history} & set(shown["chain"])
    assert sum(m.get("subtype") == "compact_boundary" for m in history) == 1  # the earlier compaction
    times = [m["timestamp"] for m in history if m.get("timestamp")]
    assert max(times) < shown["messages"][0]["timestamp"]  # all of it older than the last boundary
    assert not d.socket.exists()


def test_export_includes_the_history_marked(daemon_factory):
    d = daemon_factory()
    md = d.cli("export", str(FILE), "--format", "markdown").stdout.decode()
    before, _, after = md.partition("## After compaction")
    assert "<summary>Before compaction: " in before and "(not what a resume restores)" in before
    assert EXPORTED_FIRST_PROMPT["markdown"] in before and EXPORTED_FIRST_PROMPT["markdown"] not in after
    html = d.cli("export", str(FILE), "--format", "html").stdout.decode()
    collapsed, _, after = html.split('<details class="history">', 1)[1].partition('<h2 class="after">')
    assert "Before compaction:" in collapsed and EXPORTED_FIRST_PROMPT["html"] in collapsed
    assert EXPORTED_FIRST_PROMPT["html"] not in after and "&lt;command-message&gt;" not in html


def test_export_redacts_the_history_too(daemon_factory, tmp_path):
    """The turns before a compaction are exported like the rest: their secrets
    redacted unless ``--no-redact``."""
    from tests.secrets.fakes import fakes

    secret = next(f.value for f in fakes(7) if f.kind == "github-token")
    lines = FILE.read_bytes().splitlines(keepends=True)
    at = next(i for i, raw in enumerate(lines) if FIRST_PROMPT.encode() in raw)
    # the secret in the command's arguments, which every export shows (the notice's gist)
    lines[at] = lines[at].replace(b"<command-args>8107", f"<command-args>8107 token {secret}".encode(), 1)
    assert secret.encode() in lines[at]
    copy = tmp_path / FILE.name
    copy.write_bytes(b"".join(lines))
    d = daemon_factory()
    for fmt in ("markdown", "html"):
        out = d.cli("export", str(copy), "--format", fmt).stdout.decode()
        before = out.split("## After compaction" if fmt == "markdown" else '<h2 class="after">', 1)[0]
        assert "/erk:plan-implement 8107 token " in before and secret not in out
        assert "REDACTED:github-token:" in before.partition("/erk:plan-implement 8107 token ")[2][:40]
    kept = d.cli("export", str(copy), "--format", "markdown", "--no-redact").stdout.decode()
    assert secret.replace("_", "\\_") in kept  # Markdown escapes the token's underscore
