"""The interactive session picker (``sessiond pick``, and ``sessiond`` alone on
a terminal): every session in a filterable table, the selected one's
conversation beside it, keys to resume, show, rename and trash.

Why a package of its own: it is the only part of sessiond that needs Textual,
and only the ``pick`` command imports it (no other command pays for it).
``matching`` is the filter, plain Python with no Textual, which the bench times
alone; ``app`` is the Textual application. What the picker does to the store it
does through the functions the commands use (``Actions``, built by ``pick``).
"""
