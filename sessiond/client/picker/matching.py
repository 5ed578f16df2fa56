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
distinct title word is compared once per query word, and the sessions holding
the close ones come from an inverted index. Each query word's sessions are
kept (cached), so a keystroke computes only the word being typed, and only
within what the word so far matched (every rule above keeps fewer sessions for
a longer word); the words' sets are then intersected.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

TYPO_MIN = 4
"""The shortest query word matched with a typo (shorter ones would match too much)."""

TERMS_KEPT = 4096
"""Query words remembered as typed (to look for a longer one within what it matched)."""

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
        self.rows_of: dict[str, list[int]] = {}
        """Each title word: the sessions whose title holds it."""
        for i, t in enumerate(self.lowered):
            for w in set(words(t)):
                self.rows_of.setdefault(w, []).append(i)
        self.vocabulary = sorted(self.rows_of)
        self._near = lru_cache(maxsize=256)(self._near_words)
        self._term = lru_cache(maxsize=256)(self._term_sets)
        self._terms_seen: set[str] = set()
        self._near_seen: dict[str, frozenset[str]] = {}

    def _near_words(self, word: str) -> frozenset[str]:
        """The title words one typo from ``word``, or starting with a prefix one
        typo from it (``refactr`` finds ``refactoring``), or holding its letters
        in order (``rfctor`` finds ``refactor``). Typing on, only the words near
        the word so far are compared (a word near the longer one is near the
        shorter: each rule keeps fewer words for a longer word)."""
        n = len(word)
        shorter = self._near_seen.get(word[:-1]) if n > TYPO_MIN else None
        found = set()
        for w in self.vocabulary if shorter is None else shorter:
            if len(w) < n - 1:
                continue
            if one_typo(word, w[:n]) or one_typo(word, w[:n + 1]) or one_typo(word, w[:n - 1]) or in_order(word, w):
                found.add(w)
        if len(self._near_seen) >= TERMS_KEPT:
            self._near_seen.clear()
        self._near_seen[word] = near = frozenset(found)
        return near

    def filter(self, query: str) -> list[int]:
        """The indexes of the sessions ``query`` keeps, best matches first."""
        terms = query.lower().split()
        if not terms:
            return list(range(len(self.lowered)))
        plain = [t for t in terms if not t.startswith(("#", "@"))]
        everyone = None if plain else frozenset(range(len(self.lowered)))
        exact = prefix = kept = everyone
        for t in plain:  # a session's tier is its worst word's: sets intersected word by word
            e, p, k = self._term(t)
            exact = e if exact is None else exact & e
            prefix = p if prefix is None else prefix & p
            kept = k if kept is None else kept & k
        assert exact is not None and prefix is not None and kept is not None
        tags = [t[1:] for t in terms if t.startswith("#")]
        places = [t[1:] for t in terms if t.startswith("@") and len(t) > 1]
        if tags or places:
            kept = frozenset(i for i in kept if self._scoped(i, tags, places))
            exact, prefix = exact & kept, prefix & kept
        return sorted(exact) + sorted(prefix - exact) + sorted(kept - prefix)

    def _term_sets(self, term: str) -> tuple[frozenset[int], frozenset[int], frozenset[int]]:
        """The sessions ``term`` matches exactly (a title word, an id prefix),
        also by prefix (in the title), and also by a typo: three growing sets.
        Typing on, the id and title are looked at only in the sessions the
        word so far matched as written (a longer word is in fewer); the typo
        matches come from the index whatever the word so far matched."""
        shorter = term[:-1]
        pool: Sequence[int] = range(len(self.lowered))
        if shorter in self._terms_seen:
            pool = sorted(self._term(shorter)[1])  # typing on: within what the word so far matched as written
        if len(self._terms_seen) >= TERMS_KEPT:  # a long session of typing: start over (only speed is lost)
            self._terms_seen.clear()
        self._terms_seen.add(term)
        lowered, ids = self.lowered, self.ids
        exact = set(self.rows_of.get(term, ()))
        exact.update(i for i in pool if ids[i].startswith(term))
        prefix = exact.union(i for i in pool if term in lowered[i])
        kept = set(prefix)
        if len(term) >= TYPO_MIN:
            for w in self._near(term):
                kept.update(self.rows_of[w])
        return frozenset(exact), frozenset(prefix), frozenset(kept)

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
