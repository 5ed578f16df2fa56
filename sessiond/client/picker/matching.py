"""The picker's filter: which sessions a typed query keeps, and in what order.

A query is words. A plain word keeps a session when it names its id (a prefix
of it) or its title: the same word (exact), a part of it (``sock`` in
``socket``: prefix), or, for a word of four letters or more, a word of the
title one typo away (a letter changed, added, dropped or two swapped, also
from a prefix of a word still being typed: ``refactr``) or holding its letters
in order from the same first letter (``rfctor``): fuzzy. ``#tag`` keeps the
sessions whose tag starts with ``tag`` (``#`` alone: every tagged one);
``@part`` those whose project holds ``part``. Every word must keep a session.
Sessions whose every word matched exactly come first, then those with a word
matched by prefix, then those with a typo; each group keeps the listing's order.

Why an index and not a scan per keystroke: the typo check compares a query word
with title words, and the same words recur across thousands of titles; each
distinct title word is compared once per query word (cached), so a keystroke
costs a set lookup per title word. Typing on (the query growing at its end)
filters only what the previous query kept: every rule above keeps fewer
sessions for a longer word.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

TYPO_MIN = 4
"""The shortest query word matched with a typo (shorter ones would match too much)."""

EXACT, PREFIX, FUZZY = 0, 1, 2
"""How well a word matched a session, best first (a session ranks by its worst word)."""

_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """The lower-cased words of ``text``."""
    return _WORD.findall(text.lower())


def one_typo(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ by at most one edit: a character changed,
    inserted or deleted, or two adjacent ones swapped."""
    if a == b:
        return True
    la, lb = len(a), len(b)
    if abs(la - lb) > 1:
        return False
    i = 0
    shortest = min(la, lb)
    while i < shortest and a[i] == b[i]:
        i += 1
    if la == lb:
        return a[i + 1:] == b[i + 1:] or (a[i + 1:i + 2] == b[i:i + 1] and a[i:i + 1] == b[i + 1:i + 2] and a[i + 2:] == b[i + 2:])
    if la > lb:
        return a[i + 1:] == b[i:]
    return a[i:] == b[i + 1:]


def in_order(word: str, target: str) -> bool:
    """Whether ``word``'s letters are in ``target`` in order, from its first."""
    if not target.startswith(word[:1]):
        return False
    at = 0
    for ch in word:
        at = target.find(ch, at) + 1
        if not at:
            return False
    return True


class Matcher:
    """The sessions' titles, ids, tags and projects, indexed for filtering as
    one types.

    The sequences are parallel to the listing (in the order it is shown);
    ``filter(query)`` gives the indexes to show, best first."""

    def __init__(self, titles: Sequence[str], ids: Sequence[str], tags: Sequence[str] | None = None,
                 projects: Sequence[str] | None = None) -> None:
        self.lowered = [t.lower() for t in titles]
        self.ids = [i.lower() for i in ids]
        self.tags = [t.lower() for t in tags] if tags is not None else [""] * len(self.ids)
        self.projects = [p.lower() for p in projects] if projects is not None else [""] * len(self.ids)
        self.title_words = [frozenset(words(t)) for t in self.lowered]
        vocabulary: set[str] = set()
        for ws in self.title_words:
            vocabulary.update(ws)
        self.vocabulary = sorted(vocabulary)
        self._near = lru_cache(maxsize=256)(self._near_words)
        self._last: tuple[str, list[int]] | None = None

    def _near_words(self, word: str) -> frozenset[str]:
        """The title words one typo from ``word``, or starting with a prefix one
        typo from it (``refactr`` finds ``refactoring``), or holding its letters
        in order (``rfctor`` finds ``refactor``)."""
        n = len(word)
        found = set()
        for w in self.vocabulary:
            if len(w) < n - 1:
                continue
            if one_typo(word, w[:n]) or one_typo(word, w[:n + 1]) or one_typo(word, w[:n - 1]) or in_order(word, w):
                found.add(w)
        return frozenset(found)

    def filter(self, query: str) -> list[int]:
        """The indexes of the sessions ``query`` keeps, best matches first."""
        terms = query.lower().split()
        if not terms:
            self._last = None
            return list(range(len(self.lowered)))
        candidates: Sequence[int] = range(len(self.lowered))
        if self._last is not None and self._narrows(self._last[0], query.lower()):
            candidates = self._last[1]  # typing on: only what the shorter query kept can stay
        tiers = self._tiers(terms, candidates)
        kept = [i for i, _ in tiers]
        self._last = (query.lower(), kept)
        out: list[list[int]] = [[], [], []]
        for i, tier in tiers:
            out[tier].append(i)
        return out[EXACT] + out[PREFIX] + out[FUZZY]

    @staticmethod
    def _narrows(before: str, now: str) -> bool:
        """Whether every session ``now`` keeps was kept by ``before``: ``now``
        goes on from it, and its last word was already complete, or already
        long enough for typos (a shorter one matched only as written)."""
        if not now.startswith(before) or not before.strip():
            return False
        if before[-1].isspace():
            return True
        last = before.split()[-1]
        return last.startswith(("#", "@")) or len(last) >= TYPO_MIN

    def in_scope(self, i: int, query: str) -> bool:
        """Whether session ``i`` passes ``query``'s ``#tag`` and ``@project``
        words (what a session found in the conversations must pass too)."""
        terms = query.lower().split()
        return self._scoped(i, [t[1:] for t in terms if t.startswith("#")],
                            [t[1:] for t in terms if t.startswith("@") and len(t) > 1])

    def _scoped(self, i: int, tags: list[str], places: list[str]) -> bool:
        tag = self.tags[i]
        if tags and not (tag and all(tag.startswith(t) for t in tags)):
            return False
        return all(p in self.projects[i] for p in places)

    def _tiers(self, terms: list[str], candidates: Sequence[int]) -> list[tuple[int, int]]:
        """(index, worst tier of its words) of each candidate every term keeps, in index order."""
        tags = [t[1:] for t in terms if t.startswith("#")]
        places = [t[1:] for t in terms if t.startswith("@") and len(t) > 1]
        plain = [t for t in terms if not t.startswith(("#", "@"))]
        near = [self._near(t) if len(t) >= TYPO_MIN else frozenset() for t in plain]
        kept: list[tuple[int, int]] = []
        scoped = bool(tags or places)
        for i in candidates:
            if scoped and not self._scoped(i, tags, places):
                continue
            title, sid, title_words = self.lowered[i], self.ids[i], self.title_words[i]
            worst = EXACT
            for t, close in zip(plain, near, strict=True):
                if t in title_words or sid.startswith(t):
                    continue
                if t in title:
                    worst = max(worst, PREFIX)
                    continue
                if close and not close.isdisjoint(title_words):
                    worst = FUZZY
                    continue
                break
            else:
                kept.append((i, worst))
        return kept
