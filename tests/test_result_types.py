"""The result model of what the runner writes (issue 23, "One result model"): benchmark.json
read into frozen values and written back from them byte for byte, a value of the wrong kind
refused naming the file and the JSON path, and aggregate() building the same values.
"""

from __future__ import annotations

import dataclasses
import json
import unittest
from pathlib import Path

from tests.golden_iterations import GOLDEN
from tests.helpers import per_eval_row, runner

GOLDEN_NAMES = ("two_arms", "three_arms", "regrade")


def set_at(document, steps: tuple, value) -> None:
    """document[steps[0]][steps[1]]... = value."""
    for step in steps[:-1]:
        document = document[step]
    document[steps[-1]] = value


def golden(name: str) -> tuple[str, dict]:
    path = GOLDEN / name / "benchmark.json"
    return str(path), json.loads(path.read_text(encoding="utf-8"))


class RoundTripTest(unittest.TestCase):
    def test_golden_benchmarks_come_back_as_written(self) -> None:
        for name in GOLDEN_NAMES:
            with self.subTest(name):
                path, written = golden(name)
                model = runner.Benchmark.from_json(written, path)
                # The same text, so the same keys in the same order.
                self.assertEqual(json.dumps(model.to_json()), json.dumps(written))
                for run in (*model.runs, *model.unscored_runs):
                    self.assertIsInstance(run, runner.RunResult)
                    self.assertIsInstance(run.result, runner.RunScore)
                for summary in model.run_summary.values():
                    self.assertIsInstance(summary.pass_rate, runner.Stats)
                for flag in model.sanity_checks.flags:
                    self.assertIsInstance(flag, runner.SanityFlag)
                for compared in model.comparisons:
                    self.assertIsInstance(compared, runner.Comparison)
                self.assertEqual(model.paired, model.comparisons[0].as_paired())
                for row, as_written in zip(model.per_eval, written["per_eval"]):
                    self.assertIsInstance(row, runner.PerEval)
                    for slot in row.configs.values():
                        self.assertIsInstance(slot, runner.EvalConfigRates)
                    self.assertEqual(json.dumps(row.to_json()), json.dumps(as_written))

    def test_values_are_frozen(self) -> None:
        path, written = golden("two_arms")
        model = runner.Benchmark.from_json(written, path)
        with self.assertRaises(dataclasses.FrozenInstanceError):
            model.runs[0].status = "changed"  # type: ignore[misc]
        with self.assertRaises(dataclasses.FrozenInstanceError):
            model.sanity_checks.status = "OK"  # type: ignore[misc]
        with self.assertRaises(dataclasses.FrozenInstanceError):
            model.per_eval[0].delta = 1.0  # type: ignore[misc]
        with self.assertRaises(dataclasses.FrozenInstanceError):
            model.per_eval[0].configs["with_skill"].scored_runs = 0  # type: ignore[misc]

    def test_a_per_eval_row_writes_deltas_only_with_three_or_more_configs(self) -> None:
        for name, has_deltas in (("two_arms", False), ("three_arms", True)):
            with self.subTest(name):
                path, written = golden(name)
                row = runner.PerEval.from_json(written["per_eval"][0], path, "per_eval[0]")
                self.assertEqual("deltas" in row.to_json(), has_deltas)
                self.assertEqual(list(row.to_json()), list(written["per_eval"][0]))
                first = next(iter(row.configs.values()))
                self.assertEqual(list(first.to_json()),
                                 ["pass_rates", "statuses", "mean_pass_rate", "scored_runs"])

    def test_read_and_built_rows_give_the_same_paired_statistics(self) -> None:
        path, written = golden("three_arms")
        model = runner.Benchmark.from_json(written, path)
        pair = tuple(model.configs[:2])
        built = [per_eval_row(row.eval_id, **{c: list(s.pass_rates)
                                              for c, s in row.configs.items()})
                 for row in model.per_eval]
        self.assertEqual(runner._paired_statistics(model.per_eval, pair),
                         runner._paired_statistics(built, pair))
        self.assertEqual(runner.power_forecast(model.per_eval, pair, 0.1),
                         runner.power_forecast(built, pair, 0.1))

    def test_a_flag_keeps_where_it_points_in_order(self) -> None:
        flag = {"severity": "warning", "kind": "judge_tie", "message": "m", "eval_id": "E1",
                "configuration": "with_skill", "run_number": 2, "assertion_id": 3}
        parsed = runner.SanityFlag.from_json(flag, "benchmark.json", "sanity_checks.flags[0]")
        self.assertEqual(list(parsed.to_json().items()), list(flag.items()))
        self.assertEqual(runner._flag_place(parsed), "eval E1, run 2, assertion 3")
        common = runner.SanityFlag("warning", "judge_disagrees_with_check", "m",
                                   (("eval_id", None),))
        self.assertEqual(runner._flag_place(common), "eval None")  # as the reports always said


class WrongKindTest(unittest.TestCase):
    """A mistyped value is invalid input naming the file and the JSON path."""

    CASES = (
        (("runs", 0, "scored"), "runs[0].scored"),
        (("runs", 0, "result"), "runs[0].result"),
        (("runs", 0, "result", "pass_rate"), "runs[0].result.pass_rate"),
        (("runs", 0, "expectations"), "runs[0].expectations"),
        (("runs", 0, "grader"), "runs[0].grader"),
        (("runs", 0, "expectations", 0, "passed"), "runs[0].expectations[0].passed"),
        (("runs", 0, "expectations", 0, "ballots"), "runs[0].expectations[0].ballots"),
        (("runs", 0, "expectations", 0, "ballots", 0, "evidence"),
         "runs[0].expectations[0].ballots[0].evidence"),
        (("runs", 0, "metric_sources", "tokens"), "runs[0].metric_sources.tokens"),
        (("runs", 0, "metric_sources", "tokens", "value"),
         "runs[0].metric_sources.tokens.value"),
        (("run_summary", "with_skill", "pass_rate", "mean"), "run_summary.with_skill.pass_rate"),
        (("run_summary", "with_skill", "runs"), "run_summary.with_skill.runs"),
        (("sanity_checks", "flags", 0, "message"), "sanity_checks.flags[0].message"),
        (("sanity_checks", "status"), "sanity_checks.status"),
        (("comparisons", 0, "verdict"), "comparisons[0].verdict"),
        (("comparisons", 0, "ci95"), "comparisons[0].ci95"),
        (("paired", "wins"), "paired.wins"),
        (("paired", "test"), "paired.test"),
        (("per_eval", 0), "per_eval[0]"),
        (("per_eval", 0, "configs"), "per_eval[0].configs"),
        (("per_eval", 0, "configs", "with_skill"), "per_eval[0].configs.with_skill"),
        (("per_eval", 0, "configs", "with_skill", "pass_rates"),
         "per_eval[0].configs.with_skill.pass_rates"),
        (("per_eval", 0, "configs", "with_skill", "statuses"),
         "per_eval[0].configs.with_skill.statuses"),
        (("per_eval", 0, "configs", "with_skill", "mean_pass_rate"),
         "per_eval[0].configs.with_skill.mean_pass_rate"),
        (("per_eval", 0, "configs", "with_skill", "scored_runs"),
         "per_eval[0].configs.with_skill.scored_runs"),
        (("per_eval", 0, "delta"), "per_eval[0].delta"),
    )

    def test_each_names_its_path(self) -> None:
        for steps, shown in self.CASES:
            for value in ("x", [1], {"k": 1}, 7):
                path, written = golden("two_arms")
                target = written
                for step in steps[:-1]:
                    target = target[step]
                before = target[steps[-1]]
                numbers = all(isinstance(v, (int, float)) for v in (before, value))
                if type(before) is type(value) or numbers:
                    continue  # the same kind: not a mistyped value
                target[steps[-1]] = value
                with self.subTest(steps=steps, value=value):
                    with self.assertRaises(runner.InputError) as caught:
                        runner.Benchmark.from_json(written, path)
                    self.assertIn(path, str(caught.exception))
                    self.assertIn(shown, str(caught.exception))

    def test_a_per_eval_row_names_the_item_inside_its_lists(self) -> None:
        for steps, value, shown in (
                (("per_eval", 1, "configs", "with_skill", "pass_rates", 0), "x",
                 "per_eval[1].configs.with_skill.pass_rates[0]"),
                (("per_eval", 1, "configs", "without_skill", "statuses", 0), 3,
                 "per_eval[1].configs.without_skill.statuses[0]"),
                (("per_eval", 0, "deltas", "without_skill"), "x",
                 "per_eval[0].deltas.without_skill"),
                (("per_eval", 0, "deltas"), [0.5], "per_eval[0].deltas"),
                (("per_eval", 0, "eval_id"), "../up", "per_eval[0].eval_id")):
            path, written = golden("three_arms")
            set_at(written, steps, value)
            with self.subTest(steps=steps):
                with self.assertRaises(runner.InputError) as caught:
                    runner.Benchmark.from_json(written, path)
                self.assertIn(path, str(caught.exception))
                self.assertIn(shown, str(caught.exception))


def golden_run_files(name: str) -> list:
    return sorted((GOLDEN / name).glob("eval-*/*/run-*"))


class RunFileTypesTest(unittest.TestCase):
    """grading.json and the metrics files, parsed into Grading, Verdict and Metric records
    and written from them: the same bytes, and a misshapen value named by file and path."""

    def test_golden_run_files_come_back_as_written(self) -> None:
        for name in GOLDEN_NAMES:
            for folder in golden_run_files(name):
                with self.subTest(folder=str(folder)):
                    grading_text = (folder / "grading.json").read_text(encoding="utf-8")
                    grading = runner.Grading.from_json(json.loads(grading_text), folder)
                    self.assertTrue(all(isinstance(v, runner.Verdict)
                                        for v in grading.expectations))
                    self.assertEqual(json.dumps(grading.to_json(), indent=2, ensure_ascii=False)
                                     + "\n", grading_text)
                    for file in ("metrics.json", "grader_metrics.json"):
                        written = json.loads((folder / file).read_text(encoding="utf-8"))
                        typed = runner.metrics_from_json(written["metrics"], file, "metrics")
                        self.assertEqual(json.dumps({k: m.to_json() for k, m in typed.items()}),
                                         json.dumps(written["metrics"]))

    def test_the_read_record_holds_the_types(self) -> None:
        folder = golden_run_files("regrade")[0]
        record = runner.read_run_record(folder)
        self.assertIsInstance(record.grading, runner.Grading)
        self.assertEqual(record.grading.grader_runs, 2)
        self.assertEqual(record.grading.expectations[0].majority.votes, 2)

    def test_the_processes_of_run_json_are_typed_and_written_back_as_read(self) -> None:
        for name in GOLDEN_NAMES:
            for folder in golden_run_files(name):
                with self.subTest(folder=str(folder)):
                    written = json.loads((folder / "run.json").read_text(encoding="utf-8"))
                    record = runner.read_run_record(folder)
                    self.assertIsInstance(record.executor, runner.ProcessCall)
                    self.assertIsInstance(record.grader, runner.ProcessCall)
                    self.assertTrue(all(isinstance(c, runner.GraderCall)
                                        for c in record.grader_calls))
                    self.assertEqual(json.dumps(record.run_json()), json.dumps(written))

    def assert_run_json_refused(self, written: dict, steps: tuple, value: object,
                                shown: str) -> None:
        """run.json with the member at `steps` set to `value` is refused naming `shown`."""
        set_at(written, steps, value)
        with self.subTest(steps=steps):
            with self.assertRaises(runner.InputError) as caught:
                runner.RunRecord.from_files(Path("run-1"), written, None, None)
            self.assertIn(f"run.json holds the wrong kind of value at {shown}:",
                          str(caught.exception))

    def test_a_misshapen_process_names_run_json_and_the_path(self) -> None:
        folder = golden_run_files("two_arms")[0]
        for steps, value, shown in ((("executor", "argv", 0), 7, "executor.argv[0]"),
                                    (("executor", "returncode"), "0", "executor.returncode"),
                                    (("grader", "timed_out"), "no", "grader.timed_out"),
                                    (("grader_calls", 0, "process"), None,
                                     "grader_calls[0].process"),
                                    (("grader_calls", 0, "metrics", "tokens", "value"), "9",
                                     "grader_calls[0].metrics.tokens.value")):
            written = json.loads((folder / "run.json").read_text(encoding="utf-8"))
            self.assert_run_json_refused(written, steps, value, shown)

    def run_json_with_checks_and_a_conversation(self) -> tuple:
        """A golden run.json with a checks block (a refused run check, a timed-out one, a
        file check, a stopped trace check) and a user conversation, in the order written."""
        folder = golden_run_files("two_arms")[0]
        written = json.loads((folder / "run.json").read_text(encoding="utf-8"))
        written["checks"] = {"results": [
            {"name": "planted", "subject": "run", "duration_s": 0.0, "unrun": "not run"},
            {"name": "slow", "subject": "run", "stdout_tail": "", "stderr_tail": "e",
             "returncode": None, "isolation": None, "unrun": "timed out after 1 s",
             "duration_s": 1.0},
            {"name": "file", "subject": "file", "passed": True, "evidence": "a exists",
             "duration_s": 0.001},
            {"name": "trace", "subject": "trace", "unrun": "stopped", "cancelled": False,
             "duration_s": 0.0}],
            "protected": {"tests": {"changed_by_executor": ["tests/a.py"]}},
            "unrun": "check 'planted' could not run: not run",
            "planted_interpreter_files": ["conftest.py"], "cancelled": False,
            "duration_s": 0.5, "note": "the checks' own time"}
        talk = {"kind": "user", "most_turns": 3, "turns_taken": 1, "ended": "user ended",
                "turns": [{"turn": 1, "status": "ok", "executor": written["executor"],
                           "session_id": "s1",
                           "metrics": {"tokens": {"value": 5, "source": "cli"}}}],
                "user_calls": [{"for_turn": 2, "status": "ok", "process": written["executor"],
                                "metrics": {}}], "user_metrics": {}}
        keys = list(written)
        at = keys.index("started_at")
        ordered = {k: written[k] for k in keys[:at]}
        ordered["conversation"] = talk
        ordered.update({k: written[k] for k in keys[at:]})
        return folder, ordered

    def test_checks_and_a_conversation_come_back_as_written(self) -> None:
        folder, written = self.run_json_with_checks_and_a_conversation()
        record = runner.RunRecord.from_files(folder, written, None, None)
        self.assertIsInstance(record.checks.results[0], runner.CheckResult)
        self.assertIsInstance(record.conversation.turns[0].executor, runner.ProcessCall)
        self.assertIsInstance(record.sandbox.git, runner.SandboxGit)
        self.assertEqual(json.dumps(record.run_json()), json.dumps(written))

    def test_a_misshapen_sandbox_check_or_conversation_names_run_json_and_the_path(self):
        for steps, value, shown in (
                (("sandbox", "git", "ok"), "yes", "sandbox.git.ok"),
                (("sandbox", "skipped"), [3], "sandbox.skipped[0]"),
                (("sandbox", "files_delivered"), "1", "sandbox.files_delivered"),
                (("changes", "added"), {"a": 1}, "changes.added"),
                (("skill_read", "calls"), "2", "skill_read.calls"),
                (("checks", "results", 2, "passed"), "yes", "checks.results[2].passed"),
                (("checks", "protected", "tests", "changed_by_executor"), "a",
                 "checks.protected.tests.changed_by_executor"),
                (("checks", "duration_s"), "0.5", "checks.duration_s"),
                (("conversation", "turns", 0, "turn"), 0, "conversation.turns[0].turn"),
                (("conversation", "turns_taken"), [], "conversation.turns_taken"),
                (("conversation", "user_calls", 0, "process"), None,
                 "conversation.user_calls[0].process")):
            _, written = self.run_json_with_checks_and_a_conversation()
            self.assert_run_json_refused(written, steps, value, shown)

    def test_a_misshapen_run_block_names_its_file_and_path(self) -> None:
        """The blocks once kept as written (a failure, the artifact, a process's isolation,
        the graders' metrics, the re-grade source, the judge, a run's grader cost) are
        records now: a value of the wrong kind inside one is refused where it sits."""
        folder = golden_run_files("two_arms")[0]
        for steps, value, shown in (
                (("failure",), {"stage": 3, "detail": "d"}, "failure.stage"),
                (("written_artifact", "captured"), "no", "written_artifact.captured"),
                (("written_artifact", "bytes"), -1, "written_artifact.bytes"),
                (("executor", "isolation", "strays_ended"), -2, "executor.isolation.strays_ended"),
                (("executor", "isolation", "home_files"), "../x", "executor.isolation.home_files"),
                (("grader_metrics", "tokens", "value"), "9", "grader_metrics.tokens.value"),
                (("regraded_from",), {"run_dir": ["/"], "status": "ok"}, "regraded_from.run_dir")):
            written = json.loads((folder / "run.json").read_text(encoding="utf-8"))
            self.assert_run_json_refused(written, steps, value, shown)
        grading = self.grading()
        set_at(grading, ("judge", "grader_runs"), 0)
        with self.assertRaises(runner.InputError) as caught:
            runner.Grading.from_json(grading, "grading.json")
        self.assertIn("at judge.grader_runs:", str(caught.exception))
        for steps, value, shown in ((("runs", 0, "grader", "calls"), -1, "runs[0].grader.calls"),
                                    (("runs", 0, "failure"), {"stage": "x"},
                                     "runs[0].failure.detail")):
            path, written = golden("two_arms")
            set_at(written, steps, value)
            with self.subTest(steps=steps):
                with self.assertRaises(runner.InputError) as caught:
                    runner.Benchmark.from_json(written, path)
                self.assertIn(f"at {shown}:", str(caught.exception))

    def grading(self) -> dict:
        folder = golden_run_files("regrade")[0]
        return json.loads((folder / "grading.json").read_text(encoding="utf-8"))

    def test_a_misshapen_grading_names_the_path(self) -> None:
        for steps, value, shown in (
                (("expectations", 0, "passed"), "yes", "expectations[0].passed"),
                (("expectations", 1, "id"), True, "expectations[1].id"),
                (("expectations", 0, "ballots", 1, "passed"), None,
                 "expectations[0].ballots[1].passed"),
                (("expectations", 2, "votes_passed"), "2", "expectations[2].votes_passed"),
                (("expectations", 1, "ballots"), None, "expectations[1].ballots"),
                (("notes",), [3], "notes[0]"),
                (("summary", "passed"), 0, "summary"),  # counts that disagree with the list
                (("judge",), "codex", "judge")):
            grading = self.grading()
            set_at(grading, steps, value)
            with self.subTest(steps=steps):
                with self.assertRaises(runner.InputError) as caught:
                    runner.Grading.from_json(grading, "grading.json")
                self.assertIn(f"grading.json holds the wrong kind of value at {shown}",
                              str(caught.exception))

    def test_a_metric_absent_without_a_reason_or_not_finite_is_refused(self) -> None:
        for metric, shown in (({"value": None}, "tokens.absent_reason"),
                              ({"value": float("inf"), "source": "s"}, "tokens.value"),
                              ({"value": "12", "source": "s"}, "tokens.value"),
                              ({"value": 3, "source": 4}, "tokens.source"),
                              ({"value": None, "absent_reason": "r", "implausible": "yes"},
                               "tokens.implausible")):
            with self.subTest(metric=metric):
                with self.assertRaises(runner.InputError) as caught:
                    runner.metrics_from_json({"tokens": metric}, "metrics.json", "")
                self.assertIn(f"at {shown}:", str(caught.exception))

    def test_each_kind_of_metric_keeps_its_keys_in_one_order(self) -> None:
        for written in ({"value": 3, "source": "s"}, {"value": None, "absent_reason": "r"},
                        {"value": None, "implausible": True, "absent_reason": "r"},
                        {"value": 2, "source": "s", "note": "1 of 2 grader calls ran"}):
            metric = runner.Metric.from_json(written, "m.json", "x")
            self.assertEqual(list(metric.to_json().items()), list(written.items()))

    def test_a_grader_sum_marked_implausible_is_written_in_the_same_order(self) -> None:
        implausible = runner.Metric(None, implausible=True, absent_reason="r")
        total = runner._sum_metrics([{"tokens": implausible}, {"tokens": implausible}], 2)
        self.assertEqual(list(total["tokens"].to_json()), ["value", "implausible", "absent_reason"])


class AggregateTest(unittest.TestCase):
    def test_aggregate_builds_the_values_and_writes_what_it_read(self) -> None:
        path, written = golden("three_arms")
        model = runner.Benchmark.from_json(written, path)
        again = runner.Benchmark.from_json(model.to_json(), path)
        self.assertEqual(again, model)
        checked = runner.apply_results_check(model, model.results_check)
        self.assertEqual(checked.sanity_checks, model.sanity_checks)
        self.assertEqual(runner.render_markdown(checked), runner.render_markdown(model))


if __name__ == "__main__":
    unittest.main()
