"""The compact dedup sets against a plain set of strings: same answers, always.

Dedup is what makes resends idempotent, so both dedup sets (the pure-Python
``UuidSet`` and the compiled one, ``_uuidset.c``) must behave exactly as
``set[str]`` for every sequence of what dedup does (add, update, membership,
disjointness, clear), whatever the strings: canonical uuids, the same uuid in
uppercase or without dashes, legacy ids, near-misses of the format, and enough
of them that packing, filter growth and the packed lookup (the table's growth)
all run."""

from __future__ import annotations

import copy
import gc
import os
import pickle
import shutil
import subprocess
import sys
import sysconfig
import uuid as uuidlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiond.daemon import uuidset
from sessiond.daemon.uuidset import UuidSet
from tests.helpers import examples

try:
    from sessiond.daemon._uuidset import UuidSet as CompiledUuidSet
except ImportError:  # checked below: only where nothing can compile it
    CompiledUuidSet = None

compiled = pytest.mark.skipif(CompiledUuidSet is None, reason="the compiled dedup set is not built")
IMPLEMENTATIONS = [pytest.param(UuidSet, id="python"), pytest.param(CompiledUuidSet, id="compiled", marks=compiled)]

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


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@settings(max_examples=examples(300), deadline=None)
@given(strings=pool, ops=st.lists(op, max_size=40), pack_min=st.integers(min_value=1, max_value=8))
def test_behaves_as_a_set(impl, strings, ops, pack_min):
    old_min, uuidset.PACK_MIN = uuidset.PACK_MIN, pack_min  # pack often: every path runs
    packs = impl is UuidSet  # the compiled set has no packing step: those ops are the Python set's
    try:
        compact, plain = impl(), set()
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
            elif not packs:
                pass
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
        assert sorted(impl(compact)) == sorted(plain) and sorted(impl.unpacked(set(plain))) == sorted(plain)
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


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_non_canonical_ids_are_kept_exactly(impl):
    odd = ["MSG-1", ids := "A" * 36, "12345678-1234-1234-1234-12345678901Z", "12345678-1234-1234-1234-1234567890AB",
           "12345678-1234-1234-1234-12345678901\u00e9", "\u00e9" * 36]
    s = impl(odd)
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


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_copied_and_pickled_as_its_strings(impl):
    s = impl([*(str(uuidlib.uuid4()) for _ in range(300)), "MSG-1", "00000000-0000-0000-0000-000000000000"])
    for other in (copy.deepcopy(s), pickle.loads(pickle.dumps(s))):  # (nothing copies one; a copy is whole)
        assert type(other) is impl and sorted(other) == sorted(s)
        other.add("new")
        assert "new" not in s


def test_the_compiled_set_is_built_wherever_it_can_be():
    """CI has a C compiler and Python's headers: there the install must have
    built ``_uuidset`` (an optional extension fails to build quietly), so the
    tests above run against it and the daemon uses it. A build older than its
    source is a stale install: ``make install`` builds it again."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if shutil.which(cc) is None or not headers.exists():
        pytest.skip(f"no C compiler ({cc}) or no Python headers ({headers}): the pure-Python set is used")
    assert CompiledUuidSet is not None, "sessiond.daemon._uuidset was not built: run `make install` (pip install -e .)"
    from sessiond.daemon import _uuidset

    source = Path(uuidset.__file__).with_name("_uuidset.c")
    assert Path(_uuidset.__file__).stat().st_mtime >= source.stat().st_mtime, "a stale build: run `make install`"
    if os.environ.get("SESSIOND_UUIDSET") != "python":
        assert uuidset.DedupSet is CompiledUuidSet and uuidset.IMPLEMENTATION == "compiled"
    forced = subprocess.run([sys.executable, "-c", "from sessiond.daemon import uuidset; print(uuidset.IMPLEMENTATION)"],
                            env={**os.environ, "SESSIOND_UUIDSET": "python"}, capture_output=True, text=True, check=True)
    assert forced.stdout.strip() == "python"


@compiled
def test_compiled_keys_take_about_what_packed_records_take():
    """16 bytes a slot, the table at most 3/4 full and doubled when it would be
    more: 21-43 bytes a uuid, as ``nbytes`` and ``sys.getsizeof`` both report
    (the daemon's memory figures use ``nbytes``), against ~30 packed."""
    s = CompiledUuidSet()
    assert s.nbytes == 0 and sys.getsizeof(s) < 100  # an empty set has no table yet
    ids = [str(uuidlib.uuid4()) for _ in range(100_000)]
    per_uuid = []
    for i in range(0, len(ids), 1000):
        s.update(ids[i:i + 1000])
        assert 16 * len(s) / 0.75 <= s.nbytes <= 43 * len(s)
        assert sys.getsizeof(s) >= s.nbytes
        per_uuid.append(s.nbytes / len(s))
    assert 24 <= sorted(per_uuid)[len(per_uuid) // 2] <= 36
    assert s.packed == len(s) == len(ids) and not s.other
    assert all(u in s for u in ids[::97]) and str(uuidlib.uuid4()) not in s
    s.clear()
    assert s.nbytes == 0 and len(s) == 0 and ids[0] not in s


@compiled
def test_compiled_exact_through_every_growth_and_with_a_worker_thread():
    """A table grown through many doublings finds every uuid held and no
    other; a worker thread adding to it while the loop's thread reads it (as a
    set may be shared) leaves it exact: every operation runs under the GIL."""
    import threading

    held = [str(uuidlib.uuid4()) for _ in range(60_000)]
    s = CompiledUuidSet()
    sizes = set()

    def add(part: list[str]) -> None:
        for i in range(0, len(part), 700):
            s.update(part[i:i + 700])
            sizes.add(s.nbytes)

    worker = threading.Thread(target=add, args=(held[1::2],))
    worker.start()
    add(held[0::2])
    assert all(u in s or u in held[1::2] for u in held[0::2])
    worker.join()
    assert len(sizes) >= 8 and len(s) == len(held)
    assert all(u in s for u in held)
    assert s.isdisjoint({str(uuidlib.uuid4()) for _ in range(20_000)})
    assert not s.isdisjoint({held[123], str(uuidlib.uuid4())})


@compiled
def test_compiled_iteration_refuses_a_set_that_changed_and_unhashables():
    s = CompiledUuidSet(str(uuidlib.uuid4()) for _ in range(10))
    it = iter(s)
    next(it)
    s.add(str(uuidlib.uuid4()))
    with pytest.raises(RuntimeError):
        list(it)
    with pytest.raises(TypeError):
        [] in s  # noqa: B015  (as a set: an unhashable is an error, not absent)
    with pytest.raises(TypeError):
        s.add([])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        hash(s)


@compiled
def test_compiled_set_is_collected_through_a_cycle():
    """``other`` may hold any hashable, one that refers back to the set too:
    the set takes part in garbage collection, so such a cycle is freed."""
    import weakref

    class Holder:
        pass

    s = CompiledUuidSet(["x"])
    h = Holder()
    h.s = s  # type: ignore[attr-defined]
    s.add(h)  # type: ignore[arg-type]
    gone = weakref.ref(h)
    del s, h
    gc.collect()
    assert gone() is None


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_scans_set_is_made_whole_in_chunks(impl, monkeypatch):
    """``dedup_set`` (a scan's uuids, in the scan's worker thread) gives the
    set the daemon makes, every string of the scan in it, however many chunks."""
    monkeypatch.setattr(uuidset, "DedupSet", impl)
    monkeypatch.setattr(uuidset, "SCAN_CHUNK", 7)
    for n in (0, 1, 7, 8, 100):
        items = {str(uuidlib.uuid4()) for _ in range(n)} | ({"MSG-1", "A" * 36} if n else set())
        made = uuidset.dedup_set(items)
        assert type(made) is impl and len(made) == len(items) and sorted(made) == sorted(items)
