"""The README documents what the parser accepts, and CI runs the README's test command."""

from __future__ import annotations

import argparse
import re
import unittest

from tests.helpers import PROJECT, runner

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
                     runner.EXIT_ENVIRONMENT, runner.EXIT_INTERRUPTED):
            self.assertRegex(README, rf"\n\| {code} \|")


if __name__ == "__main__":
    unittest.main()
