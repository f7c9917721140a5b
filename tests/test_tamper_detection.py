"""What an unconfined executor changes outside its sandbox is caught, never reported as OK.

The hostile executors here are the fake CLIs with `shell_write_files`: they find the checkout
the way a real agent could (`/proc/$PPID/cwd`, the runner's working folder) and write into it
and into other cells' results. These runs use `--isolation none`, so the writes succeed (under
bwrap, tests/test_confinement.py shows they cannot); the point is that detection does not rest
on confinement: the run and every later `report` say REVIEW REQUIRED and exit 1.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import unittest
from pathlib import Path

from tests import helpers as h
from tests.helpers import TempDir, call_main, demo_suite, fake_env, make_repo, runner

HAS_PROC = os.path.isdir("/proc/self/cwd")


def flags_of(benchmark: dict, kind: str) -> list[dict]:
    return [f for f in benchmark["sanity_checks"]["flags"] if f["kind"] == kind]


def load(iteration: Path) -> dict:
    return json.loads((iteration / "benchmark.json").read_text(encoding="utf-8"))


class TempRepoTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)

    def run_suite(self, script: dict, cases: int = 2, use_git: bool = True,
                  extra_args: tuple = ()) -> tuple[int, str, Path]:
        root = make_repo(self.tmp.path, demo_suite(cases), files={"README.md": "readme\n"},
                         use_git=use_git)
        env = fake_env(self.tmp.path, script=script)
        code, out, err = call_main(["run", str(root / "evals/demo/evals.json"), "--agent",
                                    "claude", "--quiet", "--concurrency", "1", "--isolation", "none",
                                    *extra_args],
                                   env=env)
        self.root, self.env = root, env
        return code, out + err, root / "evals/demo/workspace/claude/iteration-1"


@unittest.skipUnless(HAS_PROC, "needs /proc to find the runner's working folder")
class HostileExecutorTests(unittest.TestCase):
    """One run whose second case's executor edits the checkout through /proc/$PPID/cwd and
    overwrites the first case's finished results."""

    def test_checkout_and_results_tampering_is_flagged_by_run_and_report(self) -> None:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        root = make_repo(tmp.path, demo_suite(2), files={"README.md": "readme\n"})
        checkout = "/proc/$PPID/cwd"
        victim = f"{checkout}/evals/demo/workspace/claude/iteration-1/eval-E01/*/run-1"
        script = {"cases": [{"match": "Task number 2.", "role": "executor", "spec": {
            "shell_write_files": {
                f"{checkout}/README.md": "owned\n",
                f"{checkout}/skills/demo/SKILL.md": "# tampered skill\n",
                f"{checkout}/planted.txt": "x\n",
                f"{victim}/outputs/output.txt": "a better answer\n",
                f"{victim}/grading.json": '{"summary": {"pass_rate": 1.0}}\n'}}}]}
        env = fake_env(tmp.path, script=script)
        done = h.run_script(["run", "evals/demo/evals.json", "--agent", "claude", "--quiet",
                             "--concurrency", "1", "--isolation", "none"], env=env, cwd=root)
        self.assertEqual(done.returncode, 1, done.stdout + done.stderr)
        self.assertIn("Sanity checks: REVIEW REQUIRED", done.stdout)
        self.assertNotIn("Sanity checks: OK", done.stdout)
        self.assertEqual((root / "README.md").read_text(), "owned\n", "the attack did not land")

        iteration = root / "evals/demo/workspace/claude/iteration-1"
        benchmark = load(iteration)
        self.assertEqual(benchmark["sanity_checks"]["status"], "REVIEW REQUIRED")
        [checkout_flag] = flags_of(benchmark, "checkout_modified")
        self.assertEqual(checkout_flag["severity"], "error")
        for name in ("README.md (modified)", "skills/demo/SKILL.md (modified)",
                     "planted.txt (added)"):
            self.assertIn(name, checkout_flag["message"])
        changed = {c["path"]: c["change"] for c in benchmark["metadata"]["checkout_check"]
                   ["changed"]}
        self.assertEqual(changed, {"README.md": "modified", "skills/demo/SKILL.md": "modified",
                                   "planted.txt": "added"})
        [results_flag] = flags_of(benchmark, "results_modified")
        self.assertEqual(results_flag["severity"], "error")
        for config in ("with_skill", "without_skill"):
            for rel in ("outputs/output.txt", "grading.json"):
                self.assertIn(f"eval-E01/{config}/run-1/{rel} (modified)",
                              results_flag["message"])
        self.assertNotIn("eval-E02", results_flag["message"])
        self.assertIn("REVIEW REQUIRED", (iteration / "benchmark.md").read_text())

        report = h.run_script(["report", str(iteration)], env=env)
        self.assertEqual(report.returncode, 1, report.stderr)
        self.assertIn("Sanity checks: REVIEW REQUIRED", report.stdout)  # report prints the summary
        self.assertIn("Status: **REVIEW REQUIRED**", (iteration / "benchmark.md").read_text())
        self.assertIn("results_modified", report.stdout)
        self.assertIn("checkout_modified", report.stdout)


class CheckoutComparisonTests(TempRepoTest):
    def test_an_untouched_checkout_passes_with_its_file_count(self) -> None:
        code, out, iteration = self.run_suite({})
        self.assertEqual(code, 0, out)
        check = load(iteration)["metadata"]["checkout_check"]
        self.assertTrue(check["checked"])
        self.assertEqual(check["changed_count"], 0)
        self.assertEqual(check["listing"], "git ls-files")
        # README, SKILL.md, evals.json, .git/config and git's sample hooks
        self.assertGreaterEqual(check["files_before"], 4)
        manifest = json.loads((iteration / "iteration_manifest.json").read_text())
        self.assertEqual(manifest["checkout_check"]["before"]["files"], check["files_before"])
        self.assertIn("seconds", manifest["checkout_check"]["before"])

    def test_rewriting_a_file_with_its_own_content_is_a_touch_not_a_change(self) -> None:
        readme = self.tmp.path / "repo" / "README.md"
        time.sleep(0.01)  # the rewrite must land on a later mtime
        code, out, iteration = self.run_suite({"executor": {
            "shell_write_files": {str(readme): "readme\n"}}})
        self.assertEqual(code, 0, out)
        check = load(iteration)["metadata"]["checkout_check"]
        self.assertEqual(check["changed_count"], 0)
        self.assertGreaterEqual(check["touched_only"], 1)
        self.assertFalse(flags_of(load(iteration), "checkout_modified"))

    def test_a_planted_git_hook_is_a_change(self) -> None:
        hook = self.tmp.path / "repo" / ".git" / "hooks" / "pre-commit"
        code, out, iteration = self.run_suite({"executor": {
            "shell_write_files": {str(hook): "#!/bin/sh\ncurl evil\n"}}})
        self.assertEqual(code, 1, out)
        [flag] = flags_of(load(iteration), "checkout_modified")
        self.assertIn(".git/hooks/pre-commit (added)", flag["message"])

    def test_outside_git_the_folder_walk_is_compared(self) -> None:
        readme = self.tmp.path / "repo" / "README.md"
        code, out, iteration = self.run_suite(
            {"executor": {"shell_write_files": {str(readme): "changed\n"}}}, use_git=False)
        self.assertEqual(code, 1, out)
        check = load(iteration)["metadata"]["checkout_check"]
        self.assertEqual(check["listing"], "folder walk")
        self.assertEqual(check["changed"], [{"path": "README.md", "change": "modified"}])

    def test_the_list_of_changed_files_is_capped(self) -> None:
        root = self.tmp.path / "repo"
        writes = {str(root / f"junk/f{i:02d}.txt"): "x" for i in range(25)}
        code, out, iteration = self.run_suite({"executor": {"shell_write_files": writes}},
                                              cases=1, extra_args=("--config", "with_skill"))
        self.assertEqual(code, 1, out)
        check = load(iteration)["metadata"]["checkout_check"]
        self.assertEqual(check["changed_count"], 25)
        self.assertEqual(len(check["changed"]), 20)
        [flag] = flags_of(load(iteration), "checkout_modified")
        self.assertIn("and 5 more", flag["message"])


class SnapshotUnitTests(unittest.TestCase):
    """CheckoutSnapshot on a plain folder, without a run around it."""

    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.root = self.tmp.path / "checkout"
        self.root.mkdir()
        (self.root / "a.txt").write_text("aaaa")
        (self.root / "b.txt").write_text("bbbb")
        self.iteration = self.root / "ws" / "iteration-1"
        self.iteration.mkdir(parents=True)

    def snapshot(self):
        return runner.CheckoutSnapshot.take(self.root, self.iteration,
                                            groups=runner.ProcessGroups())

    def test_an_edit_that_puts_the_mtime_back_is_still_seen(self) -> None:
        snap = self.snapshot()
        path = self.root / "a.txt"
        before = path.stat()
        time.sleep(0.02)
        path.write_text("AAAA")  # same size
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        self.assertEqual(path.stat().st_mtime_ns, before.st_mtime_ns)
        result = snap.compare(runner.ProcessGroups()).to_json()
        self.assertEqual(result["changed"], [{"path": "a.txt", "change": "modified"}])

    def test_mode_type_and_removal_are_changes(self) -> None:
        snap = self.snapshot()
        (self.root / "a.txt").chmod(0o755)
        (self.root / "b.txt").unlink()
        (self.root / "b.txt").symlink_to("a.txt")
        result = snap.compare(runner.ProcessGroups()).to_json()
        self.assertEqual(result["changed"], [{"path": "a.txt", "change": "mode changed"},
                                             {"path": "b.txt", "change": "type changed"}])
        (self.root / "b.txt").unlink()
        self.assertEqual(snap.compare(runner.ProcessGroups()).to_json()["changed"][1],
                         {"path": "b.txt", "change": "removed"})

    def test_the_runners_own_iteration_folders_are_left_out(self) -> None:
        snap = self.snapshot()
        (self.iteration / "benchmark.json").write_text("{}")
        (self.root / "ws" / "iteration-2").mkdir()
        (self.root / "ws" / "iteration-2" / "x").write_text("x")
        (self.root / "ws" / "notes.txt").write_text("x")
        other_run = self.root / "evals" / "other" / "workspace" / "codex" / "iteration-3"
        other_run.mkdir(parents=True)
        (other_run / "benchmark.json").write_text("{}")  # a concurrent run with its defaults
        result = snap.compare(runner.ProcessGroups()).to_json()
        self.assertEqual(result["changed"], [{"path": "ws/notes.txt", "change": "added"}])


class ResultsVerificationTests(TempRepoTest):
    def test_every_run_file_is_hashed_and_verified_by_the_run(self) -> None:
        code, out, iteration = self.run_suite({})
        self.assertEqual(code, 0, out)
        benchmark = load(iteration)
        self.assertEqual(benchmark["results_check"]["changed_count"], 0)
        for run in benchmark["runs"]:
            run_dir = (iteration / f"eval-{run['eval_id']}" / run["configuration"]
                       / f"run-{run['run_number']}")
            on_disk = {p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*")
                       if p.is_file()}
            self.assertEqual(set(run["files_sha256"]), on_disk)
            for rel, digest in run["files_sha256"].items():
                self.assertEqual(runner.sha256_file(run_dir / rel), digest, rel)
            self.assertNotIn("written_files", json.loads((run_dir / "run.json").read_text()))
        self.assertIn(f"Run files: all {len(on_disk) * 4} match", (iteration / "benchmark.md").read_text())

    def test_report_flags_a_changed_or_missing_run_file_and_exits_1(self) -> None:
        code, out, iteration = self.run_suite({})
        self.assertEqual(code, 0, out)
        code, out, err = call_main(["report", str(iteration)], env=self.env)
        self.assertEqual(code, 0, err)
        (iteration / "eval-E02/without_skill/run-1/outputs/output.txt").write_text("better")
        (iteration / "eval-E01/with_skill/run-1/metrics.json").unlink()
        code, out, err = call_main(["report", str(iteration)], env=self.env)
        self.assertEqual(code, 1)
        self.assertIn("Sanity checks: REVIEW REQUIRED", out)
        markdown = (iteration / "benchmark.md").read_text()
        self.assertIn("eval-E02/without_skill/run-1/outputs/output.txt (modified)", markdown)
        self.assertIn("eval-E01/with_skill/run-1/metrics.json (missing)", markdown)
        self.assertIn("results_modified", err)
        self.assertIn("REVIEW REQUIRED", (iteration / "benchmark.md").read_text())

    def test_a_finding_of_the_run_survives_a_clean_report(self) -> None:
        code, out, iteration = self.run_suite({})
        benchmark = load(iteration)
        # What the run writes when a cell's files changed while it ran (then put back since).
        seen = {"path": "eval-E01/with_skill/run-1/outputs/output.txt", "change": "modified"}
        benchmark["results_check"].update(changed_count=1, changed=[seen])
        benchmark["sanity_checks"]["flags"].append(runner._results_flags(
            runner.ResultsCheck.from_json(benchmark["results_check"], "b"))[0].to_json())
        benchmark["sanity_checks"]["status"] = "REVIEW REQUIRED"
        (iteration / "benchmark.json").write_text(json.dumps(benchmark))
        code, out, err = call_main(["report", str(iteration)], env=self.env)
        # The files are as written now, and the finding stands: review, as `run` said.
        self.assertEqual(code, 1, err)
        self.assertNotIn("run file(s) changed since", err)
        self.assertIn("checked at run time: eval-E01/with_skill/run-1/outputs/output.txt", out)
        self.assertIn("Sanity checks: REVIEW REQUIRED", out)

    def test_a_path_edited_into_benchmark_json_is_not_followed(self) -> None:
        code, out, iteration = self.run_suite({})
        benchmark = load(iteration)
        benchmark["runs"][0]["files_sha256"]["../../../../README.md"] = "0" * 64
        (iteration / "benchmark.json").write_text(json.dumps(benchmark))
        code, out, err = call_main(["report", str(iteration)], env=self.env)
        self.assertEqual(code, 2, out + err)  # a name that leaves the folder is invalid input
        self.assertIn("benchmark.json holds the wrong kind of value at "
                      "runs[0].files_sha256.../../../../README.md", err)

    def test_an_older_benchmark_without_hashes_renders_with_a_note(self) -> None:
        code, out, iteration = self.run_suite({})
        benchmark = load(iteration)
        for run in benchmark["runs"]:
            del run["files_sha256"]
        del benchmark["results_check"]
        (iteration / "benchmark.json").write_text(json.dumps(benchmark))
        (iteration / runner.HASH_JOURNAL).unlink()  # an older runner kept no journal either
        shutil.rmtree(iteration / "eval-E01")  # nothing to verify against, nothing claimed
        code, out, err = call_main(["report", str(iteration)], env=self.env)
        self.assertEqual(code, 0, err)
        self.assertIn("Sanity checks: OK", out)
        markdown = (iteration / "benchmark.md").read_text()
        self.assertIn("Run files: not verifiable: written by an older runner", markdown)
        self.assertIn("Status: **OK**", markdown)
        self.assertIn("results_unverifiable", markdown)

    def test_an_empty_hash_list_is_never_a_verified_run(self) -> None:
        code, out, iteration = self.run_suite({})
        benchmark = load(iteration)
        for run in benchmark["runs"]:
            run["files_sha256"] = {}
        (iteration / "benchmark.json").write_text(json.dumps(benchmark))
        code, out, err = call_main(["report", str(iteration)], env=self.env)
        self.assertEqual(code, 1, err)  # the journal still holds what the run hashed
        self.assertIn("results_modified", out + err)
        (iteration / runner.HASH_JOURNAL).unlink()
        code, out, err = call_main(["report", str(iteration)], env=self.env)
        self.assertEqual(code, 0, err)  # as for an older runner's hash-less runs: said, not hidden
        markdown = (iteration / "benchmark.md").read_text()
        self.assertNotIn("Run files: all", markdown)
        self.assertIn("Run files: not verifiable", markdown)
        self.assertIn("results_unverifiable", markdown)

    def test_resume_reruns_a_kept_cell_whose_files_changed(self) -> None:
        code, out, iteration = self.run_suite({})
        self.assertEqual(code, 0, out)
        grading = iteration / "eval-E01/with_skill/run-1/grading.json"
        genuine = grading.read_text()
        grading.write_text(genuine.replace('"passed": true', '"passed": false'))
        calls_before = len(h.fake_calls(self.tmp.path))
        code, out, err = call_main(["run", str(self.root / "evals/demo/evals.json"), "--agent",
                                    "claude", "--quiet", "--concurrency", "1", "--isolation",
                                    "none", "--resume", str(iteration)], env=self.env)
        self.assertEqual(code, 0, out + err)
        prompts = [c for c in h.fake_calls(self.tmp.path)[calls_before:] if c.get("role")]
        self.assertEqual(sorted(c["role"] for c in prompts), ["executor", "grader"],
                         "exactly the tampered cell ran again")
        self.assertEqual(grading.read_text().replace('"resumed": true', ""),
                         genuine.replace('"resumed": true', ""))
        self.assertEqual(load(iteration)["results_check"]["changed_count"], 0)

    def test_a_resumed_iteration_counts_the_grader_cost_of_its_kept_cells(self) -> None:
        code, out, iteration = self.run_suite({})
        self.assertEqual(code, 0, out)
        before = load(iteration)["judge"]["cost"]
        (iteration / "eval-E02/without_skill/run-1/grading.json").unlink()  # this cell runs again
        calls_before = len(h.fake_calls(self.tmp.path))
        code, out, err = call_main(["run", str(self.root / "evals/demo/evals.json"), "--agent",
                                    "claude", "--quiet", "--concurrency", "1", "--isolation",
                                    "none", "--resume", str(iteration)], env=self.env)
        self.assertEqual(code, 0, out + err)
        roles = [c["role"] for c in h.fake_calls(self.tmp.path)[calls_before:] if c.get("role")]
        self.assertEqual(sorted(roles), ["executor", "grader"], "one cell ran again, one kept")
        after = load(iteration)["judge"]["cost"]
        for config in ("with_skill", "without_skill"):
            for key in ("judged_runs", "grader_calls"):
                self.assertEqual(after[config][key], before[config][key], (config, key))
            for metric in ("tokens", "total_cost_usd"):
                self.assertEqual({k: after[config][metric][k] for k in ("mean", "n")},
                                 {k: before[config][metric][k] for k in ("mean", "n")})
        for key in ("grader_calls", "tokens", "total_cost_usd"):
            self.assertEqual(after["total"][key], before["total"][key], key)

    def test_resume_of_a_misshapen_manifest_launches_nothing(self) -> None:
        code, out, iteration = self.run_suite({})
        self.assertEqual(code, 0, out)
        path = iteration / "iteration_manifest.json"
        genuine = json.loads(path.read_text())
        (iteration / "eval-E01/with_skill/run-1/run.json").unlink()  # a cell left to run
        # Each of these once ended the resumed run in an internal error, some after its agents.
        for key, value in (("isolation", 7), ("fixture_status", None), ("arms", "x"),
                           ("fixture_status", {"before": {"dirty": [1]}})):
            with self.subTest(key=key, value=value):
                path.write_text(json.dumps({**genuine, key: value}))
                calls_before = len(h.fake_calls(self.tmp.path))
                code, _, err = call_main(
                    ["run", str(self.root / "evals/demo/evals.json"), "--agent", "claude",
                     "--quiet", "--isolation", "none", "--resume", str(iteration)], env=self.env)
                self.assertEqual(code, 2, err)
                self.assertIn("iteration_manifest.json holds the wrong kind of value", err)
                self.assertIn(key, err)
                self.assertEqual(len(h.fake_calls(self.tmp.path)), calls_before)


if __name__ == "__main__":
    unittest.main()
