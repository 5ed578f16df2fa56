# sessiond: `make run` and `make test` are the whole set-up (see README).
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: run test bench install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

## Start the daemon in the foreground on the default store (Ctrl-C stops it cleanly).
run: $(STAMP)
	$(BIN)/sessiond serve

## The test suite (what CI runs).
test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

## Benchmarks: figures for the README (not tests).
bench: $(STAMP)
	$(BIN)/python bench/append_load.py

clean:
	rm -rf $(VENV) *.egg-info
