"""One way in to a written iteration (issue 23): report, --across, --merge, --resume and
--regrade read an iteration through one loader, so an edited, linked or misnamed run file is
treated the same on every path: results_modified (exit 1) for a changed file, a link never
followed, exit 2 naming the file for a name that would leave the folder.
"""

from __future__ import annotations

import json
import os
import shutil
import unittest
from pathlib import Path

from tests.helpers import (
    TempDir,
    call_main,
    demo_suite,
    fake_calls,
    fake_env,
    git,
    make_repo,
    read_output,
    start_script,
    wait_until,
)

SUITE = "evals/demo/evals.json"
ANSWER = "eval-E01/with_skill/run-1/outputs/output.txt"
GRADING = "eval-E01/with_skill/run-1/grading.json"


def load(path: Path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


def flag_kinds(iteration: Path) -> list[str]:
    return [f["kind"] for f in load(iteration / "benchmark.json")["sanity_checks"]["flags"]]


def link_with_same_content(iteration: Path, rel: str, outside: Path) -> None:
    """Replace a run file by a link to a copy outside the iteration: the same bytes, so only
    a reader that follows no link tells it from the file the runner wrote."""
    outside.write_bytes((iteration / rel).read_bytes())
    (iteration / rel).unlink()
    os.symlink(outside, iteration / rel)


class LoaderCase(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.root = make_repo(self.tmp.path, demo_suite(2))
        self.env = fake_env(self.tmp.path, {})
        self.ws = self.tmp.path / "ws"

    def run_main(self, *extra: str) -> tuple[int, str, str]:
        return call_main(["run", str(self.root / SUITE), "--agent", "claude", "--quiet",
                          "--workspace", str(self.ws), *extra], self.env)

    def first(self) -> Path:
        code, out, err = self.run_main()
        self.assertEqual(code, 0, out + err)
        return self.ws / "iteration-1"

    def launches(self) -> int:
        return len(fake_calls(self.tmp.path))

    def roles(self, since: int) -> list[str]:
        """The agents started after the first `since` log records (not version checks)."""
        return sorted(c["role"] for c in fake_calls(self.tmp.path)[since:] if c.get("role"))


class ReportTests(LoaderCase):
    def test_a_run_file_replaced_by_a_link_is_flagged_not_followed(self) -> None:
        iteration = self.first()
        link_with_same_content(iteration, ANSWER, self.tmp.path / "elsewhere.txt")
        code, out, err = call_main(["report", str(iteration)], self.env)
        self.assertEqual(code, 1, out + err)
        self.assertIn("results_modified", (iteration / "benchmark.md").read_text())
        self.assertIn("not followed", (iteration / "benchmark.md").read_text())
        self.assertNotIn("Sanity checks: OK", out)

    def test_a_linked_benchmark_json_is_refused(self) -> None:
        iteration = self.first()
        moved = self.tmp.path / "benchmark-elsewhere.json"
        shutil.move(str(iteration / "benchmark.json"), moved)
        os.symlink(moved, iteration / "benchmark.json")
        before = (iteration / "benchmark.md").read_bytes()
        code, out, err = call_main(["report", str(iteration)], self.env)
        self.assertEqual(code, 2, out + err)
        self.assertIn("it is a link", err)
        self.assertEqual((iteration / "benchmark.md").read_bytes(), before)

    def test_a_traversal_eval_id_in_benchmark_json_is_invalid_input(self) -> None:
        iteration = self.first()
        data = load(iteration / "benchmark.json")
        data["runs"][0]["eval_id"] = "../../../../x"
        (iteration / "benchmark.json").write_text(json.dumps(data))
        before = (iteration / "benchmark.md").read_bytes()
        code, out, err = call_main(["report", str(iteration)], self.env)
        self.assertEqual(code, 2, out + err)
        self.assertIn("runs[0].eval_id", err)
        self.assertEqual((iteration / "benchmark.md").read_bytes(), before)

    def test_across_flags_a_linked_run_file_of_another_agent(self) -> None:
        iteration = self.first()
        code, out, err = self.run_main("--workspace", str(self.tmp.path / "other"))
        self.assertEqual(code, 0, out + err)
        other = self.tmp.path / "other" / "iteration-1"
        link_with_same_content(other, ANSWER, self.tmp.path / "elsewhere.txt")
        code, out, err = call_main(["report", str(iteration), "--across", str(other)], self.env)
        self.assertEqual(code, 1, out + err)
        self.assertIn("1 run file(s) changed", err)


class RegradeTests(LoaderCase):
    def regrade(self, source: Path, *extra: str) -> tuple[int, str, str]:
        return self.run_main("--regrade", str(source), *extra)

    def test_an_edited_source_answer_is_not_graded_and_flagged(self) -> None:
        source = self.first()
        (source / ANSWER).write_text("EDITED ANSWER")
        before = self.launches()
        code, out, err = self.regrade(source)
        self.assertEqual(code, 1, out + err)
        self.assertNotIn("Sanity checks: OK", out)
        regraded = self.ws / "iteration-2"
        self.assertIn("results_modified", flag_kinds(regraded))
        cell = regraded / "eval-E01/with_skill/run-1"
        self.assertFalse((cell / "outputs/output.txt").exists())
        self.assertEqual(load(cell / "run.json")["status"], "runner_error")
        prompts = [c.get("prompt") or c.get("stdin") or "" for c in fake_calls(self.tmp.path)]
        self.assertFalse(any("EDITED ANSWER" in json.dumps(p) for p in prompts))
        self.assertEqual(self.roles(before), ["grader"] * 3)  # the three unchanged cells only

    def test_a_linked_source_answer_is_neither_copied_nor_graded(self) -> None:
        source = self.first()
        outside = self.tmp.path / "outside.txt"
        (source / ANSWER).unlink()
        outside.write_text("TEXT FROM OUTSIDE THE ITERATION")
        os.symlink(outside, source / ANSWER)
        code, out, err = self.regrade(source)
        self.assertEqual(code, 1, out + err)
        regraded = self.ws / "iteration-2"
        for path in regraded.rglob("*"):
            if path.is_file():
                self.assertNotIn("TEXT FROM OUTSIDE", path.read_text(errors="replace"), path)
        self.assertIn("results_modified", flag_kinds(regraded))

    def test_a_traversal_eval_id_in_the_source_is_invalid_input(self) -> None:
        source = self.first()
        data = load(source / "benchmark.json")
        data["runs"][0]["eval_id"] = "../../../../x"
        (source / "benchmark.json").write_text(json.dumps(data))
        before = self.launches()
        code, out, err = self.regrade(source)
        self.assertEqual(code, 2, out + err)
        self.assertIn("runs[0].eval_id", err)
        self.assertEqual(self.launches(), before)
        self.assertFalse((self.ws / "iteration-2").exists())

    def test_a_source_manifest_without_its_runs_is_invalid_input(self) -> None:
        # Found by the result fuzz: the re-grade adopted a null `runs` and failed inside the plan.
        source = self.first()
        for key, value in (("runs", None), ("configs", [])):
            with self.subTest(key=key, value=value):
                manifest = load(source / "iteration_manifest.json")
                saved = manifest["options"][key]
                manifest["options"][key] = value
                (source / "iteration_manifest.json").write_text(json.dumps(manifest))
                before = self.launches()
                code, out, err = self.regrade(source)
                self.assertEqual(code, 2, out + err)
                self.assertIn("iteration_manifest.json", err)
                self.assertEqual(self.launches(), before)
                self.assertFalse((self.ws / "iteration-2").exists())
                manifest["options"][key] = saved
                (source / "iteration_manifest.json").write_text(json.dumps(manifest))

    def test_max_tokens_stops_a_regrade_at_the_cap(self) -> None:
        source = self.first()
        before = self.launches()
        code, out, err = self.regrade(source, "--max-tokens", "1", "--concurrency", "1")
        self.assertEqual(code, 1, out + err)
        statuses = [r["status"] for r in load(self.ws / "iteration-2" / "benchmark.json")
                    ["unscored_runs"]]
        self.assertEqual(statuses.count("cancelled"), 3, statuses)
        self.assertEqual(self.roles(before), ["grader"])  # one grader, then the cap


class ResumeTests(LoaderCase):
    def test_resume_after_a_sigkill_reruns_a_cell_whose_grading_was_edited(self) -> None:
        iteration = self.first()
        # What a SIGKILL leaves: run files and the hash journal, no benchmark.json yet.
        (iteration / "benchmark.json").unlink()
        grading = load(iteration / GRADING)
        grading["expectations"][0]["evidence"] = "EDITED"
        (iteration / GRADING).write_text(json.dumps(grading))
        before = self.launches()
        code, out, err = self.run_main("--resume", str(iteration))
        self.assertEqual(code, 0, out + err)
        self.assertEqual(self.roles(before), ["executor", "grader"])  # that cell only
        self.assertNotIn("EDITED", (iteration / GRADING).read_text())

    def test_resume_of_a_regrade_reruns_a_cell_whose_grading_was_edited(self) -> None:
        source = self.first()
        code, out, err = self.run_main("--regrade", str(source))
        self.assertEqual(code, 0, out + err)
        regraded = self.ws / "iteration-2"
        (regraded / "benchmark.json").unlink()
        grading = load(regraded / GRADING)
        grading["expectations"][0]["evidence"] = "EDITED"
        (regraded / GRADING).write_text(json.dumps(grading))
        before = self.launches()
        code, out, err = self.run_main("--resume", str(regraded))
        self.assertEqual(code, 0, out + err)
        self.assertEqual(self.roles(before), ["grader"])  # that cell's grader only
        self.assertNotIn("EDITED", (regraded / GRADING).read_text())


class ConcurrentResumeTests(LoaderCase):
    def test_a_resume_of_an_iteration_another_run_is_writing_is_refused_at_once(self) -> None:
        # Issue 33: two runs of one iteration were found out only afterwards, in mixed files.
        script = self.tmp.path / "slow.json"
        script.write_text(json.dumps({"executor": {"sleep_s": 4}}), encoding="utf-8")
        env = {**self.env, "FAKE_AGENT_SCRIPT": str(script)}
        iteration = self.ws / "iteration-1"
        first = start_script(["run", str(self.root / SUITE), "--agent", "claude", "--quiet",
                              "--workspace", str(self.ws)], env, out_dir=self.tmp.path / "out")
        self.addCleanup(lambda: first.poll() is None and (first.kill(), first.wait()))
        self.assertTrue(wait_until(lambda: (iteration / "iteration_manifest.json").is_file()
                                   and self.launches() > 0, 60), read_output(first))
        resume = ["run", str(self.root / SUITE), "--agent", "claude", "--quiet",
                  "--resume", str(iteration)]
        second_log = self.tmp.path / "second-log"  # the resume's agents log apart
        second_log.mkdir()
        code, out, err = call_main(resume, {**self.env, "FAKE_AGENT_LOG": str(second_log)})
        self.assertEqual(code, 2, out + err)
        self.assertIn("is being written by another skill-eval run right now", err)
        roles = [json.loads(p.read_text(encoding="utf-8")).get("role")
                 for p in second_log.glob("*.json")]
        self.assertEqual([r for r in roles if r], [])  # no agent: refused before any cell
        self.assertEqual(first.wait(120), 0, read_output(first))
        code, out, err = call_main(resume, self.env)  # the lock ends with its holder
        self.assertEqual(code, 0, out + err)


class MergeTests(LoaderCase):
    def shards(self, *extra: str) -> list[Path]:
        folders = []
        for index in (1, 2):
            workspace = self.tmp.path / f"shard-{index}"
            code, out, err = self.run_main("--shard", f"{index}/2", "--workspace",
                                           str(workspace), *extra)
            self.assertEqual(code, 0, out + err)
            folders.append(workspace / "iteration-1")
        return folders

    def merge(self, shards: list[Path]) -> tuple[int, str, str, Path]:
        target = self.tmp.path / "merged"
        code, out, err = call_main(["report", str(target), "--merge", *map(str, shards)],
                                   self.env)
        return code, out, err, target

    def test_an_edited_shard_answer_is_results_modified_at_merge_time(self) -> None:
        shards = self.shards()
        edited = next(s for s in shards if (s / ANSWER).exists())
        (edited / ANSWER).write_text("EDITED")
        code, out, err, target = self.merge(shards)
        self.assertEqual(code, 1, out + err)
        self.assertNotIn("Sanity checks: OK", out)
        self.assertIn("results_modified", flag_kinds(target))

    def test_a_shard_grading_edited_out_of_shape_is_results_modified_as_report_says(self):
        shards = self.shards()
        edited = next(s for s in shards if (s / GRADING).exists())
        grading = load(edited / GRADING)
        grading["expectations"][0]["passed"] = "yes"
        (edited / GRADING).write_text(json.dumps(grading))
        code, out, err = call_main(["report", str(edited)], self.env)
        self.assertEqual(code, 1, out + err)  # report: the file changed
        code, out, err, target = self.merge(shards)
        self.assertEqual(code, 1, out + err)  # the merge says the same, and scores no answer
        self.assertNotIn("Sanity checks: OK", out)
        self.assertIn("results_modified", flag_kinds(target))
        merged = load(target / "benchmark.json")
        failed = [r for r in merged["unscored_runs"] if r["status"] == "runner_error"]
        self.assertEqual(len(failed), 1)
        self.assertIn("no longer parse", failed[0]["failure"]["detail"])
        self.assertIn("expectations[0].passed", failed[0]["failure"]["detail"])

    def test_a_traversal_eval_key_in_a_shard_is_invalid_input(self) -> None:
        shards = self.shards()
        path = shards[0] / "iteration_manifest.json"
        manifest = load(path)
        manifest["shard"]["evals"] = ["../../../../x"]
        path.write_text(json.dumps(manifest))
        listing = sorted(p.name for p in self.tmp.path.iterdir())
        code, out, err, target = self.merge(shards)
        self.assertEqual(code, 2, out + err)
        self.assertIn("shard.evals[0]", err)
        self.assertEqual(sorted(p.name for p in self.tmp.path.iterdir()), listing)
        self.assertFalse(target.exists())

    def test_a_revision_with_a_slash_runs_shards_and_merges(self) -> None:
        git(self.root, "branch", "feature/x", "HEAD")
        shards = self.shards("--config", "with_skill,with_skill@feature/x")
        for shard in shards:  # its folder is the quoted name, and nothing else is made
            self.assertEqual(sorted(p.name for p in shard.glob("eval-*/*") if p.is_dir()),
                             sorted(["with_skill", "with_skill@feature%2Fx"]
                                    * len(list(shard.glob("eval-*")))))
            self.assertEqual(list(shard.rglob("with_skill@feature")), [])
        code, out, err, target = self.merge(shards)
        self.assertEqual(code, 0, out + err)
        self.assertEqual(load(target / "benchmark.json")["scored_run_count"], 4)


if __name__ == "__main__":
    unittest.main()
