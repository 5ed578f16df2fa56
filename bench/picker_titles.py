"""What Claude Code's real ``--resume`` picker shows, release by release, next
to sessiond's title, for the corpus files of ``tests/claude_picker.py``.

Why: the picker is the authority on titles and its rules are only readable in
a minified binary; this runs it (offline, in tmux) for Claude Code 2.1.197
(the npm package, installed into a throwaway dir unless ``--old`` names a
binary) and the release bundled in the Agent SDK's wheel, and prints one
Markdown table: file, rule, each picker's title (``-`` when not listed, in
the picker's row order), sessiond's (``sessiond.store.lite``, ``-`` when not
listed). ``tests/e2e/test_claude_picker.py`` asserts what it shows.

    .venv/bin/python bench/picker_titles.py [--old PATH]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])  # the repo, not bench/ (bench/secrets.py is no stdlib)

import claude_agent_sdk  # noqa: E402

from sessiond.store.lite import read_lite  # noqa: E402
from sessiond.store.paths import sanitize  # noqa: E402
from tests.claude_picker import CASES, OLD_RELEASE, picker_titles  # noqa: E402

NEW = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"


def old_binary(where: Path) -> Path:
    npm = shutil.which("npm")
    if npm is None:
        sys.exit("npm is not installed: pass --old PATH to a Claude Code 2.1.197 binary")
    subprocess.run([npm, "install", "--no-save", "--no-audit", "--no-fund", "--prefix", str(where),
                    f"@anthropic-ai/claude-code@{OLD_RELEASE}"], check=True, timeout=600, capture_output=True)
    return sorted((where / "node_modules").glob("@anthropic-ai/claude-code-*/claude"))[0]


def version(binary: Path) -> str:
    return subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60).stdout.split()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, help=f"a Claude Code {OLD_RELEASE} binary (default: npm install it)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sd-picker-") as tmp:
        base = Path(tmp)
        binaries = [args.old or old_binary(base / "npm"), NEW]
        shown = []
        for i, binary in enumerate(binaries):
            print(f"running the picker of {binary} ...", file=sys.stderr)
            titles, _ = picker_titles(binary, base / f"run{i}")
            shown.append(titles)
        project = base / "run1" / "config" / "projects" / sanitize(str((base / "run1" / "work").resolve()))
        ours = {}
        for case in CASES:
            info = read_lite(project / f"{case.session}.jsonl")
            ours[case.session] = info.title if info.listable else None
        heads = [f"{version(b)} shows (row)" for b in binaries]
        print("| file | rule | " + " | ".join(heads) + " | sessiond |")
        print("|---|---|" + "---|" * len(heads) + "---|")
        for case in CASES:
            cells = []
            for titles in shown:
                rank = list(titles).index(case.session) + 1 if case.session in titles else None
                cells.append(f"{titles[case.session]} ({rank})" if rank else "-")
            print(f"| `{case.corpus[:40]}…` | {case.rule} | " + " | ".join(cells) + f" | {ours[case.session] or '-'} |")


if __name__ == "__main__":
    main()
