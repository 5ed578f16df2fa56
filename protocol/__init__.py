"""sessiond.protocol: everything the daemon and its clients must agree on.

``wire`` is the socket protocol (messages, framing, errors); ``transcript`` is the
on-disk format shared with Claude Code and its pure readers. This package imports
neither ``sessiond.daemon``, ``sessiond.client`` nor ``sessiond.common``.
"""

__version__ = "0.1.0"
