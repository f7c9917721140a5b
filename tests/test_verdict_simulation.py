"""Issue 25: the verdict's test and interval at their stated level, checked by simulation.

Model (fixed seeds): each eval has its own baseline pass probability p ~ Beta(2, 2); a run
passes (pass rate 1) or fails (0) with that probability, independently. Under no effect the
candidate has the same p. Under an effect delta the candidate fixes a share 2 * delta of the
baseline's failures, p_c = p + 2 * delta * (1 - p), so the true mean per-eval delta is exactly
delta while the per-eval deltas are skewed and discrete, as real ones are.

Per cell (evals x runs): the false-claim rate (any verdict but `inconclusive`) and the
coverage of ci95 under no effect; then suites with the true effect set to the median MDE the
no-effect suites reported: the share called `improved` (power at the MDE, target 80%) and
the coverage of the true delta.

What is asserted, and why not more:
- false claims at most 6.5% in every cell. The issue's floor of 3% is not asserted: the
  exact test is valid, so on coarse pass rates (1 run: deltas -1, 0, +1 with many ties) it is
  conservative, and no valid non-randomized test can reach 3% there; below 6 evals it never
  claims (the best exact two-sided p with 5 evals is 0.0625). OneRunCeilingTest below works
  out that ceiling exactly (0.43% at 10 x 1, 1.94% at 20 x 1) and the runner's test against
  it.
- coverage of ci95 at least 93% with no effect; at the MDE as well where the MDE is at most
  40 pp. Above that (20 evals x 1 run: about 46 pp, where the model's ceiling is 50 pp and
  almost every candidate run passes) the interval, which inverts a test that assumes deltas
  symmetric about their mean, covers about 92%: at least 90% is asserted there.
- power at the MDE between 70% and 90% (the issue's band). The forecast assumes the level
  the exact test attains on the suite's deltas (forecast_level in the runner); with the
  stated 5% it was 62% at 10 evals. skills/skill-eval/references/statistics.md prints the
  table.
Suites per cell: 1,000 up to 20 evals, 500 at 50 (above 16 evals the Monte Carlo test costs
about 15 ms of CPU a suite); about 160 s of CPU, printed with the table.
"""

from __future__ import annotations

import math
import random
import statistics
import sys
import time
import unittest

from tests.helpers import runner, volume_test

PAIR = ("c", "b")


def simulated_suite(rng: random.Random, evals: int, runs: int, delta: float) -> list[dict]:
    rows = []
    for i in range(evals):
        base = rng.betavariate(2, 2)
        cand = base + 2 * delta * (1 - base)
        rows.append({"eval_id": i, "configs": {
            "c": {"pass_rates": [float(rng.random() < cand) for _ in range(runs)]},
            "b": {"pass_rates": [float(rng.random() < base) for _ in range(runs)]}}})
    return rows


def run_cell(evals: int, runs: int, suites: int, seed: int) -> dict:
    """One cell of the grid: rates under no effect, then power and coverage at the MDE."""
    rng = random.Random(seed)
    claims = covered = 0
    mdes = []
    for _ in range(suites):
        rows = simulated_suite(rng, evals, runs, 0.0)
        stats = runner.paired_statistics(rows, PAIR)
        claims += stats["verdict"] != "inconclusive"
        covered += stats["ci95"][0] <= 0.0 <= stats["ci95"][1]
        mde = runner.power_forecast(rows, PAIR, stats["mean_delta"])["mde"]
        if mde is not None:
            mdes.append(mde)
    cell = {"evals": evals, "runs": runs, "suites": suites, "false_claims": claims / suites,
            "coverage_null": covered / suites, "mde": None, "power": None,
            "coverage_effect": None}
    # The model cannot make a mean delta above 0.5 (every failure fixed would be 0.5).
    if len(mdes) < suites / 2 or statistics.median(mdes) > 0.5:
        cell["mde"] = statistics.median(mdes) if mdes else None
        return cell
    cell["mde"] = effect = statistics.median(mdes)
    improved = covered = 0
    for _ in range(suites):
        stats = runner.paired_statistics(simulated_suite(rng, evals, runs, effect), PAIR)
        improved += stats["verdict"] == "improved"
        covered += stats["ci95"][0] <= effect <= stats["ci95"][1]
    cell.update(power=improved / suites, coverage_effect=covered / suites)
    return cell


def percent(value) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def table(cells: list[dict]) -> str:
    lines = ["| evals | runs | suites | false claims | coverage (no effect) | median MDE | "
             "improved at MDE | coverage at MDE |", "|---|---|---|---|---|---|---|---|"]
    for c in cells:
        mde = "none" if c["mde"] is None else f"{c['mde'] * 100:.1f} pp"
        lines.append(f"| {c['evals']} | {c['runs']} | {c['suites']} | "
                     f"{percent(c['false_claims'])} | {percent(c['coverage_null'])} | {mde} | "
                     f"{percent(c['power'])} | {percent(c['coverage_effect'])} |")
    return "\n".join(lines)


def suites_for(evals: int) -> int:
    return 500 if evals > 20 else 1000


@volume_test
class VerdictSimulationTest(unittest.TestCase):
    def test_grid(self) -> None:
        started, cpu = time.perf_counter(), time.process_time()
        cells = [run_cell(evals, runs, suites_for(evals), seed=1000 * evals + runs)
                 for evals in (5, 10, 20, 50) for runs in (1, 3, 5)]
        print(f"\n[verdict simulation, {time.perf_counter() - started:.0f} s wall, "
              f"{time.process_time() - cpu:.0f} s CPU]\n{table(cells)}", file=sys.stderr)
        for cell in cells:
            name = f"{cell['evals']} evals x {cell['runs']} runs"
            self.assertLessEqual(cell["false_claims"], 0.065, name)
            self.assertGreaterEqual(cell["coverage_null"], 0.93, name)
            if cell["evals"] < runner.MIN_PAIRED_EVALS:
                self.assertEqual(cell["false_claims"], 0.0, name)
                self.assertIsNone(cell["mde"], name)
            if cell["power"] is not None:
                floor = 0.93 if cell["mde"] <= 0.40 else 0.90
                self.assertGreaterEqual(cell["coverage_effect"], floor, name)
                self.assertGreaterEqual(cell["power"], 0.70, name)
                self.assertLessEqual(cell["power"], 0.90, name)
        # Power is checked where the model can make the MDE (at most 50 pp): not at 5 evals
        # (no MDE), nor 10 x 1 run (about 85 pp).
        self.assertGreaterEqual(sum(c["power"] is not None for c in cells), 8)


if __name__ == "__main__":
    unittest.main()


# -- --adaptive: the sequential verdict over all its looks (issue 25, items 4 and 5) ----------
#
# The same model; a suite's K = runs waves are revealed one at a time and the runner's own
# look (runner.sequential_look) decides after each whether the next wave runs. Per cell: the
# share of no-effect suites with any claim at any look (the false-claim rate of the whole
# procedure, asserted at most 5%), and for no effect, +10 pp and +30 pp the mean share of
# cells the waves not run saved, and the share called `improved`. Suites per cell (fixed
# seeds): 1,000 up to 10 evals; 200 with no effect and 100 with one at 20 evals; 150 and 60
# at 50 (the Monte Carlo test above 16 evals costs about 15 ms a look, and futility may take
# a few); about 90 s of CPU. The false-claim rate at 20 and 50 evals is therefore known to
# about +-1.5 pp (one standard error), enough to show it well under 5%.

ADAPTIVE_EFFECTS = (0.0, 0.10, 0.30)


# -- the ceiling on false claims at one run ------------------------------------------------
#
# With one run a per-eval delta is -1, 0 or +1. In the model above an eval is discordant (its
# two runs differ) with probability E[2p(1 - p)] = 0.4 for p ~ Beta(2, 2), independently, and
# under no effect a discordant eval's sign is a fair coin. A verdict that (a) holds its level
# for every no-effect distribution symmetric about 0 (what an assumption-light test is; it
# then must hold it given the deltas' sizes, since a null may put all its mass on one set of
# sizes), (b) ignores the order of the evals and (c) is two-sided and not randomized, rejects
# for n discordant evals a union of pairs of win counts {w, n - w} of total chance at most
# 5%. The best such union, weighted by the chance of n, bounds every test of that kind.


def discordant_chance() -> float:
    mean, variance = 0.5, 2 * 2 / ((2 + 2) ** 2 * (2 + 2 + 1))  # Beta(2, 2)
    return 2 * (mean - (variance + mean ** 2))


def best_symmetric_size(n: int, alpha: float = 0.05) -> float:
    """The largest chance <= alpha of a union of {w, n - w} win counts among n fair signs."""
    pairs = [math.comb(n, w) * (1 if 2 * w == n else 2) for w in range(n // 2 + 1)]
    cap, reachable = alpha * 2 ** n, {0}
    for size in pairs:
        reachable |= {total + size for total in reachable if total + size <= cap}
    return max(reachable) / 2 ** n


def weighted(evals: int, size_for_n) -> float:
    q = discordant_chance()
    return math.fsum(math.comb(evals, n) * q ** n * (1 - q) ** (evals - n) * size_for_n(n)
                     for n in range(evals + 1))


def runner_size(evals: int, n: int) -> float:
    """The runner's own chance of a claim given n discordant evals of `evals`, exactly."""
    claims = 0
    for wins in range(n + 1):
        deltas = [1.0] * wins + [-1.0] * (n - wins) + [0.0] * (evals - n)
        test = runner.sign_flip_test(deltas)
        if runner._decision(test, evals):
            claims += math.comb(n, wins)
    return claims / 2 ** n


class OneRunCeilingTest(unittest.TestCase):
    def test_no_valid_exact_verdict_reaches_three_percent_at_one_run(self) -> None:
        self.assertAlmostEqual(discordant_chance(), 0.4)
        rows = []
        for evals in (5, 10, 20):
            ceiling = weighted(evals, best_symmetric_size)
            ours = weighted(evals, lambda n, e=evals: runner_size(e, n))
            rows.append(f"{evals} x 1: ceiling {ceiling:.2%}, the runner's test {ours:.2%}")
            self.assertLess(ceiling, 0.03, evals)  # the 3% floor is out of reach
            self.assertLessEqual(ours, ceiling + 1e-12, evals)
            self.assertGreater(ours, ceiling - 0.005, evals)  # within half a point of it
        print("\nfalse-claim ceiling at one run (Beta(2,2) model): " + "; ".join(rows),
              file=sys.stderr)


def adaptive_suite(rows: list[dict], runs: int) -> tuple[dict, int]:
    """The look the waves stop at, and how many waves ran."""
    pairs = [(row["configs"]["c"]["pass_rates"], row["configs"]["b"]["pass_rates"])
             for row in rows]
    for wave in range(1, runs + 1):
        look = runner.sequential_look([(c[:wave], b[:wave]) for c, b in pairs], wave, runs)
        if look["stop"]:
            return look, wave
    raise AssertionError("the last look always stops")


def adaptive_suites_for(evals: int, effect: float) -> int:
    if evals <= 10:
        return 1000
    return (200 if evals <= 20 else 150) if effect == 0 else (100 if evals <= 20 else 60)


def run_adaptive_cell(evals: int, runs: int, effect: float, suites: int, seed: int) -> dict:
    rng = random.Random(seed)
    claims = improved = 0
    saved = 0.0
    for _ in range(suites):
        look, waves = adaptive_suite(simulated_suite(rng, evals, runs, effect), runs)
        claims += look["decision"] is not None
        improved += look["decision"] == "improved"
        saved += 1 - waves / runs
    return {"evals": evals, "runs": runs, "effect": effect, "suites": suites,
            "claims": claims / suites, "improved": improved / suites, "saved": saved / suites}


def adaptive_table(cells: list[dict]) -> str:
    lines = ["| evals | runs | suites (none/+10/+30) | false claims | saved, no effect | "
             "saved, +10 pp | saved, +30 pp | improved, +10 pp | improved, +30 pp |",
             "|---|---|---|---|---|---|---|---|---|"]
    by_key = {(c["evals"], c["runs"], c["effect"]): c for c in cells}
    for evals, runs in dict.fromkeys((c["evals"], c["runs"]) for c in cells):
        row = [by_key[(evals, runs, effect)] for effect in ADAPTIVE_EFFECTS]
        lines.append(f"| {evals} | {runs} | {'/'.join(str(c['suites']) for c in row)} | "
                     f"{percent(row[0]['claims'])} | {percent(row[0]['saved'])} | "
                     f"{percent(row[1]['saved'])} | {percent(row[2]['saved'])} | "
                     f"{percent(row[1]['improved'])} | {percent(row[2]['improved'])} |")
    return "\n".join(lines)


@volume_test
class AdaptiveSimulationTest(unittest.TestCase):
    def test_false_claims_over_all_looks(self) -> None:
        started, cpu = time.perf_counter(), time.process_time()
        cells = [run_adaptive_cell(evals, runs, effect, adaptive_suites_for(evals, effect),
                                   seed=100000 + 1000 * evals + 10 * runs + int(effect * 100))
                 for evals in (5, 10, 20, 50) for runs in (3, 5) for effect in ADAPTIVE_EFFECTS]
        print(f"\n[adaptive simulation, {time.perf_counter() - started:.0f} s wall, "
              f"{time.process_time() - cpu:.0f} s CPU]\n{adaptive_table(cells)}",
              file=sys.stderr)
        for cell in cells:
            name = f"{cell['evals']} evals x {cell['runs']} runs, effect {cell['effect']}"
            if cell["effect"] == 0:
                self.assertLessEqual(cell["claims"], runner.ALPHA, name)
            if cell["evals"] < runner.MIN_PAIRED_EVALS:  # no look can decide: stop at once
                self.assertEqual(cell["claims"], 0.0, name)
                self.assertAlmostEqual(cell["saved"], 1 - 1 / cell["runs"], msg=name)
        # A large effect is found, and found early, from 20 evals on.
        for cell in cells:
            if cell["evals"] >= 20 and cell["effect"] == 0.30:
                self.assertGreaterEqual(cell["improved"], 0.8, cell)
                self.assertGreater(cell["saved"], 0.1, cell)
