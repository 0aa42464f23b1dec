# Two commands: `make run` sets up, indexes the bundled sample folder and prints the top of its
# topic tree, starts the daemon on it in the background and opens the TUI (quitting it stops the
# daemon; without a terminal it runs one query through the daemon instead); `make test` runs the
# suite (what CI runs), `make test-fast` its pure-logic tier (tests/conftest.py says which).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-fast lint docs docs-serve clean setup

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test,fast,ray]'
	touch $(STAMP)

setup: $(STAMP)

DATA := .psirag-data
KB := $(BIN)/psirag-kb --data-dir $(DATA)
SAMPLE_QUERY := How does Python manage memory for objects?

# Exits 0 once the daemon started by `make run` (pid argv[2]) answers its API.
define DAEMON_ANSWERS
import json, sys, urllib.error, urllib.request
info = json.load(open(sys.argv[1] + "/daemon.json"))
assert info["pid"] == int(sys.argv[2])
try:
    urllib.request.urlopen(info["url"] + "/api/health", timeout=1)
except urllib.error.HTTPError:
    pass
endef
export DAEMON_ANSWERS

run: $(STAMP)
	$(KB) ingest examples/docs
	@echo "What the sample folder is about (the top of the topic tree; \`psirag-kb tree NODE\` goes down):"
	@$(KB) tree
	$(KB) status
	$(KB) query "$(SAMPLE_QUERY)"
	@$(KB) daemon --watch examples/docs --port 0 >>$(DATA)/daemon.out 2>&1 & pid=$$!; \
	trap 'kill $$pid 2>/dev/null; wait $$pid 2>/dev/null' EXIT INT TERM; \
	echo "daemon $$pid starting in the background (log: $(DATA)/daemon.log)"; \
	tries=0; \
	until $(BIN)/python -c "$$DAEMON_ANSWERS" $(DATA) $$pid 2>/dev/null; do \
	  kill -0 $$pid 2>/dev/null || { echo "the daemon exited:"; tail -n 20 $(DATA)/daemon.out; exit 1; }; \
	  tries=$$((tries + 1)); [ $$tries -lt 240 ] || { echo "the daemon did not answer in 2 min"; exit 1; }; \
	  sleep 0.5; \
	done; \
	$(BIN)/python -c "import json; print('the web page (sign in with $(DATA)/api.token):', json.load(open('$(DATA)/daemon.json')).get('web'))"; \
	if [ -t 0 ] && [ -t 1 ]; then \
	  $(KB) tui; \
	else \
	  echo "no terminal, so no TUI: one query through the daemon, then it stops"; \
	  $(KB) query "$(SAMPLE_QUERY)" -k 3 && $(KB) status | tail -n 1; \
	fi

# two pytest-xdist workers, each test module on one of them (its module fixtures built once):
# on 2 idle cores the suite took 8:57 so, 9:49 with tests spread one by one, 13:32 serially
# (2026-12-07, docs/reliability/index.md)
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadscope --durations=20

# no subprocesses, knowledge bases or real model: pytest -m fast (under 2 min on 2 cores)
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m fast tests/unit

lint: $(STAMP)
	$(BIN)/ruff check psirag_kb tui tests
	$(BIN)/lint-imports
	$(BIN)/mypy

# the site: reference pages written from the code, then mkdocs-material into site/ (strict:
# a broken link or a missing page fails); docs-serve rebuilds it as you edit
docs: $(STAMP)
	$(BIN)/python -m psirag_kb.cli.reference docs/reference
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

clean:
	rm -rf $(VENV) .psirag-data site
