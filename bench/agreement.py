"""How often sessiond agrees with Anthropic's own readers on real transcripts.

Why: Claude Code's listing and resume walk are ported by the Agent SDK
(``claude_agent_sdk.list_sessions`` / ``get_session_messages``); a root pointed
at ``~/.claude`` should name and restore every session as they do. For every
``*.jsonl`` of a corpus directory this copies the file into a throwaway Claude
config dir (``CLAUDE_CONFIG_DIR``) as ``projects/-corpus/<id>.jsonl`` (the
file's own name when it is a session id, else a name derived from it), then
compares

* the title: sessiond's ``session_title`` (None when the file is not listed)
  with the SDK's ``list_sessions`` ``summary`` (absent when not listed);
* the resumed messages: the uuids of sessiond's resumed chain (the walk, before
  the repairs that make it valid for the model API drop an empty message or a
  tool call without result) that the SDK would show (user/assistant, not meta,
  not sidechain, not a teammate's) with the uuids ``get_session_messages``
  returns, as sets (sessiond orders a response's blocks for the API; files
  where only the order differs are counted apart).

A file agrees when both match. Where the SDK and Claude Code differ, Claude
Code is the tie-breaker: the SDK names a session begun with a slash command
by the command's name, Claude Code's picker shows its arguments too (counted
apart); the SDK's port has no link for a lost parent line,
Claude Code links the child to an entry at most 5 s older (and so does
sessiond); for such a file the SDK is asked again about a copy whose lost
parents are those links, and a match is counted apart ("agrees with Claude
Code"). Every other disagreement is printed, not hidden.

    .venv/bin/python bench/agreement.py [CORPUS_DIR] [--verbose]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

# bench/ (this script's dir, first on sys.path) holds a secrets.py, which would
# stand in for the stdlib's when the Agent SDK's imports ask for it.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import msgspec  # noqa: E402

from sessiond.client.resume.chain import choose_leaf, walk  # noqa: E402
from sessiond.client.resume.loader import load_entries  # noqa: E402
from sessiond.client.resume.pipeline import resolve_chain  # noqa: E402
from sessiond.client.resume.relink import apply_compaction, apply_snips  # noqa: E402
from sessiond.store.lite import read_lite  # noqa: E402
from sessiond.store.paths import is_session_id  # noqa: E402

DEFAULT_CORPUS = Path(__file__).resolve().parent.parent / "tests" / "corpus" / "claude-code"


def _sessiond_title(path: Path) -> str | None:
    info = read_lite(path)
    return info.title if info.listable else None


def _sessiond_uuids(path: Path) -> list[str]:
    shown = []
    for e in resolve_chain(path).chain:
        if not e.uuid or e.type not in ("user", "assistant") or e.isSidechain:
            continue
        line = msgspec.json.decode(e.raw) if e.raw else {}
        if not line.get("isMeta") and not line.get("teamName"):
            shown.append(e.uuid)
    return shown


def _claude_links(path: Path) -> dict[str, str]:
    """child uuid -> the entry Claude Code's 5 s fallback links it to."""
    stem = path.name.removesuffix(".jsonl")
    loaded = load_entries(path, skip_threshold=float("inf"))
    e, side = loaded.entries, loaded.sidechain_only
    apply_compaction(e, loaded.boundaries, sidechain_only=side)
    apply_snips(e, loaded.snips)
    leaf = choose_leaf(e, sidechain_only=side, session=stem if is_session_id(stem) else None)
    chain, bridges = walk(e, leaf, sidechain_only=side)[:2]  # (a 2-tuple before issue 29: the script measures both)
    at = {b.at for b in bridges}
    return {c.uuid: chain[i - 1].uuid for i, c in enumerate(chain) if c.uuid in at and i > 0}  # type: ignore[misc]


def _relinked_copy(path: Path, links: dict[str, str], dest: Path) -> None:
    out = []
    for raw in path.read_bytes().split(b"\n"):
        try:
            d = json.loads(raw)
        except ValueError:
            out.append(raw)
            continue
        if isinstance(d, dict) and d.get("uuid") in links:
            d["parentUuid"] = links[d["uuid"]]
            raw = json.dumps(d).encode()
        out.append(raw)
    dest.write_bytes(b"\n".join(out))


def compare(corpus: Path, verbose: bool) -> tuple[int, int, list[str]]:
    files = sorted(p for p in corpus.glob("*.jsonl"))
    tmp = Path(tempfile.mkdtemp(prefix="sessiond-agreement-"))
    os.environ["CLAUDE_CONFIG_DIR"] = str(tmp)
    proj = tmp / "projects" / "-corpus"
    proj.mkdir(parents=True)
    names: dict[str, Path] = {}
    for p in files:
        stem = p.name.removesuffix(".jsonl")
        tail = stem.rsplit("__", 1)[-1]
        sid = tail if is_session_id(tail) and tail not in names else str(uuid.uuid5(uuid.NAMESPACE_URL, p.name))
        names[sid] = p
        shutil.copyfile(p, proj / f"{sid}.jsonl")
    import claude_agent_sdk as sdk

    listed = {s.session_id: s.summary for s in sdk.list_sessions()}
    agree = 0
    notes: list[str] = []
    reordered: list[str] = []
    claude_only: list[str] = []
    for sid, src in names.items():
        copy = proj / f"{sid}.jsonl"
        ours_title = _sessiond_title(copy)
        theirs_title = listed.get(sid)
        ours_chain = _sessiond_uuids(copy) if ours_title is not None or theirs_title is not None else []
        theirs_chain = [m.uuid for m in sdk.get_session_messages(sid)] if theirs_title is not None else []
        if theirs_title is None and ours_title is None:
            ok_chain = True
        else:
            ok_chain = set(ours_chain) == set(theirs_chain)
            if ok_chain and ours_chain != theirs_chain:
                reordered.append(src.name)
        ok_title = ours_title == theirs_title
        if ok_title and ok_chain:
            agree += 1
            continue
        if (not ok_title and ok_chain and theirs_title is not None and ours_title is not None
                and theirs_title.startswith("/") and ours_title.startswith(theirs_title + " ")):
            # A slash command first: the picker shows its arguments, the SDK the name alone
            # (tests/e2e/test_claude_picker.py reads both pickers).
            claude_only.append(f"{src.name} (the picker shows the command's arguments: {ours_title!r})")
            continue
        links = _claude_links(copy) if ok_title and not ok_chain else {}
        if links:
            twin = str(uuid.uuid5(uuid.NAMESPACE_URL, "relinked " + src.name))
            _relinked_copy(copy, links, proj / f"{twin}.jsonl")
            if set(m.uuid for m in sdk.get_session_messages(twin)) == set(ours_chain):
                claude_only.append(f"{src.name} ({len(links)} lost parent(s) linked within 5 s)")
                continue
        why = []
        if not ok_title:
            why.append(f"title: sessiond {ours_title!r} / SDK {theirs_title!r}")
        if not ok_chain:
            extra = [u for u in ours_chain if u not in set(theirs_chain)]
            lost = [u for u in theirs_chain if u not in set(ours_chain)]
            why.append(f"messages: sessiond {len(ours_chain)} / SDK {len(theirs_chain)}"
                       f" (only sessiond {len(extra)}, only SDK {len(lost)})")
        notes.append(f"{src.name}: " + "; ".join(why))
    shutil.rmtree(tmp)
    for name in claude_only:
        notes.append(f"agrees with Claude Code, not the SDK: {name}")
    notes.append(f"agree with the SDK: {agree} of {len(names)}; counting Claude Code as the tie-breaker: "
                 f"{agree + len(claude_only)} of {len(names)}")
    if reordered:
        notes.append(f"same messages, another order (a response's blocks in API order): {len(reordered)}")
    return agree + len(claude_only), len(names), notes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", nargs="?", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    agree, total, notes = compare(args.corpus, args.verbose)
    for n in notes:
        print(n)
    print(f"agree (Claude Code breaking ties): {agree} of {total} transcripts ({args.corpus})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
