"""Query parsing: words, phrases and prefixes; everything else literal."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sessiond.search.query import QueryError, Term, fts_expression, parse, parse_since, split_marks


def test_words_phrases_and_prefixes():
    assert parse('fix "the parser" pars*') == [Term(("fix",)), Term(("the", "parser")), Term(("pars",), prefix=True)]
    assert fts_expression(parse('fix "the parser" pars*')) == '"fix" AND "the parser" AND "pars"*'


def test_fts_syntax_is_plain_text():
    assert fts_expression(parse("NEAR(a b) OR col:x -y ^z")) == '"NEAR a" AND "b" AND "OR" AND "col x" AND "y" AND "z"'
    assert fts_expression(parse('"unclosed phrase')) == '"unclosed phrase"'
    assert fts_expression(parse("src/foo.py")) == '"src foo py"'
    for empty in ("", "   ", '""', "*** ---", "__"):
        with pytest.raises(QueryError):
            parse(empty)


def test_since_takes_dates_datetimes_and_ages():
    now = datetime(2026, 5, 10, 12, 0, tzinfo=UTC)
    assert parse_since("3d", now) == "2026-05-07T12:00:00.000Z"
    assert parse_since("2w", now) == "2026-04-26T12:00:00.000Z"
    assert parse_since("2026-01-02T03:04:05.678Z") == "2026-01-02T03:04:05.678Z"
    assert parse_since(None) is None
    with pytest.raises(QueryError):
        parse_since("last tuesday")


def test_marks_become_ranges():
    assert split_marks("a \x02bc\x03 d \x02e\x03") == ("a bc d e", [(2, 4), (7, 8)])
