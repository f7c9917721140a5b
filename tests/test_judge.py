"""The judge under test: repeated grading, agreement, grader cost, and --regrade.

Agreement numbers are checked against hand computations written out in the comments. The
end-to-end tests use the fakes' `noisy` grader mode (tests/fakes/README.md): assertions whose
text holds a marker get the votes of a fixed cycle, one per grader call of the same prompt,
so with --concurrency 1 and a cycle of length K every recorded answer gets the same K votes.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import unittest
from pathlib import Path

from tests.helpers import call_main, run_result, runner
from tests.test_run_e2e import SUITE_REL, RunTestCase, case, load_json

NOISY = "NOISY"


def voted(number: int, text: str, yes: int, k: int) -> runner.Verdict:
    """A majority verdict of k graders, yes of them voting pass."""
    ballots = tuple(runner.Ballot(v, v <= yes, "") for v in range(1, k + 1))
    return runner.Verdict(number, text, 2 * yes > k, "", runner.Majority(
        yes, k, yes in (0, k), 2 * yes == k, ballots))


class FleissKappaTests(unittest.TestCase):
    def test_matches_a_hand_computation(self) -> None:
        # Five items, three votes each; yes counts 3, 3, 0, 0, 2.
        # share of yes votes = 8/15; per-item agreement 1, 1, 1, 1, (4 + 1 - 3)/6 = 1/3
        # observed = (4 + 1/3)/5 = 13/15; chance = (8/15)^2 + (7/15)^2 = 113/225
        # kappa = (13/15 - 113/225) / (1 - 113/225) = 82/112 = 41/56
        kappa = runner._fleiss_kappa([3, 3, 0, 0, 2], 3).to_json()
        self.assertAlmostEqual(kappa["value"], 41 / 56)
        self.assertAlmostEqual(kappa["observed_agreement"], 13 / 15)
        self.assertAlmostEqual(kappa["chance_agreement"], 113 / 225)

    def test_high_agreement_on_a_rare_verdict_can_score_below_zero(self) -> None:
        # 8 unanimous passes and 4 items split 2-1, three votes: share yes = 32/36 = 8/9,
        # observed = (8 + 4/3)/12 = 7/9, chance = 64/81 + 1/81 = 65/81,
        # kappa = (63/81 - 65/81) / (16/81) = -1/8.
        self.assertAlmostEqual(runner._fleiss_kappa([3] * 8 + [2] * 4, 3).value, -0.125)

    def test_undefined_cases_are_absent_with_a_reason_never_a_number(self) -> None:
        for yes, k, words in (([3, 3, 3], 3, "every vote was pass"),
                              ([0, 0], 2, "every vote was fail"),
                              ([1, 0], 1, "one grader"), ([], 3, "no scored verdicts")):
            kappa = runner._fleiss_kappa(yes, k).to_json()
            self.assertIsNone(kappa["value"], (yes, k))
            self.assertIn(words, kappa["absent_reason"])

    def test_unanimous_share_and_unstable_flag(self) -> None:
        runs = [{"eval_id": "E1", "configuration": c, "run_number": 1, "scored": True,
                 "expectations": (voted(1, "steady", 3, 3), voted(2, "shaky", y, 3))}
                for c, y in (("with_skill", 2), ("without_skill", 3), ("with_skill", 1))]
        agreement = runner._judge_agreement([run_result(**run) for run in runs], 3).to_json()
        self.assertAlmostEqual(agreement["overall"]["unanimous_share"], 4 / 6)
        by_id = {e["assertion_id"]: e for e in agreement["per_assertion"]}
        self.assertFalse(by_id[1]["judge_unstable"])
        self.assertTrue(by_id[2]["judge_unstable"])  # split in 2 of 3 runs
        self.assertIn("every vote was pass", by_id[1]["kappa"]["absent_reason"])


class MajorityTests(unittest.TestCase):
    @staticmethod
    def grading(*passed: bool) -> runner.Grading:
        return runner.grade_assertions(
            [f"a{i}" for i in range(len(passed))],
            {"verdicts": [{"id": i + 1, "passed": p, "evidence": f"e{i}{p}"}
                          for i, p in enumerate(passed)]})

    def test_majority_wins_and_a_tie_fails(self) -> None:
        three = runner.majority_grading([self.grading(True, False), self.grading(True, True),
                                         self.grading(False, False)]).to_json()
        first, second = three["expectations"]
        self.assertEqual((first["passed"], first["votes_passed"], first["tie"]), (True, 2, False))
        self.assertEqual((second["passed"], second["votes_passed"]), (False, 1))
        self.assertEqual([b["evidence"] for b in first["ballots"]], ["e0True", "e0True",
                                                                      "e0False"])
        self.assertEqual(three["summary"]["passed"], 1)
        two = runner.majority_grading([self.grading(True), self.grading(False)]).to_json()
        tied = two["expectations"][0]
        self.assertEqual((tied["passed"], tied["tie"], tied["unanimous"]), (False, True, False))
        self.assertIn("tied", tied["evidence"])


class VarianceSplitTests(unittest.TestCase):
    @staticmethod
    def graded_run(number: int, ballots: list[list[bool]]) -> runner.RunResult:
        def verdict(number: int, votes: list[bool]) -> runner.Verdict:
            yes, k = sum(votes), len(votes)
            return runner.Verdict(number, f"a{number}", 2 * yes > k, "", runner.Majority(
                yes, k, yes in (0, k), 2 * yes == k,
                tuple(runner.Ballot(v, p, "") for v, p in enumerate(votes, 1))))

        return run_result(run_number=number, expectations=tuple(
            verdict(i + 1, votes) for i, votes in enumerate(ballots)))

    def test_judge_and_executor_shares_match_a_hand_computation(self) -> None:
        # Two assertions, two graders. Run 1: both votes pass both -> rates [1, 1].
        # Run 2: vote 1 fails both, vote 2 passes one -> rates [0, 0.5].
        # judge = mean of within-run variances = (0 + 0.125)/2 = 0.0625
        # run means 1 and 0.25 -> variance 0.28125; executor = 0.28125 - 0.0625/2 = 0.25
        # judge share = 0.0625 / 0.3125 = 0.2
        runs = [self.graded_run(1, [[True, True], [True, True]]),
                self.graded_run(2, [[False, True], [False, False]])]
        split = runner.judge_variance(runs, 2).to_json()
        self.assertAlmostEqual(split["judge_variance"], 0.0625)
        self.assertAlmostEqual(split["executor_variance"], 0.25)
        self.assertAlmostEqual(split["value"], 0.2)

    def test_absent_without_repeats(self) -> None:
        self.assertIn("--grader-runs 1",
                      runner.judge_variance([], 1).absent_reason)
        one_run = [self.graded_run(1, [[True, False]])]
        self.assertIn("--runs 2", runner.judge_variance(one_run, 2)
                      .absent_reason)


class JudgeRunTestCase(RunTestCase):
    SUITE = {"skill_name": "demo", "common_assertions": ["The reply is in English."],
             "evals": [case("E01", "Task one.", ["It names item one.", f"{NOISY} it is polite."]),
                       case("E02", "Task two.", ["It names item two.", f"{NOISY} it is kind."])]}

    def noisy_script(self, votes: list[bool], **grader) -> dict:
        return {"grader": {"noisy": {"if_text_contains": [NOISY], "votes": votes,
                                     "counter_dir": str(self.tmp.path / "counter")}, **grader}}

    def launched(self, since: int = 0) -> list[str]:
        """Roles of the agent processes started after the first `since` log records."""
        return [c["role"] for c in self.calls()[since:] if c.get("role")]


class RepeatedGradingTests(JudgeRunTestCase):
    def check_noisy(self, agent: str) -> None:
        root = self.repo(self.SUITE)
        code, out, err = self.run_main(root, self.env(self.noisy_script([True, False, True])),
                                       "--agent", agent, "--grader-runs", "3",
                                       "--concurrency", "1", "--quiet")
        self.assert_exit(code, 1, out, err)  # judge_unstable is a warning: review required
        self.assertEqual(sorted(self.launched()), ["executor"] * 4 + ["grader"] * 12)
        iteration = self.iteration(root, agent)
        bench = load_json(iteration / "benchmark.json")
        flagged = {(f["eval_id"], f["assertion_id"]) for f in bench["sanity_checks"]["flags"]
                   if f["kind"] == "judge_unstable"}
        self.assertEqual(flagged, {("E01", 3), ("E02", 3)})  # exactly the marked assertions
        overall = bench["judge"]["agreement"]["overall"]
        self.assertEqual((overall["items"], overall["split_items"], overall["ties"]), (12, 4, 0))
        self.assertAlmostEqual(overall["unanimous_share"], 8 / 12)
        self.assertAlmostEqual(overall["kappa"]["value"], -0.125)  # hand computation above
        for run in self.runs(iteration).values():
            grading = load_json(run["dir"] / "grading.json")
            marked = grading["expectations"][2]
            self.assertEqual((marked["passed"], marked["votes_passed"]), (True, 2))
            self.assertEqual([b["passed"] for b in marked["ballots"]], [True, False, True])
            self.assertTrue(all(b["evidence"] for b in marked["ballots"]))
            self.assertEqual(grading["summary"]["pass_rate"], 1.0)
            self.assertEqual(len(run["grader_calls"]), 3)
        self.assertIn("Fleiss' kappa: -0.125", (iteration / "benchmark.md").read_text())

    def test_noisy_claude_grader(self) -> None:
        self.check_noisy("claude")

    def test_noisy_codex_grader(self) -> None:
        self.check_noisy("codex")

    def test_a_tie_counts_as_failed_and_is_flagged(self) -> None:
        root = self.repo(self.SUITE)
        code, out, err = self.run_main(root, self.env(self.noisy_script([True, False])),
                                       "--agent", "claude", "--grader-runs", "2",
                                       "--concurrency", "1", "--quiet")
        self.assert_exit(code, 1, out, err)
        bench = load_json(self.iteration(root) / "benchmark.json")
        ties = {(f["eval_id"], f["configuration"], f["assertion_id"])
                for f in bench["sanity_checks"]["flags"] if f["kind"] == "judge_tie"}
        self.assertEqual(ties, {(e, c, 3) for e in ("E01", "E02")
                                for c in ("with_skill", "without_skill")})
        for run in bench["runs"]:
            self.assertAlmostEqual(run["result"]["pass_rate"], 2 / 3)
            self.assertFalse(run["expectations"][2]["passed"])

    def test_every_graders_fresh_home_is_removed(self) -> None:
        # gemini gets a fresh home per process when unconfined; the second grader's home
        # used to replace the first one's on the sandbox, which was then never removed
        root = self.repo(self.SUITE)
        env = self.env(self.noisy_script([True, False]), GEMINI_API_KEY="k")
        code, out, err = self.run_main(root, env, "--agent", "gemini", "--isolation", "none",
                                       "--grader-runs", "2", "--concurrency", "1", "--quiet")
        self.assert_exit(code, 1, out, err)  # the noisy graders tie: review required
        self.assertEqual(self.launched().count("grader"), 8)
        self.assertEqual(os.listdir(env["SKILL_EVAL_SANDBOX_ROOT"]), [])
        for run in self.runs(self.iteration(root, "gemini")).values():
            self.assertTrue(run["sandbox"]["removed"])

    def test_variance_split_with_several_runs(self) -> None:
        root = self.repo(self.SUITE)
        code, out, err = self.run_main(root, self.env(self.noisy_script([True, False, True])),
                                       "--agent", "claude", "--grader-runs", "3", "--runs", "2",
                                       "--config", "with_skill", "--concurrency", "1",
                                       "--quiet")
        self.assert_exit(code, 1, out, err)
        variance = load_json(self.iteration(root) / "benchmark.json")["judge"]["variance"]
        # The fake executor answers the same every time: all variation is the judge's.
        # Per run, single-grading rates 1, 2/3, 1: within-run variance 1/27; runs agree.
        self.assertAlmostEqual(variance["judge_variance"], 1 / 27)
        self.assertEqual(variance["executor_variance"], 0.0)
        self.assertEqual(variance["value"], 1.0)
        self.assertEqual(variance["cells"], 2)


class GraderMetricsTests(JudgeRunTestCase):
    SUITE = {"skill_name": "demo", "evals": [case("E01", "Task one.", ["It goes."])]}

    def test_claude_grader_cost_is_captured_apart_from_the_executor(self) -> None:
        script = {"executor": {"usage": {"input_tokens": 1000, "output_tokens": 10},
                               "duration_ms": 5000, "total_cost_usd": 0.5},
                  "grader": {"usage": {"input_tokens": 300, "output_tokens": 7},
                             "duration_ms": 1500, "total_cost_usd": 0.02}}
        root = self.repo(self.SUITE)
        code, out, err = self.run_main(root, self.env(script), "--agent", "claude",
                                       "--config", "with_skill", "--grader-runs", "2", "--quiet")
        self.assert_exit(code, 0, out, err)
        iteration = self.iteration(root)
        run = self.runs(iteration)[("E01", "with_skill")]
        grader = load_json(run["dir"] / "grader_metrics.json")
        self.assertEqual(len(grader["calls"]), 2)
        self.assertAlmostEqual(grader["metrics"]["total_cost_usd"]["value"], 0.04)
        self.assertAlmostEqual(grader["metrics"]["time_seconds"]["value"], 3.0)
        self.assertEqual(grader["metrics"]["input_tokens"]["value"], 600)
        self.assertIn("sum over 2 grader calls", grader["metrics"]["tokens"]["source"])
        executor = load_json(run["dir"] / "metrics.json")["metrics"]
        self.assertEqual(executor["input_tokens"]["value"], 1000)  # the grader's not added
        bench = load_json(iteration / "benchmark.json")
        self.assertAlmostEqual(bench["run_summary"]["with_skill"]["time_seconds"]["mean"], 5.0)
        cost = bench["judge"]["cost"]["with_skill"]
        self.assertAlmostEqual(cost["total_cost_usd"]["mean"], 0.04)
        self.assertEqual(cost["grader_calls"], 2)
        md = (iteration / "benchmark.md").read_text()
        self.assertIn("## Judge (grader) cost", md)
        self.assertIn("0.0400 USD", md)
        self.assertIn("| with_skill | 5.0 s (n=1) |", md)  # executor block unchanged
        html = (iteration / "benchmark.html").read_text()
        self.assertIn("Judge (grader) cost", html)

    def test_codex_grader_cost_is_absent_with_its_reason(self) -> None:
        root = self.repo(self.SUITE)
        code, out, err = self.run_main(root, self.env({}), "--agent", "codex",
                                       "--config", "with_skill", "--quiet")
        self.assert_exit(code, 0, out, err)
        iteration = self.iteration(root, "codex")
        run = self.runs(iteration)[("E01", "with_skill")]
        grader = load_json(run["dir"] / "grader_metrics.json")["metrics"]
        self.assertEqual(grader["tokens"]["value"], 120 + 15)
        self.assertIsNone(grader["total_cost_usd"]["value"])
        self.assertIn("runner wall clock", grader["time_seconds"]["source"])
        md = (iteration / "benchmark.md").read_text()
        self.assertIn("not captured (codex reports no cost)", md)
        self.assertIn("not captured (codex reports no cost)",
                      (iteration / "benchmark.html").read_text())


class RegradeTests(JudgeRunTestCase):
    SUITE = {"skill_name": "demo", "common_assertions": ["The reply is in English."],
             "evals": [case("E01", "Task one.", ["It names item one."],
                            files=["evals/demo/fixtures/one.txt"]),
                       case("E02", "Task two.", ["It names item two."])]}
    FILES = {"evals/demo/fixtures/one.txt": "one\n"}
    SCRIPT = {"executor": {"write_artifact": "# Plan\nitem one\n"},
              "grader": {"verdicts": {"fail_if_text_contains": ["STRICT"]}}}

    def first_run(self, agent: str, suite: dict | None = None, script: dict | None = None,
                  expect: int = 0) -> tuple[Path, dict, Path]:
        root = self.repo(suite or self.SUITE, self.FILES)
        env = self.env(script or self.SCRIPT)
        code, out, err = self.run_main(root, env, "--agent", agent, "--quiet")
        self.assertEqual(code, expect, err)
        return root, env, self.iteration(root, agent)

    def edit_suite(self, root: Path, change) -> None:
        path = root / SUITE_REL
        suite = json.loads(path.read_text())
        change(suite)
        path.write_text(json.dumps(suite))

    def check_regrade(self, agent: str) -> None:
        root, env, source = self.first_run(agent)
        before = len(self.calls())
        self.edit_suite(root, lambda s: s["evals"][0]["expectations"].__setitem__(
            0, "STRICT It names item one."))
        code, out, err = self.run_main(root, env, "--agent", agent, "--regrade", str(source),
                                       "--quiet")
        self.assert_exit(code, 0, out, err)
        self.assertEqual(self.launched(before), ["grader"] * 4)  # zero executors
        regraded = self.iteration(root, agent, 2)
        runs = self.runs(regraded)
        e01 = load_json(runs[("E01", "with_skill")]["dir"] / "grading.json")
        self.assertEqual([(e["text"], e["passed"]) for e in e01["expectations"]],
                         [("The reply is in English.", True),
                          ("STRICT It names item one.", False)])
        for run in runs.values():
            old = source / run["dir"].relative_to(regraded)
            self.assertEqual((run["dir"] / "outputs/output.txt").read_text(),
                             (old / "outputs/output.txt").read_text())
            self.assertEqual(run["executor"], load_json(old / "run.json")["executor"])
            self.assertEqual(run["regraded_from"]["run_dir"], str(old.resolve()))
            self.assertEqual(load_json(run["dir"] / "metrics.json"),
                             load_json(old / "metrics.json"))
        grader_prompt = (runs[("E01", "with_skill")]["dir"] / "grader_prompt.md").read_text()
        self.assertIn("item one", grader_prompt)  # the recorded artifact was graded
        manifest = load_json(regraded / "iteration_manifest.json")
        self.assertEqual(manifest["regrade"]["source"], str(source.resolve()))
        self.assertEqual(manifest["regrade"]["source_benchmark_sha256"],
                         runner.sha256_file(source / "benchmark.json"))
        code, out, err = call_main(["report", str(regraded), "--compare", str(source)], env=env)
        self.assert_exit(code, 0, out, err)
        compared = (regraded / "comparison.md").read_text(encoding="utf-8")  # report prints a line
        self.assertIn(str(regraded / "comparison.md"), out)
        self.assertIn("Judge only", compared)
        self.assertIn("| E01 | 50.0% / 100.0% |", compared)

    def test_claude_regrade(self) -> None:
        self.check_regrade("claude")

    def test_codex_regrade(self) -> None:
        self.check_regrade("codex")

    def test_an_unconfined_regrade_gives_each_grader_a_fresh_home(self) -> None:
        # gemini gets a fresh home per process; unconfined (no bwrap: macOS), a re-graded
        # cell's GraderRoom makes it, as a Sandbox does, and removes it with its folders
        root, env = self.repo(self.SUITE, self.FILES), self.env(self.SCRIPT, GEMINI_API_KEY="k")
        code, out, err = self.run_main(root, env, "--agent", "gemini", "--isolation", "none",
                                       "--quiet")
        self.assert_exit(code, 0, out, err)
        before = len(self.calls())
        code, out, err = self.run_main(root, env, "--agent", "gemini", "--isolation", "none",
                                       "--regrade", str(self.iteration(root, "gemini")),
                                       "--quiet")
        self.assert_exit(code, 0, out, err)
        self.assertEqual(self.launched(before), ["grader"] * 4)
        for run in self.runs(self.iteration(root, "gemini", 2)).values():
            self.assertEqual(run["status"], "ok", run.get("failure"))
            home = Path(run["sandbox"]["regrade_grader"]["agent_homes"]["grader"])
            self.assertFalse(home.exists(), home)

    def assert_refused(self, root: Path, env: dict, source: Path, *extra: str,
                       words: str = "") -> None:
        before = len(self.calls())
        code, out, err = self.run_main(root, env, "--agent", "claude", "--regrade", str(source),
                                       *extra)
        self.assert_exit(code, 2, out, err)
        self.assertIn(words, err)
        self.assertIn("fix:", err)
        self.assertEqual(len(self.calls()), before, "a refused re-grade launched something")

    def test_refuses_what_the_executor_was_given_changing(self) -> None:
        root, env, source = self.first_run("claude")
        suite_text = (root / SUITE_REL).read_text()
        self.edit_suite(root, lambda s: s["evals"][1].__setitem__("prompt", "Task 2, reworded."))
        self.assert_refused(root, env, source, words="the prompt of case E02")
        self.assert_refused(root, env, source, "--dry-run", words="the prompt of case E02")
        (root / SUITE_REL).write_text(suite_text)
        (root / "evals/demo/fixtures/one.txt").write_text("changed\n")
        self.assert_refused(root, env, source, words="fixture evals/demo/fixtures/one.txt")
        (root / "evals/demo/fixtures/one.txt").write_text("one\n")
        (root / "skills/demo/SKILL.md").write_text("---\nname: demo\ndescription: x.\n---\n")
        self.assert_refused(root, env, source, words="the skill package")
        self.assert_refused(root, env, source, "--config", "with_skill", words="--configs")

    def test_refuses_an_incomplete_source(self) -> None:
        root, env, source = self.first_run("claude")
        bench = load_json(source / "benchmark.json")
        bench["metadata"]["incomplete"] = True
        (source / "benchmark.json").write_text(json.dumps(bench))
        self.assert_refused(root, env, source, words="incomplete")
        bench["metadata"]["incomplete"] = False
        (source / "benchmark.json").write_text(json.dumps(bench))
        (source / "eval-E02/without_skill/run-1/run.json").unlink()
        self.assert_refused(root, env, source, words="incomplete")
        self.assert_refused(root, env, self.tmp.path, words="no readable")

    def test_failed_executors_stay_failed_and_failed_graders_are_graded_again(self) -> None:
        script = {**self.SCRIPT, "cases": [
            {"match": "Task two", "role": "executor", "spec": {"fault": "exit_nonzero"}},
            {"match": "Task one", "role": "grader", "spec": {"fault": "exit_nonzero"}}]}
        root, env, source = self.first_run("claude", script=script, expect=1)
        statuses = {k: r["status"] for k, r in self.runs(source).items()}
        self.assertEqual(statuses[("E01", "with_skill")], "grader_failed")
        before = len(self.calls())
        code, out, err = self.run_main(root, self.env(self.SCRIPT), "--agent", "claude",
                                       "--regrade", str(source), "--quiet")
        self.assert_exit(code, 1, out, err)
        self.assertEqual(self.launched(before), ["grader"] * 2)
        runs = self.runs(self.iteration(root, "claude", 2))
        self.assertEqual({k: r["status"] for k, r in runs.items()},
                         {("E01", "with_skill"): "ok", ("E01", "without_skill"): "ok",
                          ("E02", "with_skill"): "executor_failed",
                          ("E02", "without_skill"): "executor_failed"})


class BoundsTests(JudgeRunTestCase):
    def test_dry_run_counts_the_graders(self) -> None:
        root = self.repo(self.SUITE)
        code, out, err = self.run_main(root, self.env(), "--agent", "claude",
                                       "--grader-runs", "3", "--dry-run")
        self.assert_exit(code, 0, out, err)
        self.assertIn("provider calls: up to 16 (4 executors + 4 x 3 graders)", out)
        self.assertIn("worst-case wall time: 2400 s", out)  # one wave of 4 x 600 s
        self.assertEqual(self.calls(), [])

    def test_regrade_dry_run_counts_no_executor(self) -> None:
        root = self.repo(self.SUITE)
        env = self.env({})
        code, out, err = self.run_main(root, env, "--agent", "claude", "--quiet")
        before = len(self.calls())
        code, out, err = self.run_main(root, env, "--agent", "codex", "--dry-run",
                                       "--grader-runs", "2", "--regrade",
                                       str(self.iteration(root)))
        self.assert_exit(code, 0, out, err)
        self.assertIn("executors: 0; grader calls: up to 8 (4 x 2)", out)
        self.assertEqual(len(self.calls()), before)

    def test_resume_a_multi_grader_iteration(self) -> None:
        root = self.repo(self.SUITE)
        broken = {"grader": {}, "cases": [{"match": "Task two", "role": "grader",
                                           "spec": {"fault": "exit_nonzero"}}]}
        code, out, err = self.run_main(root, self.env(broken), "--agent", "claude",
                                       "--grader-runs", "2", "--quiet")
        self.assert_exit(code, 1, out, err)
        iteration = self.iteration(root)
        before = len(self.calls())
        code, out, err = self.run_main(root, self.env({}), "--agent", "claude",
                                       "--grader-runs", "2", "--resume", str(iteration),
                                       "--quiet")
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(self.launched(before)), ["executor"] * 2 + ["grader"] * 4)
        bench = load_json(iteration / "benchmark.json")
        self.assertEqual(bench["scored_run_count"], 4)
        # Left out, K is the iteration's own; a different K is a different iteration.
        before = len(self.calls())
        code, out, err = self.run_main(root, self.env({}), "--agent", "claude",
                                       "--resume", str(iteration), "--quiet")
        # nothing left to run: the benchmark is written again from the same four ok cells,
        # which raised only info flags just above (exit 0 there), so exit 0 again
        self.assertEqual(code, 0, err)
        self.assertEqual(self.launched(before), [])
        code, out, err = self.run_main(root, self.env({}), "--agent", "claude",
                                       "--grader-runs", "1", "--resume", str(iteration),
                                       "--quiet")
        self.assert_exit(code, 2, out, err)
        self.assertIn("--grader-runs 1 here, 2 in that iteration", err)

    def test_resume_a_regraded_iteration(self) -> None:
        root = self.repo(self.SUITE)
        code, out, err = self.run_main(root, self.env({}), "--agent", "claude", "--quiet")
        source = self.iteration(root)
        broken = {"cases": [{"match": "Task two", "role": "grader",
                             "spec": {"fault": "exit_nonzero"}}]}
        code, out, err = self.run_main(root, self.env(broken), "--agent", "codex",
                                       "--regrade", str(source), "--grader-runs", "2",
                                       "--quiet")
        self.assert_exit(code, 1, out, err)
        regraded = self.iteration(root, "codex")
        self.assertEqual(load_json(regraded / "benchmark.json")["scored_run_count"], 2)
        before = len(self.calls())
        code, out, err = self.run_main(root, self.env({}), "--agent", "codex",
                                       "--grader-runs", "2", "--resume", str(regraded),
                                       "--quiet")
        self.assertEqual(code, 0, err)
        self.assertEqual(self.launched(before), ["grader"] * 4)  # two cells, two graders
        bench = load_json(regraded / "benchmark.json")
        self.assertEqual(bench["scored_run_count"], 4)
        self.assertEqual(bench["metadata"]["regrade"]["source"], str(source.resolve()))

    def test_graders_count_against_concurrency(self) -> None:
        # Every agent sleeps; the wrapper logs start and end times. With --concurrency 2 and
        # three graders per cell, no more than two agents may ever overlap.
        root = self.repo(self.SUITE)
        env = self.env({"executor": {"sleep_s": 0.2}, "grader": {"sleep_s": 0.2}})
        spans = self.tmp.path / "spans"
        spans.mkdir()
        bin_dir = self.tmp.path / "span-bin"
        bin_dir.mkdir()
        wrapper = bin_dir / "claude"
        real = shutil.which("claude", path=env["PATH"])
        wrapper.write_text("#!/bin/sh\nstart=$(date +%s.%N)\n"
                           f"\"{real}\" \"$@\"\nrc=$?\n"
                           f"echo \"$start $(date +%s.%N)\" > \"{spans}/$$\"\nexit $rc\n")
        wrapper.chmod(0o755)
        env["PATH"] = f"{bin_dir}:{env['PATH']}"
        code, out, err = self.run_main(root, env, "--agent", "claude", "--grader-runs", "3",
                                       "--concurrency", "2", "--quiet")
        self.assertEqual(code, 0, err)
        intervals = [tuple(map(float, p.read_text().split())) for p in spans.iterdir()]
        self.assertEqual(len(intervals), 1 + 4 + 12)  # --version, executors, graders
        events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
        running = peak = 0
        for _, step in events:
            running += step
            peak = max(peak, running)
        self.assertLessEqual(peak, 2)
        self.assertTrue(math.isfinite(peak))


if __name__ == "__main__":
    unittest.main()
