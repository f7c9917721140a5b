"""The README documents what the parser accepts, and CI runs the README's test command."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import unittest
from unittest import mock

from tests import TIERS, UNIT_MODULES
from tests.helpers import PROJECT, TempDir, runner

README = (PROJECT / "README.md").read_text(encoding="utf-8")


def subcommand_options() -> dict[str, list[str]]:
    parser = runner.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: [opt for action in p._actions for opt in action.option_strings
                   if opt.startswith("--") and opt != "--help"]
            for name, p in sub.choices.items()}


class ReadmeTests(unittest.TestCase):
    def test_every_option_is_documented(self) -> None:
        for command, options in subcommand_options().items():
            for option in options:
                with self.subTest(command=command, option=option):
                    self.assertRegex(README, rf"`{re.escape(option)}[ `]",
                                     f"README does not document {command} {option}")

    def test_every_documented_option_exists(self) -> None:
        known = {opt for options in subcommand_options().values() for opt in options}
        usage = README.split("## Usage", 1)[1].split("##", 1)[0]
        for option in set(re.findall(r"\[(--[a-z-]+)", usage)):
            with self.subTest(option=option):
                self.assertIn(option, known, f"README's usage names {option}, the parser lacks it")

    def test_set_up_commands_and_ci_agree(self) -> None:
        block = README.split("## Set up", 1)[1].split("```", 2)[1]
        commands = [line for line in block.splitlines() if line.strip()]
        self.assertEqual(len(commands), 2, commands)
        self.assertIn("eval_runner.py run evals/skill-eval/evals.json", commands[0])
        self.assertIn("--dry-run", commands[0])
        self.assertEqual(commands[1], "python3 -m unittest")
        ci = (PROJECT / ".ci" / "run").read_text(encoding="utf-8")
        self.assertIn("-m unittest", ci)

    def test_readme_stays_short_and_its_reference_links_resolve(self) -> None:
        # The README is for starting and using the tool; the reference lives with the skill.
        self.assertLessEqual(len(README.split()), 2600)
        skill = (PROJECT / "skills" / "skill-eval" / "SKILL.md").read_text(encoding="utf-8")
        linked = set(re.findall(r"\((skills/skill-eval/references/[\w.-]+\.md)", README))
        linked |= {"skills/skill-eval/" + rel
                   for rel in re.findall(r"`(references/[\w.-]+\.md)`", skill)}
        self.assertGreaterEqual(len(linked), 8)
        for rel in sorted(linked):
            with self.subTest(link=rel):
                self.assertTrue((PROJECT / rel).is_file(), f"{rel} is linked but missing")

    def test_exit_codes_match_the_runner(self) -> None:
        for code in (runner.EXIT_OK, runner.EXIT_REVIEW, runner.EXIT_INVALID,
                     runner.EXIT_ENVIRONMENT, runner.EXIT_INTERNAL, runner.EXIT_INTERRUPTED):
            self.assertRegex(README, rf"\n\| {code} \|")

    def test_skill_md_names_every_exit_code(self) -> None:
        skill = (PROJECT / "skills" / "skill-eval" / "SKILL.md").read_text(encoding="utf-8")
        line = " ".join(skill.split("- Exit codes:", 1)[1].split("\n- ", 1)[0].split())
        for code, word in ((runner.EXIT_OK, "clean"), (runner.EXIT_REVIEW, "finished"),
                           (runner.EXIT_INVALID, "invalid"),
                           (runner.EXIT_ENVIRONMENT, "agent CLI"),
                           (runner.EXIT_INTERNAL, "internal error"),
                           (runner.EXIT_INTERRUPTED, "interrupted")):
            self.assertRegex(line, rf"(^|; ){code} {word}", f"SKILL.md leaves out exit {code}")

    def help_of(self, option: str) -> str:
        parser = runner.build_parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        action = next(a for a in sub.choices["run"]._actions if option in a.option_strings)
        return action.help

    def test_skill_path_help_and_readme_say_the_same(self) -> None:
        row = re.search(r"\n\| `--skill-path P` \| (.*) \|\n", README).group(1)
        self.assertEqual(row, self.help_of("--skill-path"))
        self.assertIn("must name skills/<skill_name>/SKILL.md", row)

    def test_deadline_help_says_it_ends_running_cells_too(self) -> None:
        for text in (self.help_of("--deadline"),
                     re.search(r"\n\| `--deadline S` \| (.*) \|\n", README).group(1)):
            self.assertIn("still running are ended", text)
            self.assertIn("not started are cancelled", text)


def modules_of(found: list[unittest.TestCase]) -> set[str]:
    return {type(test).__module__ for test in found}


class TestTierTests(unittest.TestCase):
    """The README's `python3 -m unittest` is the quick tier; CI names every version's tier."""

    @classmethod
    def setUpClass(cls) -> None:
        # The whole suite, discovered once the way `python3 -m unittest` does from the project
        # root (through tests/__init__.py's load_tests), at the tier that keeps every module;
        # CI runs this test inside one part of some tier.
        import tests
        with mock.patch.object(tests, "TIER", "core"), mock.patch.dict(os.environ):
            os.environ.pop("SKILL_EVAL_TEST_SHARD", None)
            cls.found = list(tests._flatten(unittest.TestLoader().discover(
                str(PROJECT), "test*.py", str(PROJECT))))

    def test_the_plain_command_runs_only_the_unit_modules(self) -> None:
        import tests
        env = {k: v for k, v in os.environ.items()
               if k not in ("SKILL_EVAL_TEST_TIER", "SKILL_EVAL_TEST_SHARD")}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        for tier in (None, "", "unit"):  # unset, empty and named: the same quick tier
            if tier is not None:
                env["SKILL_EVAL_TEST_TIER"] = tier
            done = subprocess.run([sys.executable, "-c", "import tests; print(tests.TIER)"],
                                  cwd=PROJECT, env=env, capture_output=True, text=True,
                                  timeout=60, stdin=subprocess.DEVNULL)
            self.assertEqual((done.returncode, done.stdout.strip()), (0, "unit"), done.stderr)
        plain = modules_of(tests.tier_tests(self.found, "unit"))
        tiered = {next((name for name in UNIT_MODULES if module == name
                        or module.startswith(name + ".")), module) for module in plain}
        self.assertEqual(tiered, set(UNIT_MODULES))
        self.assertGreater(modules_of(tests.tier_tests(self.found, "core")), plain)

    def test_ci_sets_the_tier_of_every_version(self) -> None:
        ci = (PROJECT / ".ci" / "run").read_text(encoding="utf-8")
        function = re.search(r"^tier_for\(\) \{.*?^\}", ci, re.M | re.S).group(0)
        script = (f"REAL_CLI_PYTHON=3.11\n{function}\n"
                  "for v in 3.9 3.10 3.11 3.12 3.13; do echo \"$v $(tier_for $v)\"; done")
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)
        tiers = dict(line.split() for line in done.stdout.splitlines())
        self.assertEqual(tiers, {"3.9": "core", "3.10": "unit", "3.11": "full",
                                 "3.12": "unit", "3.13": "core"})
        self.assertTrue(set(tiers.values()) <= set(TIERS))
        self.assertRegex(ci, r'SKILL_EVAL_TEST_TIER="\$tier" SKILL_EVAL_TEST_SHARD=')
        self.assertRegex(ci, r'\n\s+"\$py" -m unittest -v </dev/null')

    def test_ci_runs_every_part_of_every_version_and_blames_the_failed_one(self) -> None:
        # The queue of .ci/run, run with a stand-in interpreter that reports its part at once
        # and fails one part of 3.9.
        ci = (PROJECT / ".ci" / "run").read_text(encoding="utf-8")
        queue = ci[ci.index("# Every version's tier is cut into parts"):
                   ci.index('if [ "$boundary_found" -eq 0 ]')]
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        fake = tmp.path / "python"
        fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && exit 0\n"
                        "echo \"$SKILL_EVAL_TEST_TIER $SKILL_EVAL_TEST_SHARD\" >> \"$0.parts\"\n"
                        "echo 'Ran 2 tests'\n"
                        "[ \"$SKILL_EVAL_TEST_TIER $SKILL_EVAL_TEST_SHARD\" != 'core 2/3' ]\n",
                        encoding="utf-8")
        fake.chmod(0o755)
        script = ("set -euo pipefail\nPYTHON_VERSIONS=(3.9 3.10 3.11)\nREAL_CLI_PYTHON=3.11\n"
                  "tier_for() { case $1 in 3.11) echo full ;; 3.9) echo core ;; "
                  "*) echo unit ;; esac; }\n"
                  f"resolve_python() {{ echo {fake}; }}\ntmp_dir={tmp.path}\n"
                  "section() { :; }\npass() { echo \"PASS: $1\"; }\n"
                  "fail() { echo \"FAIL: $1\"; }\n" + queue)
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)
        self.assertEqual(done.returncode, 0, done.stderr)
        ran = (tmp.path / "python.parts").read_text(encoding="utf-8").split()
        self.assertEqual(sorted(" ".join(pair) for pair in zip(ran[::2], ran[1::2])), [
            "core 1/3", "core 2/3", "core 3/3", "full 1/4", "full 2/4", "full 3/4",
            "full 4/4", "unit 1/2", "unit 2/2"])
        verdicts = [line for line in done.stdout.splitlines()
                    if line.startswith(("PASS", "FAIL"))]
        self.assertEqual([re.sub(r", \d+ s of a core", "", v) for v in verdicts], [
            "FAIL: python3.9 (core tier): unittest failed (exit 1)",
            "PASS: python3.10 (unit tier, 2 parts): ran 4 tests",
            "PASS: python3.11 (full tier, 4 parts): ran 8 tests"])
        starts = [line for line in done.stdout.splitlines() if line.startswith("started")]
        self.assertTrue(starts[0].startswith("started python3.11 (full tier)"), starts)

    def test_the_parts_of_a_tier_are_the_tier(self) -> None:
        import tests
        found = self.found
        self.assertGreater(len(found), 300)
        whole = sorted(test.id() for test in found)
        for count in (1, 2, 3, 4):  # .ci/run cuts a tier into up to 4
            parts = [[t.id() for t in tests.shard_of(found, k, count)] for k in
                     range(1, count + 1)]
            self.assertEqual(sorted(i for part in parts for i in part), whole, count)
            self.assertTrue(all(parts), count)  # no part is empty
            classes = [{i.rsplit(".", 1)[0] for i in part} for part in parts]
            for k, mine in enumerate(classes):  # a class is never split
                self.assertFalse(mine & set().union(*classes[:k], *classes[k + 1:]), count)
        with self.assertRaises(ValueError):
            tests.shard_spec("3/2")


if __name__ == "__main__":
    unittest.main()
