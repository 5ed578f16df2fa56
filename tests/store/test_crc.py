"""The accelerated CRC-32 (zlib-ng's) against the standard library's: the same
value for every input and every running value, so the follower's fingerprints,
the index's tail sums and the mirror's message ids do not depend on which one
a machine has."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib

from hypothesis import given
from hypothesis import strategies as st

from sessiond.store import crc

NG = crc.crc32 is not zlib.crc32


def test_the_accelerated_crc_is_in_use_where_zlib_ng_is_installed():
    """The test environment installs the dependency: the fast path is the one measured and tested."""
    assert NG
    assert crc.crc32 is not zlib.crc32


@given(st.binary(max_size=70_000), st.integers(0, 2**32 - 1))
def test_the_same_value_as_the_standard_library(data, start):
    assert crc.crc32(data, start) == zlib.crc32(data, start)
    assert crc.crc32(data) == zlib.crc32(data)


@given(st.lists(st.binary(max_size=5_000), max_size=12), st.data())
def test_a_running_value_over_parts_and_views_is_the_whole_ones(parts, data):
    """How the follower and ``linecap`` use it: continued part by part, some parts memoryview slices."""
    whole = b"".join(parts)
    value = 0
    for part in parts:
        cut = data.draw(st.integers(0, len(part)))
        value = crc.crc32(memoryview(part)[:cut], value)
        value = crc.crc32(part[cut:], value)
    assert value == zlib.crc32(whole)


def test_sessiond_crc_zlib_picks_the_standard_librarys():
    code = "from sessiond.store import crc; import zlib; print(crc.crc32 is not zlib.crc32, crc.crc32 is zlib.crc32)"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "SESSIOND_CRC": "zlib"},
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.split() == ["False", "True"]
