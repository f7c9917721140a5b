"""Paired statistics, sanity checks, judge identity and contamination evidence (issue 7).

Small verdict mixes are built by hand and their statistics worked out in the comments next to
them; a property test drives the sign-flip test with a few hundred seeded random mixes;
end-to-end tests run the whole matrix through the fake `claude` and `codex` CLIs in tests/fakes.

How the end-to-end scripts tell the configs apart: only a with_skill executor prompt holds a
`Skill path:` line and only a without_skill one says "Use no agent skill", so the executor
answers with a per-config marker text. The grader sees that text in its prompt and fails the
assertions whose text carries a marker word (`fail_if_text_contains`), which lets one suite
say "the skill helps on this eval" or "hurts on that one".
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
import unittest
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

from tests.helpers import (
    FAKES,
    RUNNER_PATH,
    TempDir,
    call_main,
    fake_env,
    git,
    make_repo,
    per_eval_row,
    runner,
    volume_test,
)

CONFIGS = ("with_skill", "without_skill")

# ---------------------------------------------------------------------------
# synthetic records, shaped the way execute_cell/execute_cell_safely leave them
# ---------------------------------------------------------------------------


def make_record(index: int, config: str, run_number: int, passed: int | str, total: int,
                skill_read: str = "read") -> runner.RunRecord:
    """One run: `passed` of `total` assertions pass, or `passed` is a failure status."""
    case = SimpleNamespace(index=index, id=f"E{index:02d}", name=None, key=f"E{index:02d}")
    record = runner._new_record(SimpleNamespace(case=case, config=config, run_number=run_number))
    record.metrics = {"time_seconds": runner.captured(2.0, "test"),
                      "tokens": runner.captured(100, "test")}
    record.skill_read = runner.SkillRead(skill_read)
    if isinstance(passed, str):
        record.fail(passed, "executor", "scripted")
    else:
        assertions = [f"assertion {i} of eval {index}" for i in range(1, total + 1)]
        verdicts = [{"id": i, "passed": i <= passed, "evidence": "test"}
                    for i in range(1, total + 1)]
        record.grading = runner.grade_assertions(assertions, {"verdicts": verdicts})
    record.scored = record.status == runner.STATUS_OK and record.grading is not None
    return record


def make_records(table: list[tuple[list, list]], total: int) -> list[runner.RunRecord]:
    """table[i] = (with_skill runs, without_skill runs); a run is a passed count or a status."""
    records = []
    for index, runs_by_config in enumerate(table, 1):
        for config, runs in zip(CONFIGS, runs_by_config):
            for number, passed in enumerate(runs, 1):
                records.append(make_record(index, config, number, passed, total))
    return records


def meta_for(table: list, runs: int = 1, configs=CONFIGS) -> runner.Metadata:
    ids = [f"E{i:02d}" for i in range(1, len(table) + 1)]
    return runner.Metadata(configs=tuple(configs), skill_name="demo", agent="claude",
                           runs_per_configuration=runs, evals_run=tuple(ids),
                           suite_case_count=len(ids))


def aggregate(table: list, total: int, runs: int = 1) -> dict:
    """benchmark.json's object, as the runner writes it."""
    return runner.aggregate(make_records(table, total), meta_for(table, runs)).to_json()


def model(benchmark: dict) -> runner.Benchmark:
    """A benchmark.json object as the reports take it."""
    return runner.Benchmark.from_json(benchmark, "benchmark.json")


def flags_of(benchmark: dict, kind: str) -> list[dict]:
    return [f for f in benchmark["sanity_checks"]["flags"] if f["kind"] == kind]


def per_eval(benchmark: dict, eval_id: str) -> dict:
    return next(row for row in benchmark["per_eval"] if str(row["eval_id"]) == eval_id)


# ---------------------------------------------------------------------------
# 1. pure functions, hand-computed
# ---------------------------------------------------------------------------


class DescribeTest(unittest.TestCase):
    def test_empty(self) -> None:
        self.assertEqual(runner.describe([]),
                         {"mean": None, "stddev": None, "min": None, "max": None, "n": 0})

    def test_one_value_has_no_stddev(self) -> None:
        self.assertEqual(runner.describe([0.25]),
                         {"mean": 0.25, "stddev": None, "min": 0.25, "max": 0.25, "n": 1})

    def test_sample_stddev_divides_by_n_minus_1(self) -> None:
        # [0, 0.5, 1]: mean 0.5; squared deviations 0.25 + 0 + 0.25 = 0.5; / (3 - 1) -> 0.25;
        # sqrt -> 0.5. (The population stddev would be sqrt(0.5 / 3) = 0.408.)
        stats = runner.describe([0.0, 0.5, 1.0])
        self.assertEqual(stats["mean"], 0.5)
        self.assertAlmostEqual(stats["stddev"], 0.5, places=12)
        self.assertEqual((stats["min"], stats["max"], stats["n"]), (0.0, 1.0, 3))

    def test_constant_values_have_zero_stddev(self) -> None:
        self.assertEqual(runner.describe([1.0, 1.0, 1.0, 1.0])["stddev"], 0.0)

    def test_run_summary_uses_scored_runs_only(self) -> None:
        # with_skill of E01: 2 of 2, 1 of 2, and a failed run -> rates [1.0, 0.5];
        # mean 0.75, stddev sqrt((0.0625 + 0.0625) / 1) = 0.35355.
        b = aggregate([([2, 1, "executor_failed"], [0, 0, 0])], total=2, runs=3)
        summary = b["run_summary"]["with_skill"]
        self.assertEqual(summary["pass_rate"]["mean"], 0.75)
        self.assertAlmostEqual(summary["pass_rate"]["stddev"], math.sqrt(0.125), places=12)
        self.assertEqual((summary["scored_runs"], summary["runs"]), (2, 3))


class PairedStatisticsTest(unittest.TestCase):
    def test_per_eval_deltas_and_their_mean_are_not_the_pooled_delta(self) -> None:
        # Two assertions per run, three runs per config.
        # E01 with_skill 2/2 x3 -> 1.0; without_skill 0/2, then two failed runs -> 0.0.
        #     delta 1.0
        # E02 with_skill 1/2, 0/2, 2/2 -> (0.5 + 0 + 1) / 3 = 0.5; without_skill 1/2 x3 -> 0.5.
        #     delta 0.0
        # Mean of per-eval deltas: (1.0 + 0.0) / 2 = 0.5.
        # Pooled over scored runs instead: with_skill (1+1+1+0.5+0+1) / 6 = 0.75, without_skill
        # (0 + 0.5*3) / 4 = 0.375, delta 0.375: the paired number must not be that one.
        b = aggregate([([2, 2, 2], [0, "executor_failed", "executor_failed"]),
                       ([1, 0, 2], [1, 1, 1])], total=2, runs=3)
        e01, e02 = per_eval(b, "E01"), per_eval(b, "E02")
        self.assertEqual(e01["configs"]["with_skill"]["mean_pass_rate"], 1.0)
        self.assertEqual(e01["configs"]["without_skill"]["mean_pass_rate"], 0.0)
        self.assertEqual(e01["configs"]["without_skill"]["scored_runs"], 1)
        self.assertEqual(e01["configs"]["without_skill"]["statuses"],
                         ["ok", "executor_failed", "executor_failed"])
        self.assertEqual(e01["delta"], 1.0)
        self.assertEqual(e02["configs"]["with_skill"]["mean_pass_rate"], 0.5)
        self.assertEqual(e02["delta"], 0.0)
        self.assertEqual(b["paired"]["mean_delta"], 0.5)
        self.assertEqual(b["comparison"]["delta"], 0.375)
        self.assertEqual((b["paired"]["wins"], b["paired"]["ties"], b["paired"]["losses"]),
                         (1, 1, 0))
        self.assertEqual(b["paired"]["paired_evals"], 2)

    def test_improved_with_a_hand_computed_interval(self) -> None:
        # Seven evals, two assertions. with_skill passes both everywhere; without_skill passes
        # one of two on E01..E06 and both on E07. Per-eval deltas: 0.5 x6, 0.0 x1.
        # mean = 3 / 7; wins/ties/losses 6/1/0. Exact sign-flip test over 2^7 = 128 patterns:
        # a pattern's sum reaches the observed 3.0 only when it flips no 0.5, i.e. flips
        # nothing or only the 0: p_one_sided = 2 / 128, two-sided p = 4 / 128 = 0.03125.
        # The test's interval: 0.025 * 128 = 3.2 -> the 3rd smallest and 3rd largest of the
        # 127 nonempty subset means. Smallest: {0} -> 0, then {0, 0.5} six times -> 0.25: the
        # 3rd is 0.25. Largest: the 63 subsets of 0.5s alone -> 0.5.
        # The pseudo-eval t interval (issue 38): a delta moves in steps of 0.5 (one of two
        # assertions, one run), so the deltas plus +0.5 and -0.5: nine values, mean 1/3,
        # squared deviations 7/36 + 4/36 + 25/36 = 1, SD sqrt(1/8); t_8(0.975) = 2.306004:
        # 1/3 -+ 2.306004 * sqrt(1/8) / 3 = [0.0616, 0.6051]. The stated interval is the
        # hull of the two: [0.0616, 0.6051].
        b = aggregate([([2], [1])] * 6 + [([2], [2])], total=2)
        paired = b["paired"]
        self.assertAlmostEqual(paired["mean_delta"], 3 / 7, places=12)
        self.assertEqual((paired["wins"], paired["ties"], paired["losses"]), (6, 1, 0))
        self.assertEqual(paired["test"]["interval"]["sign_flip"], [0.25, 0.5])
        self.assertEqual(paired["test"]["interval"]["step"], 0.5)
        half = 2.306004 * math.sqrt(1 / 8) / 3
        self.assertAlmostEqual(paired["ci95"][0], 1 / 3 - half, places=3)
        self.assertAlmostEqual(paired["ci95"][1], 1 / 3 + half, places=3)
        self.assertEqual(paired["test"]["p_value"], 4 / 128)
        self.assertEqual((paired["test"]["exact"], paired["test"]["sign_patterns"]), (True, 128))
        self.assertEqual(paired["verdict"], "improved")
        self.assertIn("above 0", paired["verdict_reason"])
        self.assertIn("p = 0.03125", paired["verdict_reason"])

    def test_five_wins_and_a_tie_are_not_improved(self) -> None:
        # Old bootstrap: [0.25, 0.5], improved. Exactly: the tie carries no sign, so this is
        # five signs of five: two-sided p = 2 * 2 / 64 = 0.0625 > 0.05.
        b = aggregate([([2], [1])] * 5 + [([2], [2])], total=2)
        self.assertEqual(b["paired"]["test"]["p_value"], 0.0625)
        self.assertEqual(b["paired"]["verdict"], "inconclusive")
        self.assertEqual(b["paired"]["ci95"][0], 0.0)

    def test_regressed_mirror_image(self) -> None:
        b = aggregate([([1], [2])] * 6 + [([2], [2])], total=2)
        paired = b["paired"]
        self.assertAlmostEqual(paired["mean_delta"], -3 / 7, places=12)
        self.assertEqual((paired["wins"], paired["ties"], paired["losses"]), (0, 1, 6))
        half = 2.306004 * math.sqrt(1 / 8) / 3  # the mirror of the hand-computed case above
        self.assertAlmostEqual(paired["ci95"][0], -1 / 3 - half, places=3)
        self.assertAlmostEqual(paired["ci95"][1], -1 / 3 + half, places=3)
        self.assertEqual(paired["test"]["interval"]["sign_flip"], [-0.5, -0.25])
        self.assertEqual(paired["verdict"], "regressed")
        self.assertIn("below 0", paired["verdict_reason"])
        self.assertEqual(len(flags_of(b, "candidate_below_baseline")), 6)

    def test_interval_spanning_zero_is_inconclusive(self) -> None:
        # Deltas +0.5, -0.5, 0 x4: mean 0, wins/ties/losses 1/4/1.
        b = aggregate([([2], [1]), ([1], [2])] + [([2], [2])] * 4, total=2)
        paired = b["paired"]
        self.assertEqual(paired["mean_delta"], 0.0)
        self.assertEqual((paired["wins"], paired["ties"], paired["losses"]), (1, 4, 1))
        self.assertLess(paired["ci95"][0], 0)
        self.assertGreater(paired["ci95"][1], 0)
        self.assertEqual(paired["verdict"], "inconclusive")
        self.assertIn("includes 0", paired["verdict_reason"])

    def test_interval_touching_zero_is_not_improved(self) -> None:
        # Deltas 0.5, 0 x5: 0.025 * 64 = 1.6, so the test's interval starts at the smallest
        # subset mean, that of a lone 0: exactly 0; the stated hull reaches below it.
        # "Improved" needs the whole interval above 0.
        b = aggregate([([2], [1])] + [([2], [2])] * 5, total=2)
        self.assertAlmostEqual(b["paired"]["mean_delta"], 0.5 / 6, places=12)
        self.assertEqual(b["paired"]["test"]["interval"]["sign_flip"][0], 0.0)
        self.assertLess(b["paired"]["ci95"][0], 0.0)
        self.assertEqual(b["paired"]["verdict"], "inconclusive")

    def test_too_few_paired_evals_is_inconclusive_with_the_reason(self) -> None:
        minimum = runner.MIN_PAIRED_EVALS
        # Six: the fewest evals whose best outcome, all one sign, reaches exact p <= 0.05
        # (2 / 2^6 = 0.031; five give 0.0625). It was 5, which let five wins of five be
        # "improved" at p = 0.0625.
        self.assertEqual(minimum, 6, "the stated minimum of paired evals changed")
        # minimum evals help by 0.5, but one of them has no scored baseline run: it is not a
        # pair, leaving minimum - 1 pairs, each +0.5. No outcome of five reaches the level, so
        # the interval is the whole range of a delta.
        table = [([2], [1])] * (minimum - 1) + [([2], ["executor_failed"])]
        b = aggregate(table, total=2)
        paired = b["paired"]
        self.assertEqual(paired["paired_evals"], minimum - 1)
        self.assertEqual(paired["min_paired_evals"], minimum)
        self.assertEqual(paired["ci95"], [-1.0, 1.0])
        self.assertEqual(paired["test"]["p_value"], 0.0625)
        self.assertEqual(paired["verdict"], "inconclusive")
        self.assertIn(f"only {minimum - 1} eval(s) scored in both configs",
                      paired["verdict_reason"])
        self.assertIn(f"at least {minimum}", paired["verdict_reason"])
        # One more real pair reaches the minimum and the same data is "improved".
        b = aggregate([([2], [1])] * minimum, total=2)
        self.assertEqual(b["paired"]["paired_evals"], minimum)
        self.assertEqual(b["paired"]["verdict"], "improved")

    def test_no_pairs_at_all(self) -> None:
        b = aggregate([([2], ["executor_failed"])] * 6, total=2)
        paired = b["paired"]
        self.assertEqual(paired["paired_evals"], 0)
        self.assertIsNone(paired["mean_delta"])
        self.assertIsNone(paired["ci95"])
        self.assertEqual(paired["verdict"], "inconclusive")

    def test_one_config_has_no_paired_block(self) -> None:
        table = [([2], [])] * 5
        b = runner.aggregate(make_records(table, 2),
                             meta_for(table, configs=("with_skill",))).to_json()
        self.assertIsNone(b["paired"])
        self.assertIn("no comparison", runner.render_markdown(model(b)))

    def test_markdown_shows_the_verdict_in_its_first_lines(self) -> None:
        b = aggregate([([2], [1])] * 6 + [([2], [2])], total=2)
        head = runner.render_markdown(model(b)).splitlines()[:10]
        line = next((x for x in head if "Verdict" in x), None)
        self.assertIsNotNone(line, "\n".join(head))
        self.assertIn("improved", line)
        self.assertIn("+42.9 pp", line)                     # 3 / 7
        self.assertIn("[+6.2 pp, +60.5 pp]", line)
        self.assertIn("6/1/0", line)
        self.assertIn("sign-flip p = 0.03125", line)

    def test_identical_rates_are_a_tie(self) -> None:
        # Five assertions, three runs; every scored run of both configs passes 1 of 5 (0.2),
        # so every per-eval delta is 0 and every eval is a tie. One run of one config failed
        # per eval. In floating point (0.2 + 0.2 + 0.2) / 3 = 0.20000000000000004 while
        # (0.2 + 0.2) / 2 = 0.2, so the runner sees deltas of +-2.8e-17: E01..E03 count as wins,
        # E04 and E05 as losses with a candidate_below_baseline warning each.
        # (On Python < 3.12, whose sum() is not compensated, the same happens with no failed
        # run at all: with_skill 1, 4, 1 of 5 against without_skill 1, 1, 4 of 5.)
        table = ([([1, 1, 1], [1, 1, "grader_failed"])] * 3
                 + [([1, 1, "grader_failed"], [1, 1, 1])] * 2)
        b = aggregate(table, total=5, runs=3)
        self.assertEqual((b["paired"]["wins"], b["paired"]["ties"], b["paired"]["losses"]),
                         (0, 5, 0))
        self.assertEqual(flags_of(b, "candidate_below_baseline"), [])

    def test_identical_rates_never_give_improved(self) -> None:
        # Every scored run of both configs passes 1 of 5 (0.2). with_skill has three scored
        # runs per eval, without_skill one (two runs failed). Each "delta" is
        # 0.20000000000000004 - 0.2 = 2.8e-17 unless snapped to 0; the old interval was
        # [2.8e-17, 2.8e-17], above 0, and the verdict came out "improved".
        table = [([1, 1, 1], [1, "executor_failed", "executor_failed"])] * 6
        b = aggregate(table, total=5, runs=3)
        self.assertEqual(b["paired"]["mean_delta"], 0.0)
        self.assertNotEqual(b["paired"]["verdict"], "improved")


class PassHatKTest(unittest.TestCase):
    # Two runs per config, two assertions (2 = both pass):
    #        with_skill   without_skill
    #   E01  2/2, 2/2     2/2, 2/2
    #   E02  2/2, 2/2     2/2, 1/2
    #   E03  2/2, 1/2     0/2, 0/2
    #   E04  1/2, 1/2     2/2, 2/2
    #   E05  2/2, 2/2     2/2, 2/2
    #   E06  2/2, 2/2     1/2, 2/2
    # Every run passed everything: with_skill E01, E02, E05, E06 -> 4/6; without_skill E01,
    # E04, E05 -> 3/6. (E03's with_skill mean is 0.75, which pass^k must not count.)
    TABLE = [([2, 2], [2, 2]), ([2, 2], [2, 1]), ([2, 1], [0, 0]), ([1, 1], [2, 2]),
             ([2, 2], [2, 2]), ([2, 2], [1, 2])]

    def test_pass_hat_k_per_config(self) -> None:
        b = aggregate(self.TABLE, total=2, runs=2)
        self.assertAlmostEqual(b["pass_hat_k"]["with_skill"]["rate"], 4 / 6, places=12)
        self.assertAlmostEqual(b["pass_hat_k"]["without_skill"]["rate"], 3 / 6, places=12)
        self.assertEqual(b["pass_hat_k"]["with_skill"]["k"], 2)
        text = runner.render_markdown(model(b))
        self.assertIn("pass^k (with_skill): 66.7% (k = 2 runs of each of 6 evals)", text)
        self.assertIn("pass^k (without_skill): 50.0%", text)

    def test_an_unscored_run_is_left_out_not_failed(self) -> None:
        # Issue 38, item 6: E03's second with_skill run failed to run. It is neither a pass
        # nor a failure: E03 leaves the with_skill count, which says so.
        table = [([2, 2], [2, 2]), ([2, 2], [2, 1]), ([2, "timeout"], [0, 0])] + \
            [([2, 2], [2, 2])] * 3
        b = aggregate(table, total=2, runs=2)
        self.assertEqual(b["pass_hat_k"]["with_skill"],
                         {"rate": 1.0, "k": 2, "evals": 5, "evals_left_out": 1})
        self.assertIn("1 eval(s) with an unscored run left out",
                      runner.render_markdown(model(b)))

    def test_after_an_adaptive_stop_k_is_the_waves_that_ran(self) -> None:
        # --runs 5 planned, the waves stopped after 2: k is 2, and the page says so.
        b = aggregate(self.TABLE, total=2, runs=5)
        self.assertEqual(b["pass_hat_k"]["with_skill"]["k"], 2)
        self.assertIn("k = 2 runs", runner.render_markdown(model(b)))

    def test_an_older_benchmark_keeps_its_share(self) -> None:
        b = aggregate(self.TABLE, total=2, runs=2)
        b["pass_hat_k"] = {"with_skill": 4 / 6, "without_skill": 0.5}
        self.assertIn("pass^k (with_skill): 66.7%\n", runner.render_markdown(model(b)))

    def test_absent_with_one_run(self) -> None:
        b = aggregate([([2], [2])] * 5, total=2, runs=1)
        self.assertIsNone(b["pass_hat_k"])
        self.assertNotIn("pass^k", runner.render_markdown(model(b)))


class SanityUnitTest(unittest.TestCase):
    def test_skill_read_evidence(self) -> None:
        unknown = runner._skill_read_evidence(None, "demo", "with_skill").to_json()
        self.assertEqual(unknown["state"], "unknown")
        trace = [{"tool": "Read", "input": {"file_path": "/s/repo/skills/demo/SKILL.md"}},
                 {"tool": "Bash", "input": {"command": "ls"}}]
        read = runner._skill_read_evidence(trace, "demo", "with_skill").to_json()
        self.assertEqual((read["state"], read["calls"], read["reads"]), ("read", 2, ["Read"]))
        other = [{"tool": "Read", "input": {"file_path": "/s/repo/skills/demo-two/SKILL.md"}}]
        self.assertEqual(runner._skill_read_evidence(other, "demo", "without_skill").state,
                         "not_read")
        self.assertEqual(runner._skill_read_evidence([], "demo", "with_skill").state,
                         "not_read")

    def test_skill_read_states_become_flags(self) -> None:
        records = [make_record(1, "with_skill", 1, 2, 2, skill_read="not_read"),
                   make_record(1, "without_skill", 1, 2, 2, skill_read="read"),
                   make_record(2, "with_skill", 1, 2, 2, skill_read="unknown"),
                   make_record(2, "without_skill", 1, 2, 2, skill_read="unknown"),
                   make_record(3, "with_skill", 1, 2, 2, skill_read="read"),
                   make_record(3, "without_skill", 1, 2, 2, skill_read="not_read")]
        b = runner.aggregate(records, meta_for([0, 0, 0])).to_json()
        got = {(f["kind"], f["severity"], f["eval_id"], f["configuration"])
               for f in b["sanity_checks"]["flags"]
               if f["kind"] in ("skill_not_read", "skill_read_unknown", "baseline_contamination")}
        self.assertEqual(got, {("skill_not_read", "warning", "E01", "with_skill"),
                               ("baseline_contamination", "error", "E01", "without_skill"),
                               ("skill_read_unknown", "info", "E02", "with_skill")})
        self.assertEqual(b["sanity_checks"]["status"], "REVIEW REQUIRED")

    def test_skill_installed_where_agents_discover_skills(self) -> None:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        home, codex_home = tmp.path / "home", tmp.path / "codex-home"
        for place in (home / ".claude" / "skills" / "demo", codex_home / "skills" / "demo",
                      home / ".agents" / "skills" / "demo", home / ".claude" / "skills" / "other"):
            place.mkdir(parents=True)
        with mock.patch.dict(os.environ, {"HOME": str(home), "CODEX_HOME": str(codex_home)}):
            found = runner.skill_installed_elsewhere("demo")
            self.assertEqual(sorted(found), sorted([
                str(home / ".claude" / "skills" / "demo"), str(codex_home / "skills" / "demo"),
                str(home / ".agents" / "skills" / "demo")]))
            self.assertEqual(runner.skill_installed_elsewhere("absent"), [])

    def test_assertion_flags_need_the_same_outcome_in_both_configs(self) -> None:
        # Two assertions; passed count k means assertions 1..k pass.
        # E01: 2/2 vs 2/2 -> both assertions pass everywhere: two info flags.
        # E02: 2/2 vs 1/2 -> assertion 1 passes everywhere (flag), assertion 2 discriminates.
        # E03: 0/2 vs 0/2 -> both fail everywhere: two info flags, "fails".
        # E04: 2/2 vs failed run -> no scored baseline run: no flags.
        b = aggregate([([2], [2]), ([2], [1]), ([0], [0]), ([2], ["executor_failed"])], total=2)
        got = sorted((f["eval_id"], f["assertion_id"], f["severity"], "fails" in f["message"])
                     for f in flags_of(b, "non_discriminating_assertion"))
        self.assertEqual(got, [("E01", 1, "info", False), ("E01", 2, "info", False),
                               ("E02", 1, "info", False),
                               ("E03", 1, "info", True), ("E03", 2, "info", True)])

    def test_eval_flags(self) -> None:
        # E01 with_skill scores 0 in both runs -> scored_zero; E02 every run failed ->
        # eval_unscored; E03 normal.
        b = aggregate([([0, 0], [2, 2]), (["executor_failed"] * 2, ["grader_failed"] * 2),
                       ([2, 2], [2, 2])], total=2, runs=2)
        zero = flags_of(b, "scored_zero")
        self.assertEqual([(f["eval_id"], f["configuration"], f["severity"]) for f in zero],
                         [("E01", "with_skill", "warning")])
        unscored = flags_of(b, "eval_unscored")
        self.assertEqual([(f["eval_id"], f["severity"]) for f in unscored], [("E02", "error")])


# ---------------------------------------------------------------------------
# 2. sign-flip test properties
# ---------------------------------------------------------------------------


def _mean(values):
    return sum(values) / len(values)


def deltas_of(pairs):
    return [_mean(c) - _mean(b) for c, b in pairs]


class SignFlipPropertyTest(unittest.TestCase):
    def test_interval_contains_the_point_estimate_and_agrees_with_the_p_value(self) -> None:
        for case in range(300):
            rng = random.Random(1000 + case)
            evals, assertions = rng.randint(1, 20), rng.randint(1, 5)
            pairs = []
            for _ in range(evals):
                runs_c = rng.randint(1, 5)
                runs_b = rng.randint(1, 5) if rng.random() < 0.3 else runs_c
                pairs.append(([rng.randint(0, assertions) / assertions for _ in range(runs_c)],
                              [rng.randint(0, assertions) / assertions for _ in range(runs_b)]))
            deltas = deltas_of(pairs)
            point = _mean(deltas)
            test = runner.sign_flip_test(deltas)
            low, high = test["ci"]
            with self.subTest(case=case, pairs=pairs):
                self.assertLessEqual(low, high)
                # 1e-12 only absorbs summation order; pass rates differ by >= 0.2 / 5.
                self.assertLessEqual(low, point + 1e-12)
                self.assertGreaterEqual(high, point - 1e-12)
                # By construction: 0 outside the interval exactly when p <= alpha.
                self.assertEqual(low > 0 or high < 0, test["p_value"] <= runner.ALPHA)

    def test_interval_narrows_as_runs_per_eval_grow(self) -> None:
        # Each eval has its own true pass probability per config; run r of an eval is the
        # same draw whatever the run count, so only the number of runs changes between columns.
        trials, evals = 24, 12
        widths = {runs: [] for runs in range(1, 6)}
        for trial in range(trials):
            rng = random.Random(5000 + trial)
            population = []
            for _ in range(evals):
                p_c, p_b = rng.random(), rng.random()
                population.append(([float(rng.random() < p_c) for _ in range(5)],
                                   [float(rng.random() < p_b) for _ in range(5)]))
            for runs in widths:
                pairs = [(c[:runs], b[:runs]) for c, b in population]
                low, high = runner.sign_flip_test(deltas_of(pairs))["ci"]
                widths[runs].append(high - low)
        average = {runs: _mean(w) for runs, w in widths.items()}
        for runs in range(1, 5):
            self.assertLessEqual(average[runs + 1], average[runs], average)
        self.assertLess(average[5], average[1] * 0.9, average)

    def test_runs_are_not_resampled_a_second_time(self) -> None:
        # Every eval: with_skill runs [1, 0] (mean 0.5), without_skill [0.5, 0.5]: each
        # per-eval delta is exactly 0. The spread between evals' deltas already holds the
        # run-to-run noise; the old bootstrap resampled runs again and widened the interval
        # around 0 (counting that noise twice). Evals are the unit: the test's interval is
        # [0, 0], and the stated one is what identical runs give (the pseudo-evals' width,
        # never zero: issue 38).
        table = [([2, 0], [1, 1])] * 6
        paired = aggregate(table, total=2, runs=2)["paired"]
        self.assertEqual(paired["test"]["interval"]["sign_flip"], [0.0, 0.0])
        steady = aggregate([([1, 1], [1, 1])] * 6, total=2, runs=2)["paired"]
        self.assertEqual(paired["ci95"], steady["ci95"])
        self.assertLess(paired["ci95"][0], 0.0)
        self.assertEqual(paired["test"]["p_value"], 1.0)
        self.assertEqual(paired["verdict"], "inconclusive")

    def test_case_order_and_seed_come_from_the_content(self) -> None:
        # 24 evals: above the exact limit, so random sign patterns are drawn; seven assertions
        # and three runs give many distinct subset means, so the interval moves with the seed.
        rng = random.Random(42)
        table = [([rng.randint(0, 7) for _ in range(3)], [rng.randint(0, 7) for _ in range(3)])
                 for _ in range(24)]
        first = aggregate(table, total=7, runs=3)
        test = first["paired"]["test"]
        self.assertFalse(test["exact"])
        self.assertEqual(test["sign_patterns"], runner._SIGN_FLIP_RESAMPLES + 1)
        self.assertIsInstance(test["seed"], int)
        # The same runs with the cases in reverse (or any) order: identical numbers.
        for order in (table[::-1], random.Random(3).sample(table, len(table))):
            again = aggregate(order, total=7, runs=3)
            self.assertEqual(again["paired"], first["paired"])
            self.assertEqual(again["comparisons"][0]["power"], first["comparisons"][0]["power"])
        # Recomputing from the recorded per-eval rates gives the same interval and seed.
        pairs = [tuple(row["configs"][c]["pass_rates"] for c in CONFIGS)
                 for row in first["per_eval"]]
        recomputed = runner.sign_flip_test(runner._paired_deltas(pairs))
        self.assertEqual([runner._snap(x) for x in recomputed["ci"]], first["paired"]["ci95"])
        self.assertEqual(recomputed["seed"], test["seed"])
        # The seed is really used: other seeds move this interval.
        values = runner._paired_deltas(pairs)
        others = set()
        for seed in range(4):
            with mock.patch.object(runner, "_content_seed", lambda _values, s=seed: s):
                others.add(runner.sign_flip_test(values)["ci"])
        self.assertGreater(len(others), 1)


# ---------------------------------------------------------------------------
# 3-5. end to end through the fake CLIs
# ---------------------------------------------------------------------------

WITH_TEXT = "ANSWER-FROM-SKILLED-RUN"
BASE_TEXT = "ANSWER-FROM-BASELINE-RUN"
HELPS = "[skill helps]"       # the baseline grader fails assertions carrying this
HURTS = "[skill hurts]"       # the with_skill grader fails assertions carrying this


def marked_suite(n: int, helps=(), hurts=(), zero=(), files: dict | None = None) -> dict:
    """n cases of three assertions (one common); markers go on the case's first one."""
    cases = []
    for i in range(1, n + 1):
        marker = " " + HELPS if i in helps else " " + HURTS if i in hurts else ""
        first = f"Item {i} is named.{marker}"
        second = "It is tidy."
        if i in zero:
            first, second = f"Item {i} is named. {HURTS}", f"It is tidy. {HURTS}"
        case = {"id": f"E{i:02d}", "prompt": f"Task number {i}.",
                "expectations": [first, second]}
        if files and i in files:
            case["files"] = files[i]
        cases.append(case)
    suite = {"skill_name": "demo", "evals": cases}
    if not zero:
        suite["common_assertions"] = ["The reply answers the task."]
    return suite


def marker_script(executor_cases=()) -> dict:
    return {"cases": [
        *executor_cases,
        {"role": "executor", "match": "Skill path:", "spec": {"text": WITH_TEXT}},
        {"role": "executor", "match": "Use no agent skill", "spec": {"text": BASE_TEXT}},
        {"role": "grader", "match": BASE_TEXT,
         "spec": {"verdicts": {"fail_if_text_contains": [HELPS]}}},
        {"role": "grader", "match": WITH_TEXT,
         "spec": {"verdicts": {"fail_if_text_contains": [HURTS]}}},
    ]}


class EndToEndCase(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)

    def run_matrix(self, suite: dict, script: dict, agent: str = "claude", args=(),
                   files: dict | None = None, env_extra: dict | None = None,
                   root: Path | None = None):
        if root is None:
            root = make_repo(self.tmp.path, suite, files=files)
        env = fake_env(self.tmp.path, script, env_extra)
        code, out, err = call_main(["run", str(root / "evals" / "demo" / "evals.json"),
                                    "--agent", agent, "--concurrency", "8", "--quiet", *args],
                                   env)
        workspace = root / "evals" / "demo" / "workspace" / agent
        iterations = sorted(workspace.glob("iteration-*"), key=lambda p: int(p.name.split("-")[1]))
        self.assertTrue(iterations, f"no iteration written; exit {code}\n{out}\n{err}")
        iteration = iterations[-1]
        benchmark = json.loads((iteration / "benchmark.json").read_text(encoding="utf-8"))
        return SimpleNamespace(code=code, out=out, err=err, root=root, dir=iteration,
                               b=benchmark, md=(iteration / "benchmark.md").read_text("utf-8"),
                               model=model(benchmark))

    def run_json(self, run, eval_id: str, config: str, number: int = 1) -> dict:
        path = run.dir / f"eval-{eval_id}" / config / f"run-{number}" / "run.json"
        return json.loads(path.read_text(encoding="utf-8"))


class VerdictEndToEndTest(EndToEndCase):
    def test_skill_helps_on_8_of_10_is_improved(self) -> None:
        run = self.run_matrix(marked_suite(10, helps=range(1, 9)), marker_script())
        self.assertEqual(run.code, 0, run.out + run.err)
        paired = run.b["paired"]
        # E01..E08: with_skill 3/3, without_skill 2/3 -> +1/3; E09, E10: 0.
        # mean = 8/3/10 = 0.2667.
        for i in range(1, 11):
            expected = 1 / 3 if i <= 8 else 0.0
            self.assertAlmostEqual(per_eval(run.b, f"E{i:02d}")["delta"], expected, places=12)
        self.assertAlmostEqual(paired["mean_delta"], 8 / 30, places=12)
        self.assertEqual((paired["wins"], paired["ties"], paired["losses"]), (8, 2, 0))
        self.assertEqual(paired["paired_evals"], 10)
        self.assertEqual(paired["verdict"], "improved")
        self.assertGreater(paired["ci95"][0], 0)
        sign_flip = paired["test"]["interval"]["sign_flip"]
        self.assertAlmostEqual(sign_flip[0], 5 / 30, places=12)
        self.assertAlmostEqual(sign_flip[1], 10 / 30, places=12)
        self.assertLessEqual(paired["ci95"][0], sign_flip[0])
        # Exact over 2^10 patterns; only the two ties can be flipped without lowering the
        # sum: p = 2 * 4 / 1024. Interval: 25 = floor(0.025 * 1024) -> the 25th smallest
        # subset mean: {0}s (3), {1/3, 0, 0} (8), {1/3, 0} (16) -> 1/6; 25th largest: 1/3.
        self.assertEqual(paired["test"]["p_value"], 8 / 1024)
        self.assertTrue(paired["test"]["exact"])
        self.assertIsNone(run.b["pass_hat_k"])
        self.assertEqual(run.b["sanity_checks"]["status"], "OK")
        self.assertIn("Verdict: improved", run.out)
        head = run.md.splitlines()[:10]
        self.assertTrue(any("**Verdict: improved**" in line for line in head), head)
        # Assertions that pass in every run of both configs do not discriminate (info only):
        # the common one and "It is tidy." everywhere, "Item i is named." on E09 and E10.
        flags = flags_of(run.b, "non_discriminating_assertion")
        got = {(f["eval_id"], f["assertion_id"]) for f in flags}
        expected = ({(f"E{i:02d}", 1) for i in range(1, 11)}
                    | {(f"E{i:02d}", 3) for i in range(1, 11)} | {("E09", 2), ("E10", 2)})
        self.assertEqual(got, expected)
        self.assertTrue(all(f["severity"] == "info" for f in flags))
        # benchmark.md counts the per-assertion table's rows (the common assertion is one row
        # over all evals), as that table does: 13 of its 21 rows.
        self.assertIn("non_discriminating_assertion: 13 of the 21 assertions", run.md)

    def test_five_evals_never_claim_at_the_five_percent_level(self) -> None:
        # Issue 25: three wins and two ties were "improved" (CI [0.2, 1.0]); five wins of five
        # too, at an exact two-sided p of 2 / 2^5 = 0.0625.
        for helps, p_value in ((range(1, 4), 0.25), (range(1, 6), 0.0625)):
            base = self.tmp.path / f"wins-{len(helps)}"
            base.mkdir()
            run = self.run_matrix({}, marker_script(),
                                  root=make_repo(base, marked_suite(5, helps=helps)))
            paired = run.b["paired"]
            with self.subTest(wins=len(helps)):
                self.assertEqual(run.code, 0, run.out + run.err)
                self.assertEqual(paired["wins"], len(helps))
                self.assertEqual(paired["test"]["p_value"], p_value)
                self.assertEqual(paired["verdict"], "inconclusive")
                self.assertEqual(paired["ci95"], [-1.0, 1.0])
                self.assertIn("at least 6 are needed", paired["verdict_reason"])
                self.assertIsNone(run.b["comparisons"][0]["power"]["mde"])
                self.assertIn("**Verdict: inconclusive**", run.md)

    @volume_test
    def test_a_clear_effect_over_20_evals_and_3_runs_in_any_case_order(self) -> None:
        # 12 evals helped (+1/3), 2 hurt (-1/3), 6 ties. A paired t-test on the per-eval
        # deltas: mean 1/6, sd sqrt(1/19) = 0.2294, t = 3.25 on 19 df, p = 0.004 < 0.01.
        # Above 16 evals the sign patterns are drawn at random, seeded from the deltas: the
        # same suite with its cases in reverse order gives identical numbers.
        suite = marked_suite(20, helps=range(1, 13), hurts=(13, 14))
        forward = self.run_matrix(suite, marker_script(), args=("--runs", "3"))
        paired = forward.b["paired"]
        self.assertEqual((paired["wins"], paired["ties"], paired["losses"]), (12, 6, 2))
        self.assertAlmostEqual(paired["mean_delta"], 1 / 6, places=12)
        self.assertEqual(paired["verdict"], "improved", paired)
        self.assertLess(paired["test"]["p_value"], 0.05)
        self.assertGreater(paired["ci95"][0], 0)
        self.assertFalse(paired["test"]["exact"])
        suite["evals"].reverse()
        (self.tmp.path / "reversed").mkdir()
        backward = self.run_matrix({}, marker_script(), args=("--runs", "3"),
                                   root=make_repo(self.tmp.path / "reversed", suite))
        self.assertEqual([r["eval_id"] for r in backward.b["per_eval"]][:2], ["E20", "E19"])
        self.assertEqual(backward.b["paired"], paired)
        self.assertEqual(backward.b["comparisons"][0]["power"],
                         forward.b["comparisons"][0]["power"])

    def test_helps_on_one_hurts_on_one_is_inconclusive(self) -> None:
        run = self.run_matrix(marked_suite(10, helps=[1], hurts=[2]), marker_script())
        paired = run.b["paired"]
        # +1/3, -1/3 and eight zeros: mean 0, wins/ties/losses 1/8/1.
        self.assertAlmostEqual(paired["mean_delta"], 0.0, places=12)
        self.assertEqual((paired["wins"], paired["ties"], paired["losses"]), (1, 8, 1))
        self.assertEqual(paired["verdict"], "inconclusive")
        self.assertIn("includes 0", paired["verdict_reason"])
        self.assertLess(paired["ci95"][0], 0)
        self.assertGreater(paired["ci95"][1], 0)
        below = flags_of(run.b, "candidate_below_baseline")
        self.assertEqual([(f["eval_id"], f["severity"]) for f in below], [("E02", "warning")])
        self.assertEqual(run.code, 1)
        self.assertIn("**Verdict: inconclusive**", run.md)

    def test_the_first_config_is_the_candidate(self) -> None:
        # --config is "candidate,baseline" (the issue fixes this order). The skill helps on all
        # six evals (+1/3 each); naming without_skill first asks how the bare agent compares
        # with the skill, so the same runs read as a regression of -1/3 for that candidate.
        run = self.run_matrix(marked_suite(6, helps=range(1, 7)), marker_script(),
                              args=("--config", "without_skill,with_skill"))
        self.assertEqual(run.b["comparison"]["candidate"], "without_skill")
        self.assertAlmostEqual(run.b["paired"]["mean_delta"], -1 / 3, places=12)
        self.assertEqual(run.b["paired"]["verdict"], "regressed")
        self.assertEqual(len(flags_of(run.b, "candidate_below_baseline")), 6)

    def test_scored_zero_and_unscored_evals(self) -> None:
        # E01: every with_skill assertion carries the "hurts" marker -> with_skill scores 0.
        # E03: the executor fails in both configs -> nothing to score.
        script = marker_script([{"role": "executor", "match": "Task number 3.",
                                 "spec": {"fault": "exit_nonzero"}}])
        run = self.run_matrix(marked_suite(3, zero=[1]), script)
        self.assertEqual(run.code, 1)
        zero = flags_of(run.b, "scored_zero")
        self.assertEqual([(f["eval_id"], f["configuration"], f["severity"]) for f in zero],
                         [("E01", "with_skill", "warning")])
        unscored = flags_of(run.b, "eval_unscored")
        self.assertEqual([(f["eval_id"], f["severity"]) for f in unscored], [("E03", "error")])
        infra = flags_of(run.b, "infrastructure_failure")
        self.assertEqual(sorted((f["eval_id"], f["configuration"]) for f in infra),
                         [("E03", "with_skill"), ("E03", "without_skill")])
        self.assertEqual(run.b["paired"]["paired_evals"], 2)
        self.assertIsNone(per_eval(run.b, "E03")["delta"])
        # A failed executor leaves no trace: whether it read the skill is unknown, not "no".
        self.assertEqual(self.run_json(run, "E03", "with_skill")["skill_read"]["state"],
                         "unknown")
        unknown = flags_of(run.b, "skill_read_unknown")
        self.assertEqual([(f["eval_id"], f["severity"]) for f in unknown], [("E03", "info")])
        self.assertEqual(flags_of(run.b, "skill_not_read"), [])
        self.assertEqual(run.b["sanity_checks"]["status"], "REVIEW REQUIRED")


class ContaminationEndToEndTest(EndToEndCase):
    def test_skill_installed_in_home_flags_the_baseline(self) -> None:
        installed = self.tmp.path / "home" / ".claude" / "skills" / "demo"
        installed.mkdir(parents=True)
        (installed / "SKILL.md").write_text("---\nname: demo\ndescription: x\n---\n", "utf-8")
        run = self.run_matrix(marked_suite(2, helps=[1]), marker_script())
        flags = flags_of(run.b, "baseline_contamination")
        self.assertEqual(len(flags), 1, flags)
        self.assertEqual(flags[0]["severity"], "error")
        self.assertIn(str(installed), flags[0]["message"])
        self.assertEqual(run.b["sanity_checks"]["status"], "REVIEW REQUIRED")
        self.assertEqual(run.code, 1)
        self.assertIn("Sanity checks: REVIEW REQUIRED", run.out)
        self.assertIn("baseline_contamination", run.md)
        manifest = json.loads((run.dir / "iteration_manifest.json").read_text("utf-8"))
        self.assertEqual(manifest["skill_installed_elsewhere"], [str(installed)])

    def test_clean_home_is_not_flagged(self) -> None:
        other = self.tmp.path / "home" / ".claude" / "skills" / "unrelated"
        other.mkdir(parents=True)
        run = self.run_matrix(marked_suite(2, helps=[1]), marker_script())
        self.assertEqual(flags_of(run.b, "baseline_contamination"), [])
        self.assertEqual(run.b["sanity_checks"]["status"], "OK")
        self.assertEqual(run.code, 0)

    def test_baseline_executor_reading_the_target_skill(self) -> None:
        root = make_repo(self.tmp.path, marked_suite(2),
                         files={"skills/other/SKILL.md": "---\nname: other\n---\n"})
        target = str(root / "skills" / "demo" / "SKILL.md")
        script = marker_script([
            # E02 reads another skill only: that is no contamination.
            {"role": "executor", "match": "Task number 2.",
             "spec": {"read_paths": [str(root / "skills" / "other" / "SKILL.md")]}},
            {"role": "executor", "match": "Use no agent skill", "spec": {"read_paths": [target]}},
        ])
        run = self.run_matrix({}, script, root=root)
        self.assertEqual(self.run_json(run, "E01", "without_skill")["skill_read"]["state"],
                         "read")
        self.assertEqual(self.run_json(run, "E02", "without_skill")["skill_read"]["state"],
                         "not_read")
        flags = flags_of(run.b, "baseline_contamination")
        self.assertEqual([(f["eval_id"], f["configuration"], f["severity"]) for f in flags],
                         [("E01", "without_skill", "error")])
        self.assertEqual(run.code, 1)

    def test_with_skill_executor_that_never_reads_the_skill(self) -> None:
        denial = {"tool_name": "Bash", "tool_use_id": "toolu_x", "tool_input": {"command": "rm"}}
        script = marker_script([
            {"role": "executor", "match": "Task number 1.", "spec": {"read_skill": False}},
            {"role": "executor", "match": "Task number 2.",
             "spec": {"permission_denials": [denial]}},
        ])
        run = self.run_matrix(marked_suite(2), script)
        self.assertEqual(self.run_json(run, "E01", "with_skill")["skill_read"]["state"],
                         "not_read")
        self.assertEqual(self.run_json(run, "E02", "with_skill")["skill_read"]["state"], "read")
        not_read = flags_of(run.b, "skill_not_read")
        self.assertEqual([(f["eval_id"], f["configuration"], f["severity"]) for f in not_read],
                         [("E01", "with_skill", "warning")])
        denials = flags_of(run.b, "permission_denials")   # the E02 case applies to both configs
        self.assertEqual(sorted((f["eval_id"], f["configuration"], f["severity"]) for f in denials),
                         [("E02", "with_skill", "warning"), ("E02", "without_skill", "warning")])
        self.assertEqual(run.code, 1)

    def test_codex_trace_comes_from_command_execution(self) -> None:
        codex_home = self.tmp.path / "codex-home"
        (codex_home / "skills" / "demo").mkdir(parents=True)
        root = make_repo(self.tmp.path, marked_suite(3))
        target = str(root / "skills" / "demo" / "SKILL.md")
        script = marker_script([
            {"role": "executor", "match": "Task number 1.", "spec": {"read_skill": False}},
            {"role": "executor", "match": "Task number 3.", "spec": {"read_paths": [target]}},
        ])
        run = self.run_matrix({}, script, agent="codex", root=root,
                              env_extra={"CODEX_HOME": str(codex_home)})
        read = self.run_json(run, "E02", "with_skill")["skill_read"]
        self.assertEqual(read["state"], "read")
        self.assertEqual(read["reads"], ["command_execution"])
        self.assertEqual(self.run_json(run, "E01", "with_skill")["skill_read"]["state"],
                         "not_read")
        self.assertEqual(self.run_json(run, "E02", "without_skill")["skill_read"]["state"],
                         "not_read")
        got = {(f["kind"], f.get("eval_id"), f.get("configuration"), f["severity"])
               for f in run.b["sanity_checks"]["flags"]
               if f["kind"] in ("skill_not_read", "baseline_contamination")}
        self.assertEqual(got, {
            ("skill_not_read", "E01", "with_skill", "warning"),
            ("baseline_contamination", "E03", "without_skill", "error"),
            ("baseline_contamination", None, None, "error"),     # $CODEX_HOME/skills/demo
        })
        installed = [f for f in flags_of(run.b, "baseline_contamination") if "eval_id" not in f]
        self.assertIn(str(codex_home / "skills" / "demo"), installed[0]["message"])
        judge = json.loads((run.dir / "eval-E02" / "with_skill" / "run-1" / "grading.json")
                           .read_text("utf-8"))["judge"]
        self.assertEqual(judge["provider"], "codex")
        self.assertEqual(judge["cli_version"], fake_version("codex"))


def fake_version(cli: str) -> str:
    done = subprocess.run([sys.executable, str(FAKES / cli), "--version"], capture_output=True,
                          text=True, check=True, stdin=subprocess.DEVNULL)
    return done.stdout.strip()


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class IdentityAndCompareTest(EndToEndCase):
    """One repository, several iterations: identities, judge blocks and comparability."""

    FIXTURE = "evals/demo/fixtures/input.txt"

    def setUp(self) -> None:
        super().setUp()
        suite = marked_suite(2, helps=[1], files={1: [self.FIXTURE]})
        self.root = make_repo(self.tmp.path, suite, files={self.FIXTURE: "fixture v1\n"})

    def iterate(self, *args):
        return self.run_matrix({}, marker_script(), root=self.root, args=args)

    def gradings(self, run) -> list[dict]:
        paths = sorted(run.dir.glob("eval-*/*/run-*/grading.json"))
        self.assertEqual(len(paths), 4)
        return [json.loads(p.read_text("utf-8")) for p in paths]

    def test_judge_identity_and_manifest_hashes(self) -> None:
        first = self.iterate()
        for grading in self.gradings(first):
            self.assertEqual(grading["judge"], {
                "provider": "claude", "model": "CLI default",
                "cli_version": fake_version("claude"),
                "prompt_template_sha256": runner.grader_template_sha256(), "grader_runs": 1})
        # The template hash covers the fixed grader text, not per-run content.
        with mock.patch.object(runner, "GRADER_PREAMBLE", runner.GRADER_PREAMBLE + "x"):
            self.assertNotEqual(runner.grader_template_sha256(),
                                first.b["metadata"]["identity"]["grader_prompt_sha256"])
        prompt = (first.dir / "eval-E01" / "with_skill" / "run-1" / "grader_prompt.md").read_text(
            "utf-8")
        self.assertIn(runner.GRADER_PREAMBLE, prompt)
        self.assertIn(runner._GRADER_ANSWER_FORMAT, prompt)

        manifest = json.loads((first.dir / "iteration_manifest.json").read_text("utf-8"))
        self.assertEqual(manifest["runner"]["sha256"], sha256_of(RUNNER_PATH))
        self.assertEqual(manifest["suite"]["sha256"],
                         sha256_of(self.root / "evals" / "demo" / "evals.json"))
        self.assertRegex(manifest["skill_package"]["sha256"], r"^[0-9a-f]{64}$")
        self.assertEqual(list(manifest["fixtures"]), [self.FIXTURE])
        self.assertRegex(manifest["fixtures"][self.FIXTURE], r"^[0-9a-f]{64}$")
        self.assertEqual(manifest["cli_version"], fake_version("claude"))

        second = self.iterate("--grader-model", "grader-x")
        for grading in self.gradings(second):
            self.assertEqual(grading["judge"]["model"], "grader-x")
        self.assertIn("grader grader-x", second.md)

        # A changed skill package and a changed fixture change their hashes, nothing else.
        skill_md = self.root / "skills" / "demo" / "SKILL.md"
        skill_md.write_text(skill_md.read_text("utf-8") + "\nOne more rule.\n", "utf-8")
        (self.root / self.FIXTURE).write_text("fixture v2\n", "utf-8")
        git(self.root, "commit", "-qam", "change skill and fixture")
        third = self.iterate()
        manifest3 = json.loads((third.dir / "iteration_manifest.json").read_text("utf-8"))
        self.assertNotEqual(manifest3["skill_package"]["sha256"],
                            manifest["skill_package"]["sha256"])
        self.assertNotEqual(manifest3["fixtures"][self.FIXTURE], manifest["fixtures"][self.FIXTURE])
        self.assertEqual(manifest3["suite"]["sha256"], manifest["suite"]["sha256"])
        self.assertEqual(manifest3["runner"]["sha256"], manifest["runner"]["sha256"])
        self.assertEqual(runner._comparability(third.model, first.model),
                         "different series: fixtures changed; the skill changed (the change "
                         "being measured, not a comparability problem)")

    def test_comparability_and_report_compare(self) -> None:
        first = self.iterate()
        second = self.iterate()
        self.assertEqual(runner._comparability(second.model, first.model), "same inputs")
        self.assertIn("Comparability: same inputs",
                      runner.render_compare_markdown(second.model, first.model, "iteration-1"))

        # Through the CLI: the comparison goes to comparison.md, beside (never inside) the
        # iteration's own benchmark.md; stdout names it and says whether the two compare.
        own_md = (second.dir / "benchmark.md").read_text("utf-8")
        code, out, err = call_main(["report", str(second.dir), "--compare", str(first.dir)])
        self.assertEqual(code, 0, err)
        comparison = (second.dir / "comparison.md").read_text("utf-8")
        self.assertIn(f"Comparison with {first.dir}: same inputs; {second.dir / 'comparison.md'}",
                      out)
        self.assertIn("\n  Overall change of the delta vs without_skill: mean +0.0 pp over the ",
                      out)
        self.assertIn(f"## Compared with {first.dir}", comparison)
        self.assertIn("Comparability: same inputs", comparison)
        # E01: the skill helps (with_skill 3/3, without_skill 2/3) in both iterations.
        self.assertIn("| E01 | 100.0% / 100.0% | 66.7% / 66.7% | +33.3 pp / +33.3 pp | +0.0 pp |",
                      comparison.splitlines())
        self.assertEqual((second.dir / "benchmark.md").read_text("utf-8"), own_md)

        skill_md = self.root / "skills" / "demo" / "SKILL.md"
        original = skill_md.read_text("utf-8")
        skill_md.write_text(original + "\nAlways say hello twice.\n", "utf-8")
        edited = self.iterate()
        # the skill changing is what the author set out to measure: information, not a warning
        note = "the skill changed (the change being measured, not a comparability problem)"
        self.assertEqual(runner._comparability(edited.model, first.model),
                         f"same inputs; {note}")
        code, out, _ = call_main(["report", str(edited.dir), "--compare", str(first.dir)])
        self.assertEqual(code, edited.code)  # as the run of that iteration
        self.assertIn(f": same inputs; {note};", out)
        self.assertNotIn("different series", out)
        self.assertIn(f"Comparability: same inputs; {note}",
                      (edited.dir / "comparison.md").read_text("utf-8"))
        skill_md.write_text(original, "utf-8")

        graded_elsewhere = self.iterate("--grader-model", "other-grader")
        self.assertEqual(runner._comparability(graded_elsewhere.model, first.model),
                         "different series: grader model changed")

        legacy = json.loads(json.dumps(first.b))
        del legacy["metadata"]["identity"]
        self.assertTrue(runner._comparability(second.model, model(legacy)).startswith("unknown"))
        self.assertTrue(runner._comparability(model(legacy), second.model).startswith("unknown"))
        legacy_dir = self.tmp.path / "legacy-iteration"  # its run files too: --compare checks them
        shutil.copytree(first.dir, legacy_dir)
        (legacy_dir / "benchmark.json").write_text(json.dumps(legacy), "utf-8")
        code, out, _ = call_main(["report", str(second.dir), "--compare", str(legacy_dir)])
        self.assertEqual(code, 0)
        self.assertIn(": unknown (an iteration records no identities);", out)


class CompareMarkdownTest(unittest.TestCase):
    def test_rates_side_by_side_and_change_in_delta(self) -> None:
        # this:  E01 with 2/2 vs 1/2 (delta +0.5); E02 1/2 vs 1/2 (0)
        # other: E01 1/2 vs 1/2 (0);               E03 2/2 vs 0/2 (+1.0), not in this one
        this = aggregate([([2], [1]), ([1], [1])], total=2)
        other_table = [([1], [1]), ([0], [0]), ([2], [0])]
        other_records = [r for r in make_records(other_table, 2) if r.eval_id != "E02"]
        other = runner.aggregate(other_records, meta_for(other_table))
        text = runner.render_compare_markdown(model(this), other, "iteration-7")
        lines = text.splitlines()
        self.assertEqual(lines[0], "## Compared with iteration-7")
        self.assertIn("| E01 | 100.0% / 50.0% | 50.0% / 50.0% | +50.0 pp / +0.0 pp | +50.0 pp |",
                      lines)
        self.assertIn("| E02 | 50.0% / n/a | 50.0% / n/a | +0.0 pp / n/a | n/a |", lines)
        self.assertIn("Only in iteration-7: E03", lines)
        self.assertIn("Comparability: unknown", text)    # synthetic metadata has no identity
        # E01 is the only eval both measured: its change is the mean, and one pair cannot
        # reject "no change"
        self.assertIn("Overall change of the delta vs without_skill: mean +50.0 pp over the 1 "
                      "eval(s) both measured; paired sign-flip p = 1 (exact, two-sided, each "
                      "eval's change as one pair)", lines)

    def test_overall_change_is_the_mean_over_shared_evals_with_the_paired_test(self) -> None:
        # seven evals, each delta up from 0 to +50 pp: the smallest exact p with 7 pairs, 2/128
        this = model(aggregate([([2], [1])] * 7, total=2))
        other = model(aggregate([([1], [1])] * 7, total=2))
        [line] = runner._compare_overall(this, other)
        self.assertEqual(line, "Overall change of the delta vs without_skill: mean +50.0 pp over "
                               "the 7 eval(s) both measured; paired sign-flip p = 0.01562 "
                               "(exact, two-sided, each eval's change as one pair)")
        self.assertIn(line, runner.render_compare_markdown(this, other, "it-1").splitlines())
        # unchanged: a mean of zero, and p = 1
        [same] = runner._compare_overall(other, other)
        self.assertIn("mean +0.0 pp over the 7 eval(s) both measured; paired sign-flip p = 1 ",
                      same)


# ---------------------------------------------------------------------------
# 6. what the sign-flip test costs
# ---------------------------------------------------------------------------


def synthetic_rows(evals: int, runs: int, seed: int) -> list:
    rng = random.Random(seed)
    return [per_eval_row(i, **{c: [rng.randint(0, 4) / 4 for _ in range(runs)]
                               for c in CONFIGS})
            for i in range(evals)]


@volume_test
class SignFlipCostTest(unittest.TestCase):
    def test_wall_time_for_5000_runs(self) -> None:
        timings = []
        for evals, runs in ((2500, 1), (500, 5)):
            rows = synthetic_rows(evals, runs, seed=evals)
            started, cpu = time.perf_counter(), time.process_time()
            paired = runner._paired_statistics(rows, CONFIGS)
            elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
            self.assertEqual(evals * 2 * runs, 5000)
            self.assertEqual(paired.paired_evals, evals)
            self.assertLessEqual(paired.ci95[0], paired.mean_delta)
            self.assertLess(elapsed, 30.0, f"sign-flip test for {evals} evals x {runs} runs")
            timings.append(f"{evals} evals x 2 configs x {runs} run(s): {elapsed:.2f} s wall "
                           f"({cpu:.2f} s CPU)")
        print(f"\n[sign-flip test, {runner._SIGN_FLIP_RESAMPLES} patterns, 5,000 runs, Python "
              f"{sys.version.split()[0]}] " + "; ".join(timings), file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
