"""CRC-32 of transcript bytes: zlib-ng's where it is installed, else the standard library's.

The follower keeps a running CRC-32 of every byte of the transcripts it
follows, the daemon's own appends included (it is how a rewrite in place is
told from an append, ``daemon/follow/reading.py``); the index and the mirror
checksum file spans with it too. That makes it the one per-byte cost of an
append besides validating the entries. zlib-ng (the ``zlib-ng`` wheel, a
dependency) computes the same values, the same polynomial and the same
chaining through ``value``, with the CPU's carry-less multiply: several
times faster than the standard library's on a batch of entries. Where its
wheel is missing the standard library's is used, with the same results
(``tests/store/test_crc.py`` holds the two equal). ``SESSIOND_CRC=zlib``
picks the standard library's (the comparison in ``bench/``).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable

crc32: Callable[..., int] = zlib.crc32
"""``crc32(data, value=0)``: CRC-32 of ``data``, continuing ``value`` (zlib-ng's
where it is not ``zlib.crc32``)."""

if os.environ.get("SESSIOND_CRC") != "zlib":
    try:
        from zlib_ng.zlib_ng import crc32 as _ng_crc32
    except ImportError:  # no wheel for this platform: the standard library's, same values
        pass
    else:
        crc32 = _ng_crc32
