"""Linux system calls Python has no binding for, called through libc.

``syncfs`` (the writer's group commit) and inotify (the rename check) are plain
libc functions that return -1 and set errno; ``libc_function`` wraps one so
that it raises ``OSError`` as ``os`` functions do, or gives None where libc
lacks it (not Linux, an old libc).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from typing import Any

_libc: ctypes.CDLL | None = None


def libc_function(name: str, argtypes: list[Any]) -> Callable[..., int] | None:
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        fn = getattr(_libc, name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int

    def call(*args: Any) -> int:
        result = fn(*args)
        if result < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return result

    call.__name__ = name
    return call
