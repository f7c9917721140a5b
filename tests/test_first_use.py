"""What a new user and a skill author hit on first use (issue 28): a workspace that ignores
itself, resuming after Ctrl-C, like-with-like comparisons, plans that cannot give a verdict,
a CLI that is not signed in, `report` flags typed the natural way, and small validation notes.
"""

from __future__ import annotations

import unittest

from tests.helpers import (
    TempDir,
    call_main,
    demo_suite,
    fake_env,
    git,
    make_repo,
)


class FirstUseBase(unittest.TestCase):
    cases = 2

    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.root = make_repo(self.tmp.path, demo_suite(self.cases))
        self.suite = str(self.root / "evals" / "demo" / "evals.json")
        self.env = fake_env(self.tmp.path)

    def run_main(self, *args: str, env: dict | None = None) -> tuple[int, str, str]:
        return call_main(list(args), env=env or self.env)


class WorkspaceIgnoresItselfTests(FirstUseBase):
    """A repository with no .gitignore: the workspace still stays out of `git status`."""

    def test_a_new_workspace_holds_a_gitignore_of_everything(self) -> None:
        self.assertFalse((self.root / ".gitignore").exists())
        code, _, err = self.run_main("run", self.suite, "--agent", "claude", "--quiet")
        self.assertIn(code, (0, 1), err)
        workspace = self.root / "evals" / "demo" / "workspace" / "claude"
        self.assertEqual((workspace / ".gitignore").read_text(), "*\n")
        self.assertTrue((workspace / "iteration-1" / "benchmark.json").is_file())
        self.assertEqual(git(self.root, "status", "--porcelain", "--untracked-files=all"), "")

    def test_an_existing_folder_given_as_workspace_is_left_as_it_is(self) -> None:
        mine = self.tmp.path / "mine"
        mine.mkdir()
        code, _, err = self.run_main("run", self.suite, "--agent", "claude", "--quiet",
                                     "--workspace", str(mine))
        self.assertIn(code, (0, 1), err)
        self.assertFalse((mine / ".gitignore").exists())
        self.assertTrue((mine / "iteration-1" / "benchmark.json").is_file())


if __name__ == "__main__":
    unittest.main()
