"""Shared test set-up: one SparkSession per test run, markers, ``--update-golden`` and ``--update-docs``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite golden_plans/ from the current compiler instead of diffing against it")
    parser.addoption("--update-docs", action="store_true", default=False,
                     help="rewrite the outputs shown in README.md and docs/*.md from what their examples print now")


def pytest_configure(config):
    config.addinivalue_line("markers", "spark: needs a JVM and the shared SparkSession")
    config.addinivalue_line("markers", "slow: end-to-end tests (run in CI)")


#: Pure test modules that take the most time (hundreds of property-test examples each, or a subprocess per
#: module): marked slow, so that `make test-fast` (`-m "not spark and not slow"`) stays a few minutes.  CI runs them.
SLOW_PURE_MODULES = {"test_match_language.py", "test_import_layers.py", "test_expr_arrow.py", "test_match_groups.py",
                     "test_match_columnar.py", "test_late_events.py", "test_check_contract.py",
                     "test_match_collapsed.py", "test_match_negation_general.py", "test_recognize_workload.py"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SLOW_PURE_MODULES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def update_golden(request) -> bool:
    return request.config.getoption("--update-golden")


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession of the test run: local[2], 2 shuffle partitions, UTC, no UI."""
    from sparkcep.spark.session import local_session

    # Python workers import sparkcep too: make this checkout importable even when it is not pip-installed.
    root = str(Path(__file__).resolve().parent.parent)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])
    session = local_session("local[2]", shuffle_partitions=2, app_name="sparkcep-tests")
    yield session
    session.stop()
