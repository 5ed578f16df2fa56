"""The picker's filter: which sessions a typed query keeps, and in what order.

A query is words; a session is kept when every word is in its title
(case-insensitive substring) or starts its id, or, for a word of four letters
or more, when one word of the title is one typo away from it (a letter
changed, added, dropped or two swapped), or starts with something one typo
away (a word still being typed). Sessions matched exactly come first, then the
ones matched only through a typo; each group keeps the listing's order (newest
activity first).

Why an index and not a scan per keystroke: the typo check compares a query word
with title words, and the same words recur across thousands of titles; each
distinct title word is compared once per query word (cached), so a keystroke
costs a set lookup per title word.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

TYPO_MIN = 4
"""The shortest query word matched with a typo (shorter ones would match too much)."""

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


class Matcher:
    """The sessions' titles and ids, indexed for filtering as one types.

    ``titles`` and ``ids`` are parallel to the listing (newest first);
    ``filter(query)`` gives the indexes to show, in order."""

    def __init__(self, titles: Sequence[str], ids: Sequence[str]) -> None:
        self.lowered = [t.lower() for t in titles]
        self.ids = [i.lower() for i in ids]
        self.title_words = [frozenset(words(t)) for t in titles]
        vocabulary: set[str] = set()
        for ws in self.title_words:
            vocabulary.update(ws)
        self.vocabulary = sorted(vocabulary)
        self._near = lru_cache(maxsize=256)(self._near_words)

    def _near_words(self, word: str) -> frozenset[str]:
        """The title words one typo from ``word``, or starting with a prefix one
        typo from it (``refactr`` finds ``refactoring``)."""
        n = len(word)
        found = set()
        for w in self.vocabulary:
            if len(w) < n - 1:
                continue
            if one_typo(word, w) or (len(w) > n and (one_typo(word, w[:n]) or one_typo(word, w[:n + 1]))):
                found.add(w)
        return frozenset(found)

    def filter(self, query: str) -> list[int]:
        """The indexes of the sessions ``query`` keeps, exact matches first."""
        terms = query.lower().split()
        if not terms:
            return list(range(len(self.lowered)))
        near = [self._near(t) if len(t) >= TYPO_MIN else frozenset() for t in terms]
        exact: list[int] = []
        typo: list[int] = []
        for i, title in enumerate(self.lowered):
            sid = self.ids[i]
            fuzzy = False
            for t, close in zip(terms, near, strict=True):
                if t in title or sid.startswith(t):
                    continue
                if close and not close.isdisjoint(self.title_words[i]):
                    fuzzy = True
                    continue
                break
            else:
                (typo if fuzzy else exact).append(i)
        return exact + typo
