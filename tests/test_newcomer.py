"""What a new user meets first: the CLI lookup, the README's first run, the start line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import unittest

from tests.helpers import (
    FAKES,
    PROJECT,
    TempDir,
    call_main,
    demo_suite,
    fake_calls,
    fake_env,
    make_repo,
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
        # Only the copy inside the checkout: the bundled fakes are not on PATH.
        rest = [p for p in self.env["PATH"].split(os.pathsep) if p != str(FAKES)]
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
    """README's command for a machine without an agent CLI gives a complete run."""

    def test_the_readme_command_runs_every_cell(self) -> None:
        text = (PROJECT / "README.md").read_text(encoding="utf-8")
        section = text.split("### Try it without an agent CLI", 1)[1]
        command = re.search(r"```\n(.*?)\n```", section, re.DOTALL).group(1).strip()
        self.assertIn("tests/fakes", command)
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        clone = tmp.path / "clone"
        for rel in ("skills", "evals", "tests/fakes"):
            shutil.copytree(PROJECT / rel, clone / rel,
                            ignore=shutil.ignore_patterns("workspace", "__pycache__"))
        subprocess.run(["git", "init", "-q"], cwd=clone, check=True)
        # No agent CLI anywhere on PATH: only system folders.
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp.path),
               "SKILL_EVAL_SANDBOX_ROOT": str(tmp.path), "TMPDIR": str(tmp.path)}
        if shutil.which("claude", path=env["PATH"]):
            self.skipTest("a claude CLI is installed in a system folder")
        done = subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True,
                              text=True, timeout=300, stdin=subprocess.DEVNULL)
        self.assertIn(done.returncode, (0, 1), done.stdout + done.stderr)
        self.assertRegex(done.stdout, r"\((\d+) runs, \1 scored, 0 excluded\)")
        self.assertTrue((clone / "evals/skill-eval/workspace/claude/iteration-1/benchmark.md")
                        .is_file())


if __name__ == "__main__":
    unittest.main()
