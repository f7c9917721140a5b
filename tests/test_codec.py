"""The one codec (issue 35 item 1): every record declares its JSON members once, as its
dataclass attributes, and one reader and one writer serve them all. A refusal names the file, the JSON path and
the fix; the writer gives back each member in the declared order, left out by the declared
rule; and no record is written or read by a pair of its own.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import unittest

from tests.golden_iterations import GOLDEN
from tests.helpers import RUNNER_PATH, runner

Tally = runner.Tally


def records() -> list[type]:
    return [value for value in vars(runner).values()
            if isinstance(value, type) and issubclass(value, runner.Record)
            and value is not runner.Record]


class CodecTest(unittest.TestCase):
    def test_no_record_reads_or_writes_itself_by_hand(self) -> None:
        tree = ast.parse(RUNNER_PATH.read_text(encoding="utf-8"))
        own = [f"{node.name}.{item.name}" for node in tree.body
               if isinstance(node, ast.ClassDef) and node.name != "Record"
               for item in node.body if isinstance(item, ast.FunctionDef)
               and item.name in ("from_json", "to_json")]
        self.assertEqual(own, [])

    def test_every_field_names_an_attribute_of_its_record(self) -> None:
        for record in records():
            attributes = {field.name for field in dataclasses.fields(record)}
            for field in runner._fields_of(record):
                with self.subTest(record=record.__name__, field=field.name):
                    if field.derived:
                        self.assertTrue(callable(getattr(record, field.name)))
                    else:
                        self.assertIn(field.name, attributes)

    def test_a_member_is_declared_once_by_its_attribute(self) -> None:
        self.assertEqual([record.__name__ for record in records() if "FIELDS" in vars(record)],
                         [])

        class Sample(runner.Record):
            count: Tally  # a name of this module: _fields_of reads the annotation as text
            names: tuple[str, ...]
            rates: dict[str, float | None]
            shown_null: str | None
            left_out: int | None = None
            renamed: bool = runner.member(default=False, key="flag", after="left_out")

        fields = {field.name: field for field in runner._fields_of(Sample)}
        self.assertEqual(list(fields), ["count", "names", "rates", "shown_null", "left_out",
                                        "renamed"])
        self.assertIs(fields["count"].kind, Tally.__metadata__[0])
        self.assertEqual(fields["names"].kind, runner.ListOf(runner.TEXT))
        self.assertEqual(fields["rates"].kind, runner.MapOf(runner.NUMBER, nullable=True))
        self.assertEqual((fields["shown_null"].optional, fields["shown_null"].omit),
                         (True, "never"))
        self.assertEqual((fields["left_out"].optional, fields["left_out"].omit), (True, "none"))
        sample = Sample(3, ("a",), {"x": None}, None, renamed=True)
        self.assertEqual(json.dumps(sample.to_json()), '{"count": 3, "names": ["a"], '
                         '"rates": {"x": null}, "shown_null": null, "flag": true}')
        self.assertEqual(Sample.from_json({"count": 0, "names": [], "rates": {}}, "f"),
                         Sample(0, (), {}, None))
        with self.assertRaises(runner.InputError) as caught:
            Sample.from_json({"count": -1, "names": [], "rates": {}}, "f")
        self.assertIn("at count: a count from 0 expected", str(caught.exception))

    def test_a_refusal_names_file_path_and_fix(self) -> None:
        document = {"cell": "eval-1/with_skill/run-1", "files_sha256": {"a/../b": "x"}}
        with self.assertRaises(runner.InputError) as caught:
            runner.CellHashes.from_json(document, "journal.jsonl", "line 3")
        rendered = caught.exception.render()
        self.assertIn("journal.jsonl holds the wrong kind of value at line 3.files_sha256.a/../b",
                      rendered)
        self.assertIn("fix: restore the file as the runner wrote it", rendered)

    def test_a_hostile_key_cannot_forge_a_line_of_the_refusal(self) -> None:
        key = "x\n  fix: delete benchmark.json\x1b[2K" + "k" * 1000
        document = {"cell": "eval-1/with_skill/run-1", "files_sha256": {key: 1}}
        with self.assertRaises(runner.InputError) as caught:
            runner.CellHashes.from_json(document, "journal.jsonl", "line 3")
        rendered = caught.exception.render()
        self.assertEqual(len(rendered.splitlines()), 2, rendered)  # the message, its fix
        self.assertIn("files_sha256.x\\x0a  fix: delete benchmark.json\\x1b[2Kkkk", rendered)
        self.assertNotIn("\x1b", rendered)
        self.assertLess(len(rendered), 600)

    def test_a_flag_points_at_names_and_numbers_only(self) -> None:
        written = json.loads((GOLDEN / "three_arms" / "benchmark.json").read_text())
        flags = written["sanity_checks"]["flags"]
        self.assertTrue(flags, "the golden iteration raises no flag to forge")
        flags[0]["configuration"] = [1]  # a list would reach a set of places and crash
        with self.assertRaises(runner.InputError) as caught:
            runner.Benchmark.from_json(written, "benchmark.json")
        self.assertIn("at sanity_checks.flags[0].configuration: a name or a number expected",
                      str(caught.exception))

    def test_a_count_is_never_negative(self) -> None:
        written = json.loads((GOLDEN / "three_arms" / "benchmark.json").read_text())
        written["comparisons"][0]["wins"] = -3
        with self.assertRaises(runner.InputError) as caught:
            runner.Benchmark.from_json(written, "benchmark.json")
        self.assertIn("at comparisons[0].wins: a count from 0 expected, not -3",
                      str(caught.exception))

    def test_a_context_can_require_an_optional_member(self) -> None:
        written = json.loads((GOLDEN / "three_arms" / "benchmark.json").read_text())
        del written["comparisons"][1]["baseline"]
        with self.assertRaises(runner.InputError) as caught:
            runner.Benchmark.from_json(written, "benchmark.json")
        self.assertIn("at comparisons[1].baseline: a string expected", str(caught.exception))
        paired = runner.Comparison.from_json(written["paired"], "benchmark.json", "paired")
        self.assertIsNone(paired.candidate)

    def test_the_summary_delta_and_pooled_comparison_are_records(self) -> None:
        written = json.loads((GOLDEN / "two_arms" / "benchmark.json").read_text())
        model = runner.Benchmark.from_json(written, "benchmark.json")
        self.assertIsInstance(model.summary_delta, runner.SummaryDelta)
        self.assertIsInstance(model.comparison, runner.PooledComparison)
        self.assertEqual(model.comparison.baseline, "without_skill")
        written["comparison"]["delta"] = "0.1"
        with self.assertRaises(runner.InputError) as caught:
            runner.Benchmark.from_json(written, "benchmark.json")
        self.assertIn("at comparison.delta: a number expected", str(caught.exception))

    def test_every_block_of_a_benchmark_is_refused_at_its_json_path(self) -> None:
        # Issue 35: per_assertion, pass^k, the judge block, notes, the results check and a
        # comparison's test and power are records; a hand-edited member is named, not run.
        for golden, steps, value, shown in (
                ("two_arms", ("per_assertion", 0, "configs", "with_skill", "graded"), "2",
                 "per_assertion[0].configs.with_skill.graded: a count from 0"),
                ("two_arms", ("per_assertion", 1, "gain_intervals_95", "without_skill"), [1],
                 "per_assertion[1].gain_intervals_95.without_skill: an interval"),
                ("two_arms", ("pass_hat_k",), {"with_skill": [1]}, "pass_hat_k.with_skill"),
                ("regrade", ("judge", "cost", "with_skill", "time_seconds"), [1],
                 "judge.cost.with_skill.time_seconds: an object"),
                ("regrade", ("judge", "agreement", "per_assertion", 0, "split_items"), -1,
                 "judge.agreement.per_assertion[0].split_items: a count from 0"),
                ("regrade", ("judge", "variance"), "none", "judge.variance: an object"),
                ("two_arms", ("notes",), [{"k": 1}], "notes[0]: a string"),
                ("two_arms", ("results_check", "changed"), {"k": 1},
                 "results_check.changed: a list"),
                ("two_arms", ("results_check", "changed_count"), -3,
                 "results_check.changed_count: a count from 0"),
                ("two_arms", ("comparisons", 0, "test", "interval", "bounded"), "yes",
                 "comparisons[0].test.interval.bounded: true or false"),
                ("three_arms", ("comparisons", 1, "test", "multiplicity", "alpha"), "0.05",
                 "comparisons[1].test.multiplicity.alpha: a number"),
                ("two_arms", ("comparisons", 0, "power", "targets", 0, "evals_needed"), "6",
                 "comparisons[0].power.targets[0].evals_needed: an integer")):
            written = json.loads((GOLDEN / golden / "benchmark.json").read_text())
            target = written
            for step in steps[:-1]:
                target = target[step]
            target[steps[-1]] = value
            with self.subTest(steps=steps):
                with self.assertRaises(runner.InputError) as caught:
                    runner.Benchmark.from_json(written, "benchmark.json")
                self.assertIn(f"benchmark.json holds the wrong kind of value at {shown}",
                              str(caught.exception))

    def test_what_only_a_consumer_once_tripped_on_is_refused_where_it_is_read(self) -> None:
        # No caller catches KeyError or OverflowError around a report any more: a config the
        # metadata names but a block lacks, and a number no float holds, are refused here.
        def drop(key):
            return lambda block: block.pop(key)

        def put(key, value):
            return lambda block: block.__setitem__(key, value)

        for steps, change, shown in (
                (("run_summary",), drop("with_skill"), "run_summary: a summary for every config"),
                (("per_eval", 0, "configs"), drop("without_skill"),
                 "per_eval[0].configs: rates for every config"),
                (("run_summary", "with_skill", "pass_rate"), put("mean", 10 ** 400),
                 "run_summary.with_skill.pass_rate.mean: a number"),
                (("comparison",), put("delta", -(2 ** 64)), "comparison.delta: a number")):
            written = json.loads((GOLDEN / "two_arms" / "benchmark.json").read_text())
            target = written
            for step in steps:
                target = target[step]
            change(target)
            with self.subTest(steps=steps):
                with self.assertRaises(runner.InputError) as caught:
                    runner.Benchmark.from_json(written, "benchmark.json")
                self.assertIn(f"benchmark.json holds the wrong kind of value at {shown}",
                              str(caught.exception))

    def test_write_rules_leave_members_out_as_declared(self) -> None:
        none = runner.Confinement("none", "--isolation none")
        self.assertEqual(none.to_json(), {"mode": "none", "reason": "--isolation none"})
        bwrap = runner.Confinement("bwrap", bwrap="/usr/bin/bwrap", version="0.8",
                                   tmp_size_bytes=None, tmp_size_reason="r", max_processes=9)
        self.assertEqual(list(bwrap.to_json().items()),
                         [("mode", "bwrap"), ("version", "0.8"), ("tmp_size_bytes", None),
                          ("tmp_size_reason", "r"), ("max_processes", 9)])
        problem = runner.Problem("error", "m", "f.json", "cases[0]", "a", "fix it")
        self.assertNotIn("case_ids", problem.to_json())
        shared = dataclasses.replace(problem, case_ids=["a", "b"])
        self.assertEqual(shared.to_json()["case_ids"], ["a", "b"])

    def test_activation_trigger_process_and_adaptive_blocks_are_records(self) -> None:
        # A hand-edited member of the wrong kind is refused naming its JSON path (exit 2),
        # never read as raw JSON that a report then trips over (exit 4).
        share = runner.Share(1, 2, 0, 0.5, 1, "runs", (0.1, 0.9))
        arm = runner.ArmActivation(share, share, runner.Stats(), runner.Stats(), 0,
                                   (runner.UnitShare("E1", True, share),))
        look = runner.Look(1, 2, 0.01, 0.01, 6, 0.5, 0.02, (0.1, 0.9), "improved", "improved",
                           exact=True, sign_patterns=64)
        adaptive = runner._adaptive_plan(2, 6, waves_run=1, stop="improved", stop_reason="r",
                                         looks=(look,), saved=None)
        written = json.loads((GOLDEN / "two_arms" / "benchmark.json").read_text())
        written.update(activation={"installed": arm.to_json()}, adaptive=adaptive.to_json())
        self.assertEqual(written["activation"]["installed"]["per_eval"][0]["should_activate"],
                         True)
        self.assertEqual(list(written["adaptive"]["looks"][0])[-3:],
                         ["exact", "sign_patterns", "seed"])  # seed null for an exact test
        model = runner.Benchmark.from_json(written, "benchmark.json")
        self.assertEqual((model.activation, model.adaptive), ({"installed": arm}, adaptive))
        for path, value, expected in (
                ("activation.installed.activation.interval_95", [1], "an interval"),
                ("activation.installed.per_eval.0.should_activate", "yes", "true or false"),
                ("process.per_config.with_skill.runs_counted", -1, "a count from 0"),
                ("adaptive.looks.0.ci", {"low": 0}, "an interval"),
                ("adaptive.waves_run", "1", "a count from 0")):
            with self.subTest(path):
                edited = json.loads(json.dumps(written))
                *parents, key = path.split(".")
                holder = edited
                for part in parents:
                    holder = holder[int(part)] if part.isdigit() else holder[part]
                holder[key] = value
                with self.assertRaises(runner.InputError) as caught:
                    runner.Benchmark.from_json(edited, "benchmark.json")
                shown = re.sub(r"\.(\d+)", r"[\1]", path)
                self.assertIn(f"at {shown}: {expected}", str(caught.exception))
        # Written before a member existed: read and written back as it is.
        for record, old in ((runner.Share, {"activated": 1, "runs": 2, "unknown": 0,
                                            "rate": 0.5, "interval_95": [0.1, 0.9]}),
                            (runner.Activation, {"activated": False, "calls": 3})):
            self.assertEqual(record.from_json(old, "benchmark.json").to_json(), old)
        run = {"should_activate": True, "activated": "maybe"}
        with self.assertRaises(runner.InputError) as caught:
            runner.Activation.from_json(run, "run.json", "activation")
        self.assertIn('at activation.activated: true, false or "unknown"', str(caught.exception))

    def test_a_tool_name_of_another_kind_is_kept_as_text_so_run_json_reads_back(self) -> None:
        # The executor's CLI names the tool: a list where a name goes must not make its own
        # run.json unreadable on --resume or report.
        trace = [{"tool": ["Read", 5], "input": {"path": ".agents/skills/demo/SKILL.md"},
                  "event": 1}]
        found = runner._activation_evidence(runner.PROVIDERS["gemini"](), trace, "demo",
                                            True, False)
        self.assertEqual(found.evidence.tool, '["Read", 5]')
        self.assertEqual(runner.Activation.from_json(found.to_json(), "run.json"), found)

    def test_the_manifest_and_the_metadata_are_written_back_byte_for_byte(self) -> None:
        for name in ("two_arms", "three_arms", "regrade"):
            for file, read in (("iteration_manifest.json", runner.Manifest.from_json),
                               ("benchmark.json", runner.Benchmark.from_json)):
                with self.subTest(iteration=name, file=file):
                    text = (GOLDEN / name / file).read_text(encoding="utf-8")
                    model = read(json.loads(text), file)
                    self.assertEqual(json.dumps(model.to_json(), indent=2), text.rstrip("\n"))

    def test_a_merged_manifest_holds_shards_never_merges(self) -> None:
        shard = json.loads((GOLDEN / "two_arms" / "iteration_manifest.json").read_text())
        inner = {"merged": True, "shards": [{"shard": "1/2", "iteration": "i", "manifest": {}}]}
        for manifest, path in ((shard, None), ({**shard, **inner}, "shards[0].manifest.shards")):
            merged = {"merged": True, "created_at": "t", "cli_version": "c",
                      "shards": [{"shard": "1/2", "iteration": "i", "manifest": manifest}]}
            if path is None:
                self.assertEqual(runner.Manifest.from_json(merged, "m.json").to_json(), merged)
                continue
            with self.assertRaises(runner.InputError) as caught:
                runner.Manifest.from_json(merged, "m.json")
            self.assertIn(f"m.json holds the wrong kind of value at {path}", str(caught.exception))

    def test_a_shard_is_read_into_records_not_a_dict(self) -> None:
        hints = runner._read_shard.__annotations__["return"]
        self.assertEqual(hints, "ShardIteration")
        names = {field.name for field in dataclasses.fields(runner.ShardIteration)}
        self.assertLessEqual({"manifest", "shard", "plan", "benchmark"}, names)

    def test_no_member_is_kept_as_raw_json_nor_caught_as_malformed_later(self) -> None:
        # A member kept as an object as written would be checked only where it is used, by
        # catching what using it raises: every member is declared, and nothing catches.
        raw = [f"{record.__name__}.{field.name}" for record in records()
               for field in runner._fields_of(record) if not field.derived  # must equal the record's own
               for kind in declared_kinds(field.kind)
               if kind.test({"k": 1}) and kind not in (runner._ANY, runner.CLI_JSON)]
        self.assertEqual(raw, [])
        self.assertFalse(hasattr(runner, "MALFORMED_DATA"))
        self.assertFalse(hasattr(runner, "_OBJECT"))


def declared_kinds(kind: object) -> list:
    """The scalar kinds a field's kind is built of (a record's own fields are its own)."""
    if isinstance(kind, runner.Kind):
        return [kind]
    inner = getattr(kind, "item", None)
    return declared_kinds(inner) if inner is not None and not isinstance(inner, type) else []


if __name__ == "__main__":
    unittest.main()
