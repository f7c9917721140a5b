"""The test suite, in three tiers picked by SKILL_EVAL_TEST_TIER (README, "Tests").

`unit`, the default, is what `python3 -m unittest` runs, so the README's test command is the
quick one: discovery keeps only UNIT_MODULES (the core tested directly, validation, the
layering and documentation checks, and the end-to-end runs through main() with the fake CLIs).
`core` is every module but the volume tests; `full` is everything. CI names the tier of every
Python version it runs (.ci/run), so the default never decides what CI covers.
"""

from __future__ import annotations

import os
import unittest
from pathlib import Path

TIERS = ("unit", "core", "full")
DEFAULT_TIER = "unit"
TIER = os.environ.get("SKILL_EVAL_TEST_TIER") or DEFAULT_TIER

UNIT_MODULES = (
    "tests.test_core_units", "tests.test_layering", "tests.test_docs",
    "tests.test_validate", "tests.test_validate_fixtures", "tests.test_agent_neutral_core",
    "tests.test_comparisons", "tests.test_report_details", "tests.test_run_e2e",
    "tests.test_validate_checks", "tests.test_checks_e2e", "tests.test_absurd_metrics",
    "tests.test_first_use", "tests.test_golden",
)


def _flatten(suite: unittest.TestSuite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from _flatten(item)
        else:
            yield item


def _in_unit_tier(test: unittest.TestCase) -> bool:
    # A module that failed to import shows up as a test of unittest.loader: keep it, so the
    # import error is still reported.
    module = type(test).__module__
    return module.startswith("unittest.") or any(
        module == name or module.startswith(name + ".") for name in UNIT_MODULES)


def load_tests(loader: unittest.TestLoader, standard_tests: unittest.TestSuite,
               pattern: str | None) -> unittest.TestSuite:
    here = Path(__file__).resolve().parent
    found = loader.discover(str(here), pattern or "test*.py", str(here.parent))
    if TIER != "unit":
        standard_tests.addTests(found)
        return standard_tests
    standard_tests.addTests(t for t in _flatten(found) if _in_unit_tier(t))
    return standard_tests
