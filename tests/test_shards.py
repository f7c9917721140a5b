"""Sharding a plan across machines, merging the shards, and the assignment's balance (issue 19).

The fakes are scripted to be deterministic (a fixed duration, fixed usage), so a sharded run
merged back must equal one unsharded run in every per-eval and overall figure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import unittest
from pathlib import Path

from tests.helpers import (
    PEER_CORPUS,
    PROJECT,
    RUNNER_PATH,
    TempDir,
    call_main,
    demo_suite,
    fake_env,
    make_repo,
    read_output,
    runner,
    start_script,
)

SUITE_REL = "evals/demo/evals.json"
# Deterministic answers: fixed time, and a grader that fails one assertion of some evals so
# that per-eval rates differ and a wrong merge would show.
SCRIPT = {"executor": {"duration_ms": 1500},
          "grader": {"duration_ms": 700},
          "cases": [{"match": "Task number 2", "role": "grader",
                     "spec": {"verdicts": {"fail_ids": [2]}, "duration_ms": 700}},
                    {"match": "Task number 5", "role": "grader",
                     "spec": {"verdicts": "all_fail", "duration_ms": 700}}]}
# What must be identical between a merged and an unsharded benchmark.
RESULT_KEYS = ("runs", "run_summary", "per_eval", "comparison", "paired", "pass_hat_k",
               "status_counts", "scored_run_count", "error_run_count", "sanity_checks")


def load_json(path: Path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


def iteration_of(workspace: Path) -> Path:
    found = sorted(workspace.glob("iteration-*"))
    assert len(found) == 1, found
    return found[0]


class ShardAssignmentTests(unittest.TestCase):
    def test_whole_evals_balanced_and_independent_of_case_order(self) -> None:
        weights = {f"E{i:02d}": 4 for i in range(1, 11)}
        first = runner.assign_shards(weights, 4)
        reordered = runner.assign_shards(dict(reversed(list(weights.items()))), 4)
        self.assertEqual(first, reordered)
        loads = [sum(w for k, w in weights.items() if first[k] == s) for s in range(1, 5)]
        self.assertLessEqual(max(loads) - min(loads), 4)  # at most one eval apart
        self.assertEqual(sum(loads), 40)

    def test_heavier_evals_are_placed_first(self) -> None:
        assignment = runner.assign_shards({"a": 10, "b": 1, "c": 1, "d": 1, "e": 7}, 2)
        loads = {s: sum(w for k, w in {"a": 10, "b": 1, "c": 1, "d": 1, "e": 7}.items()
                        if assignment[k] == s) for s in (1, 2)}
        self.assertEqual(sorted(loads.values()), [10, 10])

    def test_more_shards_than_evals_leaves_some_empty(self) -> None:
        assignment = runner.assign_shards({"a": 2, "b": 2}, 5)
        self.assertEqual(sorted(assignment.values()), [1, 2])

    @unittest.skipUnless((PEER_CORPUS / "evals").is_dir(), "peer corpus not present")
    def test_peer_corpus_balance(self) -> None:
        for suite_path in sorted((PEER_CORPUS / "evals").glob("*/evals.json")):
            suite = runner.load_suite(suite_path).suite
            self.assertIsNotNone(suite, suite_path)
            options = runner.RunOptions(agent="claude")
            cells = runner.plan_cells(suite, options, Path("/nowhere"))
            for count in (2, 4, 8):
                with self.subTest(suite=suite.skill_name, n=count):
                    assignment = runner._shard_of_plan(cells, count)
                    sizes = [sum(1 for c in cells if assignment[c.case.key] == k)
                             for k in range(1, count + 1)]
                    self.assertEqual(sum(sizes), len(cells))
                    self.assertLessEqual(max(sizes) - min(sizes), 2)  # one eval's cells


class ShardOptionTests(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.repo = make_repo(self.tmp.path, demo_suite(5))
        self.env = fake_env(self.tmp.path, SCRIPT)

    def test_bad_shard_specs_are_refused_before_launch(self) -> None:
        for spec in ("0/4", "5/4", "1/257", "x", "2"):
            with self.subTest(spec=spec):
                code, _, err = call_main(["run", str(self.repo / SUITE_REL), "--agent", "claude",
                                          "--shard", spec], self.env)
                self.assertEqual(code, 2, err)
        self.assertFalse(list((self.tmp.path / "log").glob("*.json")))

    def test_dry_run_names_the_shards_evals(self) -> None:
        code, out, _ = call_main(["run", str(self.repo / SUITE_REL), "--agent", "claude",
                                  "--shard", "2/2", "--dry-run"], self.env)
        self.assertEqual(code, 0)
        suite = runner.load_suite(self.repo / SUITE_REL).suite
        cells = runner.plan_cells(suite, runner.RunOptions(agent="claude"), Path("x"))
        assignment = runner._shard_of_plan(cells, 2)
        mine = [key for key in dict.fromkeys(c.case.key for c in cells) if assignment[key] == 2]
        self.assertIn(f"shard 2/2: evals {', '.join(mine)}", out)

    def test_an_empty_shard_launches_nothing(self) -> None:
        code, out, _ = call_main(["run", str(self.repo / SUITE_REL), "--agent", "claude",
                                  "--shard", "7/8", "--workspace", str(self.tmp.path / "ws")],
                                 self.env)
        self.assertEqual(code, 0)
        self.assertIn("holds no eval", out)
        self.assertFalse((self.tmp.path / "ws").exists())


def without_file_hashes(value):
    if isinstance(value, list):
        return [without_file_hashes(v) for v in value]
    if isinstance(value, dict):
        return {k: without_file_hashes(v) for k, v in value.items() if k != "files_sha256"}
    return value


class ShardMergeTests(unittest.TestCase):
    """One unsharded run, then 4 shards as 4 parallel processes, merged."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = TempDir()
        cls.repo = make_repo(cls.tmp.path, demo_suite(7))
        cls.env = fake_env(cls.tmp.path, SCRIPT)
        suite = str(cls.repo / SUITE_REL)
        common = ["run", suite, "--agent", "claude", "--concurrency", "2", "--quiet",
                  "--isolation", "none"]
        whole = start_script([*common, "--workspace", str(cls.tmp.path / "whole")], cls.env)
        procs = [start_script([*common, "--shard", f"{k}/4",
                               "--workspace", str(cls.tmp.path / f"shard-{k}")], cls.env)
                 for k in range(1, 5)]
        for proc in [whole, *procs]:
            proc.wait(timeout=300)
        cls.codes = [proc.returncode for proc in [whole, *procs]]
        cls.outputs = [read_output(proc) for proc in [whole, *procs]]
        cls.whole = iteration_of(cls.tmp.path / "whole")
        cls.shards = [iteration_of(cls.tmp.path / f"shard-{k}") for k in range(1, 5)]

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def merge(self, name: str, shards: list[Path], *extra: str) -> tuple[int, str, str]:
        return call_main(["report", str(self.tmp.path / name), "--merge",
                          *map(str, shards), *extra], self.env)

    def test_every_process_finished(self) -> None:
        # E05 fails everything (scored_zero): a review verdict, not a crash
        self.assertEqual(self.codes[0], 1, self.outputs)
        # A shard is judged on its own evals: the one holding E05 needs review, the others
        # are OK (a shard's partial plan alone raises no flag).
        expected = [1 if "E05" in load_json(shard / "iteration_manifest.json")["shard"]["evals"]
                    else 0 for shard in self.shards]
        self.assertEqual(expected.count(1), 1)
        self.assertEqual(self.codes[1:], expected, self.outputs)

    def test_shards_hold_whole_evals_and_record_the_plan(self) -> None:
        seen: list[str] = []
        plans = set()
        for index, folder in enumerate(self.shards, 1):
            manifest = load_json(folder / "iteration_manifest.json")
            self.assertEqual(manifest["shard"]["label"], f"{index}/4")
            plans.add(manifest["plan"]["sha256"])
            for key in manifest["shard"]["evals"]:
                self.assertEqual(sorted(p.name for p in (folder / f"eval-{key}").iterdir()
                                        if p.is_dir()), ["with_skill", "without_skill"])
            seen += manifest["shard"]["evals"]
            flags = load_json(folder / "benchmark.json")["sanity_checks"]["flags"]
            self.assertIn("shard", [f["kind"] for f in flags])
            self.assertNotIn("partial_selection", [f["kind"] for f in flags])
        self.assertEqual(len(plans), 1)
        self.assertEqual(sorted(seen), [f"E{i:02d}" for i in range(1, 8)])

    def test_merged_results_equal_one_unsharded_run(self) -> None:
        code, out, err = self.merge("merged", self.shards)
        self.assertEqual(code, self.codes[0], err)
        merged = load_json(self.tmp.path / "merged" / "benchmark.json")
        whole = load_json(self.whole / "benchmark.json")
        for key in RESULT_KEYS:
            with self.subTest(key=key):
                # Each run file's SHA-256 is of this execution's bytes (its run.json holds its
                # own times and paths), so two executions never share them; the rest must match.
                self.assertEqual(without_file_hashes(merged[key]), without_file_hashes(whole[key]))
        for key in ("evals_run", "cells_planned", "cells_finished", "incomplete",
                    "selection_partial", "identity", "configs"):
            self.assertEqual(merged["metadata"][key], whole["metadata"][key], key)
        self.assertEqual([m["shard"] for m in merged["metadata"]["merged_from"]],
                         ["1/4", "2/4", "3/4", "4/4"])
        # skill-creator's layout: eval metadata and every run's grading in place
        for i in range(1, 8):
            self.assertTrue((self.tmp.path / "merged" / f"eval-E{i:02d}" /
                             "eval_metadata.json").is_file())
            self.assertTrue((self.tmp.path / "merged" / f"eval-E{i:02d}" / "with_skill" /
                             "run-1" / "grading.json").is_file())
        self.assertTrue((self.tmp.path / "merged" / "benchmark.html").is_file())
        self.assertIn("Sanity checks: REVIEW REQUIRED", out)

    def test_a_missing_shard_gives_an_incomplete_merge_naming_it(self) -> None:
        code, _, err = self.merge("partial", [self.shards[0], self.shards[1], self.shards[3]])
        self.assertEqual(code, 1)
        merged = load_json(self.tmp.path / "partial" / "benchmark.json")
        missing_evals = load_json(self.shards[2] / "iteration_manifest.json")["shard"]["evals"]
        self.assertEqual(merged["metadata"]["missing_shards"],
                         [{"shard": "3/4", "evals": missing_evals}])
        self.assertTrue(merged["metadata"]["incomplete"])
        self.assertEqual(merged["sanity_checks"]["status"], "REVIEW REQUIRED")
        flags = [f for f in merged["sanity_checks"]["flags"] if f["kind"] == "missing_shard"]
        self.assertEqual(len(flags), 1)
        self.assertIn("3/4", flags[0]["message"])
        self.assertIn("missing shard 3/4", err)
        md = (self.tmp.path / "partial" / "benchmark.md").read_text(encoding="utf-8")
        self.assertIn("shard 3/4 was not merged", md)

    def assert_refused_without_writes(self, name: str, shards: list[Path]) -> str:
        before = set(os.listdir(self.tmp.path))
        code, _, err = self.merge(name, shards)
        self.assertEqual(code, 2, err)
        self.assertEqual(set(os.listdir(self.tmp.path)), before)
        return err

    def test_overlapping_shards_are_refused(self) -> None:
        err = self.assert_refused_without_writes("twice", [self.shards[0], self.shards[0]])
        self.assertIn("given twice", err)

    def test_an_unsharded_iteration_is_refused(self) -> None:
        err = self.assert_refused_without_writes("plain", [self.shards[0], self.whole])
        self.assertIn("not a shard", err)

    def test_an_existing_target_is_refused(self) -> None:
        (self.tmp.path / "exists").mkdir(exist_ok=True)
        code, _, err = self.merge("exists", self.shards)
        self.assertEqual(code, 2)
        self.assertEqual(os.listdir(self.tmp.path / "exists"), [])

    def test_shards_of_different_options_or_suites_are_refused(self) -> None:
        other = TempDir()
        self.addCleanup(other.cleanup)
        env = fake_env(other.path, SCRIPT)
        repo = make_repo(other.path, demo_suite(7, purpose="another suite"))
        suite = str(repo / SUITE_REL)
        for name, argv in (("runs", ["run", str(self.repo / SUITE_REL), "--runs", "2"]),
                           ("suite", ["run", suite])):
            code, _, err = call_main([*argv, "--agent", "claude", "--shard", "2/4", "--quiet",
                                      "--workspace", str(other.path / name)], env)
            self.assertEqual(code, 1, err)
            with self.subTest(differs=name):
                err = self.assert_refused_without_writes(
                    f"mixed-{name}", [self.shards[0], iteration_of(other.path / name)])
                self.assertIn("another plan", err)
                self.assertIn("suite_sha256" if name == "suite" else "options_sha256", err)

    def test_a_tampered_shard_is_refused(self) -> None:
        copy = self.tmp.path / "tampered-src"
        shutil.copytree(self.shards[1], copy)
        self.addCleanup(shutil.rmtree, copy, True)
        manifest = load_json(copy / "iteration_manifest.json")
        manifest["shard"]["evals"] = manifest["shard"]["evals"][:-1]
        (copy / "iteration_manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
        err = self.assert_refused_without_writes("tampered", [self.shards[0], copy])
        self.assertIn("holds evals", err)

    def test_a_malformed_shard_is_invalid_input_not_a_crash(self) -> None:
        # Well-formed JSON of the wrong shape: each of these was an internal error (exit 4).
        copy = self.tmp.path / "malformed-src"
        self.addCleanup(shutil.rmtree, copy, True)
        for label, change in (("arms a number", lambda b: b["metadata"].update(arms=7)),
                              ("run_number a list", lambda b: b["runs"][0].update(run_number=[])),
                              ("unscored_runs a number", lambda b: b.update(unscored_runs=7))):
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(self.shards[1], copy)
            data = load_json(copy / "benchmark.json")
            change(data)
            (copy / "benchmark.json").write_text(json.dumps(data), encoding="utf-8")
            with self.subTest(label):
                err = self.assert_refused_without_writes("malformed", [copy, self.shards[0]])
                self.assertRegex(err, "is malformed|holds the wrong kind of value at")
                self.assertIn(str(copy), err)


SHARDING_DOC = PROJECT / "skills" / "skill-eval" / "references" / "sharding.md"


def readme_shell_loop() -> str:
    readme = SHARDING_DOC.read_text(encoding="utf-8")
    block = readme.split("<!-- shard-loop -->", 1)[1].split("```sh\n", 1)[1]
    return block.split("```", 1)[0]


class ShellLoopTests(unittest.TestCase):
    """The sharding reference's plain shell loop, run as written: N shard processes at once,
    then the merge."""

    def test_readme_shell_loop_runs_parallel_shards_and_merges_them(self) -> None:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        repo = make_repo(tmp.path, demo_suite(6))
        script = {"executor": {"sleep_s": 1.0, "duration_ms": 1000},
                  "grader": {"duration_ms": 500}}
        env = fake_env(tmp.path, script)
        # python3 in the loop is this interpreter; the fakes log into tmp, so no confinement
        (tmp.path / "bin").mkdir()
        (tmp.path / "bin" / "python3").symlink_to(sys.executable)
        env.update(PATH=f"{tmp.path / 'bin'}{os.pathsep}{env['PATH']}", N="3", AGENT="claude",
                   SUITE=str(repo / SUITE_REL), RUNNER=str(RUNNER_PATH), OUT=str(tmp.path / "out"),
                   RUN_OPTIONS="--isolation none --concurrency 1")
        (tmp.path / "loop.sh").write_text(readme_shell_loop(), encoding="utf-8")
        done = subprocess.run(["sh", str(tmp.path / "loop.sh")], env=env, cwd=repo,
                              capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL)
        logs = {p.name: p.read_text(encoding="utf-8") for p in (tmp.path / "out").glob("*.log")}
        self.assertEqual(done.returncode, 0, (done.stdout, done.stderr, logs))
        merged = load_json(tmp.path / "out" / "merged" / "benchmark.json")
        self.assertEqual([m["shard"] for m in merged["metadata"]["merged_from"]],
                         ["1/3", "2/3", "3/3"])
        self.assertEqual(len(merged["runs"]), 12)
        self.assertEqual(merged["metadata"]["missing_shards"], [])
        # the shard processes ran at the same time: their executor windows overlap
        windows = []
        for k in (1, 2, 3):
            runs = [load_json(p) for p in
                    (tmp.path / "out" / f"shard-{k}").glob("iteration-1/eval-*/*/run-*/run.json")]
            windows.append((min(r["started_at"] for r in runs), max(r["finished_at"] for r in runs)))
        latest_start = max(w[0] for w in windows)
        earliest_end = min(w[1] for w in windows)
        self.assertLess(latest_start, earliest_end, windows)


if __name__ == "__main__":
    unittest.main()
