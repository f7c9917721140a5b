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


def row(eval_id: str, **rates: list[float]) -> dict:
    """A per_eval row as per_eval_rates leaves it: pass rates of the scored runs per config."""
    return {"eval_id": eval_id, "eval_name": eval_id,
            "configs": {config: {"pass_rates": values} for config, values in rates.items()}}


def graded_run(eval_id: str, config: str, run_number: int, verdicts: list[tuple[str, bool]],
               scored: bool = True) -> runner.RunResult:
    """A benchmark run (what benchmark_run gives) with the given (assertion text, passed)."""
    return runner.RunResult(
        eval_id=eval_id, eval_name=eval_id, configuration=config, run_number=run_number,
        status="ok", scored=scored, result=runner.RunScore(None, None, None, None, None, None, 0),
        expectations=tuple(runner.Verdict(i, text, passed, "")
                           for i, (text, passed) in enumerate(verdicts, 1)) if scored else (),
        failure=None, permission_denials=0, skill_read=None, activation=None,
        metric_sources=None, files_sha256=None, grader=None)


def t_by_integration(p: float, df: int) -> float:
    """Student's t quantile by Simpson integration of the density and bisection: an
    independent check of the runner's series for levels no printed table has."""
    def density(x: float) -> float:
        return (math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
                * (1 + x * x / df) ** (-(df + 1) / 2))

    def cdf(x: float) -> float:
        steps, width = 4000, x / 4000
        total = density(0.0) + density(x) + sum(
            (4 if i % 2 else 2) * density(i * width) for i in range(1, steps))
        return 0.5 + total * width / 3

    low, high = 0.0, 20.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if cdf(middle) < p else (low, middle)
    return (low + high) / 2


class PowerForecastTest(unittest.TestCase):
    def test_mde_and_evals_needed_by_hand(self) -> None:
        # Deltas 0.1, 0.3 three times each (one run): mean 0.2, sample SD sqrt(6 * 0.01 / 5)
        # = 0.10954. Of the 64 sign patterns only "all +" (sum 1.2) lies in the top 2.5%: the
        # next sum, 1.0, comes with 3 more patterns (4/64 > 2.5%). So the exact test attains
        # 2/64 = 0.03125, and the forecast's level is sqrt(0.05 * 0.03125) = 0.039528.
        # MDE = (t_5(1 - level / 2) + t_5(0.8)) * sd / sqrt(6) = 0.16483. To detect 0.2
        # (observed) 6 evals do; 0.1 needs 13: (t_12(1 - level / 2) + t_12(0.8)) * sd /
        # sqrt(13) = 0.0967, where 12 evals give 0.1015.
        per_eval = [row(str(i), c=[0.6 if i % 2 else 0.8], b=[0.5]) for i in range(6)]
        power = runner.power_forecast(per_eval, ("c", "b"), 0.2)
        sd = math.sqrt(6 * 0.01 / 5)
        level = math.sqrt(0.05 * 2 / 64)
        self.assertAlmostEqual(power["sd_per_eval_delta"], sd)
        self.assertAlmostEqual(power["level"], level)
        self.assertNotIn("bootstrap_run_variance", power)
        by_hand = (t_by_integration(1 - level / 2, 5) + 0.919544) * sd / math.sqrt(6)
        self.assertAlmostEqual(power["mde"], by_hand, places=3)
        self.assertAlmostEqual(power["mde"], 0.16483, places=3)
        self.assertEqual([(t["label"], t["evals_needed"]) for t in power["targets"]],
                         [("observed", 6), ("10 pp", 13)])
        self.assertIsNone(power["targets"][0]["runs_needed"])
        self.assertIn("at least 2 runs", power["targets"][0]["runs_note"])

    def test_the_level_is_what_the_exact_test_attains(self) -> None:
        # Eight equal-sized deltas: the sum is binomial; all 8 of one sign is 1/256 a tail,
        # 7 or more is 9/256 > 2.5%, so the test attains 2/256. Sixteen distinct sizes
        # (powers of two: every subset sum differs) attain floor(0.025 * 65536) * 2 / 65536.
        # Deltas all tied at 0 attain nothing.
        self.assertAlmostEqual(runner.attainable_level([0.5, -0.5] * 4), 2 / 256)
        self.assertAlmostEqual(runner.attainable_level([2.0 ** -k for k in range(16)]),
                               2 * 1638 / 65536)
        self.assertEqual(runner.attainable_level([0.0] * 10), 0.0)
        self.assertAlmostEqual(runner.forecast_level([0.5, -0.5] * 4),
                               math.sqrt(0.05 * 2 / 256))

    def test_a_suite_whose_ties_allow_no_verdict_names_no_mde(self) -> None:
        # Ten evals, one run: nine ties at 0 and one win. No sign pattern of one non-zero
        # delta reaches p <= 0.05, so no effect is detectable and no target is forecast.
        per_eval = [row(str(i), c=[1.0 if i == 0 else 0.0], b=[0.0]) for i in range(10)]
        power = runner.power_forecast(per_eval, ("c", "b"), 0.1)
        self.assertIsNone(power["mde"])
        self.assertEqual(power["level"], 0.0)
        self.assertIn("no sign pattern", power["reason"])
        self.assertEqual(power["targets"], [])

    def test_t_quantile_matches_tables(self) -> None:
        for p, df, table in ((0.975, 5, 2.570582), (0.975, 9, 2.262157), (0.975, 49, 2.009575),
                             (0.8, 5, 0.919544), (0.8, 19, 0.860951)):
            self.assertAlmostEqual(runner.t_quantile(p, df), table, delta=3e-4)

    def test_below_the_minimum_of_evals_nothing_is_detectable(self) -> None:
        # Five evals: the verdict cannot be "improved" whatever the effect, so the forecast
        # must not name an effect this suite would detect (issue 25: it used to).
        per_eval = [row(str(i), c=[0.6 if i % 2 else 0.8], b=[0.5]) for i in range(5)]
        power = runner.power_forecast(per_eval, ("c", "b"), 0.2)
        self.assertIsNone(power["mde"])
        self.assertIn("at least 6", power["reason"])
        self.assertEqual(power["targets"][-1]["evals_needed"], 12)

    def test_no_spread_and_too_few_evals_say_why(self) -> None:
        same = [row(str(i), c=[1.0], b=[0.5]) for i in range(6)]
        power = runner.power_forecast(same, ("c", "b"), 0.5)
        self.assertIsNone(power["mde"])
        self.assertIn("same delta", power["reason"])
        one = runner.power_forecast([row("a", c=[1.0], b=[0.5])], ("c", "b"), 0.5)
        self.assertIsNone(one["mde"])
        self.assertIn("fewer than 2", one["reason"])

    def test_runs_per_eval_forecast_uses_the_run_to_run_spread(self) -> None:
        # 8 evals, two runs per config; without_skill 0.5 and 0.5; with_skill 0.7/0.4 (mean
        # 0.55) on even evals and 0.6/0.3 (0.45) on odd: deltas +-0.05, sd^2 = 8 * 0.0025 / 7.
        # One run's delta varies by W = 0.045 (the with arm) + 0. Between evals: tau^2 =
        # max(0, sd^2 - W / 2) = 0. Eight equal-sized deltas attain 2/256, so the level is
        # sqrt(0.05 * 2 / 256) = 0.019764. With r runs sd'^2 = W / r, and the MDE is
        # (t_7(1 - level / 2) + t_7(0.8)) * sqrt(W / r) / sqrt(8) = 3.9021 * ...: r=8 gives
        # 0.1035, r=9 0.0976 <= 0.1.
        per_eval = [row(str(i), c=[0.7, 0.4] if i % 2 == 0 else [0.6, 0.3], b=[0.5, 0.5])
                    for i in range(8)]
        power = runner.power_forecast(per_eval, ("c", "b"), None)
        sd = math.sqrt(8 * 0.0025 / 7)
        level = math.sqrt(0.05 * 2 / 256)
        factor = t_by_integration(1 - level / 2, 7) + 0.896030
        self.assertAlmostEqual(power["mde"], factor * sd / math.sqrt(8), places=3)
        ten = power["targets"][-1]
        self.assertEqual((ten["label"], ten["runs_needed"]), ("10 pp", 9))
        self.assertIn("more than --runs allows (5)", ten["runs_note"])

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
    3 SE. The deltas are continuous, where the exact sign-flip test has about the t-test's
    power; tests/test_verdict_simulation.py checks the coarse pass rates of real suites.
    """

    SIMULATIONS = 300
    TOLERANCE = 0.07

    def simulate(self, n: int, reference_sd: float, seed: int) -> tuple[float, float]:
        rng = random.Random(seed)
        reference = [row(str(i), c=[rng.gauss(0.0, reference_sd)], b=[0.0]) for i in range(n)]
        power = runner.power_forecast(reference, ("c", "b"), None)
        mde, sd = power["mde"], power["sd_per_eval_delta"]
        improved = 0
        for _ in range(self.SIMULATIONS):
            suite = [row(str(i), c=[rng.gauss(mde, sd)], b=[0.0]) for i in range(n)]
            improved += runner.paired_statistics(suite, ("c", "b"))["verdict"] == "improved"
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
            ("c", "b"))["verdict"] == "improved" for _ in range(60)) / 60
        self.assertLess(half, 0.6)
        print(f"\n[power simulation] (MDE, share improved) by n: {shares}; at MDE/2 (n=20): "
              f"{half:.0%}; {time.perf_counter() - started:.1f} s")


class ComparisonsTest(unittest.TestCase):
    def test_three_arms_give_two_paired_comparisons(self) -> None:
        per_eval = [row(str(i), new=[1.0], old=[0.5], none=[0.0 if i else 1.0])
                    for i in range(6)]
        found = runner.comparisons(per_eval, ("new", "old", "none"))
        self.assertEqual([(c.candidate, c.baseline) for c in found],
                         [("new", "old"), ("new", "none")])
        self.assertEqual(found[0].verdict, "improved")  # every delta 0.5: CI [0.5, 0.5]
        self.assertEqual(found[0].mean_delta, 0.5)
        self.assertEqual((found[1].wins, found[1].ties, found[1].losses), (5, 1, 0))
        self.assertIn("mde", found[1].power)


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
        written = runner.aggregate(records, meta).to_json()
        for key in ("comparisons", "per_assertion"):
            written.pop(key)
        benchmark = runner.Benchmark.from_json(written, "benchmark.json")
        md = runner.render_markdown(benchmark)
        self.assertNotIn("## Per assertion", md)
        self.assertIn("Verdict", md)
        runner.render_html(benchmark, {})
        runner.render_junit(benchmark)


if __name__ == "__main__":
    unittest.main()
