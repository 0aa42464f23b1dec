# Two commands: `make run` sets up, indexes the bundled sample folder and starts the daemon on it
# (Ctrl-C stops it); `make test` runs the suite.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint clean setup

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/psirag-kb --data-dir .psirag-data ingest examples/docs
	$(BIN)/psirag-kb --data-dir .psirag-data status
	$(BIN)/psirag-kb --data-dir .psirag-data query "How does Python manage memory for objects?"
	$(BIN)/psirag-kb --data-dir .psirag-data daemon --watch examples/docs

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check psirag_kb tests

clean:
	rm -rf $(VENV) .psirag-data
