"""The UTF-8 byte order mark, which some writers put at the start of a file.

Windows editors and PowerShell's ``>`` redirect start a transcript with it;
JSON.parse and msgspec refuse the line it precedes, RFC 8259 lets a reader
ignore it. Readers of transcript lines go through ``entries.readable_copy``
(the retry after a failed decode), which removes it; input the CLI sends to the
daemon loses it in ``client/cli/appending.entry_line`` (the daemon writes the
bytes it is given, and a BOM in the middle of a store file helps nobody).
No imports: the lite append path (no msgspec) uses it too.
"""

BOM = b"\xef\xbb\xbf"


def strip_bom(data: bytes) -> bytes:
    """``data`` without a leading BOM (the same object when it has none)."""
    return data[3:] if data[:3] == BOM else data
