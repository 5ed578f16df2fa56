"""The compact dedup set against a plain set of strings: same answers, always.

Dedup is what makes resends idempotent, so the compact set must behave exactly
as ``set[str]`` for every sequence of what dedup does (add, update, membership,
disjointness, clear), whatever the strings: canonical uuids, the same uuid in
uppercase or without dashes, legacy ids, near-misses of the format, and enough
of them that packing, filter growth and the packed lookup all run."""

from __future__ import annotations

import uuid as uuidlib

from hypothesis import given, settings
from hypothesis import strategies as st

from sessiond.daemon import uuidset
from sessiond.daemon.uuidset import UuidSet
from tests.helpers import examples

canonical = st.uuids().map(str)
variants = st.one_of(
    canonical,
    canonical.map(str.upper),
    canonical.map(lambda u: u.replace("-", "")),
    canonical.map(lambda u: u[:35] + "G"),
    canonical.map(lambda u: u[:8] + "_" + u[9:]),
    canonical.map(lambda u: " " + u[1:]),
    st.text(max_size=40),
    st.sampled_from(["", "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff", "msg_01"]),
)
pool = st.lists(variants, min_size=1, max_size=60, unique=True)
op = st.tuples(st.sampled_from(["add", "update", "contains", "disjoint", "clear", "pack", "many", "start", "adopt"]),
               st.lists(st.integers(min_value=0, max_value=59), max_size=12))


@settings(max_examples=examples(300), deadline=None)
@given(pool, st.lists(op, max_size=40), st.integers(min_value=1, max_value=8))
def test_behaves_as_a_set(strings, ops, pack_min):
    old_min, uuidset.PACK_MIN = uuidset.PACK_MIN, pack_min  # pack often: every path runs
    try:
        compact, plain = UuidSet(), set()
        fresh = iter(str(uuidlib.uuid4()) for _ in range(10**6))
        job = None  # a background packing: built from a snapshot, adopted later
        for name, picks in ops:
            items = [strings[i % len(strings)] for i in picks]
            if name == "add":
                for u in items:
                    compact.add(u)
                    plain.add(u)
            elif name == "update":
                compact |= set(items)
                plain |= set(items)
            elif name == "many":  # a batch of new uuids, as an append brings
                new = [next(fresh) for _ in range(3 * pack_min)]
                compact.update(new)
                plain.update(new)
            elif name == "disjoint":
                assert compact.isdisjoint(set(items)) == plain.isdisjoint(set(items))
            elif name == "clear":
                compact.clear()
                plain.clear()
            elif name == "pack" and not compact.packing:
                compact.pack()
            elif name == "start" and job is None:
                items = list(compact.recent)
                compact.packing = True
                job = (compact.packed_with(items), compact.generation, items)
            elif name == "adopt" and job is not None:
                compact.adopt(*job)
                job = None
            for u in strings:
                assert (u in compact) == (u in plain), u
            assert len(compact) == len(plain)
        assert set(compact) == plain
        for u in list(plain)[:20]:
            assert u.upper() in compact or u.upper() not in plain
    finally:
        uuidset.PACK_MIN = old_min


def test_packs_canonical_uuids_compactly():
    ids = [str(uuidlib.uuid4()) for _ in range(20_000)]
    s = UuidSet(ids)
    assert s.packed == len(ids) and not s.recent and not s.other
    assert s.nbytes / len(ids) <= 40  # 24 of record, the rest filter and buckets
    assert all(u in s for u in ids[::97])
    assert str(uuidlib.uuid4()) not in s
    assert ids[5].upper() not in s  # a different string: not a duplicate


def test_non_canonical_ids_are_kept_exactly():
    odd = ["MSG-1", ids := "A" * 36, "12345678-1234-1234-1234-12345678901Z", "12345678-1234-1234-1234-1234567890AB"]
    s = UuidSet(odd)
    assert set(s) == set(odd) and len(s.other) == len(odd)
    assert ids.lower() not in s


def test_buckets_are_malloc_blocks_not_small_objects():
    """Each bucket's buffer is over pymalloc's 512-byte limit, so it comes from
    malloc, whose free pages ``malloc_trim`` returns; pymalloc keeps an arena
    while any block in it lives (a session of 5,000 uuids had 512 buckets of
    about 240 bytes)."""
    s = UuidSet([str(uuidlib.uuid4()) for _ in range(5000)])
    assert min(map(len, s.buckets)) > 512


def test_exact_through_every_growth_step():
    """Packed in steps through bucket doublings and filter growths: every uuid
    held is found, no other is."""
    held = [str(uuidlib.uuid4()) for _ in range(40_000)]
    s = UuidSet()
    sizes = set()
    for i in range(0, len(held), 700):
        s.update(held[i:i + 700])
        s.pack()
        sizes.add((len(s.buckets), len(s.filter)))
    assert len({b for b, _ in sizes}) >= 3 and len({f for _, f in sizes}) >= 3  # both grew several times
    assert all(u in s for u in held)
    assert s.isdisjoint({str(uuidlib.uuid4()) for _ in range(20_000)})
    assert not s.isdisjoint({held[123], str(uuidlib.uuid4())})
