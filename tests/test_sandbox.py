"""The sandbox on its own: file copies, the baseline repositories, change detection."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import tempfile
import threading
import unittest
from pathlib import Path
from unittest import mock

from tests.helpers import TempDir, demo_suite, make_repo, runner

GIT = shutil.which("git")


class CopyFilePreservingTests(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.source = self.tmp.path / "tool.sh"
        self.source.write_bytes(b"#!/bin/sh\necho hi\n" * 5000)
        self.source.chmod(0o751)
        os.utime(self.source, ns=(1_600_000_000_123_456_789, 1_500_000_000_987_654_321))

    def check_copy(self, target: Path) -> None:
        self.assertEqual(target.read_bytes(), self.source.read_bytes())
        self.assertEqual(stat.S_IMODE(target.stat().st_mode), 0o751)
        self.assertEqual(target.stat().st_mtime_ns, 1_500_000_000_987_654_321)

    def test_content_mode_and_mtime_are_kept(self) -> None:
        target = self.tmp.path / "copy.sh"
        self.assertTrue(runner._copy_file_preserving(str(self.source), str(target)))
        self.check_copy(target)

    def test_without_an_in_kernel_copy_the_bytes_still_arrive(self) -> None:
        target = self.tmp.path / "copy.sh"
        refused = OSError(errno.EXDEV, "Invalid cross-device link")
        with mock.patch.object(os, "copy_file_range", side_effect=refused, create=True):
            self.assertTrue(runner._copy_file_preserving(str(self.source), str(target)))
        self.check_copy(target)

    def test_a_fifo_or_a_missing_file_is_refused_without_waiting(self) -> None:
        fifo = self.tmp.path / "pipe"
        os.mkfifo(fifo)
        done = []
        worker = threading.Thread(target=lambda: done.append(
            runner._copy_file_preserving(str(fifo), str(self.tmp.path / "out"))), daemon=True)
        worker.start()
        worker.join(10)
        self.assertEqual(done, [False], "opening a FIFO must not block the copy")
        self.assertFalse(runner._copy_file_preserving(str(self.tmp.path / "gone"),
                                                      str(self.tmp.path / "out2")))

    def test_a_link_as_source_is_not_followed(self) -> None:
        link = self.tmp.path / "link"
        link.symlink_to(self.source)
        self.assertFalse(runner._copy_file_preserving(str(link), str(self.tmp.path / "out")))


@unittest.skipIf(GIT is None, "git is not installed")
class BaselineTests(unittest.TestCase):
    """A cell without fixtures reads the iteration's shared baseline; a cell with fixtures gets
    its own. Either way a fresh sandbox shows no change and every kind of change is seen."""

    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        suite = demo_suite(2)
        suite["evals"][1]["files"] = ["evals/demo/files/input.txt"]
        self.root = make_repo(self.tmp.path, suite, files={
            "src/app.py": "print('app')\n", "README.md": "readme\n",
            "evals/demo/files/input.txt": "fixture\n"})
        self.suite = runner.load_valid_suite(str(self.root / "evals/demo/evals.json"),
                                             str(self.root))
        self.base = Path(tempfile.mkdtemp(dir=self.tmp.path))
        self.groups = runner.ProcessGroups()
        self.run_folder = self.tmp.path / "iteration"
        self.snapshot = runner.RepoSnapshot.take(self.root, "demo", groups=self.groups)
        self.snapshot.template = runner.build_git_template(self.snapshot, self.base, self.groups)
        self.assertIsNone(self.snapshot.template.error)
        runner.add_runner_baselines(self.snapshot.template, self.run_folder / ".baselines")

    def build(self, case_index: int, with_skill: bool) -> runner.Sandbox:
        cell_folder = Path(tempfile.mkdtemp(dir=self.run_folder))
        sandbox = runner.build_sandbox(self.snapshot, self.suite.cases[case_index], with_skill,
                                       runner.Sandbox.new(self.base,
                                                          cell_folder / "baseline.git"),
                                       groups=self.groups)
        self.addCleanup(sandbox.remove)
        self.assertTrue(sandbox.git.ok, sandbox.git)
        return sandbox

    def changes(self, sandbox: runner.Sandbox) -> dict:
        found = runner.sandbox_changes(sandbox.repo, sandbox.baseline_git, sandbox.git,
                                       self.groups).to_json()
        self.assertTrue(found["captured"], found)
        return {k: found[k] for k in ("added", "modified", "deleted")}

    def agent_git(self, sandbox: runner.Sandbox, *args: str) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        return subprocess.run(["git", *args], cwd=sandbox.repo, env=env, capture_output=True,
                              text=True, check=True).stdout

    def test_a_renamed_fixture_is_named_by_both_its_names(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        subprocess.run(["git", "mv", "evals/demo/files/input.txt", "evals/demo/files/moved.txt"],
                       cwd=self.root, env=env, check=True)
        state = runner.fixture_status(self.root, ["evals/demo/files"], self.groups)
        self.assertEqual(state.dirty, ("evals/demo/files/input.txt",
                                       "evals/demo/files/moved.txt"))

    def test_every_kind_of_cell_starts_clean_and_sees_every_change(self) -> None:
        for case_index, with_skill, shared in ((0, False, True), (0, True, True),
                                               (1, False, False), (1, True, False)):
            with self.subTest(case=case_index, with_skill=with_skill):
                sandbox = self.build(case_index, with_skill)
                self.assertEqual(sandbox.git.shared_baseline, shared)
                self.assertEqual(self.changes(sandbox), {"added": [], "modified": [],
                                                         "deleted": []})
                self.assertEqual(self.agent_git(sandbox, "status", "--porcelain"), "")
                (sandbox.repo / "src/app.py").write_text("print('changed')\n")
                (sandbox.repo / "README.md").unlink()
                (sandbox.repo / "new.txt").write_text("new\n")
                self.assertEqual(self.changes(sandbox), {
                    "added": ["new.txt"], "modified": ["src/app.py"], "deleted": ["README.md"]})
                self.assertIn("-print('app')", self.agent_git(sandbox, "diff"))

    def test_reading_changes_never_rewrites_the_shared_baseline(self) -> None:
        sandbox = self.build(0, False)
        index = sandbox.baseline_git / "index"
        before = index.read_bytes()
        (sandbox.repo / "src/app.py").write_text("print('changed')\n")
        os.utime(sandbox.repo / "README.md", (1_700_000_000, 1_700_000_000))  # same content
        self.assertEqual(self.changes(sandbox)["modified"], ["src/app.py"])
        self.assertEqual(index.read_bytes(), before)

    def test_removing_a_sandbox_keeps_the_shared_baseline_until_the_iteration_ends(self) -> None:
        first, second = self.build(0, False), self.build(0, False)
        shared = first.baseline_git
        self.assertEqual(shared, second.baseline_git)
        first.remove()
        self.assertFalse(first.cell_dir.exists())
        self.assertTrue(shared.is_dir())
        self.assertEqual(self.changes(second)["modified"], [])
        self.snapshot.template.remove_runner_baselines()
        self.assertFalse((self.run_folder / ".baselines").exists())

    def test_a_without_skill_sandbox_cannot_reach_the_skill_through_git_objects(self) -> None:
        # Every object the sandbox's git can read, the borrowed object stores included.
        marker = (self.root / "skills/demo/SKILL.md").read_text(encoding="utf-8")
        for case_index, with_skill in ((0, False), (1, False), (0, True), (1, True)):
            with self.subTest(case=case_index, with_skill=with_skill):
                sandbox = self.build(case_index, with_skill)
                env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
                objects = subprocess.run(
                    ["git", "cat-file", "--batch-all-objects", "--batch"], cwd=sandbox.repo,
                    env=env, capture_output=True, check=True, stdin=subprocess.DEVNULL).stdout
                self.assertEqual(marker.encode() in objects, with_skill)
                self.assertEqual((sandbox.repo / "skills/demo/SKILL.md").exists(), with_skill)


if __name__ == "__main__":
    unittest.main()
