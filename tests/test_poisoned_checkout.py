"""An unconfined executor that changes the checkout and covers its tracks is still caught.

Under `--isolation none` an executor can write into the source checkout. Two ways it could
once go unseen: rewrite the skill package so a later with_skill cell is handed its text, then
put the content and the times back; or change what git sees without touching a listed file (a
file hidden by `.git/info/exclude` or a self-ignoring `.gitignore`, a branch moved to another
commit). Every cell must be delivered the skill as it was before the first agent, and each
change must end in `checkout_modified`, exit 1, never `Sanity checks: OK`.
"""

from __future__ import annotations

import json
import os
import time
import unittest
from pathlib import Path

from tests import helpers as h
from tests.helpers import SKILL_MD, TempDir, call_main, demo_suite, fake_env, make_repo, runner

POISON = "---\nname: demo\ndescription: Use when testing skill-eval.\n---\n\n# Poisoned\n"


def load(iteration: Path, name: str = "benchmark.json") -> dict:
    return json.loads((iteration / name).read_text(encoding="utf-8"))


def changed_paths(iteration: Path) -> dict[str, str]:
    check = load(iteration)["metadata"]["checkout_check"]
    return {c["path"]: c["change"] for c in check["changed"]}


class UnconfinedRun(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.root = make_repo(self.tmp.path, demo_suite(3), files={"README.md": "readme\n"})

    def run_suite(self, script: dict, *extra: str) -> tuple[int, str, Path]:
        env = fake_env(self.tmp.path, script=script)
        code, out, err = call_main(["run", str(self.root / "evals/demo/evals.json"), "--agent",
                                    "claude", "--quiet", "--concurrency", "1", "--isolation",
                                    "none", *extra], env=env)
        return code, out + err, self.root / "evals/demo/workspace/claude/iteration-1"

    def assert_flagged(self, code: int, out: str, iteration: Path) -> None:
        self.assertEqual(code, 1, out)
        self.assertNotIn("Sanity checks: OK", out)
        self.assertIn("Sanity checks: REVIEW REQUIRED", out)
        kinds = [f["kind"] for f in load(iteration)["sanity_checks"]["flags"]]
        self.assertIn("checkout_modified", kinds)


class PoisonedSkillTests(UnconfinedRun):
    def test_a_skill_rewritten_and_restored_mid_run_reaches_no_cell_and_is_flagged(self) -> None:
        skill = str(self.root / "skills/demo/SKILL.md")
        script = {"executor": {"quote_reads": True}, "cases": [
            {"match": "Task number 1.", "role": "executor",
             "spec": {"shell_write_files": {skill: POISON}, "shell_keep_times": True}},
            {"match": "Task number 3.", "role": "executor",
             "spec": {"shell_write_files": {skill: SKILL_MD}, "shell_keep_times": True}}]}
        before = Path(skill).stat()
        code, out, iteration = self.run_suite(script, "--config", "with_skill")
        after = Path(skill).stat()
        self.assertEqual(Path(skill).read_text(), SKILL_MD, "the attack restored the file")
        self.assertEqual(after.st_mtime_ns, before.st_mtime_ns, "and its mtime")

        # What the next with_skill executor read (the fake quotes it) is the original text.
        read = (iteration / "eval-E02/with_skill/run-1/outputs/output.txt").read_text()
        self.assertIn("Say hello.", read)
        self.assertNotIn("Poisoned", read)
        self.assertNotIn("Poisoned", (iteration / "eval-E03/with_skill/run-1/outputs/"
                                      "output.txt").read_text())
        self.assert_flagged(code, out, iteration)
        self.assertEqual(changed_paths(iteration)["skills/demo/SKILL.md"],
                         "rewritten, times set back")

        manifest = load(iteration, "iteration_manifest.json")
        snapshot = manifest["skill_snapshot"]["with_skill"]
        self.assertEqual(snapshot["sha256"], runner.tree_hash(self.root,
                                                              ["skills/demo/SKILL.md"]))
        self.assertEqual(snapshot["files"], 1)
        self.assertEqual(snapshot["taken"], "before the first agent")
        for case in ("E01", "E02", "E03"):
            record = load(iteration / f"eval-{case}/with_skill/run-1", "run.json")
            self.assertEqual(record["sandbox"]["skill_package_sha256"], snapshot["sha256"])

    def test_every_revision_arm_is_delivered_from_its_snapshot(self) -> None:
        script = {"executor": {"quote_reads": True}}
        code, out, iteration = self.run_suite(script, "--config", "with_skill,with_skill@HEAD")
        self.assertEqual(code, 0, out)
        snapshots = load(iteration, "iteration_manifest.json")["skill_snapshot"]
        self.assertEqual(set(snapshots), {"with_skill", "with_skill@HEAD"})
        arms = load(iteration, "iteration_manifest.json")["arms"]
        self.assertEqual(snapshots["with_skill@HEAD"]["sha256"],
                         arms["with_skill@HEAD"]["package_sha256"])
        self.assertEqual(snapshots["with_skill@HEAD"]["sha256"],
                         snapshots["with_skill"]["sha256"], "HEAD holds the same package")

    def test_a_poisoned_private_copy_fails_the_cell_instead_of_delivering(self) -> None:
        # Unconfined, the runner's private copy sits in the temp area where an executor could
        # find it: each delivery is checked against the snapshot's hash.
        sandboxes = self.tmp.path / "sandboxes"
        copy = f"{sandboxes}/skill-eval-template-*/skill-package/skills/demo/SKILL.md"
        script = {"cases": [{"match": "Task number 1.", "role": "executor",
                             "spec": {"shell_write_files": {copy: POISON}}}]}
        code, out, iteration = self.run_suite(script, "--config", "with_skill")
        self.assertEqual(code, 1, out)
        self.assertNotIn("Sanity checks: OK", out)
        for case in ("E02", "E03"):
            record = load(iteration / f"eval-{case}/with_skill/run-1", "run.json")
            self.assertEqual(record["status"], "runner_error", record)
            self.assertIn("differs from the snapshot", record["failure"]["detail"])
        self.assertEqual(load(iteration / "eval-E01/with_skill/run-1", "run.json")["status"],
                         "ok")

    def test_a_poisoned_revision_copy_fails_the_cell_instead_of_delivering(self) -> None:
        copy = (f"{self.tmp.path}/sandboxes/skill-eval-template-*/revision-0/skills/demo/"
                "SKILL.md")
        script = {"cases": [{"match": "Task number 1.", "role": "executor",
                             "spec": {"shell_write_files": {copy: POISON}}}]}
        code, out, iteration = self.run_suite(script, "--config", "with_skill@HEAD")
        self.assertEqual(code, 1, out)
        record = load(iteration / "eval-E02/with_skill@HEAD/run-1", "run.json")
        self.assertEqual(record["status"], "runner_error", record)
        self.assertIn("differs from the snapshot", record["failure"]["detail"])


class CoveredWriteTests(UnconfinedRun):
    """Writes whose content is as before: a plain touch stays touched_only elsewhere."""

    def snapshot(self):
        return runner.CheckoutSnapshot.take(self.root, self.root / "evals/demo/workspace/"
                                            "claude/iteration-1", ("skills/demo/",),
                                            groups=runner.ProcessGroups())

    def test_a_rewrite_whose_times_are_set_back_is_a_change_anywhere(self) -> None:
        snapshot = self.snapshot()
        readme = self.root / "README.md"
        before = readme.stat()
        readme.write_text("owned\n")
        readme.write_text("readme\n")
        os.utime(readme, ns=(before.st_atime_ns, before.st_mtime_ns))
        self.assertEqual(snapshot.compare(runner.ProcessGroups()).to_json()["changed"],
                         [{"path": "README.md", "change": "rewritten, times set back"}])

    def test_a_touch_counts_only_outside_the_skill_package(self) -> None:
        snapshot = self.snapshot()
        later = time.time_ns() + 2_000_000_000
        for rel in ("README.md", "skills/demo/SKILL.md"):
            os.utime(self.root / rel, ns=(later, later))
        result = snapshot.compare(runner.ProcessGroups()).to_json()
        self.assertEqual(result["changed"], [{"path": "skills/demo/SKILL.md",
                                              "change": "written to (content as before)"}])
        self.assertEqual(result["touched_only"], 1)


class GitStateTests(UnconfinedRun):
    """What decides what git sees is in the snapshot: HEAD, refs, info/, config, hooks."""

    def branch(self) -> str:
        return h.git(self.root, "symbolic-ref", "HEAD").strip()

    def other_commit(self) -> str:
        return h.git(self.root, "commit-tree", "HEAD^{tree}", "-m", "planted").strip()

    def test_a_file_hidden_by_info_exclude_is_seen(self) -> None:
        git = self.root / ".git"
        script = {"executor": {"shell_write_files": {
            str(self.root / "planted.py"): "import os\n",
            str(git / "info/exclude"): "planted.py\n"}}}
        code, out, iteration = self.run_suite(script, "--config", "with_skill")
        self.assert_flagged(code, out, iteration)
        changed = changed_paths(iteration)
        self.assertEqual(changed.get("planted.py"), "added", changed)
        self.assertIn(".git/info/exclude", changed)

    def test_a_folder_that_ignores_itself_is_seen(self) -> None:
        script = {"executor": {"shell_write_files": {
            str(self.root / "hidden/.gitignore"): "*\n",
            str(self.root / "hidden/sitecustomize.py"): "import os\n"}}}
        code, out, iteration = self.run_suite(script, "--config", "with_skill")
        self.assert_flagged(code, out, iteration)
        self.assertEqual(changed_paths(iteration).get("hidden"), "added")

    def test_a_branch_moved_to_another_commit_is_seen(self) -> None:
        ref = self.branch()
        script = {"executor": {"shell_write_files": {
            str(self.root / ".git" / ref): self.other_commit() + "\n"}}}
        code, out, iteration = self.run_suite(script, "--config", "with_skill")
        self.assert_flagged(code, out, iteration)
        self.assertIn(f".git/{ref}", changed_paths(iteration))

    def test_a_branch_moved_in_packed_refs_is_seen(self) -> None:
        ref, commit = self.branch(), self.other_commit()
        h.git(self.root, "pack-refs", "--all")
        self.assertFalse((self.root / ".git" / ref).exists())
        script = {"executor": {"shell_write_files": {
            str(self.root / ".git/packed-refs"): f"{commit} {ref}\n"}}}
        code, out, iteration = self.run_suite(script, "--config", "with_skill")
        self.assert_flagged(code, out, iteration)
        self.assertEqual(changed_paths(iteration).get(".git/packed-refs"), "modified")

    def test_head_pointed_elsewhere_is_seen(self) -> None:
        h.git(self.root, "branch", "other", self.other_commit())
        script = {"executor": {"shell_write_files": {
            str(self.root / ".git/HEAD"): "ref: refs/heads/other\n"}}}
        code, out, iteration = self.run_suite(script, "--config", "with_skill")
        self.assert_flagged(code, out, iteration)
        self.assertIn(".git/HEAD", changed_paths(iteration))

    def test_ignored_folders_of_the_start_stay_out_of_the_snapshot(self) -> None:
        (self.root / ".gitignore").write_text("node_modules/\n*.log\n")
        (self.root / "node_modules/pkg").mkdir(parents=True)
        (self.root / "node_modules/pkg/index.js").write_text("x\n")
        (self.root / "debug.log").write_text("x\n")
        snapshot = runner.CheckoutSnapshot.take(self.root, self.root / "evals/demo/workspace/"
                                                "claude/iteration-1",
                                                groups=runner.ProcessGroups())
        self.assertIn("debug.log", snapshot.entries, "an ignored file is compared")
        self.assertIn("node_modules", snapshot.entries, "an ignored folder, as one entry")
        self.assertNotIn("node_modules/pkg/index.js", snapshot.entries)
        (self.root / "node_modules/pkg/index.js").write_text("changed\n")
        self.assertEqual(snapshot.compare(runner.ProcessGroups()).to_json()["changed_count"], 0,
                         "documented as unseen")
        later = time.time_ns() + 2_000_000_000
        os.utime(self.root / "debug.log", ns=(later, later))  # not hashed: a touch is a change
        self.assertEqual(snapshot.compare(runner.ProcessGroups()).to_json()["changed"],
                         [{"path": "debug.log", "change": "modified"}])
        self.assertIsNone(snapshot.entries["debug.log"][1], "compared by metadata, not read")

    def test_an_ignored_workspace_another_run_makes_is_not_a_change(self) -> None:
        (self.root / ".gitignore").write_text("evals/*/workspace/\n")
        iteration = self.root / "evals/demo/workspace/claude/iteration-1"
        iteration.mkdir(parents=True)
        (self.root / "evals/other").mkdir()
        (self.root / "evals/other/evals.json").write_text("{}")  # another suite
        snapshot = runner.CheckoutSnapshot.take(self.root, iteration, groups=runner.ProcessGroups())
        other = self.root / "evals/other/workspace/codex/iteration-1"
        other.mkdir(parents=True)
        (other / "benchmark.json").write_text("{}")
        (self.root / "evals/demo/workspace/codex").mkdir()
        self.assertEqual(snapshot.compare(runner.ProcessGroups()).to_json()["changed_count"], 0)
        (self.root / "evals/other/planted.py").write_text("x\n")
        self.assertEqual(snapshot.compare(runner.ProcessGroups()).to_json()["changed"],
                         [{"path": "evals/other/planted.py", "change": "added"}])

    def test_a_worktree_sees_its_own_branch_not_the_others(self) -> None:
        worktree = self.tmp.path / "wt"
        h.git(self.root, "worktree", "add", "-q", "-b", "side", str(worktree))
        snapshot = runner.CheckoutSnapshot.take(worktree, worktree / "evals/demo/workspace/"
                                                "claude/iteration-1",
                                                groups=runner.ProcessGroups())
        self.assertIn(".git/worktrees/wt/HEAD", snapshot.entries)
        self.assertIn(".git/refs/heads/side", snapshot.entries)
        self.assertNotIn(".git/HEAD", snapshot.entries, "the main checkout's own HEAD")
        h.git(self.root, "commit", "-q", "--allow-empty", "-m", "work elsewhere")
        self.assertEqual(snapshot.compare(runner.ProcessGroups()).to_json()["changed_count"], 0)
        h.git(worktree, "commit", "-q", "--allow-empty", "-m", "work here")
        self.assertEqual(snapshot.compare(runner.ProcessGroups()).to_json()["changed"],
                         [{"path": ".git/refs/heads/side", "change": "modified"}])


if __name__ == "__main__":
    unittest.main()
