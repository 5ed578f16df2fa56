# sessiond: `make run` and `make test` are the whole set-up (see README).
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed
TEST_STAMP = $(VENV)/.installed-test

.PHONY: run lint test bench bench-check crash install install-cli clean node

## sessiond and what it needs to run (`make run`, `make install`). setup.py and the C sources: the
## compiled dedup set (sessiond/daemon/_uuidset.c) and header scan (sessiond/store/_entryscan.c) are
## built by the editable install, so a change to them installs again.
$(STAMP): pyproject.toml setup.py sessiond/daemon/_uuidset.c sessiond/store/_entryscan.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	touch $(STAMP)

## What the tests, the checkers and the benchmarks add: pyproject.toml's `test` extra, its packages
## alone (installing '.[test]' would build sessiond a second time).
$(TEST_STAMP): $(STAMP)
	$(BIN)/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["test"], sep="\n")' > $(VENV)/test-requirements.txt
	$(BIN)/pip install -q -r $(VENV)/test-requirements.txt
	touch $(TEST_STAMP)

install: $(STAMP)

BINDIR ?= $(HOME)/.local/bin

## Put `sessiond` on PATH: a symlink in $(BINDIR) (default ~/.local/bin) to this
## checkout's .venv/bin/sessiond (which runs with the venv's Python wherever it is called from).
install-cli: $(STAMP)
	mkdir -p "$(BINDIR)"
	ln -sfn "$(abspath $(BIN))/sessiond" "$(BINDIR)/sessiond"
	@echo "linked $(BINDIR)/sessiond -> $(abspath $(BIN))/sessiond"
	@case ":$$PATH:" in *":$(BINDIR):"*) ;; *) echo "$(BINDIR) is not on your PATH: add  export PATH=\"$(BINDIR):\$$PATH\"  to your shell's rc file" ;; esac

## Start the daemon in the foreground on the default store (Ctrl-C stops it cleanly).
run: $(STAMP)
	$(BIN)/sessiond serve

## The static checks (`make test` runs them first): ruff on everything, mypy on
## the sessiond package (strict on the wire and store layers: see pyproject.toml).
lint: $(TEST_STAMP)
	$(BIN)/ruff check --quiet .
	$(BIN)/mypy -p sessiond

## The TypeScript client (client/node): its npm dependencies as package-lock.json
## pins them (installed again only when the lock changes), then tsc. Optional
## dependencies are left out: the Agent SDK's bundled Claude Code binary (some
## 400 MB) is not needed to type-check the store or run the store's contracts.
NODE_DIR   = client/node
NODE_STAMP = $(NODE_DIR)/node_modules/.installed
$(NODE_STAMP): $(NODE_DIR)/package-lock.json $(NODE_DIR)/package.json
	cd $(NODE_DIR) && npm ci --omit=optional --no-audit --no-fund
	touch $@

node: $(NODE_STAMP)
	cd $(NODE_DIR) && npm run --silent build

## The test suite (what CI runs), in TEST_JOBS pytest-xdist workers: most of a
## test is waiting on other processes (daemons, CLI runs), so more workers than
## cores keeps both cores busy. TEST_JOBS=0 runs it in this one process.
## Bytecode is written whatever the environment says: the suite starts some 2,000
## daemons and CLI processes, and where PYTHONDONTWRITEBYTECODE is set (CI sets it)
## each would compile what it imports anew, and each worker would rewrite and compile
## every test module again (pytest caches its assertion rewriting only as bytecode).
## compileall first, so the workers starting together do not all compile sessiond at once.
TEST_JOBS ?= 4
test: lint node
	$(BIN)/python -m compileall -q sessiond
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n $(TEST_JOBS) --dist worksteal $(PYTEST_ARGS)

## Benchmarks: the figures in docs/benchmarks.md (not tests; takes a while). Installs
## what the baselines need: redis-server (Debian) and the bench extra.
bench: $(TEST_STAMP)
	command -v redis-server >/dev/null || (apt-get update && apt-get install -y redis-server)
	$(BIN)/pip install -q -e '.[test,bench]'
	$(BIN)/python bench/append_load.py
	$(BIN)/python bench/append_load.py --batch 1 --total 12000 --durable-total 4000 --levels queued,written,durable,floor,redis,redis-py --chart "" --out bench/results/append_batch1.json
	$(BIN)/python bench/append_load.py --mix --clients 1,4,16 --levels written,durable,redis,direct,disk --total 12000 --durable-total 6000 --chart "" --out bench/results/append_mix.json
	$(BIN)/python bench/append_load.py --clients 1,16 --levels durable,direct-durable --chart "" --out bench/results/append_durable.json
	$(BIN)/python bench/append_load.py --clients 1,16 --levels durable,direct-durable --warm --durable-total 64000 --chart "" --out bench/results/append_durable_warm.json
	$(BIN)/python bench/session_burst.py
	$(BIN)/python bench/resume_parse.py --sizes 10,100,1000 --runs 3
	$(BIN)/python bench/listing.py
	$(BIN)/python bench/picker.py --runs 5
	$(BIN)/python bench/agentsdk_store.py
	$(BIN)/python bench/agentsdk_store.py --batching turn --out bench/results/agentsdk_store_turn.json
	$(BIN)/python bench/lifecycle.py
	$(BIN)/python bench/secrets.py
	$(BIN)/python bench/startup.py
	$(BIN)/python bench/bounds.py
	$(BIN)/python bench/fairness.py
	$(BIN)/python bench/footprint.py
	command -v rg >/dev/null || apt-get install -y ripgrep
	$(BIN)/python bench/search.py

## The write path's guard (about ten minutes; not part of `make test`): sessiond
## `written` against the Python floor and Redis, and watchers against none, as
## ratios measured in the same run, and the daemon's instructions per request
## against the floor's (callgrind), compared with bench/results/check-baseline.json;
## fails (exit 1, loudly) when one is worse by more than the noise. After a change
## that moves them on purpose: `$(BIN)/python bench/check.py --record`.
bench-check: $(TEST_STAMP)
	command -v redis-server >/dev/null || (apt-get update && apt-get install -y redis-server)
	command -v valgrind >/dev/null || (apt-get update && apt-get install -y valgrind)
	$(BIN)/python bench/check.py

## The crash soak: hundreds of SIGKILLs of the daemon and of clients under load.
crash: $(TEST_STAMP)
	$(BIN)/python bench/crash_soak.py

clean:
	rm -rf $(VENV) *.egg-info $(NODE_DIR)/node_modules $(NODE_DIR)/dist
