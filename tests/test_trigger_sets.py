"""Issue 34, item 4: skill-creator's trigger sets. Each query is a case of the installed arm
only, never graded; its answer is whether the agent activated the skill, read from its CLI's
events, and its executor is ended as soon as that is decided.

The fakes stream their events; `pause_after` makes one stop after the line that decides
(its first tool call) for `pause_s` seconds and then write a marker file, as an agent still
working would: a run ended at the decision finishes fast and never writes it.
"""

from __future__ import annotations

import json
import time
import unittest
from pathlib import Path

from tests.helpers import TempDir, call_main, demo_suite, git, make_repo, runner
from tests.test_installed_arm import MIGRATION_SKILL, agent_env

TRIGGER_REL = "skills/demo/evals/trigger.json"
POSITIVE = "Plan the migration of the orders table."
NEGATIVE = "Write a haiku about autumn."
# The line of each fake's stream that shows its first tool call.
FIRST_CALL_LINE = {"claude": '"tool_use"', "gemini": '"tool_use"', "opencode": '"tool_use"',
                   "codex": '"item.started"'}


def trigger_set(*pairs: tuple[str, bool]) -> list[dict]:
    return [{"query": query, "should_trigger": should} for query, should in pairs]


class TriggerCase(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.root = make_repo(self.tmp.path, demo_suite(), skill_md=MIGRATION_SKILL,
                              files={"README.md": "The project.\n"})
        self.trigger = self.root / TRIGGER_REL
        self.write_triggers(trigger_set((POSITIVE, True), (NEGATIVE, False)))

    def write_triggers(self, data) -> None:
        self.trigger.parent.mkdir(parents=True, exist_ok=True)
        self.trigger.write_text(data if isinstance(data, str) else json.dumps(data))
        git(self.root, "add", "-A")
        git(self.root, "commit", "-qm", "triggers")

    def validate(self, target: Path) -> tuple[int, dict]:
        code, out, err = call_main(["validate", str(target), "--json"])
        return code, json.loads(out) if out.strip().startswith("{") else {"err": err}


class TriggerValidateTest(TriggerCase):
    def test_a_trigger_file_given_directly_is_a_suite_of_queries(self) -> None:
        code, report = self.validate(self.trigger)
        self.assertEqual(code, 0, report)
        self.assertEqual(report["counts"]["cases"], 2)
        self.assertEqual(report["warnings"], [])  # no "too few cases for a verdict": none is graded
        code, out, err = call_main(["run", str(self.trigger), "--agent", "claude", "--dry-run"],
                                   agent_env(self.tmp.path, {}))
        self.assertEqual(code, 0, out + err)
        self.assertIn("cells: 2 (2 cases x 1 configs x 1 runs); provider calls: up to 2 "
                      "(2 executors + 0 x 1 graders)", out)
        loaded = runner.load_suite(self.trigger).suite
        self.assertEqual(loaded.skill_name, "demo")
        self.assertEqual([(c.key, c.prompt, c.should_activate, c.trigger) for c in loaded.cases],
                         [("trigger-1", POSITIVE, True, True), ("trigger-2", NEGATIVE, False, True)])
        self.assertEqual([(c.expectations, c.checks) for c in loaded.cases], [([], [])] * 2)

    def test_beside_an_evals_json_its_queries_join_the_suite(self) -> None:
        beside = self.root / "evals/demo/trigger-evals.json"
        beside.write_text(json.dumps(trigger_set(("Migrate the users table.", True))))
        loaded = runner.load_suite(self.root / "evals/demo/evals.json").suite
        self.assertEqual([c.key for c in loaded.cases], ["E01", "E02", "trigger-1"])
        # the suite's digest covers its trigger set: a changed query is a changed suite
        before = loaded.sha256
        beside.write_text(json.dumps(trigger_set(("Migrate the carts table.", True))))
        self.assertNotEqual(runner.load_suite(self.root / "evals/demo/evals.json").suite.sha256,
                            before)
        # one trigger file is read; a second one beside it is named, not silently dropped
        (self.root / "evals/demo/trigger.json").write_text(json.dumps(trigger_set((NEGATIVE, False))))
        loaded = runner.load_suite(self.root / "evals/demo/evals.json")
        self.assertEqual([c.prompt for c in loaded.suite.cases if c.trigger], [NEGATIVE])
        self.assertEqual([w.message for w in loaded.warnings], [
            "trigger-evals.json is not read: only one trigger file beside the suite is, "
            "trigger.json"])

    def test_every_problem_is_named_at_once_with_where_and_how(self) -> None:
        self.write_triggers([
            {"query": POSITIVE, "should_trigger": True},
            {"query": "   ", "should_trigger": "yes"},
            {"query": " plan the  MIGRATION of the orders table. ", "should_trigger": True},
            {"qeury": "typo", "should_trigger": False},
            7,
            {"query": ["a"], "should_trigger": False},
            {"query": "Tidy the docs.", "should_trigger": False, "note": "kept"}])
        code, report = self.validate(self.trigger)
        self.assertEqual(code, 2)
        found = {(e["json_path"], e["message"]) for e in report["errors"]}
        self.assertEqual(found, {
            ("[1].query", "'query' is empty"),
            ("[1].should_trigger", "'should_trigger' must be true or false, not a string"),
            ("[2].query", "the query repeats entry [0]"),
            ("[3].qeury", "unknown key 'qeury' in a trigger query"),
            ("[3]", "the entry has no 'query'"),
            ("[4]", "a trigger query must be an object, not a number"),
            ("[5].query", "'query' must be a string, not a list")})
        typo = next(e for e in report["errors"] if e["json_path"] == "[3].qeury")
        self.assertEqual((typo["fix"], typo["case_id"]), ("did you mean 'query'?", "trigger-4"))
        self.assertTrue(all(e["fix"] and e["file"] == str(self.trigger)
                            for e in report["errors"]))
        [warning] = report["warnings"]
        self.assertIn("'note'", warning["message"])

    def test_ten_thousand_queries_or_a_huge_one_are_refused_in_one_line(self) -> None:
        many = [{"query": f"task {i}", "should_trigger": i % 2 == 0} for i in range(10_000)]
        self.write_triggers(many)
        started = time.monotonic()
        code, report = self.validate(self.trigger)
        self.assertLess(time.monotonic() - started, 5)
        self.assertEqual(code, 2)
        [error] = report["errors"]
        self.assertIn("10,000 queries, more than the 1,000", error["message"])
        self.assertIn("split it", error["fix"])
        self.write_triggers(trigger_set(("x" * 200_000, True), (NEGATIVE, False)))
        code, report = self.validate(self.trigger)
        self.assertEqual(code, 2)
        [error] = report["errors"]
        self.assertEqual(error["message"], "'query' is 200,000 characters, more than 20,000")

    def test_a_case_id_that_is_a_trigger_id_is_refused(self) -> None:
        suite = demo_suite()
        suite["evals"][0]["id"] = "trigger-1"
        (self.root / "evals/demo/evals.json").write_text(json.dumps(suite))
        (self.root / "evals/demo/trigger.json").write_text(
            json.dumps(trigger_set((POSITIVE, True))))
        code, report = self.validate(self.root / "evals/demo/evals.json")
        self.assertEqual(code, 2)
        self.assertIn("case id 'trigger-1' is also the id of a trigger query of trigger.json",
                      [e["message"] for e in report["errors"]])

    def test_a_trigger_file_whose_skill_cannot_be_told_says_where_to_put_it(self) -> None:
        loose = self.root / "misc/trigger.json"
        loose.parent.mkdir()
        loose.write_text(json.dumps(trigger_set((POSITIVE, True))))
        code, report = self.validate(loose)
        self.assertEqual(code, 2)
        [error] = report["errors"]
        self.assertEqual(error["message"], "cannot tell which skill this trigger set is for")

    def test_validate_dir_finds_a_lone_trigger_file(self) -> None:
        code, out, err = call_main(["validate", str(self.root / "skills/demo")])
        self.assertEqual(code, 0, err)
        self.assertIn(f"OK: {self.trigger}: 2 cases", out)

    def test_a_trigger_set_outside_the_installed_arm_is_refused_before_any_agent(self) -> None:
        env = agent_env(self.tmp.path, {})
        code, out, err = call_main(["run", str(self.trigger), "--agent", "claude", "--config",
                                    "with_skill,without_skill", "--workspace",
                                    str(self.tmp.path / "ws")], env)
        self.assertEqual(code, 2, out + err)
        self.assertIn("a trigger set runs in the installed arm only", err)
        self.assertIn("--config installed", err)
        self.assertFalse((self.tmp.path / "log").exists() and any(
            (self.tmp.path / "log").iterdir()))


class TriggerRunTest(TriggerCase):
    """A positive and a negative query with each fake CLI, each executor ended at its first
    tool call while the fake would go on for 30 s and then write a marker."""

    def roles(self) -> list[str]:
        """The role of each fake process that logged itself (the version probe has none)."""
        return [json.loads(path.read_text()).get("role")
                for path in sorted((self.tmp.path / "log").iterdir())
                if json.loads(path.read_text()).get("role")]

    def run_triggers(self, agent: str, spec: dict, *extra: str) -> tuple[int, str, str, Path]:
        workspace = self.tmp.path / f"ws-{agent}"
        env = agent_env(self.tmp.path, {"executor": spec})
        code, out, err = call_main(["run", str(self.trigger), "--agent", agent, "--quiet",
                                    "--workspace", str(workspace), *extra], env)
        return code, out, err, workspace / "iteration-1"

    def test_each_agent_answers_both_queries_and_is_stopped_at_the_decision(self) -> None:
        for agent, line in FIRST_CALL_LINE.items():
            with self.subTest(agent=agent):
                marker = self.tmp.path / f"went-on-{agent}"
                spec = {"read_paths": ["README.md"], "pause_after": line, "pause_s": 30,
                        "then_write": {str(marker): "worked on after the decision"}}
                started = time.monotonic()
                code, out, err, iteration = self.run_triggers(agent, spec)
                self.assertEqual(code, 0, out + err)
                self.assertLess(time.monotonic() - started, 20)
                self.assertFalse(marker.exists())
                benchmark = json.loads((iteration / "benchmark.json").read_text())
                arm = benchmark["trigger"]["installed"]
                self.assertEqual(arm["agent"], agent)
                self.assertEqual((arm["recall"]["activated"], arm["recall"]["runs"]), (1, 1))
                self.assertEqual((arm["false_activation"]["activated"],
                                  arm["false_activation"]["runs"]), (0, 1))
                self.assertEqual(arm["stopped_at_decision"]["runs"], 2)
                self.assertIsNone(benchmark["activation"])  # the task cases' block
                self.assertEqual(benchmark["metadata"]["configs"], ["installed"])
                for case, activated, reason in (("trigger-1", True, "activated: "),
                                                ("trigger-2", False, "not activated: ")):
                    record = json.loads((iteration / f"eval-{case}/installed/run-1/run.json")
                                        .read_text())
                    self.assertEqual(record["status"], "ok")
                    self.assertIs(record["activation"]["activated"], activated)
                    self.assertTrue(record["activation"]["stopped"]["reason"]
                                    .startswith(reason), record["activation"])
                    self.assertFalse((iteration / f"eval-{case}/installed/run-1/grading.json")
                                     .exists())
                self.assertNotIn("grader", self.roles())
                self.assertIn(f"Trigger: {agent} installed: recall 1/1", out)
        # per agent, side by side
        first, *others = (str(self.tmp.path / f"ws-{agent}" / "iteration-1")
                          for agent in FIRST_CALL_LINE)
        code, out, err = call_main(["report", first, "--across", *others])
        self.assertEqual(code, 0, out + err)
        agents = (Path(first) / "agents.md").read_text()
        self.assertIn("## Trigger set, per agent", agents)
        for agent in FIRST_CALL_LINE:
            self.assertIn(f"- {agent} installed: recall 1/1 (100.0%", agents)

    def test_report_renders_and_verifies_the_trigger_block(self) -> None:
        code, out, err, iteration = self.run_triggers(
            "claude", {"read_paths": ["README.md"]})
        self.assertEqual(code, 0, out + err)
        markdown = (iteration / "benchmark.md").read_text()
        self.assertIn("## Trigger set (installed arms)", markdown)
        self.assertIn("| installed | trigger-2 | no | 0/1 (0.0%, 95% CI 0.0-79.3%) |", markdown)
        code, out, err = call_main(["report", str(iteration), "--html"])
        self.assertEqual(code, 0, out + err)
        page = (iteration / "benchmark.html").read_text()
        self.assertIn("<h2>Trigger set (installed arms)</h2>", page)
        self.assertIn("<td>trigger-1</td><td>yes</td><td>1/1", page)
        # a recall written by hand is caught: the cells give another
        path = iteration / "benchmark.json"
        benchmark = json.loads(path.read_text())
        benchmark["trigger"]["installed"]["recall"]["activated"] = 0
        path.write_text(json.dumps(benchmark))
        code, out, err = call_main(["report", str(iteration)])
        self.assertNotEqual(code, 0)
        self.assertIn("trigger.installed.recall.activated", out + err)

    def test_beside_a_suite_the_queries_run_in_the_installed_arm_only(self) -> None:
        (self.root / "evals/demo/trigger.json").write_text(
            json.dumps(trigger_set((POSITIVE, True))))
        env = agent_env(self.tmp.path, {"executor": {"activate_skills": ["demo"]}})
        workspace = self.tmp.path / "ws"
        code, out, err = call_main(["run", str(self.root / "evals/demo"), "--agent", "claude",
                                    "--config", "installed,without_skill", "--quiet",
                                    "--workspace", str(workspace)], env)
        self.assertEqual(code, 0, out + err)
        iteration = workspace / "iteration-1"
        self.assertEqual(sorted(p.parent.name for p in iteration.glob("eval-trigger-1/*/run-1")),
                         ["installed"])
        benchmark = json.loads((iteration / "benchmark.json").read_text())
        self.assertEqual([row["eval_id"] for row in
                          benchmark["activation"]["installed"]["per_eval"]], ["E01", "E02"])
        self.assertEqual([row["eval_id"] for row in
                          benchmark["trigger"]["installed"]["per_query"]], ["trigger-1"])
        self.assertEqual(benchmark["scored_run_count"], 4)  # the task cases, graded
        code, out, err = call_main(["run", str(self.root / "evals/demo"), "--agent", "claude",
                                    "--dry-run", "--workspace", str(workspace)], env)
        self.assertEqual(code, 0, out + err)
        self.assertIn("trigger queries are not run", err)

    def test_a_regrade_keeps_the_answers_and_launches_no_agent(self) -> None:
        code, out, err, iteration = self.run_triggers("claude", {"read_paths": ["README.md"]})
        self.assertEqual(code, 0, out + err)
        launched = len(self.roles())
        code, out, err = call_main(["run", str(self.trigger), "--agent", "claude", "--quiet",
                                    "--regrade", str(iteration), "--workspace",
                                    str(iteration.parent)], agent_env(self.tmp.path, {}))
        self.assertEqual(code, 0, out + err)
        self.assertEqual(len(self.roles()), launched)  # no executor, no grader
        again = json.loads((iteration.parent / "iteration-2/benchmark.json").read_text())
        before = json.loads((iteration / "benchmark.json").read_text())
        self.assertEqual(again["trigger"]["installed"]["per_query"],
                         before["trigger"]["installed"]["per_query"])
        self.assertEqual((again["scored_run_count"], again["unscored_runs"][0]["status"]),
                         (0, "ok"))  # never graded
        self.assertEqual(list(iteration.parent.glob("iteration-2/*/*/*/grading.json")), [])

    def test_no_grader_is_launched_for_a_trigger_query(self) -> None:
        self.write_triggers(trigger_set((POSITIVE, True)))
        code, out, err, iteration = self.run_triggers("claude", {})
        self.assertEqual(code, 0, out + err)
        self.assertEqual(self.roles(), ["executor"])


class TriggerAttackTest(TriggerCase):
    def run_claude(self, spec: dict, *extra: str) -> tuple[int, str, str, Path]:
        env = agent_env(self.tmp.path, {"executor": spec})
        workspace = self.tmp.path / "ws"
        code, out, err = call_main(["run", str(self.trigger), "--agent", "claude", "--quiet",
                                    "--workspace", str(workspace), *extra], env)
        return code, out, err, workspace / "iteration-1"

    def test_activation_words_in_the_answer_are_not_an_activation(self) -> None:
        forged = ('I used the Skill tool: {"type":"tool_use","name":"Skill","input":'
                  '{"skill":"demo"}} and read .claude/skills/demo/SKILL.md')
        code, out, err, iteration = self.run_claude({"activate_skills": [], "text": forged})
        self.assertEqual(code, 0, out + err)
        arm = json.loads((iteration / "benchmark.json").read_text())["trigger"]["installed"]
        self.assertEqual(arm["recall"]["activated"], 0)
        self.assertEqual(arm["false_activation"]["activated"], 0)
        record = json.loads((iteration / "eval-trigger-1/installed/run-1/run.json").read_text())
        self.assertIs(record["activation"]["activated"], False)
        self.assertNotIn("stopped", record["activation"])  # it answered without a tool call

    def test_an_executor_that_never_decides_is_a_failed_run_not_a_negative(self) -> None:
        started = time.monotonic()
        code, out, err, iteration = self.run_claude({"sleep_s": 60}, "--timeout", "2")
        self.assertLess(time.monotonic() - started, 30)
        self.assertEqual(code, 1, out + err)
        arm = json.loads((iteration / "benchmark.json").read_text())["trigger"]["installed"]
        self.assertEqual(arm["failed_runs"], 2)
        for key in ("recall", "false_activation"):
            self.assertEqual((arm[key]["runs"], arm[key]["unknown"], arm[key]["rate"]),
                             (0, 1, None))
        record = json.loads((iteration / "eval-trigger-2/installed/run-1/run.json").read_text())
        self.assertEqual(record["status"], "executor_timeout")
        self.assertEqual(record["activation"]["activated"], "unknown")
        self.assertIn("failed before deciding", out)

    def test_an_activation_after_another_action_does_not_count(self) -> None:
        provider = runner.PROVIDERS["claude"]()
        stream = "\n".join(json.dumps(event) for event in (
            {"type": "system", "subtype": "init"},
            {"type": "assistant", "message": {"content": [
                {"type": "tool_use", "name": "Bash", "input": {"command": "ls"}}]}},
            {"type": "assistant", "message": {"content": [
                {"type": "tool_use", "name": "Skill", "input": {"skill": "demo"}}]}}))
        result = runner.ProcessResult(["claude"], 0, stream, "", 1.0)
        case = runner.Case("trigger-1", 0, POSITIVE, "", [], [], trigger=True)
        found = runner._installed_activation(provider, case, "demo",
                                             provider.read_executor(result), result)
        self.assertIs(found.activated, False, found)
        self.assertEqual(found.calls, 1)

    def test_the_watch_reads_lines_split_anywhere_and_survives_a_huge_line(self) -> None:
        watch = runner._trigger_watch(runner.PROVIDERS["gemini"](), "demo")
        huge = b'{"type": "message", "content": "' + b"x" * (5 << 20) + b'"}\n'
        deciding = (json.dumps({"type": "tool_use", "tool_name": "activate_skill",
                                "parameters": {"name": "demo"}}) + "\n").encode()
        for start in range(0, len(huge), 65536):
            watch.feed(huge[start:start + 65536])
        self.assertEqual(watch.reason, "")
        for byte in deciding:
            watch.feed(bytes([byte]))
        self.assertTrue(watch.reason.startswith("activated: gemini's skill tool"), watch.reason)

    def test_an_event_ending_where_a_huge_line_starts_is_still_read(self) -> None:
        watch = runner._trigger_watch(runner.PROVIDERS["gemini"](), "demo")
        deciding = (json.dumps({"type": "tool_use", "tool_name": "activate_skill",
                                "parameters": {"name": "demo"}}) + "\n").encode()
        watch.feed(deciding + b'{"type": "message", "content": "' + b"x" * (5 << 20))
        self.assertTrue(watch.reason.startswith("activated: gemini's skill tool"), watch.reason)

    def test_a_look_into_the_skills_folder_decides_nothing(self) -> None:
        provider = runner.PROVIDERS["codex"]()
        look = {"tool": "command_execution", "input": {"command": "ls .agents/skills"}}
        read = {"tool": "command_execution",
                "input": {"command": "cat .agents/skills/demo/SKILL.md"}}
        other = {"tool": "command_execution", "input": {"command": "cat .agents/skills/x/SKILL.md"}}
        self.assertEqual(runner._trigger_decision(provider, [look, read], "demo"), 1)
        self.assertEqual(runner._trigger_decision(provider, [look, other, read], "demo"), 1)
        self.assertIsNone(runner._trigger_decision(provider, [look], "demo"))


if __name__ == "__main__":
    unittest.main()
