"""The socket protocol: ``messages`` (typed requests and results), ``framing``
(length-prefixed msgpack) and ``errors`` (the error tree and wire codes).

Import the submodules directly. This package stays empty on purpose: the
transcript modules import ``wire.errors``, and ``wire.messages`` imports
``transcript.session_info`` (the listing record), so eager re-exports here would make
the import order matter.
"""
