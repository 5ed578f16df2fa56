"""The daemon: the single writer of every transcript file.

Its settings are read by ``sessiond.config`` (the CLI reads them too).
"""
