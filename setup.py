"""The C extensions: the compiled dedup set (``sessiond/daemon/uuidset.py`` says
why) and the compiled header scan of an append's entries
(``sessiond/store/entries.py``). Everything else is in pyproject.toml.
``optional``: where no C compiler or Python headers are, the install still
succeeds, with the pure-Python paths."""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("sessiond.daemon._uuidset", ["sessiond/daemon/_uuidset.c"], optional=True),
    Extension("sessiond.store._entryscan", ["sessiond/store/_entryscan.c"], optional=True),
])
