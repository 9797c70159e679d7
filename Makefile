# One command sets up and runs the demo; another sets up and runs the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint golden clean

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

lint: $(STAMP)
	$(BIN)/ruff check sparkcep tests bench

golden: $(STAMP)
	$(BIN)/python -m pytest -q tests/test_golden_plans.py --update-golden

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis spark-warehouse
