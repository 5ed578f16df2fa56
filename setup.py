"""The one C extension: the compiled dedup set (``sessiond/daemon/uuidset.py`` says
why). Everything else is in pyproject.toml. ``optional``: where no C compiler or
Python headers are, the install still succeeds, with the pure-Python set."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("sessiond.daemon._uuidset", ["sessiond/daemon/_uuidset.c"], optional=True)])
