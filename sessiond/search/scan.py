"""The same search without an index: read every transcript of the scope.

Used by ``sessiond search`` when no daemon runs and no index exists yet (a
fresh root, or the index turned off). It applies the same rules as the index
(the same extraction, words as the tokenizer splits them, case and diacritics
folded, phrases as consecutive words, ``*`` prefixes) and ranks by a plain
term-frequency score, best entry per session. Slow on big stores by nature:
the CLI says that it scanned.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

from sessiond.store.jsonl import iter_lines
from sessiond.store.lite import title_of
from sessiond.store.paths import projects_dir

from .extract import extract
from .files import transcripts
from .query import Hit, Term, hit_title, parse, words_of

SNIPPET_WORDS = 24


def fold(word: str) -> str:
    """Case and diacritics folded, as ``unicode61 remove_diacritics 2`` does."""
    decomposed = unicodedata.normalize("NFKD", word.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def _positions(tokens: list[str], term: Term) -> list[int]:
    words = [fold(w) for w in term.words]
    n = len(words)
    out = []
    for i in range(len(tokens) - n + 1):
        if all(tokens[i + k] == words[k] for k in range(n - 1)):
            last = tokens[i + n - 1]
            if last == words[-1] or (term.prefix and last.startswith(words[-1])):
                out.append(i)
    return out


def _prefilter(terms: list[Term]) -> list[bytes]:
    """ASCII words every matching line must contain (lowercased bytes)."""
    out = []
    for t in terms:
        w = t.words[0]
        if w.isascii():
            out.append(w.lower().encode())
    return out


def _snippet(text: str, first: int, spans_words: list[tuple[int, int]]) -> tuple[str, list[tuple[int, int]]]:
    import re

    matches = list(re.finditer(r"[^\W_]+", text))
    lo = max(0, first - SNIPPET_WORDS // 3)
    hi = min(len(matches), lo + SNIPPET_WORDS)
    if not matches:
        return text[:200], []
    start = matches[lo].start()
    end = matches[hi - 1].end()
    prefix = "…" if lo > 0 else ""
    out = prefix + " ".join(text[start:end].split())
    # recompute highlight ranges in the whitespace-normalized snippet
    spans = []
    norm_matches = list(re.finditer(r"[^\W_]+", out))
    for a, b in spans_words:
        if lo <= a and b <= hi:
            spans.append((norm_matches[a - lo].start(), norm_matches[b - 1 - lo].end()))
    return out + ("…" if hi < len(matches) else ""), spans


def scan(root: Path, text: str, *, projects: list[str] | None = None, limit: int = 20,
         since: str | None = None, role: str | None = None) -> list[Hit]:
    terms = parse(text)
    needles = _prefilter(terms)
    best: dict[tuple[str, str], tuple[float, Hit]] = {}
    titles: dict[tuple[str, str], tuple[str | None, str | None]] = {}
    for t in transcripts(root, projects):
        key = (t.project, t.session)
        first_prompt = None
        custom = ai = summary = last_prompt = None
        last_ts = None
        cwd = None
        for line in iter_lines(t.path):
            low = line.lower()
            got = None
            if not all(n in low for n in needles):
                if t.agent is None and (first_prompt is None or b'-title"' in low or b'"summary"' in low
                                        or b'"last-prompt"' in low):
                    got = extract(line)  # still needed for the title
                    if got is None:
                        continue
                    first_prompt = first_prompt or got.prompt
                    custom = got.titles.get("custom-title", custom)
                    ai = got.titles.get("ai-title", ai)
                    summary = got.titles.get("summary", summary)
                    last_prompt = got.titles.get("last-prompt", last_prompt)
                continue
            got = extract(line)
            if got is None:
                continue
            if got.timestamp:
                last_ts = max(last_ts or "", got.timestamp)
            cwd = cwd or got.cwd
            if t.agent is None:
                first_prompt = first_prompt or got.prompt
                custom = got.titles.get("custom-title", custom)
                ai = got.titles.get("ai-title", ai)
                summary = got.titles.get("summary", summary)
                last_prompt = got.titles.get("last-prompt", last_prompt)
            ts = got.timestamp or last_ts
            if since is not None and (ts is None or ts < since):
                continue
            for doc in got.docs:
                if role is not None and doc.role != role:
                    continue
                raw_words = words_of(doc.text)
                tokens = [fold(w) for w in raw_words]
                found = [_positions(tokens, term) for term in terms]
                if not all(found):
                    continue
                score = sum(len(p) for p in found) / (1.0 + len(tokens) / 50.0)
                if key in best and best[key][0] >= score:
                    continue
                spans = [(p, p + len(term.words)) for term, ps in zip(terms, found) for p in ps]
                first = min(p for ps in found for p in ps)
                snip, hl = _snippet(doc.text, first, sorted(spans))
                best[key] = (score, Hit(
                    sessionId=t.session, project=t.project, path=str(projects_dir(root) / t.project / f"{t.session}.jsonl"),
                    title=None, uuid=got.uuid, timestamp=ts, role=doc.role, snippet=snip, highlights=hl,
                    score=round(score, 6), sidechain=bool(got.sidechain or t.agent), agentId=t.agent, file=t.path,
                    cwd=got.cwd or cwd))
        if t.agent is None:
            titles[key] = (title_of(custom, ai, last_prompt, summary, first_prompt), cwd)
    ranked = sorted(best.items(), key=lambda kv: (-kv[1][0], kv[0][1]))[:limit]
    out = []
    for key, (_, hit) in ranked:
        title, cwd = titles.get(key, (None, None))
        hit.title = hit_title(Path(hit.path), title)
        hit.cwd = hit.cwd or cwd
        out.append(hit)
    return out
