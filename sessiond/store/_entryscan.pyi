"""The compiled header scan of an append's entries (``_entryscan.c``; ``entries.decode_headers``)."""

from typing import Any

def scan_headers(lines: list[bytes], header_type: type[Any], unset: object) -> list[Any] | None: ...
