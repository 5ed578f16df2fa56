"""The search indexer (SPEC 8): keeps ``<root>/.sessiond-search.sqlite3`` current.

``link.IndexLink`` is the daemon's side: a ``Writer`` observer that notes which
files were written, and the handle of the indexer process (``worker``), which
reads the new whole lines from the files and writes them into the index
(``store``) at the lowest CPU priority, off the append path. What the index
looks like and how it is queried is shared with the CLI: ``sessiond.search``.
"""
