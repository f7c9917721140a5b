"""Issue 16: several arms, what each assertion gains, and how much data a verdict needs.

Unit tests on the aggregation functions with hand-computed numbers, and the simulation that
checks the power forecast against the verdict rule it forecasts.
"""

from __future__ import annotations

import math
import random
import time
import unittest
from types import SimpleNamespace

from tests.helpers import runner, volume_test

Z_SUM = 1.959963984540054 + 0.8416212335729143  # z(0.975) + z(0.8)


def row(eval_id: str, **rates: list[float]) -> dict:
    """A per_eval row as per_eval_rates leaves it: pass rates of the scored runs per config."""
    return {"eval_id": eval_id, "eval_name": eval_id,
            "configs": {config: {"pass_rates": values} for config, values in rates.items()}}


def graded_run(eval_id: str, config: str, run_number: int, verdicts: list[tuple[str, bool]],
               scored: bool = True) -> dict:
    """A benchmark run (benchmark_run's shape) with the given (assertion text, passed) list."""
    return {"eval_id": eval_id, "eval_name": eval_id, "configuration": config,
            "run_number": run_number, "scored": scored,
            "expectations": [{"id": i, "text": text, "passed": passed, "evidence": ""}
                             for i, (text, passed) in enumerate(verdicts, 1)] if scored else []}


class PowerForecastTest(unittest.TestCase):
    def test_mde_and_evals_needed_by_hand(self) -> None:
        # Deltas 0.1, 0.3, 0.1, 0.3 (one run each): mean 0.2, sample SD sqrt(4 * 0.01 / 3)
        # = 0.11547. MDE = 2.8016 * 0.11547 / sqrt(4) = 0.16175. To detect 0.2 (observed):
        # (2.8016 * 0.11547 / 0.2)^2 = 2.616 -> 3 evals, raised to the verdict's own minimum
        # (MIN_PAIRED_EVALS): fewer could never give one; 0.1: 10.47 -> 11 evals.
        per_eval = [row("a", c=[0.6], b=[0.5]), row("b", c=[0.8], b=[0.5]),
                    row("c", c=[0.4], b=[0.3]), row("d", c=[0.9], b=[0.6])]
        power = runner.power_forecast(per_eval, ("c", "b"), 0.2)
        sd = math.sqrt(4 * 0.01 / 3)
        self.assertAlmostEqual(power["sd_per_eval_delta"], sd)
        self.assertEqual(power["bootstrap_run_variance"], 0.0)
        self.assertAlmostEqual(power["mde"], Z_SUM * sd / 2)
        self.assertAlmostEqual(power["mde"], 0.16175, places=4)
        self.assertEqual([(t["label"], t["evals_needed"]) for t in power["targets"]],
                         [("observed", max(3, runner.MIN_PAIRED_EVALS)), ("10 pp", 11)])
        self.assertIsNone(power["targets"][0]["runs_needed"])
        self.assertIn("at least 2 runs", power["targets"][0]["runs_note"])

    def test_no_spread_and_too_few_evals_say_why(self) -> None:
        same = [row(str(i), c=[1.0], b=[0.5]) for i in range(6)]
        power = runner.power_forecast(same, ("c", "b"), 0.5)
        self.assertIsNone(power["mde"])
        self.assertIn("same delta", power["reason"])
        one = runner.power_forecast([row("a", c=[1.0], b=[0.5])], ("c", "b"), 0.5)
        self.assertIsNone(one["mde"])
        self.assertIn("fewer than 2", one["reason"])

    def test_runs_per_eval_forecast_uses_the_run_to_run_spread(self) -> None:
        # 8 evals, two runs per config: with 0.6 and 0.4, without 0.5 and 0.5. Every delta of
        # means is 0 (sd 0, no spread between evals); one run's delta varies by W = 0.02 + 0.
        # With r runs: spread^2 = W (2r - 1) / r^2, sd^2 = W / r, and the MDE is
        # (1.96 * spread + 0.84 * sd) / sqrt(8): r=2 gives 0.1147, r=3 gives 0.0973 <= 0.1.
        per_eval = [row(str(i), c=[0.6, 0.4], b=[0.5, 0.5]) for i in range(8)]
        power = runner.power_forecast(per_eval, ("c", "b"), None)
        self.assertAlmostEqual(power["bootstrap_run_variance"], 0.02 * 1 / 4)
        self.assertAlmostEqual(power["mde"], 1.959963984540054 * math.sqrt(0.005) / math.sqrt(8))
        ten = power["targets"][-1]
        self.assertEqual((ten["label"], ten["runs_needed"], ten["runs_note"]), ("10 pp", 3, ""))

    def test_more_runs_cannot_beat_spread_between_evals(self) -> None:
        # Deltas of +-0.5 with identical runs: all the spread is between evals.
        per_eval = [row(str(i), c=[0.5 + (0.5 if i % 2 else -0.5)] * 2, b=[0.5, 0.5])
                    for i in range(6)]
        ten = runner.power_forecast(per_eval, ("c", "b"), None)["targets"][-1]
        self.assertIsNone(ten["runs_needed"])
        self.assertIn("add evals", ten["runs_note"])


@volume_test
class PowerSimulationTest(unittest.TestCase):
    """The forecast must describe the verdict rule: suites simulated with a true effect equal
    to the reported MDE come out `improved` in about 80% of cases.

    Model (the forecast's own assumptions): n evals, one run per config, per-eval deltas
    independent and normal with the reference suite's SD. 300 suites per size, fixed seeds;
    the share must lie within 0.80 +- 0.07: the binomial SE at 300 is 0.023, so this allows
    3 SE. About 10,000 bootstrap resamples per second of CPU make it a few seconds.
    """

    SIMULATIONS = 300
    TOLERANCE = 0.07

    def simulate(self, n: int, reference_sd: float, seed: int) -> tuple[float, float]:
        rng = random.Random(seed)
        reference = [row(str(i), c=[rng.gauss(0.0, reference_sd)], b=[0.0]) for i in range(n)]
        power = runner.power_forecast(reference, ("c", "b"), None)
        mde, sd = power["mde"], power["sd_per_eval_delta"]
        improved = 0
        for k in range(self.SIMULATIONS):
            suite = [row(str(i), c=[rng.gauss(mde, sd)], b=[0.0]) for i in range(n)]
            improved += runner.paired_statistics(suite, ("c", "b"), seed=k)["verdict"] == \
                "improved"
        return mde, improved / self.SIMULATIONS

    def test_improved_in_about_80_percent_at_the_mde(self) -> None:
        started = time.perf_counter()
        shares = {}
        for n, sd, seed in ((8, 0.25, 16), (20, 0.2, 17)):
            mde, share = self.simulate(n, sd, seed)
            shares[n] = (round(mde, 3), share)
            self.assertLess(abs(share - 0.8), self.TOLERANCE,
                            f"n={n}: improved in {share:.1%} at the MDE {mde:.3f}")
        # Half the MDE must be clearly underpowered, or the check above proves little.
        rng = random.Random(5)
        mde = shares[20][0]
        half = sum(runner.paired_statistics(
            [row(str(i), c=[rng.gauss(mde / 2, 0.2)], b=[0.0]) for i in range(20)],
            ("c", "b"), seed=k)["verdict"] == "improved" for k in range(60)) / 60
        self.assertLess(half, 0.6)
        print(f"\n[power simulation] (MDE, share improved) by n: {shares}; at MDE/2 (n=20): "
              f"{half:.0%}; {time.perf_counter() - started:.1f} s")


class ComparisonsTest(unittest.TestCase):
    def test_three_arms_give_two_paired_comparisons(self) -> None:
        per_eval = [row(str(i), new=[1.0], old=[0.5], none=[0.0 if i else 1.0])
                    for i in range(6)]
        found = runner.comparisons(per_eval, ("new", "old", "none"))
        self.assertEqual([(c["candidate"], c["baseline"]) for c in found],
                         [("new", "old"), ("new", "none")])
        self.assertEqual(found[0]["verdict"], "improved")  # every delta 0.5: CI [0.5, 0.5]
        self.assertEqual(found[0]["mean_delta"], 0.5)
        self.assertEqual((found[1]["wins"], found[1]["ties"], found[1]["losses"]), (5, 1, 0))
        self.assertIn("mde", found[1]["power"])


class PerAssertionTest(unittest.TestCase):
    """A hand-computed example: two evals, two configs, two runs of E1's with_skill."""

    def test_table_by_hand(self) -> None:
        common = ["Polite."]
        runs = [
            graded_run("E1", "with_skill", 1, [("Polite.", True), ("Cites the file.", True)]),
            graded_run("E1", "with_skill", 2, [("Polite.", True), ("Cites the file.", False)]),
            graded_run("E1", "without_skill", 1, [("Polite.", True), ("Cites the file.", False)]),
            graded_run("E2", "with_skill", 1, [("Polite.", True), ("Uses a table.", True)]),
            graded_run("E2", "without_skill", 1, [("Polite.", False), ("Uses a table.", True)]),
            graded_run("E2", "without_skill", 2, [], scored=False),  # unscored: left out
        ]
        rows = runner.per_assertion(runs, ("with_skill", "without_skill"), common)
        table = {(r["scope"], r["eval_id"], r["text"]): r for r in rows}
        polite = table[("common", None, "Polite.")]
        # Pooled over scored runs: with 3 of 3, without 1 of 2; gain 1 - 0.5 = +0.5.
        self.assertEqual((polite["configs"]["with_skill"]["passed"],
                          polite["configs"]["with_skill"]["graded"]), (3, 3))
        self.assertEqual((polite["configs"]["without_skill"]["passed"],
                          polite["configs"]["without_skill"]["graded"]), (1, 2))
        self.assertEqual(polite["gains"]["without_skill"], 0.5)
        cites = table[("eval", "E1", "Cites the file.")]
        self.assertEqual(cites["gains"]["without_skill"], 0.5)  # 1 of 2 against 0 of 1
        table_row = table[("eval", "E2", "Uses a table.")]
        self.assertEqual(table_row["gains"]["without_skill"], 0.0)
        self.assertTrue(table_row["non_discriminating"])
        self.assertFalse(polite["non_discriminating"])
        # Sorted by gain, common before per-eval on ties, the non-discriminating row last.
        self.assertEqual([r["text"] for r in rows],
                         ["Polite.", "Cites the file.", "Uses a table."])

    def test_markdown_and_html_show_it(self) -> None:
        records = []
        for config, passes in (("with_skill", [True, True]), ("without_skill", [False, True])):
            case = SimpleNamespace(index=1, id="E1", name=None, key="E1")
            record = runner.new_record(SimpleNamespace(case=case, config=config, run_number=1))
            record.grading = runner.grade_assertions(
                ["Polite.", "Short."], {"verdicts": [{"id": i, "passed": p, "evidence": ""}
                                                    for i, p in enumerate(passes, 1)]})
            record.scored = True
            records.append(record)
        meta = {"skill_name": "demo", "agent": "claude", "configs": ["with_skill",
                "without_skill"], "runs_per_configuration": 1, "evals_run": ["E1"],
                "suite_case_count": 1, "common_assertions": ["Polite."]}
        benchmark = runner.aggregate(records, meta)
        md = runner.render_markdown(benchmark)
        self.assertIn("## Per assertion", md)
        self.assertIn("| Polite. | all (common) | 100.0% (1/1) | 0.0% (0/1) | +100.0 pp |  |",
                      md)
        self.assertIn("| Short. | E1 | 100.0% (1/1) | 100.0% (1/1) | +0.0 pp | "
                      "non-discriminating |", md)
        html = runner.render_html(benchmark, {})
        self.assertIn("<h2>Per assertion</h2>", html)
        self.assertIn("non-discriminating", html)

    def test_older_benchmarks_without_the_new_blocks_still_render(self) -> None:
        records = []
        for config in ("with_skill", "without_skill"):
            case = SimpleNamespace(index=1, id="E1", name=None, key="E1")
            record = runner.new_record(SimpleNamespace(case=case, config=config, run_number=1))
            record.grading = runner.grade_assertions(["A."], {"verdicts": [
                {"id": 1, "passed": True, "evidence": ""}]})
            record.scored = True
            records.append(record)
        meta = {"skill_name": "demo", "agent": "claude", "configs": ["with_skill",
                "without_skill"], "runs_per_configuration": 1, "evals_run": ["E1"],
                "suite_case_count": 1}
        benchmark = runner.aggregate(records, meta)
        for key in ("comparisons", "per_assertion"):
            benchmark.pop(key)
        md = runner.render_markdown(benchmark)
        self.assertNotIn("## Per assertion", md)
        self.assertIn("Verdict", md)
        runner.render_html(benchmark, {})
        runner.render_junit(benchmark)


if __name__ == "__main__":
    unittest.main()
