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

from tests.helpers import per_eval_row, runner


def row(eval_id: str, **rates: list[float]) -> runner.PerEval:
    """A per_eval row as per_eval_rates leaves it: pass rates of the scored runs per config."""
    return per_eval_row(eval_id, **rates)


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
    """Issue 38, item 2: the MDE is simulated from the suite's own evals, so it is
    deterministic, ignores case order, and never exceeds what the pass rates leave room for."""

    def test_t_quantile_matches_tables(self) -> None:
        for p, df, table in ((0.975, 5, 2.570582), (0.975, 9, 2.262157), (0.975, 49, 2.009575),
                             (0.8, 5, 0.919544), (0.8, 19, 0.860951)):
            self.assertAlmostEqual(runner._t_quantile(p, df), table, delta=3e-4)
        self.assertAlmostEqual(runner._t_quantile(0.9, 7), t_by_integration(0.9, 7), delta=3e-4)

    def test_subset_counts_by_brute_force(self) -> None:
        rng = random.Random(3)
        for _ in range(40):
            values = [rng.randint(-4, 4) for _ in range(rng.randint(1, 9))]
            brute = sum(1 for mask in range(2 ** len(values))
                        if sum(v for i, v in enumerate(values) if mask >> i & 1) <= 0)
            self.assertEqual(runner._nonpositive_subsets(values), brute, values)

    def test_the_simulated_verdict_is_the_verdict(self) -> None:
        # The forecast decides on integer lattices; it must agree with paired_statistics.
        rng = random.Random(4)
        for _ in range(150):
            evals, runs = rng.choice((6, 7, 8, 10, 12)), rng.choice((1, 2, 3))
            per_eval = [row(str(i), c=[rng.choice((0.0, 0.5, 1.0)) for _ in range(runs)],
                            b=[rng.choice((0.0, 0.0, 0.5, 1.0)) for _ in range(runs)])
                        for i in range(evals)]
            pairs = runner._paired_rates(per_eval, ("c", "b"))
            scale = runner._lattice_scale(runner._forecast_evals(pairs))
            lattice = [round(d * scale) for d in runner._paired_deltas(pairs)]
            stats = runner._paired_statistics(per_eval, ("c", "b"))
            self.assertEqual(
                runner._forecast_claims(lattice, scale, runner._delta_step(pairs), 0.05),
                stats.verdict == "improved", per_eval)

    def test_mde_is_deterministic_order_free_and_within_the_room(self) -> None:
        rng = random.Random(5)
        per_eval = [row(str(i), c=[float(rng.random() < 0.6) for _ in range(3)],
                        b=[float(rng.random() < 0.5) for _ in range(3)]) for i in range(12)]
        power = runner.power_forecast(per_eval, ("c", "b"), None).to_json()
        shuffled = runner.power_forecast(list(reversed(per_eval)), ("c", "b"), None).to_json()
        self.assertEqual(power, shuffled)
        self.assertIsNotNone(power["mde"])
        self.assertLessEqual(power["mde"], power["max_effect"])
        self.assertLessEqual(power["max_effect"], 1.0)
        self.assertTrue(power["method"].startswith("simulation"))

    def test_six_alternating_deltas_name_no_effect_over_100_pp(self) -> None:
        # The suite: six deltas of +1 and -1 had an MDE of 164.8 pp.
        per_eval = [row(str(i), c=[1.0 if i % 2 else 0.0], b=[0.0 if i % 2 else 1.0])
                    for i in range(6)]
        power = runner.power_forecast(per_eval, ("c", "b"), None).to_json()
        self.assertAlmostEqual(power["max_effect"], 0.5)
        self.assertIsNone(power["mde"])
        self.assertIn("passed every assertion it failed", power["reason"])

    def test_a_suite_of_ties_can_still_show_what_it_could_detect(self) -> None:
        # Ten evals, one run: nine ties at 0 and one win. A skill that fixed most failures
        # would show, so an MDE is named, within the room the pass rates leave.
        per_eval = [row(str(i), c=[1.0 if i == 0 else 0.0], b=[0.0]) for i in range(10)]
        power = runner.power_forecast(per_eval, ("c", "b"), 0.1).to_json()
        self.assertIsNotNone(power["mde"])
        self.assertLessEqual(power["mde"], power["max_effect"])
        self.assertAlmostEqual(power["max_effect"], 0.95)

    def test_below_the_minimum_of_evals_nothing_is_detectable(self) -> None:
        per_eval = [row(str(i), c=[0.6 if i % 2 else 0.8], b=[0.5]) for i in range(5)]
        power = runner.power_forecast(per_eval, ("c", "b"), 0.2).to_json()
        self.assertIsNone(power["mde"])
        self.assertIn("at least 6", power["reason"])
        self.assertIsNotNone(power["targets"][-1]["evals_needed"])

    def test_no_spread_and_too_few_evals_say_why(self) -> None:
        same = [row(str(i), c=[1.0], b=[0.5]) for i in range(6)]
        power = runner.power_forecast(same, ("c", "b"), 0.5).to_json()
        self.assertIsNone(power["mde"])
        self.assertIn("fewer than 80%", power["reason"])
        one = runner.power_forecast([row("a", c=[1.0], b=[0.5])], ("c", "b"), 0.5).to_json()
        self.assertIsNone(one["mde"])
        self.assertIn("fewer than 2", one["reason"])

    def test_a_suite_where_nothing_failed_forecasts_nothing(self) -> None:
        # Every assertion passed in both configs: no skill could show an effect here.
        per_eval = [row(str(i), c=[1.0] * 2, b=[1.0] * 2) for i in range(8)]
        power = runner.power_forecast(per_eval, ("c", "b"), None).to_json()
        self.assertIsNone(power["mde"])
        self.assertEqual(power["max_effect"], 0.0)
        self.assertIn("leaves nothing for a skill to fix", power["reason"])
        ten = power["targets"][-1]
        self.assertIsNone(ten["evals_needed"])
        self.assertIn("nothing is left to gain", ten["runs_note"])

    def test_more_runs_cannot_beat_spread_between_evals(self) -> None:
        # Deltas of +-0.5 with identical runs: all the spread is between evals.
        per_eval = [row(str(i), c=[0.5 + (0.5 if i % 2 else -0.5)] * 2, b=[0.5, 0.5])
                    for i in range(6)]
        ten = runner.power_forecast(per_eval, ("c", "b"), None).to_json()["targets"][-1]
        self.assertIsNone(ten["runs_needed"])
        self.assertIn("add evals", ten["runs_note"])

    def test_a_huge_suite_forecasts_in_seconds(self) -> None:
        # Hostile sizes: 97 assertions a run (a lattice of 1/485 steps) and 400 evals x 5 runs
        # x 20 assertions (40,000 failed assertions to draw per resampled suite) took 20 s
        # each before the exact count and the draws had their limits.
        rng = random.Random(7)
        for evals, runs, assertions in ((60, 5, 97), (400, 5, 20)):
            per_eval = [row(str(i), c=[rng.randint(0, assertions) / assertions
                                       for _ in range(runs)],
                            b=[rng.randint(0, assertions) / assertions for _ in range(runs)])
                        for i in range(evals)]
            started = time.process_time()
            power = runner.power_forecast(per_eval, ("c", "b"), None).to_json()
            self.assertLess(time.process_time() - started, 6.0, (evals, runs, assertions))
            self.assertLessEqual(power["mde"], power["max_effect"])

    def test_dry_run_planned_evals_are_simulated_too(self) -> None:
        rng = random.Random(6)
        per_eval = [row(str(i), c=[float(rng.random() < 0.6) for _ in range(3)],
                        b=[float(rng.random() < 0.5) for _ in range(3)]) for i in range(8)]
        small = runner.power_forecast(per_eval, ("c", "b"), None).mde
        large = runner.power_forecast(per_eval, ("c", "b"), None, evals=30).mde
        self.assertLess(large, small)


class IntervalTest(unittest.TestCase):
    """Issue 38, item 1: ties never give a zero-width interval; an interval that cannot be
    bounded says so."""

    def test_six_tied_evals_leave_room_for_an_effect(self) -> None:
        stats = runner._paired_statistics([row(str(i), c=[0.0], b=[0.0]) for i in range(6)],
                                          ("c", "b"))
        low, high = stats.ci95
        self.assertLess(low, -0.1)
        self.assertGreater(high, 0.1)  # the old interval was [+0.0 pp, +0.0 pp]
        self.assertEqual(stats.verdict, "inconclusive")

    def test_six_wins_are_improved_but_not_exactly_plus_one(self) -> None:
        stats = runner._paired_statistics([row(str(i), c=[1.0], b=[0.0]) for i in range(6)],
                                          ("c", "b"))
        self.assertEqual(stats.verdict, "improved")
        low, high = stats.ci95
        self.assertGreater(low, 0.0)
        self.assertLess(low, 0.8)  # the old interval was [+100 pp, +100 pp]
        self.assertEqual(high, 1.0)
        self.assertTrue(stats.test.interval.bounded)

    def test_too_few_evals_cannot_bound_the_effect(self) -> None:
        stats = runner._paired_statistics([row(str(i), c=[1.0], b=[0.0]) for i in range(5)],
                                          ("c", "b"))
        self.assertEqual(stats.ci95, (-1.0, 1.0))
        self.assertFalse(stats.test.interval.bounded)
        self.assertIn("cannot bound the effect", stats.verdict_reason)

    def test_the_step_is_one_assertion_of_one_run(self) -> None:
        self.assertEqual(runner._delta_step([([1.0], [0.0])]), 1.0)
        self.assertAlmostEqual(runner._delta_step([([1 / 3] * 3, [2 / 3] * 3)]), 1 / 9)
        self.assertAlmostEqual(runner._delta_step([([0.5, 1.0], [0.0])]), 1 / 4)


class ActivationIntervalTest(unittest.TestCase):
    """Issue 38, item 5: runs of one eval agree, so pooled runs are not independent trials."""

    def test_evals_are_the_trials_when_runs_of_several_evals_are_pooled(self) -> None:
        # Three evals of ten runs: the skill is found in every run of E1 and E2, never in E3.
        runs = [SimpleNamespace(eval_id=f"E{e}",
                                activation=runner.RunActivation(e < 3, True, None))
                for e in (1, 2, 3) for _ in range(10)]
        tally = runner._activation_tally(runs)
        self.assertEqual((tally.activated, tally.runs, tally.evals), (20, 30, 3))
        self.assertEqual(tally.interval_unit, "evals")
        self.assertEqual(tally.interval_95, runner._wilson_interval(2.0, 3))
        pooled = runner._wilson_interval(20, 30)  # what the runs as trials claimed: too narrow
        self.assertLess(tally.interval_95[0], pooled[0] - 0.2)
        one = runner._activation_tally(runs[:10])  # one eval: its runs are the trials
        self.assertEqual((one.interval_unit, one.interval_95),
                         ("runs", runner._wilson_interval(10, 10)))


class ComparisonsTest(unittest.TestCase):
    def test_three_arms_give_two_paired_comparisons(self) -> None:
        per_eval = [row(str(i), new=[1.0], old=[0.5], none=[0.0 if i else 1.0])
                    for i in range(7)]
        found = runner.comparisons(per_eval, ("new", "old", "none"))
        self.assertEqual([(c.candidate, c.baseline) for c in found],
                         [("new", "old"), ("new", "none")])
        self.assertEqual(found[0].verdict, "improved")  # p = 2/128 <= 0.05/2
        self.assertEqual(found[0].mean_delta, 0.5)
        self.assertEqual((found[1].wins, found[1].ties, found[1].losses), (6, 1, 0))
        self.assertIn("mde", found[1].power.to_json())

    def test_holm_holds_the_family_and_says_so(self) -> None:
        # Six evals all won against both baselines: p = 2/64 = 0.031 each, a claim alone but
        # not at Holm's first step (0.025), so neither comparison claims.
        six = [row(str(i), new=[1.0], old=[0.0], none=[0.0]) for i in range(6)]
        found = runner.comparisons(six, ("new", "old", "none"))
        self.assertEqual([c.verdict for c in found], ["inconclusive"] * 2)
        self.assertEqual([c.interval_level for c in found], [0.975, 0.975])
        self.assertIn("97.50% interval", found[0].verdict_reason)
        held = found[0].test.to_json()["multiplicity"]
        self.assertEqual((held["comparisons"], held["family_alpha"], held["alpha"]),
                         (2, 0.05, 0.025))
        self.assertIn("Holm", held["method"])
        alone = runner.comparisons(six, ("new", "old"))[0]
        self.assertEqual(alone.verdict, "improved")
        self.assertNotIn("multiplicity", alone.test.to_json())
        self.assertIsNone(alone.interval_level)

    def test_the_plan_warning_knows_holm_needs_a_seventh_eval(self) -> None:
        # 2/2^6 = 0.031 > 0.025: with two baselines six evals can give no verdict (dry run).
        self.assertIsNone(runner._verdict_shortfall(6))
        warning = runner._verdict_shortfall(6, 2)
        self.assertIn("at least 7 evals", warning)
        self.assertIn("Holm", warning)
        self.assertIsNone(runner._verdict_shortfall(7, 2))
        self.assertIn("at least 7 evals", runner._verdict_shortfall(5, 2))

    def test_holm_steps_down_to_the_full_level(self) -> None:
        # Eight evals: against `old` every one won (p = 2/256, a claim at 0.025); against
        # `none` six won and two tied (p = 2 * 4/256 = 0.031): no claim at 0.025, but once
        # the first has claimed, Holm tests it at 0.05.
        eight = [row(str(i), new=[1.0], old=[0.5], none=[0.5 if i < 6 else 1.0])
                 for i in range(8)]
        found = runner.comparisons(eight, ("new", "old", "none"))
        self.assertEqual([c.verdict for c in found], ["improved", "improved"])
        self.assertEqual([c.interval_level for c in found], [0.975, 0.95])
        self.assertAlmostEqual(found[1].test.p_value, 0.03125)
        lines = runner._multiplicity_lines(found)
        self.assertEqual(len(lines), 1)
        self.assertIn("Holm's step-down", lines[0])


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
        rows = [r.to_json() for r in runner.per_assertion(runs, ("with_skill", "without_skill"),
                                                           common)]
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
        # In the suite's order: common first, then by eval and assertion.
        self.assertEqual([r["text"] for r in rows],
                         ["Polite.", "Cites the file.", "Uses a table."])
        # Issue 38, item 4: each rate and gain with its interval. Polite. is common: its
        # trials are the 2 evals it was graded in per config, not its runs. Wilson(2 of 2)
        # = [0.3424, 1]; Wilson(1 of 2) = [0.0944, 0.9056]; Newcombe: 0.5 - sqrt(0.6576^2
        # + 0.4056^2) = -0.2726, 0.5 + sqrt(0 + 0.4056^2) = 0.9056.
        slots = polite["configs"]
        self.assertAlmostEqual(slots["with_skill"]["interval_95"][0], 0.3424, places=3)
        self.assertAlmostEqual(slots["without_skill"]["interval_95"][1], 0.9056, places=3)
        low, high = polite["gain_intervals_95"]["without_skill"]
        self.assertAlmostEqual(low, -0.2726, places=3)
        self.assertAlmostEqual(high, 0.9056, places=3)

    def test_the_order_is_the_suites_not_the_gains(self) -> None:
        runs = [graded_run("E1", "with_skill", 1, [("Loses.", False)]),
                graded_run("E1", "without_skill", 1, [("Loses.", True)]),
                graded_run("E2", "with_skill", 1, [("Gains.", True)]),
                graded_run("E2", "without_skill", 1, [("Gains.", False)])]
        rows = [r.to_json() for r in runner.per_assertion(runs, ("with_skill", "without_skill"),
                                                           [])]
        self.assertEqual([r["text"] for r in rows], ["Loses.", "Gains."])
        low, high = rows[1]["gain_intervals_95"]["without_skill"]
        self.assertLess(low, 0.0)  # one run each: a +100 pp gain is no finding

    def test_markdown_and_html_show_it(self) -> None:
        records = []
        for config, passes in (("with_skill", [True, True]), ("without_skill", [False, True])):
            case = SimpleNamespace(index=1, id="E1", name=None, key="E1")
            record = runner._new_record(SimpleNamespace(case=case, config=config, run_number=1))
            record.grading = runner.grade_assertions(
                ["Polite.", "Short."], {"verdicts": [{"id": i, "passed": p, "evidence": ""}
                                                    for i, p in enumerate(passes, 1)]})
            record.scored = True
            records.append(record)
        meta = {"skill_name": "demo", "agent": "claude", "configs": ["with_skill",
                "without_skill"], "runs_per_configuration": 1, "evals_run": ["E1"],
                "suite_case_count": 1, "common_assertions": ["Polite."]}
        benchmark = runner.aggregate(records, runner.Metadata.from_json(meta, "metadata"))
        md = runner.render_markdown(benchmark)
        self.assertIn("## Per assertion", md)
        self.assertIn("| Polite. | all (common) | 100.0% (1/1) | 0.0% (0/1) | +100.0 pp "
                      "[-12.2 pp, +100.0 pp] |  |", md)
        self.assertIn("| Short. | E1 | 100.0% (1/1) | 100.0% (1/1) | +0.0 pp "
                      "[-79.3 pp, +79.3 pp] | non-discriminating |", md)
        self.assertIn("not by gain", md)
        html = runner.render_html(benchmark, {})
        self.assertIn("<h2>Per assertion</h2>", html)
        self.assertIn("non-discriminating", html)

    def test_older_benchmarks_without_the_new_blocks_still_render(self) -> None:
        records = []
        for config in ("with_skill", "without_skill"):
            case = SimpleNamespace(index=1, id="E1", name=None, key="E1")
            record = runner._new_record(SimpleNamespace(case=case, config=config, run_number=1))
            record.grading = runner.grade_assertions(["A."], {"verdicts": [
                {"id": 1, "passed": True, "evidence": ""}]})
            record.scored = True
            records.append(record)
        meta = {"skill_name": "demo", "agent": "claude", "configs": ["with_skill",
                "without_skill"], "runs_per_configuration": 1, "evals_run": ["E1"],
                "suite_case_count": 1}
        written = runner.aggregate(records, runner.Metadata.from_json(meta, "metadata")).to_json()
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
