"""The runner's core, called directly: provider parsing, verdicts, prompts, planning, options.

These tests start no process. They feed output that the real `claude`, `codex`, `gemini` and
`opencode` CLIs printed (tests/data/cli-samples, see tests/data/README.md) to the provider
parsers as ProcessResult values, check the argv and home each adapter prepares, and call the grading, prompt, planning and option functions with plain values. The
end-to-end tests cover how those pieces work together.

`python3 -m unittest tests.test_core_units` runs every module below. Test discovery finds this
package's load_tests and calls it, so no test runs twice.
"""

from __future__ import annotations

import unittest

from tests.test_core_units import (
    test_executor_and_options,
    test_grading,
    test_providers,
    test_providers_gemini_opencode,
)

MODULES = (test_providers, test_providers_gemini_opencode, test_grading,
           test_executor_and_options)


def load_tests(loader: unittest.TestLoader, tests: unittest.TestSuite,
               pattern: str | None) -> unittest.TestSuite:
    for module in MODULES:
        tests.addTests(loader.loadTestsFromModule(module))
    return tests
