"""What a new user meets first: the CLI lookup, the README's first run, the start line."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import unittest
from pathlib import Path

from tests.helpers import (
    FAKES,
    PROJECT,
    TempDir,
    call_main,
    demo_suite,
    fake_calls,
    fake_env,
    make_repo,
    runner,
)


class AgentLookupTests(unittest.TestCase):
    """The CLI is looked up on the PATH the agents get, which loses the checkout's folders."""

    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.root = make_repo(self.tmp.path, demo_suite(2))
        inside = self.root / "tools" / "bin"
        inside.mkdir(parents=True)
        for name in ("claude", "codex", "_fakecore.py"):
            shutil.copy2(FAKES / name, inside / name)
        self.env = fake_env(self.tmp.path)
        # Only the copy inside the checkout: neither the bundled fakes nor a real claude (CI puts
        # the pinned CLIs on PATH) may be found elsewhere.
        rest = [p for p in self.env["PATH"].split(os.pathsep)
                if p != str(FAKES) and not os.path.exists(os.path.join(p, "claude"))]
        self.env["PATH"] = os.pathsep.join([str(inside), *rest])
        self.suite = str(self.root / "evals" / "demo" / "evals.json")

    def test_a_cli_inside_the_checkout_is_refused_before_anything_starts(self) -> None:
        code, out, err = call_main(["run", self.suite, "--agent", "claude"], env=self.env)
        self.assertEqual(code, 3, out + err)
        first = err.splitlines()[0]
        self.assertIn("inside the checkout", first)
        self.assertIn("fix:", err)
        self.assertIn("Try it without an agent CLI", err)
        self.assertEqual(fake_calls(self.tmp.path), [], "an agent was launched")
        self.assertFalse((self.root / "evals/demo/workspace").exists(), "an iteration was made")

    def test_dry_run_says_the_agents_would_not_find_it(self) -> None:
        code, out, err = call_main(["run", self.suite, "--agent", "claude", "--dry-run"],
                                   env=self.env)
        self.assertEqual(code, 0, err)
        self.assertIn("inside the checkout", out)
        self.assertIn("exit 3", out)


class ReadmeFirstRunTests(unittest.TestCase):
    """README's command for a machine without an agent CLI gives a complete run, with each
    of the four agents as the README says (only --agent changed)."""

    def test_the_readme_command_runs_every_cell_with_each_agent(self) -> None:
        text = (PROJECT / "README.md").read_text(encoding="utf-8")
        section = text.split("### Try it without an agent CLI", 1)[1]
        command = re.search(r"```\n(.*?)\n```", section, re.DOTALL).group(1).strip()
        self.assertIn("tests/fakes", command)
        self.assertTrue(command.endswith("--agent claude"), command)
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        clone = tmp.path / "clone"
        for rel in ("skills", "evals", "tests/fakes"):
            shutil.copytree(PROJECT / rel, clone / rel,
                            ignore=shutil.ignore_patterns("workspace", "__pycache__"))
        subprocess.run(["git", "init", "-q"], cwd=clone, check=True)
        # No agent CLI anywhere on PATH: only system folders; a home with no sign-in.
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp.path),
               "SKILL_EVAL_SANDBOX_ROOT": str(tmp.path), "TMPDIR": str(tmp.path)}
        for agent in ("claude", "codex", "gemini", "opencode"):
            with self.subTest(agent=agent):
                if shutil.which(agent, path=env["PATH"]):
                    self.skipTest(f"a {agent} CLI is installed in a system folder")
                argv = command[:-len("claude")] + agent
                done = subprocess.run(["bash", "-c", argv], cwd=clone, env=env,
                                      capture_output=True, text=True, timeout=300,
                                      stdin=subprocess.DEVNULL)
                self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
                self.assertRegex(done.stdout, r"\((\d+) runs, \1 scored, 0 excluded\)")
                self.assertIn("Executor-only tokens (grader excluded): with_skill ",
                              done.stdout)
                self.assertTrue((clone / f"evals/skill-eval/workspace/{agent}/iteration-1/"
                                 "benchmark.md").is_file())


if __name__ == "__main__":
    unittest.main()


class UsageErrorTests(unittest.TestCase):
    """A mistake on the command line: the error on the first line, its fix next, then --help."""

    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.root = make_repo(self.tmp.path, demo_suite(1))
        self.suite = str(self.root / "evals" / "demo" / "evals.json")

    def check(self, argv: list[str], first: str, fix: str, help_of: str) -> None:
        code, out, err = call_main(argv, env=fake_env(self.tmp.path))
        lines = err.splitlines()
        self.assertEqual(code, 2, err)
        self.assertEqual(out, "")
        self.assertTrue(lines[0].startswith("eval_runner: error: "), err)
        self.assertIn(first, lines[0])
        self.assertIn(fix, lines[1])
        self.assertTrue(lines[1].startswith("  fix: "), err)
        self.assertEqual(lines[-1], f"  help: {help_of} --help")
        self.assertLessEqual(len(lines), 3, "the usage block is back")

    def test_misspelt_choice_gets_did_you_mean(self) -> None:
        self.check(["run", self.suite, "--agent", "cluade"], "cluade",
                   "did you mean 'claude'?", "eval_runner.py run")

    def test_out_of_range_runs_names_the_range(self) -> None:
        self.check(["run", self.suite, "--agent", "claude", "--runs", "9"], "--runs", "1..5",
                   "eval_runner.py run")

    def test_misspelt_subcommand_gets_did_you_mean(self) -> None:
        self.check(["rnu", self.suite], "rnu", "did you mean 'run'?", "eval_runner.py")

    def test_unknown_option_gets_did_you_mean_from_its_command(self) -> None:
        self.check(["validate", self.suite, "--jsn"], "--jsn", "did you mean '--json'?",
                   "eval_runner.py validate")

    def test_missing_required_option_shows_its_values(self) -> None:
        self.check(["run", self.suite], "--agent",
                   "--agent {" + ",".join(sorted(runner.PROVIDERS)) + "}", "eval_runner.py run")

    def test_unknown_skill_name_gets_did_you_mean_from_the_skills_folder(self) -> None:
        suite = json.loads(Path(self.suite).read_text())
        suite["skill_name"] = "dmeo"
        Path(self.suite).write_text(json.dumps(suite))
        code, _, err = call_main(["validate", self.suite])
        self.assertEqual(code, 2)
        self.assertIn("did you mean 'demo'?", err)
