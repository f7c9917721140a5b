"""Issue 24 item 6: metrics an agent CLI reports that cannot be measurements.

A negative cost, time or turn count, a token count that is negative, fractional, beyond 10^12
or not finite is recorded absent with its reason and a sanity flag naming the cell; it is never
counted or summed, so it can neither lift nor break --max-cost / --max-tokens, and every file
the runner writes stays strict JSON.
"""

from __future__ import annotations

import json
import unittest
from pathlib import Path

from tests.helpers import TempDir, call_main, demo_suite, fake_env, make_repo, runner

SUITE_REL = "evals/demo/evals.json"
PRICED = {"executor": {"total_cost_usd": 0.01}, "grader": {"total_cost_usd": 0.01}}


def case(number: int, role: str, spec: dict) -> dict:
    return {"match": f"Task number {number}.", "role": role, "spec": spec}


def strict_load(path: Path):
    def refuse(constant: str):
        raise ValueError(f"{path}: {constant} is not strict JSON")
    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


class AbsurdMetricsBase(unittest.TestCase):
    cases = 4

    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.repo = make_repo(self.tmp.path, demo_suite(self.cases))
        self.workspace = self.tmp.path / "ws"

    def run_suite(self, agent: str, script: dict, *extra: str) -> tuple[int, str]:
        code, out, err = call_main(["run", str(self.repo / SUITE_REL), "--agent", agent,
                                    "--quiet", "--concurrency", "1",
                                    "--workspace", str(self.workspace), *extra],
                                   fake_env(self.tmp.path, script))
        return code, out + err

    @property
    def iteration(self) -> Path:
        return self.workspace / "iteration-1"

    def metrics(self, eval_id: str, name: str = "metrics.json",
                config: str = "without_skill") -> dict:
        data = strict_load(self.iteration / f"eval-{eval_id}" / config / "run-1" / name)
        return data.get("metrics", data)

    def every_json_is_strict(self) -> None:
        files = sorted(self.workspace.rglob("*.json"))
        self.assertTrue(files)
        for path in files:
            strict_load(path)   # raises on NaN / Infinity

    def flags(self) -> list[dict]:
        return strict_load(self.iteration / "benchmark.json")["sanity_checks"]["flags"]

    def assert_implausible(self, metric: dict, *words: str) -> None:
        self.assertIsNone(metric["value"], metric)
        self.assertTrue(metric.get("implausible"), metric)
        for word in words:
            self.assertIn(word, metric["absent_reason"])

    def assert_flagged(self, eval_id: str, metric: str) -> None:
        named = [f for f in self.flags() if f["kind"] == "implausible_metric"
                 and f.get("eval_id") == eval_id and metric in f["message"]]
        self.assertTrue(named, [f for f in self.flags() if f["kind"] == "implausible_metric"])


class ClaudeAbsurdMetricsTests(AbsurdMetricsBase):
    SCRIPT = {"cases": [
        case(1, "executor", {"total_cost_usd": -1000000, "num_turns": -3, "duration_ms": -5}),
        case(2, "executor", {"usage": {"input_tokens": 1e308, "output_tokens": 1e308}}),
        case(3, "executor", {"usage": {"input_tokens": 10**18, "output_tokens": -10**18 + 5},
                             "total_cost_usd": 0.01}),
        case(4, "grader", {"usage": {"output_tokens": 12.5}, "total_cost_usd": float("inf")}),
    ]}

    def test_each_absurd_value_is_absent_flagged_and_never_summed(self) -> None:
        code, output = self.run_suite("claude", self.SCRIPT, "--config", "without_skill",
                                      "--max-tokens", "1000000000")
        self.assertEqual(code, 1, output)     # review required: the flags, never exit 4
        self.every_json_is_strict()
        e1 = self.metrics("E01")
        self.assert_implausible(e1["total_cost_usd"], "-1000000", "negative")
        self.assert_implausible(e1["num_turns"], "negative")
        self.assert_implausible(e1["duration_ms"], "negative")
        self.assertIsNone(e1["time_seconds"]["value"])
        e2 = self.metrics("E02")
        self.assert_implausible(e2["input_tokens"], "1e+308")
        self.assertIsNone(e2["tokens"]["value"])
        self.assertIsNone(e2["total_cost_usd"]["value"])  # the fake priced 1e308 tokens
        e3 = self.metrics("E03")
        self.assert_implausible(e3["input_tokens"], "more than")
        self.assert_implausible(e3["output_tokens"], "negative")
        self.assertIsNone(e3["tokens"]["value"], "10^18 + (-10^18 + 5) was summed")
        self.assertEqual(e3["total_cost_usd"]["value"], 0.01)
        grader = self.metrics("E04", "grader_metrics.json")
        self.assert_implausible(grader["output_tokens"], "whole number")
        self.assert_implausible(grader["total_cost_usd"], "finite")
        for eval_id, metric in (("E01", "total_cost_usd"), ("E01", "num_turns"),
                                ("E02", "input_tokens"), ("E03", "output_tokens"),
                                ("E04", "grader output_tokens")):
            self.assert_flagged(eval_id, metric)
        budget = strict_load(self.iteration / "benchmark.json")["metadata"]["budget"]
        self.assertGreaterEqual(budget["spent_tokens"], 0)
        self.assertLess(budget["spent_tokens"], 10**6)
        self.assertEqual(budget["cells_without_tokens"], 3)  # E02, E03, E04 (its grader)

    def test_a_negative_cost_does_not_lift_the_cost_cap(self) -> None:
        script = {**PRICED, "cases": [case(1, "executor", {"total_cost_usd": -1000000})]}
        code, output = self.run_suite("claude", script, "--max-cost", "0.05")
        self.assertEqual(code, 1, output)
        self.every_json_is_strict()
        benchmark = strict_load(self.iteration / "benchmark.json")
        budget = benchmark["metadata"]["budget"]
        self.assertEqual(budget["cells_without_cost"], 2)  # E01 in both configs: unknown
        # E01's graders still count (0.01 each), every other cell costs 0.02: the cap (0.05)
        # stops the run after E01's two cells and two more
        self.assertAlmostEqual(budget["spent_cost_usd"], 0.06, places=6)
        self.assertEqual(budget["cancelled_by_cap"], 4)
        kinds = {f["kind"] for f in benchmark["sanity_checks"]["flags"]}
        self.assertLessEqual({"spending_cap", "implausible_metric"}, kinds)

    def test_infinite_tokens_under_a_cost_cap_are_no_internal_error(self) -> None:
        huge = {"usage": {"input_tokens": 1e308, "output_tokens": 1e308}, "total_cost_usd": 1e308}
        script = {**PRICED, "cases": [case(1, "executor", huge)]}
        code, output = self.run_suite("claude", script, "--config", "without_skill",
                                      "--max-cost", "5", "--max-tokens", "10000000")
        self.assertEqual(code, 1, output)
        self.assertNotIn("internal error", output)
        self.every_json_is_strict()
        self.assert_flagged("E01", "input_tokens")
        self.assert_flagged("E01", "total_cost_usd")


class CodexAbsurdMetricsTests(AbsurdMetricsBase):
    SCRIPT = {"cases": [
        case(1, "executor", {"usage": {"input_tokens": 1e308, "output_tokens": 1e308}}),
        case(2, "executor", {"usage": {"input_tokens": 10**18, "output_tokens": -10**18 + 5}}),
        case(3, "grader", {"usage": {"output_tokens": -7}}),
    ]}
    cases = 3

    def test_each_absurd_value_is_absent_flagged_and_never_summed(self) -> None:
        code, output = self.run_suite("codex", self.SCRIPT, "--config", "without_skill",
                                      "--max-tokens", "1000000000")
        self.assertEqual(code, 1, output)
        self.every_json_is_strict()
        e1 = self.metrics("E01")
        self.assert_implausible(e1["input_tokens"], "1e+308")
        self.assertIsNone(e1["tokens"]["value"])
        self.assertNotIn("total_tokens", self.metrics("E01", "timing.json"))
        e2 = self.metrics("E02")
        self.assert_implausible(e2["input_tokens"], "more than")
        self.assert_implausible(e2["output_tokens"], "negative")
        self.assertIsNone(e2["tokens"]["value"])
        grader = self.metrics("E03", "grader_metrics.json")
        self.assert_implausible(grader["output_tokens"], "negative")
        for eval_id, metric in (("E01", "input_tokens"), ("E02", "output_tokens"),
                                ("E03", "grader output_tokens")):
            self.assert_flagged(eval_id, metric)
        budget = strict_load(self.iteration / "benchmark.json")["metadata"]["budget"]
        self.assertEqual(budget["cells_without_tokens"], 3)
        self.assertGreaterEqual(budget["spent_tokens"], 0)

    def test_infinite_tokens_do_not_break_the_token_cap(self) -> None:
        huge = {"usage": {"input_tokens": 1e308, "output_tokens": 1e308}}
        script = {"cases": [case(1, "executor", huge)]}
        code, output = self.run_suite("codex", script, "--config", "without_skill",
                                      "--max-tokens", "10000000")
        self.assertEqual(code, 1, output)
        self.assertNotIn("internal error", output)
        self.every_json_is_strict()
        budget = strict_load(self.iteration / "benchmark.json")["metadata"]["budget"]
        self.assertFalse(budget["cancelled_by_cap"])


class OpenCodeAbsurdMetricsTests(AbsurdMetricsBase):
    """opencode sums its steps: one absurd step makes the sum absent, never a smaller total."""
    cases = 2

    def test_a_negative_cost_or_huge_count_in_a_step_is_absent_and_flagged(self) -> None:
        config = self.tmp.path / "home" / ".config" / "opencode"
        config.mkdir(parents=True)
        (config / "opencode.json").write_text(json.dumps({
            "model": "fake/fake-model",
            "provider": {"fake": {"options": {"baseURL": "http://127.0.0.1:9/v1"},
                                  "models": {"fake-model": {}}}}}), encoding="utf-8")
        data = self.tmp.path / "home" / ".local" / "share" / "opencode"
        data.mkdir(parents=True)
        (data / "auth.json").write_text('{"fake": {"type": "api", "key": "k"}}')
        script = {"cases": [case(1, "executor", {"total_cost_usd": -5.0}),
                            case(2, "executor", {"usage": {"input": 10**18}})]}
        code, output = self.run_suite("opencode", script, "--config", "without_skill")
        self.assertEqual(code, 1, output)
        self.every_json_is_strict()
        self.assert_implausible(self.metrics("E01")["total_cost_usd"], "negative")
        e2 = self.metrics("E02")
        self.assert_implausible(e2["input_tokens"], "more than")
        self.assertIsNone(e2["tokens"]["value"])
        self.assert_flagged("E01", "total_cost_usd")
        self.assert_flagged("E02", "input_tokens")


class StrictJsonTests(unittest.TestCase):
    def test_the_write_helper_never_writes_nan_or_infinity(self) -> None:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        path = tmp.path / "x.json"
        runner.write_json(path, {"a": float("inf"), "b": [float("nan"), -float("inf")], "c": 1})
        self.assertEqual(strict_load(path), {"a": None, "b": [None, None], "c": 1})


if __name__ == "__main__":
    unittest.main()
