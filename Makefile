# One command sets up and runs the demo; another sets up and runs the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lint golden docs clean flink-diff

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/sparkcep demo

test: $(STAMP)
	$(BIN)/ruff check sparkcep tests bench
	$(BIN)/python -m pytest -q

# the pure tests only (no JVM) but the slowest modules (tests/conftest.py: SLOW_PURE_MODULES): a few minutes
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not spark and not slow"

lint: $(STAMP)
	$(BIN)/ruff check sparkcep tests bench

golden: $(STAMP)
	$(BIN)/python -m pytest -q tests/test_golden_plans.py --update-golden

# Differential test against Apache Flink's MATCH_RECOGNIZE: PyFlink (needs Java 11+) in its own environment
FLINK_VENV ?= .venv-flink
$(FLINK_VENV)/.installed:
	test -x $(FLINK_VENV)/bin/python || $(PYTHON) -m venv $(FLINK_VENV)
	$(FLINK_VENV)/bin/python -m pip install --quiet 'apache-flink>=2.0'
	touch $(FLINK_VENV)/.installed

flink-diff: $(STAMP) $(FLINK_VENV)/.installed
	SPARKCEP_FLINK_PYTHON=$(abspath $(FLINK_VENV))/bin/python $(BIN)/python -m pytest -q -m flink tests/test_recognize_flink.py

# rewrite the outputs shown in README.md and docs/*.md from what their examples print now; review the diff
docs: $(STAMP)
	$(BIN)/python -m pytest -q tests/test_docs_examples.py --update-docs

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis spark-warehouse
