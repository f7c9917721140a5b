"""The test suite, in three tiers picked by SKILL_EVAL_TEST_TIER (README, "Tests").

`unit`, the default, is what `python3 -m unittest` runs, so the README's test command is the
quick one: discovery keeps only UNIT_MODULES (the core tested directly, validation, the
layering and documentation checks, and the end-to-end runs through main() with the fake CLIs).
`core` is every module but the volume tests; `full` is everything. CI names the tier of every
Python version it runs (.ci/run), so the default never decides what CI covers.

SKILL_EVAL_TEST_SHARD=K/N keeps the K-th of N parts of the chosen tier, whole test classes
(their setUpClass runs once), dealt out by measured cost so the parts take about as long: CI
queues the parts of every version's tier and runs two at once, one a core. Every part of every tier, together, is the
tier; tests/test_docs.py checks that no test is lost or run twice.
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
    "tests.test_first_use", "tests.test_golden", "tests.test_delivery",
    "tests.test_real_suites", "tests.test_real_suites_e2e", "tests.test_root_skill",
    "tests.test_conversations",
    "tests.test_one_spawner", "tests.test_codec", "tests.test_watch_race", "tests.test_trace",
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


# Seconds the slowest test classes took (python3.12, full tier, in two parts at once on a
# 2-core machine); every other test counts DEFAULT_TEST_SECONDS. Only the balance of the parts
# depends on these.
CLASS_SECONDS = {
    "tests.test_verdict_simulation.VerdictSimulationTest": 190,  # 82 s of CPU (issue 38 grid)
    "tests.test_verdict_simulation.FamilySimulationTest": 90,  # 39 s of CPU
    "tests.test_result_fuzz.ResultFuzzTest": 263,
    "tests.test_result_fuzz.BoundedReadFuzzTest": 60,  # 45 s alone on a quiet machine
    "tests.integration.test_runner_real_cli.OpenCodeRunnerTest": 139,
    "tests.integration.test_conversation_real_cli.OpenCodeConversationTest": 180,
    "tests.test_conversations_e2e.SimulatedUserTest": 60,
    "tests.test_verdict_simulation.AdaptiveSimulationTest": 134,
    "tests.test_adaptive.AdaptiveRunTest": 136,  # 190 before two runs were shared
    "tests.test_statistics.VerdictEndToEndTest": 89,
    "tests.test_outputs.OutputsFromRunTests": 71,
    "tests.integration.test_runner_real_cli.GeminiRunnerTest": 65,
    "tests.test_across_agents.AcrossAgentsTest": 63,
    "tests.integration.test_installed_real_cli.OpenCodeInstalledTest": 61,
    "tests.integration.test_runner_real_cli.ClaudeRunnerTest": 57,
    "tests.test_benchmarks_smoke.BenchmarkSmokeTest": 56,
    "tests.integration.test_runner_real_cli.CodexRunnerTest": 42,
    "tests.test_run_e2e.PeerCorpusTests": 41,
    "tests.test_trigger_sets.TriggerRunTest": 40,
}
DEFAULT_TEST_SECONDS = 1.5


def shard_spec(text: str) -> tuple[int, int]:
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
        raise ValueError(f"SKILL_EVAL_TEST_SHARD={text!r}: expected K/N with 1 <= K <= N")
    return int(index), int(count)


def _class_of(test: unittest.TestCase) -> str:
    return f"{type(test).__module__}.{type(test).__qualname__}"


def shard_of(tests: list[unittest.TestCase], index: int, count: int) -> list[unittest.TestCase]:
    """The tests of part `index` of `count`: whole classes, heaviest first to the lightest
    part so far (ties by name), the same on every machine."""
    classes: dict[str, list[unittest.TestCase]] = {}
    for test in tests:
        classes.setdefault(_class_of(test), []).append(test)
    cost = {name: CLASS_SECONDS.get(name, DEFAULT_TEST_SECONDS * len(members))
            for name, members in classes.items()}
    loads = [0.0] * count
    owner: dict[str, int] = {}
    for name in sorted(classes, key=lambda n: (-cost[n], n)):
        lightest = min(range(count), key=lambda i: (loads[i], i))
        loads[lightest] += cost[name]
        owner[name] = lightest + 1
    return [test for test in tests if owner[_class_of(test)] == index]


def tier_tests(tests: list[unittest.TestCase], tier: str) -> list[unittest.TestCase]:
    """The tests discovery keeps at `tier` (the volume tests of `core` skip when they run)."""
    return [t for t in tests if _in_unit_tier(t)] if tier == "unit" else tests


def load_tests(loader: unittest.TestLoader, standard_tests: unittest.TestSuite,
               pattern: str | None) -> unittest.TestSuite:
    here = Path(__file__).resolve().parent
    found = loader.discover(str(here), pattern or "test*.py", str(here.parent))
    tests = tier_tests(list(_flatten(found)), TIER)
    shard = os.environ.get("SKILL_EVAL_TEST_SHARD")
    if shard:
        tests = shard_of(tests, *shard_spec(shard))
    standard_tests.addTests(tests)
    return standard_tests
