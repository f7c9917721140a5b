"""Issue 25, items 4 and 5: `run --adaptive`, the matrix in waves with a sequential verdict.

The statistics are tested directly (the shares of alpha, the looks, futility); the runs go
end to end through the fake CLIs: the fake grader fails an assertion that carries the tag of
the arm it grades ([b-fail] for the baseline's answer, [w-fail] for the skill's), so every
eval's delta is scripted exactly. The false-claim rate over all looks is checked by simulation
in tests/test_verdict_simulation.py (a volume test).
"""

from __future__ import annotations

import json
import math
import unittest
from pathlib import Path

from tests.helpers import call_main, fake_calls, runner
from tests.test_run_e2e import RunTestCase, case, load_json

SCRIPT = {
    "executor": {"text": "answer from the baseline run"},
    "grader": {"verdicts": {"fail_if_text_contains": ["[b-fail]"]}},
    "cases": [
        {"match": "Skill path:", "role": "executor", "spec": {"text": "answer from the skill run"}},
        {"match": "answer from the skill run", "role": "grader",
         "spec": {"verdicts": {"fail_if_text_contains": ["[w-fail]"]}}},
    ],
}


def suite_of(tags: list[str]) -> dict:
    """One eval per tag: [b-fail] gives a delta of +1/2 in every run, [w-fail] -1/2, '' 0
    (the common assertion passes everywhere)."""
    return {"skill_name": "demo", "common_assertions": ["The reply is in English."], "evals": [
        case(f"E{i:02d}", f"Task number {i}.", [f"It does step {i}. {tag}".strip()])
        for i, tag in enumerate(tags, 1)]}


class SequentialStatisticsTest(unittest.TestCase):
    def test_shares_sum_to_alpha_and_grow_for_obrien_fleming(self) -> None:
        for spending in ("obrien-fleming", "pocock"):
            for looks in range(1, 6):
                shares = runner.spending_shares(looks, spending=spending)
                self.assertEqual(len(shares), looks)
                self.assertAlmostEqual(math.fsum(shares), runner.ALPHA, places=12)
                self.assertTrue(all(share > 0 for share in shares))
        self.assertEqual(runner.spending_shares(1), [runner.ALPHA])
        shares = runner.spending_shares(5, spending="obrien-fleming")
        self.assertEqual(shares, sorted(shares))  # almost nothing early, most kept for last
        self.assertLess(shares[0], 1e-4)

    def test_a_clear_effect_stops_once_its_share_allows(self) -> None:
        # 8 evals all +1: p = 2/256 = 0.0078. Looks 1 and 2 (0.0000117, 0.00193) cannot reach
        # it with 8 evals, so they spend nothing and pass their shares on (issue 38): the
        # third look has a(3/5) = 0.0113 of alpha, the first above 0.0078.
        for look in (1, 2):
            result = runner.sequential_look([([1.0] * look, [0.0] * look)] * 8, look, 5)
            self.assertIsNone(result.stop)
            self.assertEqual(result.alpha, 0.0)
            self.assertIsNone(result.ci)
            self.assertIn("could not decide", result.skipped)
        result = runner.sequential_look([([1.0] * 3, [0.0] * 3)] * 8, 3, 5)
        self.assertEqual((result.decision, result.stop), ("improved", "improved"))
        self.assertGreater(result.ci[0], 0)  # the interval agrees with the decision
        self.assertLessEqual(result.p_value, result.alpha)
        verdict, reason = runner._sequential_verdict(result)
        self.assertEqual(verdict, "improved")
        self.assertIn("look 3 of 5", reason)

    def test_futility_when_no_later_outcome_could_decide(self) -> None:
        # Four evals won and four lost by every run: after three waves even two more waves
        # all won by the candidate leave four deltas below 0, and no later look decides.
        def pairs(k: int) -> list:
            return [([1.0] * k, [0.0] * k)] * 4 + [([0.0] * k, [1.0] * k)] * 4
        self.assertIsNone(runner.sequential_look(pairs(2), 2, 5).stop)
        self.assertEqual(runner.sequential_look(pairs(3), 3, 5).stop, "futility")
        self.assertEqual(runner.sequential_look(pairs(5), 5, 5).stop, "ceiling")
        # Five evals can never decide (2/32 > 0.05): the waves stop after the first.
        self.assertEqual(runner.sequential_look([([1.0], [0.0])] * 5, 1, 5).stop,
                         "futility")
        # Six evals could not decide at any nominal share of five looks (2/64 = 0.031 is
        # above each); with the shares of the looks that cannot decide passed on, the last
        # look has all of alpha, so the waves go on and a clean sweep decides there.
        self.assertIsNone(runner.sequential_look([([1.0], [0.0])] * 6, 1, 5).stop)
        last = runner.sequential_look([([1.0] * 5, [0.0] * 5)] * 6, 5, 5)
        self.assertEqual((last.alpha, last.decision), (runner.ALPHA, "improved"))

    def test_looks_that_cannot_decide_pass_their_share_on(self) -> None:
        # Issue 38, item 8: with 7 evals the smallest p is 2/128 = 0.0156, above the shares
        # of looks 1-3 of five (0.0000117, 0.00193, 0.00945; 0.0114 together): they spend
        # nothing, look 4 has a(4/5) = 0.0284, look 5 the rest.
        nominal = runner.spending_shares(5)
        shares = runner.spending_shares(5, evals=7)
        self.assertEqual(shares[:3], [0.0, 0.0, 0.0])
        self.assertAlmostEqual(shares[3], math.fsum(nominal[:4]))
        self.assertAlmostEqual(shares[4], nominal[4])
        self.assertAlmostEqual(math.fsum(shares), runner.ALPHA, places=12)
        self.assertEqual(runner.deciding_looks(5, 7), [4, 5])
        self.assertEqual(runner.deciding_looks(5, 20), [2, 3, 4, 5])
        self.assertEqual(runner.deciding_looks(5, 5), [])
        # 40 evals (sampled patterns, smallest p 2/10000): only the first look passes on.
        forty = runner.spending_shares(5, evals=40)
        self.assertEqual(forty[0], 0.0)
        self.assertAlmostEqual(forty[1], nominal[0] + nominal[1])
        self.assertEqual(forty[2:], nominal[2:])

    def test_a_level_never_reads_100_percent(self) -> None:
        # The first look of five is at 1 - 1.17e-5: "100.00%" would claim certainty.
        self.assertEqual(runner.level_text(1 - runner.spending_shares(5)[0]), "99.999%")
        self.assertEqual(runner.level_text(1 - runner.spending_shares(5)[2]), "99.05%")
        self.assertEqual(runner.level_text(0.95), "95.00%")

    def test_best_case_is_monotone_bound(self) -> None:
        # An eval not scored yet in an arm counts from its future runs alone.
        self.assertEqual(runner._best_case_deltas([([], [])], 2, 1), [1.0])
        self.assertEqual(runner._best_case_deltas([([0.0], [1.0])], 1, 1), [0.0])
        self.assertEqual(runner._best_case_deltas([([1.0], [1.0])], 1, -1), [-0.5])


class AdaptiveRunTest(RunTestCase):
    def run_adaptive(self, tags: list[str], *extra: str) -> tuple[int, str, str, Path]:
        root = self.repo(suite_of(tags))
        code, out, err = self.run_main(root, self.env(SCRIPT), "--agent", "claude",
                                       "--runs", "5", "--adaptive", "--concurrency", "8",
                                       "--quiet", *extra)
        return code, out, err, root

    def test_large_effect_stops_early_and_reports_calls_saved(self) -> None:
        code, out, err, root = self.run_adaptive(["[b-fail]"] * 8)
        self.assertEqual(code, 0, out + err)
        folder = self.iteration(root)
        bench = load_json(folder / "benchmark.json")
        adaptive = bench["adaptive"]
        self.assertEqual((adaptive["waves_run"], adaptive["waves_max"]), (3, 5))
        self.assertEqual(adaptive["stop"], "improved")
        saved = adaptive["saved"]
        self.assertEqual((saved["cells"], saved["executor_calls"], saved["grader_calls"]),
                         (32, 32, 32))
        self.assertEqual(saved["full_matrix"], {"cells": 80, "executor_calls": 80,
                                                "grader_calls": 80})
        self.assertAlmostEqual(saved["share"], 0.4)
        # The fake claude reports cost and tokens: the saving is estimated from them.
        self.assertGreater(saved["cost_usd"]["estimate"], 0)
        self.assertNotIn("value", saved["cost_usd"])  # an estimate, never a captured metric
        self.assertIn("cells that ran", saved["cost_usd"]["basis"])
        self.assertEqual(agent_calls(self.tmp.path), 2 * 48)
        self.assertEqual(len(bench["runs"]), 48)
        self.assertEqual({r["run_number"] for r in bench["runs"]}, {1, 2, 3})
        # The verdict is the sequential one, its interval at the third look's share of alpha.
        paired = bench["paired"]
        self.assertEqual(paired["verdict"], "improved")
        self.assertEqual(paired["test"]["look"], 3)
        self.assertAlmostEqual(paired["test"]["alpha"], runner.spending_shares(5, evals=8)[2])
        self.assertEqual(adaptive["deciding_looks"], [3, 4, 5])
        self.assertEqual(paired["ci95"], adaptive["looks"][-1]["ci"])
        self.assertGreater(paired["ci95"][0], 0)
        md = (folder / "benchmark.md").read_text(encoding="utf-8")
        self.assertIn("## Adaptive waves", md)
        self.assertIn("Waves run: 3 of 5", md)
        self.assertIn("32 of 80 cells", md)
        self.assertIn("look 3 of 5", md)
        page = (folder / "benchmark.html").read_text(encoding="utf-8")
        self.assertIn("<h2>Adaptive waves</h2>", page)
        self.assertIn("<li>Saved against the full matrix: 32 of 80 cells (40%)", page)
        # Looks 1 and 2 went on: with 8 evals they could not decide (issue 38, item 8).
        self.assertEqual(page.count("<td>could not decide; next wave</td>"), 2)
        self.assertEqual(load_json(folder / "iteration_manifest.json")["options"]["adaptive"],
                         True)
        # `report` re-renders the same account from benchmark.json.
        code, out, err = call_main(["report", str(folder)])
        self.assertEqual(code, 0, out + err)
        self.assertEqual((folder / "benchmark.md").read_text(encoding="utf-8"), md)
        self.assertIn("98.86% CI [+17.5 pp, +62.5 pp]", out)
        self.assertIn("look 3 of 5", out)
        self.assertIn("Adaptive: 3 of 5 waves, decided: improved; saved 32 of 80 cells (32 "
                      "executor and 32 grader calls)", out)
        # The same iteration serves the two checks below (an adaptive run of 96 fake CLI
        # calls costs about 18 s of CPU).
        self.check_an_adaptive_iteration_is_not_regraded(root)
        self.check_resume_replays_the_looks(folder)

    def test_no_effect_makes_no_claim_and_stops_for_futility(self) -> None:
        code, out, err, root = self.run_adaptive(["[b-fail]"] * 4 + ["[w-fail]"] * 4)
        folder = self.iteration(root)
        bench = load_json(folder / "benchmark.json")
        adaptive = bench["adaptive"]
        # After four waves a fifth one won by the candidate still leaves four deltas below 0
        # (cand 2.5/5 - base 4/5 for the [w-fail] evals): no later look can decide.
        self.assertEqual((adaptive["stop"], adaptive["waves_run"]), ("futility", 4), out + err)
        self.assertIn("futility", adaptive["stop_reason"])
        self.assertEqual(bench["paired"]["verdict"], "inconclusive")
        self.assertEqual(adaptive["saved"]["cells"], 16)
        self.assertEqual(agent_calls(self.tmp.path), 2 * 64)
        self.assertIn("futility", (folder / "benchmark.md").read_text(encoding="utf-8"))

    def check_resume_replays_the_looks(self, folder: Path) -> None:
        calls = agent_calls(self.tmp.path)
        code, out, err = call_resume(folder, self.env(SCRIPT))
        self.assertEqual(code, 0, out + err)
        self.assertEqual(agent_calls(self.tmp.path), calls)  # nothing ran again
        self.assertEqual(load_json(folder / "benchmark.json")["adaptive"]["waves_run"], 3)

    def check_an_adaptive_iteration_is_not_regraded(self, root: Path) -> None:
        calls = agent_calls(self.tmp.path)
        code, out, err = self.run_main(root, self.env(SCRIPT), "--agent", "claude", "--regrade",
                                       str(self.iteration(root)), "--quiet")
        self.assertEqual(code, 2, out + err)
        self.assertIn("that iteration ran --adaptive", err)
        self.assertEqual(agent_calls(self.tmp.path), calls)

    def test_a_spending_cap_stops_the_waves(self) -> None:
        # The fake claude reports 240 tokens a cell (an executor and a grader call); the cap
        # is reached inside the first wave.
        code, out, err, root = self.run_adaptive(["[b-fail]"] * 8, "--max-tokens", "500",
                                                 "--concurrency", "1")
        bench = load_json(self.iteration(root) / "benchmark.json")
        self.assertEqual(bench["adaptive"]["stop"], "stopped", out + err)
        self.assertEqual(bench["adaptive"]["waves_run"], 1)
        self.assertIn("spending cap", bench["adaptive"]["stop_reason"])
        self.assertEqual(bench["paired"]["verdict"], "inconclusive")

    def test_shards_run_one_wave_at_a_time_and_the_merge_looks(self) -> None:
        root = self.repo(suite_of(["[b-fail]"] * 8))
        env = self.env(SCRIPT)
        shards = [self.tmp.path / f"shard{k}" for k in (1, 2)]
        merged: list[Path] = []
        for wave in (1, 2, 3):
            for k, workspace in enumerate(shards, 1):
                if wave == 1:
                    code, out, err = self.run_main(root, env, "--agent", "claude", "--runs",
                                                   "5", "--adaptive", "--shard", f"{k}/2",
                                                   "--workspace", str(workspace), "--quiet")
                else:
                    code, out, err = call_main(["run", "--resume", str(workspace / "iteration-1"),
                                                "--next-wave", str(merged[-1]), "--quiet"],
                                               env=env)
                self.assertEqual(code, 0, out + err)
                bench = load_json(workspace / "iteration-1" / "benchmark.json")
                # A shard claims nothing: its evals are only some of the suite's.
                self.assertEqual(bench["paired"]["verdict"], "inconclusive")
                self.assertIn("the verdict is the look that report --merge makes",
                              bench["paired"]["verdict_reason"])
                self.assertEqual(bench["adaptive"]["waves_run"], wave)
                self.assertEqual({r["run_number"] for r in bench["runs"]},
                                 set(range(1, wave + 1)))
                self.assertIn(f"shard {k}/2 ran wave {wave} of 5", out)
            self.assertEqual(agent_calls(self.tmp.path), 2 * 16 * wave)
            merged.append(self.tmp.path / f"merged-{wave}")
            code, out, err = call_main(["report", str(merged[-1]), "--merge",
                                        *(str(w / "iteration-1") for w in shards)])
            self.assertEqual(code, 0, out + err)
            adaptive = load_json(merged[-1] / "benchmark.json")["adaptive"]
            self.assertEqual(adaptive["waves_run"], wave)
            if wave < 3:
                self.assertIsNone(adaptive["stop"])
                self.assertIsNone(adaptive["saved"])
                self.assertEqual(adaptive["next_wave"], wave + 1)
                self.assertIn(f"not decided yet; next: wave {wave + 1} on every shard", out)
                self.assertIn(f"--next-wave {merged[-1]}", out)
                self.assertIn("so far only", load_json(merged[-1] / "benchmark.json")
                              ["paired"]["verdict_reason"])
                md = (merged[-1] / "benchmark.md").read_text(encoding="utf-8")
                self.assertIn(f"Waves run: {wave} of 5; not stopped: waiting for wave", md)
                self.assertIn("Saved against the full matrix: not known until the waves stop",
                              md)
                self.assertEqual(call_main(["report", str(merged[-1])])[0], 0)
                self.assertEqual((merged[-1] / "benchmark.md").read_text(encoding="utf-8"), md)
        # The third look decides, as on one machine (test_large_effect_stops_early...).
        bench = load_json(merged[-1] / "benchmark.json")
        self.assertEqual((bench["adaptive"]["stop"], bench["paired"]["verdict"]),
                         ("improved", "improved"))
        self.assertEqual(bench["paired"]["test"]["look"], 3)
        saved = bench["adaptive"]["saved"]
        self.assertEqual((saved["cells"], saved["grader_calls"], saved["full_matrix"]["cells"]),
                         (32, 32, 80))
        self.assertEqual(len(bench["runs"]), 48)
        self.assertIn("Adaptive: 3 of 5 waves, decided: improved; saved 32 of 80 cells", out)
        # The shards are done: a further --next-wave launches nothing.
        calls = agent_calls(self.tmp.path)
        code, out, err = call_main(["run", "--resume", str(shards[0] / "iteration-1"),
                                    "--next-wave", str(merged[-1]), "--quiet"], env=env)
        self.assertEqual(code, 0, out + err)
        self.assertIn("stopped the waves (improved): nothing to run", out)
        self.assertEqual(agent_calls(self.tmp.path), calls)

    def test_shard_waves_are_refused_out_of_step(self) -> None:
        root = self.repo(suite_of(["[b-fail]"] * 8))
        env = self.env(SCRIPT)
        shards = [self.tmp.path / f"shard{k}" / "iteration-1" for k in (1, 2)]
        for k in (1, 2):
            code, out, err = self.run_main(root, env, "--agent", "claude", "--runs", "5",
                                           "--adaptive", "--shard", f"{k}/2", "--workspace",
                                           str(shards[k - 1].parent), "--quiet")
            self.assertEqual(code, 0, out + err)
        first = self.tmp.path / "merged-1"
        # A look needs every shard: one alone is refused, and nothing is written.
        code, out, err = call_main(["report", str(first), "--merge", str(shards[0])])
        self.assertEqual(code, 2, out + err)
        self.assertIn("needs every shard of an adaptive run, and shard 2/2 is not given", err)
        self.assertFalse(first.exists())
        self.assertEqual(call_main(["report", str(first), "--merge", *map(str, shards)])[0], 0)
        calls = agent_calls(self.tmp.path)
        # --next-wave only continues a shard's iteration.
        code, out, err = self.run_main(root, env, "--agent", "claude", "--runs", "5",
                                       "--adaptive", "--shard", "1/2", "--next-wave", str(first))
        self.assertEqual(code, 2, out + err)
        self.assertIn("--next-wave continues the iteration of a shard", err)
        # Shard 1 goes on to wave 2; shard 2 does not: merging them is refused.
        code, out, err = call_main(["run", "--resume", str(shards[0]), "--next-wave",
                                    str(first), "--quiet"], env=env)
        self.assertEqual(code, 0, out + err)
        code, out, err = call_main(["report", str(self.tmp.path / "m"), "--merge",
                                    *map(str, shards)])
        self.assertEqual(code, 2, out + err)
        self.assertIn("at different waves (shard 1/2: 2, shard 2/2: 1)", err)
        # The first merge no longer holds shard 1's cells as they are: refused.
        code, out, err = call_main(["run", "--resume", str(shards[0]), "--next-wave",
                                    str(first), "--quiet"], env=env)
        self.assertEqual(code, 2, out + err)
        self.assertIn("that merge looked after wave 1, and this shard has run 2 wave(s)", err)
        # A merge whose benchmark.json was edited by hand is refused naming the member.
        merged_benchmark = first / "benchmark.json"
        written = merged_benchmark.read_text(encoding="utf-8")
        edited = json.loads(written)
        edited["results_check"]["changed"] = [{"path": "eval-E01", "change": 3}]
        merged_benchmark.write_text(json.dumps(edited), encoding="utf-8")
        code, out, err = call_main(["run", "--resume", str(shards[1]), "--next-wave",
                                    str(first), "--quiet"], env=env)
        self.assertEqual(code, 2, out + err)
        self.assertIn("at results_check.changed[0].change: a string expected", err)
        merged_benchmark.write_text(written, encoding="utf-8")
        # A merge whose cells were edited after it was written is refused too.
        grading = next(first.glob("eval-*/without_skill/run-1/grading.json"))
        grading.write_text(grading.read_text(encoding="utf-8").replace("false", "true"),
                           encoding="utf-8")
        code, out, err = call_main(["run", "--resume", str(shards[1]), "--next-wave",
                                    str(first), "--quiet"], env=env)
        self.assertEqual(code, 2, out + err)
        self.assertIn("changed since the merge wrote them", err)
        self.assertEqual(agent_calls(self.tmp.path), calls + 16)  # shard 1's wave 2 alone

    def test_the_next_wave_keeps_the_failed_cells_the_merged_look_counted(self) -> None:
        # E01's graders fail in wave 1: those cells count as unscored in the first look, and
        # running them again with the next wave would change what that look saw.
        root = self.repo(suite_of(["[b-fail]"] * 8))
        failing = {**SCRIPT, "cases": [{"match": "It does step 1.", "role": "grader",
                                        "spec": {"fault": "exit_nonzero"}}, *SCRIPT["cases"]]}
        env = self.env(failing)
        shards = [self.tmp.path / f"shard{k}" / "iteration-1" for k in (1, 2)]
        suite = runner.load_suite(root / "evals" / "demo" / "evals.json").suite
        cells = runner.plan_cells(suite, runner.RunOptions(agent="claude", runs=5), Path("x"))
        owner = runner._shard_of_plan(cells, 2)["E01"]  # its shard needs review (exit 1)
        holds_e01 = {k: k == owner for k in (1, 2)}
        for k in (1, 2):
            code, out, err = self.run_main(root, env, "--agent", "claude", "--runs", "5",
                                           "--adaptive", "--shard", f"{k}/2", "--workspace",
                                           str(shards[k - 1].parent), "--quiet")
            self.assertEqual(code, 1 if holds_e01[k] else 0, out + err)
        first = self.tmp.path / "merged-1"
        code, out, err = call_main(["report", str(first), "--merge", *map(str, shards)])
        self.assertEqual(code, 1, out + err)  # two grader failures: review required
        look = load_json(first / "benchmark.json")["adaptive"]["looks"][0]
        self.assertEqual(look["paired_evals"], 7)
        (self.tmp.path / "script.json").write_text(json.dumps(SCRIPT), encoding="utf-8")
        calls = agent_calls(self.tmp.path)
        for k, shard in enumerate(shards, 1):
            code, out, err = call_main(["run", "--resume", str(shard), "--next-wave",
                                        str(first), "--quiet"], env=env)
            self.assertEqual(code, 1 if holds_e01[k] else 0, out + err)
        self.assertEqual(agent_calls(self.tmp.path), calls + 2 * 16)  # wave 2 alone
        second = self.tmp.path / "merged-2"
        code, out, err = call_main(["report", str(second), "--merge", *map(str, shards)])
        self.assertEqual(code, 1, out + err)
        looks = load_json(second / "benchmark.json")["adaptive"]["looks"]
        self.assertEqual(looks[0], look)  # the first look replayed as it was taken

    def test_a_shard_stopped_inside_a_wave_stops_the_merged_look_until_it_is_finished(
            self) -> None:
        root = self.repo(suite_of(["[b-fail]"] * 8))
        env = self.env(SCRIPT)
        shards = [self.tmp.path / f"shard{k}" / "iteration-1" for k in (1, 2)]
        for k, cap in ((1, ["--max-tokens", "500", "--concurrency", "1"]), (2, [])):
            code, out, err = self.run_main(root, env, "--agent", "claude", "--runs", "5",
                                           "--adaptive", "--shard", f"{k}/2", "--workspace",
                                           str(shards[k - 1].parent), "--quiet", *cap)
            self.assertEqual(code, 1 if cap else 0, out + err)  # the cap cancelled cells
        stopped = self.tmp.path / "merged-stopped"
        code, out, err = call_main(["report", str(stopped), "--merge", *map(str, shards)])
        self.assertEqual(code, 1, out + err)
        adaptive = load_json(stopped / "benchmark.json")["adaptive"]
        self.assertEqual((adaptive["stop"], adaptive["waves_run"]), ("stopped", 1))
        self.assertIn("was cancelled", adaptive["stop_reason"])
        calls = agent_calls(self.tmp.path)
        code, out, err = call_main(["run", "--resume", str(shards[1]), "--next-wave",
                                    str(stopped), "--quiet"], env=env)
        self.assertEqual(code, 0, out + err)
        self.assertIn("stopped the waves (stopped): nothing to run", out)
        self.assertEqual(agent_calls(self.tmp.path), calls)
        # Finishing shard 1's wave, then merging again, lets the waves go on.
        code, out, err = call_main(["run", "--resume", str(shards[0]), "--max-tokens",
                                    "100000", "--quiet"], env=env)
        self.assertEqual(code, 0, out + err)
        again = self.tmp.path / "merged-again"
        self.assertEqual(call_main(["report", str(again), "--merge", *map(str, shards)])[0], 0)
        self.assertEqual(load_json(again / "benchmark.json")["adaptive"]["next_wave"], 2)

    def test_three_configs_are_refused(self) -> None:
        root = self.repo(suite_of(["[b-fail]"] * 8))
        code, out, err = self.run_main(root, self.env(SCRIPT), "--agent", "claude", "--adaptive",
                                       "--config", "with_skill,without_skill,installed")
        self.assertEqual(code, 2, out + err)
        self.assertIn("exactly two configs", err)
        self.assertEqual(fake_calls(self.tmp.path), [])

    def test_dry_run_lists_the_waves_and_the_most_they_cost(self) -> None:
        root = self.repo(suite_of(["[b-fail]"] * 8))
        code, out, err = self.run_main(root, self.env(SCRIPT), "--agent", "claude", "--runs",
                                       "5", "--adaptive", "--dry-run")
        self.assertEqual(code, 0, out + err)
        self.assertIn("adaptive: up to 5 waves", out)
        self.assertIn("At most (every wave): 80 cells, 160 provider calls", out)
        for wave in range(1, 6):
            self.assertIn(f"  wave {wave}: 16 cells (run {wave} of each eval and arm)", out)
        self.assertNotIn("no look can decide", out)
        self.assertIn("wave 1: 16 cells (run 1 of each eval and arm); look 1 cannot decide with "
                      "8 evals (smallest p 0.00781); it spends no alpha", out)
        self.assertIn("looks that can decide with 8 evals: 3, 4, 5", out)
        self.assertEqual(fake_calls(self.tmp.path), [])
        root6 = self.repo(suite_of([""] * 6), base=self.tmp.path / "six")
        code, out, err = self.run_main(root6, self.env(SCRIPT), "--agent", "claude", "--runs",
                                       "5", "--adaptive", "--dry-run")
        self.assertIn("looks that can decide with 6 evals: 5", out)
        self.assertNotIn("no look can decide", out)
        root5 = self.repo(suite_of([""] * 5), base=self.tmp.path / "five")
        code, out, err = self.run_main(root5, self.env(SCRIPT), "--agent", "claude", "--runs",
                                       "5", "--adaptive", "--dry-run")
        self.assertIn("warning: with 5 evals no look can decide", out)
        # A shard's plan: its own cells, one wave at a time, the looks over all 8 evals.
        code, out, err = self.run_main(root, self.env(SCRIPT), "--agent", "claude", "--runs",
                                       "5", "--adaptive", "--dry-run", "--shard", "2/2")
        self.assertEqual(code, 0, out + err)
        self.assertIn("  wave 1: 8 cells (run 1 of each eval and arm)", out)
        self.assertIn("shard 2/2: one wave per invocation", out)
        self.assertNotIn("no look can decide", out)
        self.assertEqual(fake_calls(self.tmp.path), [])


def agent_calls(tmp: Path) -> int:
    """Executor and grader calls the fakes logged (not the version check)."""
    return sum(call.get("role") in ("executor", "grader") for call in fake_calls(tmp))


def call_resume(folder: Path, env: dict) -> tuple[int, str, str]:
    return call_main(["run", "--resume", str(folder), "--quiet"], env=env)


if __name__ == "__main__":
    unittest.main()
