"""The executor prompt, the plan of cells, and run options from an argv list."""

from __future__ import annotations

import argparse
import contextlib
import io
import unittest
from pathlib import Path

from tests.helpers import TempDir, runner


def make_suite(root: Path, cases: list | None = None) -> runner.Suite:
    cases = cases if cases is not None else [
        runner.Case(id="E01", index=0, prompt="Plan the database migration.",
                    name="secret case name", expectations=["It names a rollback step."],
                    files=["fixtures/schema.sql"]),
        runner.Case(id=7, index=1, prompt="Write a haiku.", name="haiku",
                    expectations=["It has three lines."], files=[]),
        runner.Case(id="E03", index=2, prompt="Summarise.", name="summary",
                    expectations=[], files=[]),
    ]
    return runner.Suite(path=root / "evals" / "migrate" / "evals.json", root=root,
                        skill_name="migrate",
                        common_assertions=["The reply is in English.", "It is polite."],
                        cases=cases, sha256="0" * 64)


class ExecutorPromptTest(unittest.TestCase):
    def setUp(self):
        self.sandbox = Path("/sandboxes/cell-1/repo")
        self.suite = make_suite(Path("/repo"))
        self.case = self.suite.cases[0]
        self.prompts = {config: runner._build_executor_prompt(self.suite, self.case, config,
                                                              self.sandbox)
                        for config in runner.CONFIGS}

    def test_no_assertion_text_or_case_name_reaches_the_executor(self):
        for config, prompt in self.prompts.items():
            for text in self.suite.assertions_for(self.case):
                with self.subTest(config=config, assertion=text):
                    self.assertNotIn(text, prompt)
            self.assertNotIn(self.case.name, prompt)

    def test_task_and_files_are_given(self):
        for prompt in self.prompts.values():
            self.assertIn("Plan the database migration.", prompt)
            self.assertIn("- fixtures/schema.sql", prompt)
            self.assertIn(str(self.sandbox), prompt)

    def test_artifact_path_is_the_same_for_both_configs(self):
        artifact = f"Artifact path: {self.sandbox / '.skill-eval' / 'artifact.md'}"
        for config, prompt in self.prompts.items():
            with self.subTest(config=config):
                self.assertEqual(prompt.count(artifact), 1)

    def test_skill_path_only_with_the_skill(self):
        skill_md = f"Skill path: {self.sandbox / 'skills' / 'migrate' / 'SKILL.md'}"
        self.assertIn(skill_md, self.prompts["with_skill"])
        without = self.prompts["without_skill"]
        self.assertNotIn("Skill path", without)
        self.assertNotIn("SKILL.md", without)
        self.assertNotIn("migrate", without)
        self.assertIn("Use no agent skill", without)

    def test_the_configs_differ_only_in_the_skill_section(self):
        def without_skill_section(prompt: str) -> str:
            head, _, rest = prompt.partition("# Skill\n")
            return head + rest[rest.index("# Deliverable"):]

        self.assertEqual(without_skill_section(self.prompts["with_skill"]),
                         without_skill_section(self.prompts["without_skill"]))

    def test_a_case_without_files_lists_none(self):
        prompt = runner._build_executor_prompt(self.suite, self.suite.cases[1], "with_skill",
                                               self.sandbox)
        self.assertIn("Write a haiku.", prompt)
        self.assertNotIn("Files provided", prompt)


class PlanCellsTest(unittest.TestCase):
    def setUp(self):
        self.suite = make_suite(Path("/repo"))
        self.iteration = Path("/ws/iteration-3")

    def plan(self, **options) -> list:
        return runner.plan_cells(self.suite, runner.RunOptions(agent="claude", **options),
                                 self.iteration)

    def test_case_then_config_then_run(self):
        cells = self.plan(runs=2)
        self.assertEqual([(c.case.key, c.config, c.run_number) for c in cells], [
            (key, config, run) for key in ("E01", "7", "E03")
            for config in ("with_skill", "without_skill") for run in (1, 2)])

    def test_folders_and_labels(self):
        cells = self.plan(runs=2)
        self.assertEqual(cells[0].run_dir, self.iteration / "eval-E01" / "with_skill" / "run-1")
        self.assertEqual(cells[5].run_dir, self.iteration / "eval-7" / "with_skill" / "run-2")
        self.assertEqual(cells[5].label, "eval-7/with_skill/run-2")
        self.assertEqual(len({c.run_dir for c in cells}), len(cells))

    def test_config_order_is_kept(self):
        cells = self.plan(configs=("without_skill", "with_skill"))
        self.assertEqual([c.config for c in cells[:2]], ["without_skill", "with_skill"])
        self.assertEqual([c.config for c in self.plan(configs=("without_skill",))],
                         ["without_skill"] * 3)

    def test_selected_ids_in_suite_order(self):
        cells = self.plan(eval_ids=["E03", "7"], configs=("with_skill",))
        self.assertEqual([c.case.key for c in cells], ["7", "E03"])

    def test_no_cases_no_cells(self):
        self.assertEqual(runner.plan_cells(make_suite(Path("/repo"), cases=[]),
                                           runner.RunOptions(agent="codex"), self.iteration),
                         [])


class OptionsFromArgsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.root = self.tmp.path / "repo"
        (self.root / "skills" / "migrate").mkdir(parents=True)
        (self.root / "skills" / "migrate" / "SKILL.md").write_text("skill", encoding="utf-8")
        self.suite = make_suite(self.root)

    def parse(self, *extra: str, agent: str = "claude") -> argparse.Namespace:
        argv = ["run", str(self.suite.path), "--agent", agent, *extra]
        with contextlib.redirect_stderr(io.StringIO()):
            return runner.build_parser().parse_args(argv)

    def options(self, *extra: str, agent: str = "claude") -> runner.RunOptions:
        return runner.options_from_args(self.parse(*extra, agent=agent), self.suite)

    def assert_refused(self, *extra: str, agent: str = "claude", says: str = "") -> None:
        with self.assertRaises(runner.InputError) as caught:
            self.options(*extra, agent=agent)
        self.assertIsInstance(caught.exception, runner.EvalError)
        self.assertTrue(caught.exception.fix, "every refusal says how to proceed")
        self.assertIn(says, caught.exception.message)

    def test_defaults(self):
        options = self.options()
        self.assertEqual(options, runner.RunOptions(
            agent="claude", configs=("with_skill", "without_skill"), runs=1, timeout_s=600.0,
            concurrency=4, deadline_s=None, executor_model=None, grader_model=None,
            skill_md=self.root / "skills" / "migrate" / "SKILL.md",
            workspace=self.root / "evals" / "migrate" / "workspace" / "claude", eval_ids=None,
            keep_sandboxes=False, agent_settings=[], quiet=False, junit=None))

    def test_numbers_at_their_bounds(self):
        options = self.options("--runs", "5", "--concurrency", "16", "--timeout", "2.5",
                               "--deadline", "30")
        self.assertEqual((options.runs, options.concurrency, options.timeout_s,
                          options.deadline_s), (5, 16, 2.5, 30.0))
        low = self.options("--runs", "1", "--concurrency", "1")
        self.assertEqual((low.runs, low.concurrency), (1, 1))

    def test_numbers_out_of_bounds_are_refused(self):
        for flag, value in [("--runs", "0"), ("--runs", "6"), ("--runs", "2.0"),
                            ("--runs", "many"), ("--concurrency", "0"),
                            ("--concurrency", "17"), ("--timeout", "0"), ("--timeout", "-5"),
                            ("--timeout", "nan"), ("--timeout", "inf"),
                            ("--timeout", "soon"), ("--deadline", "0")]:
            with self.subTest(flag=flag, value=value):
                self.assert_refused(f"{flag}={value}", says=flag)

    def test_config_list(self):
        self.assertEqual(self.options("--config", "without_skill,with_skill").configs,
                         ("without_skill", "with_skill"))
        self.assertEqual(self.options("--config", " with_skill , without_skill ").configs,
                         ("with_skill", "without_skill"))
        only_without = self.options("--config", "without_skill")
        self.assertEqual(only_without.configs, ("without_skill",))
        self.assertIsNone(only_without.skill_md, "no with_skill run: no skill file needed")

    def test_bad_config_lists_are_refused(self):
        for value in ["", "with_skill,with_skill", "with-skill", "with_skill,", "baseline",
                      "with_skill,with_skill@a|b", "with_skill,installed@v1\x9b2J"]:
            with self.subTest(value=value):
                self.assert_refused(f"--config={value}", says="--config")

    def test_models(self):
        both = self.options("--model", "opus")
        self.assertEqual((both.executor_model, both.grader_model), ("opus", "opus"))
        split = self.options("--model", "opus", "--grader-model", "haiku")
        self.assertEqual((split.executor_model, split.grader_model), ("opus", "haiku"))
        for value in ["", " opus", "-x"]:
            with self.subTest(value=value):
                self.assert_refused(f"--model={value}", says="--model")

    def test_eval_ids(self):
        self.assertEqual(self.options("--eval-id", "E03, 7").eval_ids, ["E03", "7"])
        self.assert_refused("--eval-id", "E01,E99", says="E99")
        self.assert_refused("--eval-id", ",", says="(empty)")
        with self.assertRaises(runner.InputError) as caught:
            self.options("--eval-id", "nope")
        self.assertIn("E01", caught.exception.fix)

    def test_codex_config(self):
        options = self.options("--codex-config", "model_provider=fake",
                               "--codex-config", "a.b=1", agent="codex")
        self.assertEqual(options.agent_settings, ["model_provider=fake", "a.b=1"])
        self.assert_refused("--codex-config", "model_provider=fake", agent="claude",
                            says="--agent-config")
        generic = self.options("--agent-config", "general.maxAttempts=2", agent="gemini")
        self.assertEqual(generic.agent_settings, ["general.maxAttempts=2"])
        self.assert_refused("--agent-config", "a=1", agent="claude", says="--agent-config")
        self.assert_refused("--codex-config", "no-equals", agent="codex", says="KEY=VALUE")
        self.assert_refused("--codex-config", "=value", agent="codex", says="KEY=VALUE")

    def test_agent_is_required_and_known(self):
        with contextlib.redirect_stderr(io.StringIO()):
            for argv in (["run", "s.json"], ["run", "s.json", "--agent", "aider"]):
                with self.subTest(argv=argv), self.assertRaises(runner.InputError) as caught:
                    # argparse refuses an unknown agent; cmd_run a missing one (--resume
                    # alone needs none: the iteration recorded it).
                    runner.cmd_run(runner.build_parser().parse_args(argv), argv, {})
                self.assertIn("--agent", caught.exception.message)
                self.assertTrue(caught.exception.fix)

    def test_skill_path(self):
        skill_md = self.root / "skills" / "migrate" / "SKILL.md"
        self.assertEqual(self.options("--skill-path", "skills/migrate").skill_md, skill_md)
        self.assertEqual(self.options("--skill-path", str(skill_md)).skill_md, skill_md)
        other = self.root / "elsewhere" / "SKILL.md"
        other.parent.mkdir()
        other.write_text("x", encoding="utf-8")
        self.assert_refused("--skill-path", str(other), says="is not skills/migrate/SKILL.md")
        self.assert_refused("--skill-path", ".claude/skills/migrate/SKILL.md", says=".claude")
        self.assert_refused("--skill-path", "skills/missing", says="not an existing file")

    def test_paths_are_made_absolute(self):
        options = self.options("--workspace", "ws", "--junit", "out/results.xml")
        self.assertTrue(options.workspace.is_absolute())
        self.assertEqual(options.workspace.name, "ws")
        self.assertTrue(options.junit.is_absolute())
        self.assertEqual(options.junit.name, "results.xml")
        self.assert_refused("--junit", str(self.tmp.path), says="--junit")

    def test_flags(self):
        options = self.options("--keep-sandboxes", "--quiet")
        self.assertTrue(options.keep_sandboxes)
        self.assertTrue(options.quiet)
