"""What both the daemon and the CLI run: reading the settings (``config``) and
the NATS JetStream mirror (``mirror``: the daemon's observer, and ``push``/``pull``
in the CLI).

Why its own package: ``protocol/`` holds only what the two sides agree on and
does no I/O of its own, and the client must not import the daemon; code with
I/O policy that both sides run lives here, importing neither of them.
"""
