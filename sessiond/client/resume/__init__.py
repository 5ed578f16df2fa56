"""Resume: a transcript file read back into the conversation a model API accepts.

The client runs it (``sessiond resume``, ``show``, export): ``loader`` reads the
file's entries, ``chain`` walks parentUuid links to the leaf, ``relink`` and
``order`` mend what a crash or a fork left, ``deserialize`` and ``repairs`` give
the messages the API's rules ask for. ``pipeline`` puts them together.
"""
