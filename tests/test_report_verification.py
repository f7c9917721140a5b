"""Issue 33, items 7 to 10: what `report` and `--next-wave` say comes from the run files.

benchmark.json, a merged iteration and a shard's folder are files anyone can edit after the
runner wrote them. Each test here edits one the way someone steering a result would (a verdict
typed in, a cell's rows struck out, a grading flipped, a shard's counted cell deleted, a link
planted, a report aimed at another iteration's files) and checks that the edit is named and
the exit code is the one the run files support: results_modified (1) or a refusal (2).
"""

from __future__ import annotations

import json
import os
import shutil
import unittest
from pathlib import Path

from tests.helpers import call_main, demo_suite, runner
from tests.test_adaptive import SCRIPT, agent_calls, suite_of
from tests.test_run_e2e import RunTestCase, load_json

# E01's graders fail: its runs are unscored, so `run` asks for review (eval_unscored).
UNSCORED_E01 = {"cases": [{"match": "It mentions item 1.", "role": "grader",
                           "spec": {"fault": "exit_nonzero"}}]}


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def flip_grading(path: Path) -> None:
    """Every verdict of a grading.json turned: the kind of edit that moves a rate."""
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('"passed": false', '"passed": "x"')
                    .replace('"passed": true', '"passed": false')
                    .replace('"passed": "x"', '"passed": true'), encoding="utf-8")


class IterationTest(RunTestCase):
    def iteration(self, script: dict | None = None, cases: int = 2,
                  workspace: str = "ws") -> tuple[int, Path]:
        if not hasattr(self, "root"):
            self.root = self.repo(demo_suite(cases))
        self.environment = self.env(script or {})
        code, out, err = self.run_main(self.root, self.environment, "--agent", "claude",
                                       "--quiet", "--workspace", str(self.tmp.path / workspace))
        folders = sorted((self.tmp.path / workspace).glob("iteration-*"),
                         key=lambda p: int(p.name.split("-")[1]))
        return code, folders[-1]

    def report(self, *args: str) -> tuple[int, str, str]:
        return call_main(["report", *map(str, args)], env=self.environment)


class ReportRecomputesTest(IterationTest):
    """Item 8: the benchmark is worked out again from the verified cells."""

    def test_an_untouched_iteration_reports_as_it_ran(self) -> None:
        code, iteration = self.iteration()
        self.assertEqual(code, 0)
        page = (iteration / "benchmark.md").read_text(encoding="utf-8")
        code, out, err = self.report(iteration)
        self.assertEqual(code, 0, out + err)
        self.assertEqual((iteration / "benchmark.md").read_text(encoding="utf-8"), page)

    def test_an_edited_verdict_and_status_are_results_modified(self) -> None:
        code, iteration = self.iteration(UNSCORED_E01)
        self.assertEqual(code, 1)

        def steer(data: dict) -> None:
            data["paired"]["verdict"] = "regressed"
            data["sanity_checks"] = {"status": "OK", "flags": []}
        edit_json(iteration / "benchmark.json", steer)
        code, out, err = self.report(iteration)
        self.assertEqual(code, 1, out + err)
        self.assertIn("Sanity checks: REVIEW REQUIRED", out)
        page = (iteration / "benchmark.md").read_text(encoding="utf-8")
        self.assertIn("results_modified", page)
        self.assertIn("benchmark.json paired.verdict", page)
        self.assertIn('says \\"regressed\\"', json.dumps(page))

    def test_edited_rates_a_struck_row_and_struck_hashes_are_results_modified(self) -> None:
        code, iteration = self.iteration()
        self.assertEqual(code, 0)
        pristine = (iteration / "benchmark.json").read_text(encoding="utf-8")
        edits = {
            "run_summary.with_skill.pass_rate.mean":
                lambda d: d["run_summary"]["with_skill"]["pass_rate"].update(mean=0.25),
            "per_eval[0]": lambda d: d["per_eval"][0]["configs"]["with_skill"].update(
                mean_pass_rate=0.0),
            "a cell left out of benchmark.json": lambda d: d["runs"].pop(),
            "records no hashes": lambda d: d["runs"][0].update(files_sha256=None),
            "metadata.cells_finished": lambda d: d["metadata"].update(cells_finished=1),
        }
        for named, change in edits.items():
            with self.subTest(named):
                (iteration / "benchmark.json").write_text(pristine, encoding="utf-8")
                edit_json(iteration / "benchmark.json", change)
                code, out, err = self.report(iteration)
                self.assertEqual(code, 1, out + err)
                page = (iteration / "benchmark.md").read_text(encoding="utf-8")
                self.assertIn("results_modified", page)
                self.assertIn(named, page)

    def test_a_float_written_another_way_is_not_a_change(self) -> None:
        code, iteration = self.iteration()
        self.assertEqual(code, 0)
        edit_json(iteration / "benchmark.json", lambda d: d["run_summary"]["with_skill"]
                  ["pass_rate"].update(mean=d["run_summary"]["with_skill"]["pass_rate"]["mean"]
                                       * (1 + 1e-12)))
        code, out, err = self.report(iteration)
        self.assertEqual(code, 0, out + err)

    def test_compare_and_across_verify_the_other_iteration(self) -> None:
        code, first = self.iteration()
        code, second = self.iteration()
        self.assertEqual(self.report(second, "--compare", first)[0], 0)
        flip_grading(next(first.glob("eval-E01/with_skill/run-1/grading.json")))
        code, out, err = self.report(second, "--compare", first)
        self.assertEqual(code, 1, out + err)
        self.assertIn(f"REVIEW REQUIRED: {first}", err)
        self.assertIn("grading.json (modified)", err)
        # A link where B's runner wrote a file, to a copy that reads the same
        grading = first / "eval-E01/with_skill/run-1/grading.json"
        flip_grading(grading)
        copy = self.tmp.path / "copy.json"
        shutil.copy(grading, copy)
        grading.unlink()
        grading.symlink_to(copy)
        code, out, err = self.report(second, "--compare", first)
        self.assertEqual(code, 1, out + err)
        self.assertIn("link", err)
        grading.unlink()
        shutil.copy(copy, grading)
        self.assertEqual(self.report(second, "--compare", first)[0], 0)
        # --across: an edited verdict in the other agent's iteration
        edit_json(first / "benchmark.json",
                  lambda d: d["paired"].update(verdict="regressed"))
        code, out, err = self.report(second, "--across", first)
        self.assertEqual(code, 1, out + err)
        self.assertIn("run file(s) changed", err)
        code, out, err = self.report(second, "--compare", first)
        self.assertEqual(code, 1, out + err)
        self.assertIn("benchmark.json paired.verdict", err)


class FurtherEditsTest(IterationTest):
    """Edits beyond the issue's list: a cell struck out whole, what the manifest says
    rewritten in benchmark.json, an adaptive run's looks and saving, a shard's word."""

    def assert_modified(self, iteration: Path, named: str) -> None:
        code, out, err = self.report(iteration)
        self.assertEqual(code, 1, out + err)
        page = (iteration / "benchmark.md").read_text(encoding="utf-8")
        self.assertIn("results_modified", page)
        self.assertIn(named, page)

    def test_a_cell_struck_out_with_its_folder_and_journal_line(self) -> None:
        code, iteration = self.iteration()
        label = "eval-E02/without_skill/run-1"
        edit_json(iteration / "benchmark.json", lambda d: d.update(runs=[
            r for r in d["runs"] if (r["eval_id"], r["configuration"]) != ("E02",
                                                                           "without_skill")]))
        shutil.rmtree(iteration / label)
        journal = iteration / runner.HASH_JOURNAL
        journal.write_text("".join(line + "\n" for line in journal.read_text().splitlines()
                                   if label not in line), encoding="utf-8")
        self.assert_modified(iteration, "metadata.incomplete")

    def test_what_the_manifest_says_cannot_be_rewritten_in_the_benchmark(self) -> None:
        self.root = self.repo(demo_suite(3))
        code, iteration = self.iteration()
        pristine = (iteration / "benchmark.json").read_text(encoding="utf-8")
        edits = {
            "metadata.configs": lambda m: m.update(configs=m["configs"][::-1]),
            "metadata.isolation": lambda m: m.update(isolation={"mode": "bwrap"}),
            "metadata.checkout_check": lambda m: m["checkout_check"].update(checked=False),
            "metadata.skill_installed_elsewhere":
                lambda m: m.update(skill_installed_elsewhere=["/somewhere"]),
            "metadata.cells_planned": lambda m: m.update(cells_planned=4),
        }
        for named, change in edits.items():
            with self.subTest(named):
                (iteration / "benchmark.json").write_text(pristine, encoding="utf-8")
                edit_json(iteration / "benchmark.json", lambda d, change=change: change(d["metadata"]))
                self.assert_modified(iteration, named)

    def test_a_partial_selection_cannot_be_called_whole(self) -> None:
        self.root = self.repo(demo_suite(3))
        self.environment = self.env({})
        code, out, err = self.run_main(self.root, self.environment, "--agent", "claude",
                                       "--quiet", "--eval-id", "E01,E02")
        self.assertEqual(code, 1, out + err)  # partial_selection: not a closing result
        iteration = self.root / "evals/demo/workspace/claude/iteration-1"

        def whole(data: dict) -> None:
            data["metadata"].update(selection_partial=False, suite_case_count=2)
            data["sanity_checks"] = {"status": "OK", "flags": [
                f for f in data["sanity_checks"]["flags"] if f["kind"] != "partial_selection"]}
        edit_json(iteration / "benchmark.json", whole)
        self.assert_modified(iteration, "metadata.selection_partial")

    def test_an_adaptive_runs_looks_and_saving_are_worked_out_again(self) -> None:
        self.root = self.repo(suite_of(["[b-fail]"] * 8))
        self.environment = self.env(SCRIPT)
        code, out, err = self.run_main(self.root, self.environment, "--agent", "claude",
                                       "--runs", "5", "--adaptive", "--quiet")
        self.assertEqual(code, 0, out + err)
        iteration = self.root / "evals/demo/workspace/claude/iteration-1"
        self.assertEqual(self.report(iteration)[0], 0)
        pristine = (iteration / "benchmark.json").read_text(encoding="utf-8")

        def more_saved(data: dict) -> None:
            data["adaptive"]["saved"]["cells"] = 64
        def earlier_look(data: dict) -> None:  # the manifest's looks too
            for holder in (data["adaptive"],):
                holder["looks"][0]["stop"] = "improved"
        for named, change in (("adaptive.saved.cells", more_saved),
                              ("adaptive.looks[0].stop", earlier_look)):
            with self.subTest(named):
                (iteration / "benchmark.json").write_text(pristine, encoding="utf-8")
                edit_json(iteration / "benchmark.json", change)
                edit_json(iteration / "iteration_manifest.json",
                          lambda m: m.update(adaptive=json.loads(
                              (iteration / "benchmark.json").read_text())["adaptive"]))
                self.assert_modified(iteration, named)
        # A manifest that claims a billion looks is not replayed for ever; one that is a link
        # is not read.
        (iteration / "benchmark.json").write_text(pristine, encoding="utf-8")
        manifest = iteration / "iteration_manifest.json"
        edit_json(manifest, lambda m: m.update(adaptive={
            **json.loads(pristine)["adaptive"], "waves_run": 10 ** 9}))
        self.assert_modified(iteration, "1000000000 waves run of 5")
        copy = self.tmp.path / "manifest.json"
        shutil.copy(manifest, copy)
        manifest.unlink()
        manifest.symlink_to(copy)
        self.assert_modified(iteration, "iteration_manifest.json")

    def test_a_shards_edited_benchmark_is_flagged_by_the_merge(self) -> None:
        self.root = self.repo(demo_suite(2))
        self.environment = self.env({})
        shards = []
        for k in (1, 2):
            code, out, err = self.run_main(self.root, self.environment, "--agent", "claude",
                                           "--quiet", "--shard", f"{k}/2", "--workspace",
                                           str(self.tmp.path / f"shard{k}"))
            shards.append(self.tmp.path / f"shard{k}" / "iteration-1")
        # The merge takes the isolation from the shards' metadata: a shard that ran
        # unconfined must not be merged as confined.
        edit_json(shards[0] / "benchmark.json",
                  lambda d: d["metadata"].update(isolation={"mode": "bwrap"}))
        code, out, err = self.report(self.tmp.path / "merged", "--merge", *shards)
        self.assertEqual(code, 1, out + err)
        self.assertIn("shard 1/2's benchmark.json metadata.isolation",
                      (self.tmp.path / "merged" / "benchmark.md").read_text("utf-8"))


class ReportExitCodeTest(IterationTest):
    """Item 9: `report` exits as `run` did on the same results."""

    def test_review_required_is_exit_1_from_run_and_report(self) -> None:
        code, iteration = self.iteration(UNSCORED_E01)
        self.assertEqual(code, 1)
        bench = load_json(iteration / "benchmark.json")
        self.assertEqual(bench["sanity_checks"]["status"], "REVIEW REQUIRED")
        self.assertIn("eval_unscored", [f["kind"] for f in bench["sanity_checks"]["flags"]])
        code, out, err = self.report(iteration)
        self.assertEqual(code, 1, out + err)
        self.assertNotIn("results_modified", out)


class ReportWritesOnlyItsOwnFilesTest(IterationTest):
    """Item 10: --junit and --html never replace an iteration's recorded files."""

    def test_junit_and_html_into_an_iteration_are_refused(self) -> None:
        code, first = self.iteration()
        code, second = self.iteration()
        targets = [("--junit", first / "iteration_manifest.json"),
                   ("--html", next(first.glob("eval-E01/with_skill/run-1/grading.json"))),
                   ("--junit", next(second.glob("eval-E02/without_skill/run-1/run.json"))),
                   ("--html", first / "benchmark.html"),
                   ("--junit", first / runner.HASH_JOURNAL),
                   ("--junit", first / "eval-E01" / "new.xml")]
        for flag, target in targets:
            with self.subTest(f"{flag} {target}"):
                before = target.read_bytes() if target.exists() else None
                code, out, err = self.report(second, flag, target)
                self.assertEqual(code, 2, out + err)
                self.assertIn(str(target), err)
                self.assertEqual(target.read_bytes() if target.exists() else None, before)
        # A link pointing into an iteration is the file it points at.
        link = self.tmp.path / "results.xml"
        link.symlink_to(first / "iteration_manifest.json")
        self.assertEqual(self.report(second, "--junit", link)[0], 2)
        # The iteration's own page and a new file beside the iterations are fine.
        self.assertEqual(self.report(second, "--html", second / "benchmark.html")[0], 0)
        self.assertEqual(self.report(second, "--junit", self.tmp.path / "ws" / "r.xml")[0], 0)
        self.assertTrue((self.tmp.path / "ws" / "r.xml").is_file())


class MergeRefusesLinksTest(IterationTest):
    """Item 8: `report --merge` refuses a shard with a link and writes none."""

    def shards(self) -> list[Path]:
        self.root = self.repo(demo_suite(2))
        self.environment = self.env({})
        folders = []
        for k in (1, 2):
            code, out, err = self.run_main(self.root, self.environment, "--agent", "claude",
                                           "--quiet", "--shard", f"{k}/2", "--workspace",
                                           str(self.tmp.path / f"shard{k}"))
            self.assertEqual(code, 0, out + err)
            folders.append(self.tmp.path / f"shard{k}" / "iteration-1")
        return folders

    def test_a_link_in_a_shard_is_refused_and_nothing_is_written(self) -> None:
        shards = self.shards()
        run_dir = next(shards[0].glob("eval-*/with_skill/run-1"))
        planted = run_dir / "outputs" / "notes.txt"  # not among the hashed files
        planted.symlink_to("/etc/hostname")
        target = self.tmp.path / "merged"
        code, out, err = self.report(target, "--merge", *shards)
        self.assertEqual(code, 2, out + err)
        self.assertIn(f"{planted} is a link", err)
        self.assertFalse(target.exists())
        planted.unlink()
        output = run_dir / "outputs" / "output.txt"  # a hashed file, by a link to a copy
        copy = self.tmp.path / "output.txt"
        shutil.copy(output, copy)
        output.unlink()
        output.symlink_to(copy)
        code, out, err = self.report(target, "--merge", *shards)
        self.assertEqual(code, 2, out + err)
        self.assertFalse(target.exists())
        output.unlink()
        shutil.copy(copy, output)
        code, out, err = self.report(target, "--merge", *shards)
        self.assertEqual(code, 0, out + err)
        self.assertEqual([p for p in target.rglob("*") if p.is_symlink()], [])
        self.assertEqual(self.report(target)[0], 0)


class MergedLookTest(RunTestCase):
    """Item 7: a merged look is the one its cells, and the shard's own cells, give."""

    def setUp(self) -> None:
        super().setUp()
        self.root = self.repo(suite_of(["[b-fail]"] * 8))
        self.environment = self.env(SCRIPT)
        self.shards = [self.tmp.path / f"shard{k}" / "iteration-1" for k in (1, 2)]
        for k in (1, 2):
            code, out, err = self.run_main(self.root, self.environment, "--agent", "claude",
                                           "--runs", "5", "--adaptive", "--shard", f"{k}/2",
                                           "--workspace", str(self.shards[k - 1].parent),
                                           "--quiet")
            self.assertEqual(code, 0, out + err)
        self.merged = self.tmp.path / "merged-1"
        code, out, err = call_main(["report", str(self.merged), "--merge",
                                    *map(str, self.shards)])
        self.assertEqual(code, 0, out + err)
        self.assertEqual(call_main(["report", str(self.merged)])[0], 0)

    def next_wave(self, shard: Path) -> tuple[int, str, str]:
        return call_main(["run", "--resume", str(shard), "--next-wave", str(self.merged),
                          "--quiet"], env=self.environment)

    def evals_of(self, shard: Path) -> list[str]:
        return load_json(shard / "iteration_manifest.json")["shard"]["evals"]

    def test_rows_struck_from_the_merge_and_a_flipped_grading_are_refused(self) -> None:
        victim = self.evals_of(self.shards[1])[0]  # shard 2's eval, read by shard 1's look

        def strike(data: dict) -> None:
            for key in ("runs", "unscored_runs"):
                data[key] = [r for r in data[key] if str(r["eval_id"]) != victim]
        edit_json(self.merged / "benchmark.json", strike)
        for grading in self.merged.glob(f"eval-{victim}/*/run-1/grading.json"):
            flip_grading(grading)
        code, out, err = call_main(["report", str(self.merged)])
        self.assertEqual(code, 1, out + err)
        self.assertIn("results_modified", (self.merged / "benchmark.md").read_text("utf-8"))
        calls = agent_calls(self.tmp.path)
        code, out, err = self.next_wave(self.shards[0])
        self.assertEqual(code, 2, out + err)
        self.assertIn(f"eval-{victim}/", err)
        self.assertNotIn("nothing to run", out)
        self.assertEqual(agent_calls(self.tmp.path), calls)

    def test_a_shards_counted_cells_deleted_or_edited_are_refused(self) -> None:
        shard = self.shards[0]
        first, second = self.evals_of(shard)[:2]
        shutil.rmtree(shard / f"eval-{first}" / "with_skill" / "run-1")
        with open(shard / f"eval-{second}" / "without_skill" / "run-1" / "outputs"
                  / "output.txt", "a", encoding="utf-8") as handle:
            handle.write("!")
        calls = agent_calls(self.tmp.path)
        code, out, err = self.next_wave(shard)
        self.assertEqual(code, 2, out + err)
        self.assertIn("did not see this shard's cells as they are now", err)
        self.assertEqual(agent_calls(self.tmp.path), calls)  # not 14 cells where 12 were due

    def test_the_untouched_merge_still_lets_the_next_wave_run(self) -> None:
        calls = agent_calls(self.tmp.path)
        code, out, err = self.next_wave(self.shards[0])
        self.assertEqual(code, 0, out + err)
        self.assertEqual(agent_calls(self.tmp.path), calls + 16)  # shard 1's wave 2 alone
        self.assertEqual(os.path.exists(self.merged / runner.HASH_JOURNAL), True)


if __name__ == "__main__":
    unittest.main()
