"""Full-text search of every conversation (SPEC 8): the pieces both sides share.

The daemon's indexer (``sessiond.daemon.index``) writes the index; the CLI reads
it offline, and the daemon answers ``Search`` from it. What they must agree on
lives here, with no I/O policy: ``extract`` (which text of an entry is
searchable, and how a file's title is known), ``schema`` (the SQLite FTS5 layout
and where the file lives), ``query`` (parsing a query, running it), ``rank``
(which entries its hits come from: exact BM25, or the newest matches of a very
common query), ``hit`` (the ``Hit`` a search returns, light enough for every
client to import) and ``scan`` (the same query answered by reading the files, for when
there is no index yet).
"""
