"""Spending caps (--max-cost, --max-tokens) and the dry-run forecast (issue 19)."""

from __future__ import annotations

import json
import unittest
from pathlib import Path

from tests.helpers import (
    TempDir,
    call_main,
    demo_suite,
    fake_calls,
    fake_env,
    make_repo,
    runner,
)

SUITE_REL = "evals/demo/evals.json"
# Every call reports the same cost, so the cap is reached at a known cell count.
PRICED = {"executor": {"total_cost_usd": 0.01, "duration_ms": 300},
          "grader": {"total_cost_usd": 0.01, "duration_ms": 200}}


def load_json(path: Path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


def records_of(iteration: Path) -> list:
    found = []
    for run_json in sorted(iteration.glob("eval-*/*/run-*/run.json")):
        found.append(runner.read_run_record(run_json.parent))
    return found


class CapTests(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.repo = make_repo(self.tmp.path, demo_suite(8))
        self.suite = str(self.repo / SUITE_REL)
        self.workspace = self.tmp.path / "ws"

    def run_capped(self, agent: str, *cap: str, concurrency: int = 2) -> tuple[int, str, Path]:
        env = fake_env(self.tmp.path, PRICED)
        code, out, err = call_main(["run", self.suite, "--agent", agent, "--quiet",
                                    "--concurrency", str(concurrency),
                                    "--workspace", str(self.workspace), *cap], env)
        return code, out + err, self.workspace / "iteration-1"

    def assert_stopped_within_one_wave(self, iteration: Path, kind: str, cap: float,
                                       concurrency: int) -> None:
        records = records_of(iteration)
        ran = sorted((r for r in records if r.executor is not None),
                     key=lambda r: r.finished_at)
        cancelled = [r for r in records if r.executor is None]
        self.assertTrue(cancelled, "the cap cancelled nothing")
        spent, reached_at = 0.0, None
        for position, record in enumerate(ran):
            spent += runner.spend_of(record, kind)
            if spent >= cap and reached_at is None:
                reached_at = position + 1
        self.assertIsNotNone(reached_at, "the cap was never reached, yet cells were cancelled")
        # cells still running when the cap was reached finish; no new one starts
        self.assertLessEqual(len(ran) - reached_at, concurrency - 1)
        for record in cancelled:
            self.assertEqual(record.status, "cancelled")
            self.assertTrue(record.failure.detail.startswith("the spending cap --max-"),
                            record.failure)
        meta = load_json(iteration / "benchmark.json")["metadata"]
        self.assertTrue(meta["incomplete"])
        self.assertEqual(meta["budget"]["cancelled_by_cap"], len(cancelled))
        self.assertEqual(meta["budget"]["cells_counted"], len(ran))

    def test_max_cost_stops_within_one_wave_of_concurrency(self) -> None:
        code, output, iteration = self.run_capped("claude", "--max-cost", "0.05", concurrency=3)
        self.assertEqual(code, 1, output)
        self.assert_stopped_within_one_wave(iteration, "cost", 0.05, 3)
        benchmark = load_json(iteration / "benchmark.json")
        kinds = [f["kind"] for f in benchmark["sanity_checks"]["flags"]]
        self.assertIn("spending_cap", kinds)
        self.assertIn("incomplete", kinds)
        self.assertAlmostEqual(benchmark["metadata"]["budget"]["spent_cost_usd"],
                               sum(runner.spend_of(r, "cost") for r in records_of(iteration)
                                   if r.executor is not None))

    def test_max_tokens_works_for_a_provider_without_cost(self) -> None:
        code, output, iteration = self.run_capped("codex", "--max-tokens", "600")
        self.assertEqual(code, 1, output)
        self.assert_stopped_within_one_wave(iteration, "tokens", 600, 2)

    def test_max_cost_on_a_provider_without_cost_is_refused_before_launch(self) -> None:
        code, output, _ = self.run_capped("codex", "--max-cost", "1")
        self.assertEqual(code, 2)
        self.assertIn("reports no cost", output)
        self.assertIn("--max-tokens", output)
        self.assertEqual(fake_calls(self.tmp.path), [])
        self.assertFalse(self.workspace.exists())

    def test_an_uncapped_run_reaching_no_cap_is_complete(self) -> None:
        code, output, iteration = self.run_capped("claude", "--max-cost", "100")
        self.assertEqual(code, 0, output)
        meta = load_json(iteration / "benchmark.json")["metadata"]
        self.assertFalse(meta["incomplete"])
        self.assertEqual(meta["budget"]["cancelled_by_cap"], 0)

    def test_a_forged_executor_cost_leaves_the_graders_cost_on_the_cap(self) -> None:
        # Issue 33: an executor reporting an implausible cost made the whole cell unknown,
        # and with it the grader's real cost: four grader calls ran past a $0.0025 cap.
        for forged in (-1, 1e9):
            with self.subTest(executor_cost=forged):
                workspace = self.tmp.path / f"forged-{forged}"
                env = fake_env(self.tmp.path, {
                    "executor": {"total_cost_usd": forged, "duration_ms": 300},
                    "grader": {"total_cost_usd": 0.001, "duration_ms": 200}})
                code, out, err = call_main(["run", self.suite, "--agent", "claude", "--quiet",
                                            "--concurrency", "1", "--max-cost", "0.0025",
                                            "--workspace", str(workspace)], env)
                self.assertEqual(code, 1, out + err)
                records = records_of(workspace / "iteration-1")
                graded = [r for r in records if r.grader is not None]
                self.assertEqual(len(graded), 3, "the third grader call reaches $0.003")
                budget = load_json(workspace / "iteration-1" / "benchmark.json")["metadata"][
                    "budget"]
                self.assertAlmostEqual(budget["spent_cost_usd"], 0.003)
                self.assertEqual(budget["cells_without_cost"], 3)
                self.assertEqual(budget["cancelled_by_cap"], len(records) - 3)

    def test_bad_cap_values_are_refused(self) -> None:
        for cap in (["--max-cost", "0"], ["--max-cost", "nan"], ["--max-tokens", "-1"]):
            with self.subTest(cap=cap):
                code, _, _ = self.run_capped("claude", *cap)
                self.assertEqual(code, 2)


class ForecastTests(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.repo = make_repo(self.tmp.path, demo_suite(6))
        self.suite = str(self.repo / SUITE_REL)
        self.workspace = self.tmp.path / "ws"

    def argv(self, agent: str, *extra: str) -> list[str]:
        return ["run", self.suite, "--agent", agent, "--quiet", "--workspace",
                str(self.workspace), *extra]

    def test_nothing_to_forecast_from(self) -> None:
        code, out, _ = call_main(self.argv("claude", "--dry-run"), fake_env(self.tmp.path))
        self.assertEqual(code, 0)
        self.assertIn("nothing to forecast from", out)

    def test_forecast_is_within_ten_percent_of_a_rerun(self) -> None:
        for agent in ("claude", "codex"):
            with self.subTest(agent=agent):
                self.check_forecast(agent)

    def check_forecast(self, agent: str) -> None:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        env = fake_env(tmp.path, PRICED)
        workspace = tmp.path / "ws"
        base = ["run", self.suite, "--agent", agent, "--quiet", "--workspace", str(workspace)]
        code, _, err = call_main(base, env)
        self.assertEqual(code, 0, err)
        code, out, _ = call_main([*base, "--dry-run", "--runs", "2"], env)
        self.assertEqual(code, 0)
        self.assertIn("FORECAST, not a measurement", out)
        self.assertIn("iteration-1", out)
        suite = runner.load_suite(self.suite).suite
        options = runner.RunOptions(agent=agent, runs=2)
        cells = runner.plan_cells(suite, options, Path("x"))
        forecast = runner.forecast_run(workspace, suite, options, cells)
        calls_before = len([c for c in fake_calls(tmp.path) if c.get("role")])
        code, _, err = call_main([*base, "--runs", "2"], env)
        self.assertEqual(code, 0, err)
        actual_calls = len([c for c in fake_calls(tmp.path) if c.get("role")]) - calls_before
        rerun = [r for r in records_of(workspace / "iteration-2")]
        actual_tokens = sum(runner.spend_of(r, "tokens") for r in rerun)
        totals = forecast["totals"]
        self.assertLessEqual(abs(totals["calls"]["expected"] - actual_calls), 0.1 * actual_calls)
        self.assertLessEqual(abs(totals["tokens"]["expected"] - actual_tokens),
                             0.1 * actual_tokens)
        self.assertLessEqual(totals["tokens"]["low"], actual_tokens * 1.1)
        self.assertGreaterEqual(totals["tokens"]["high"], actual_tokens * 0.9)
        if agent == "codex":
            self.assertIn("cost: not forecast", out)
            self.assertIsNone(totals["cost"])
        else:
            self.assertIsNotNone(totals["cost"])


if __name__ == "__main__":
    unittest.main()
