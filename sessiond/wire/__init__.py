"""The socket protocol: ``messages`` (typed requests and results, and the records
they carry), ``framing`` (length-prefixed msgpack) and ``errors`` (the error tree
and wire codes). Both sides agree on it; it imports nothing else of sessiond's.

Import the submodules directly: this package re-exports nothing.
"""
