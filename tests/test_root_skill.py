"""A repository that is the skill: SKILL.md at its root, evals/evals.json beside it (issue 34).

with_skill gets the repository's tracked files (but evals/) at skills/<name>/ in its sandbox;
without_skill gets no file of the package, checked by content hash, as the installed arm is.
"""

from __future__ import annotations

import hashlib
import json
import os
import unittest
from pathlib import Path

from tests.helpers import TempDir, call_main, fake_env, git, runner

SKILL = "---\nname: tidy\ndescription: Use when tidying a text file.\n---\n\nFollow references/style.md.\n"
STYLE = "ROOT-PACKAGE-MARKER-3Kp9: one sentence per line.\n"
SUITE = {"skill_name": "tidy", "evals": [
    {"id": 1, "prompt": "Tidy evals/files/in.txt.", "files": ["evals/files/in.txt"],
     "assertions": ["The text has one sentence per line."]},
    {"id": 2, "prompt": "Say what a tidy file looks like.",
     "assertions": ["It describes a tidy file."]}]}


def root_skill_repo(base: Path, extra: dict[str, str] | None = None,
                    track: bool = True) -> Path:
    root = base / "tidy"
    files = {"SKILL.md": SKILL, "references/style.md": STYLE, "scripts/tidy.py": "print(1)\n",
             "README.md": "# tidy\n", "evals/evals.json": json.dumps(SUITE),
             "evals/files/in.txt": "One. Two.\n", **(extra or {})}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    git(root, "init", "-q")
    git(root, "add", "-A")
    if not track:
        git(root, "rm", "-q", "--cached", "SKILL.md")
    git(root, "commit", "-qm", "init")
    return root


def content_hashes(folder: Path) -> dict[str, str]:
    """sha256 -> one path, for every regular file under folder but git's own."""
    found = {}
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink() and ".git" not in path.parts:
            found[hashlib.sha256(path.read_bytes()).hexdigest()] = str(path)
    return found


class RootSkillValidateTests(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)

    def test_the_repository_and_its_suite_validate(self) -> None:
        root = root_skill_repo(self.tmp.path)
        for target in (root, root / "evals" / "evals.json"):
            with self.subTest(target=target):
                code, out, err = call_main(["validate", str(target)])
                self.assertEqual(code, 0, err)
                self.assertIn("2 cases, 2 assertions, 1 fixture files", out)
        self.assertTrue(runner.load_suite(root / "evals/evals.json").suite.at_root)

    def test_a_skill_name_that_is_not_the_root_skill_names_what_it_saw(self) -> None:
        root = root_skill_repo(self.tmp.path)
        suite = dict(SUITE, skill_name="tiddy")
        (root / "evals/evals.json").write_text(json.dumps(suite))
        code, out, _ = call_main(["validate", str(root / "evals/evals.json"), "--json"])
        self.assertEqual(code, 2)
        [error] = json.loads(out)["errors"]
        self.assertIn("the repository's own SKILL.md names the skill 'tidy'", error["message"])
        self.assertIn("did you mean 'tidy'?", error["fix"])

    def test_a_fixture_outside_evals_is_package_not_task_material(self) -> None:
        root = root_skill_repo(self.tmp.path)
        suite = json.loads(json.dumps(SUITE))
        suite["evals"][0]["files"] = ["references/style.md"]
        (root / "evals/evals.json").write_text(json.dumps(suite))
        code, out, _ = call_main(["validate", str(root / "evals/evals.json"), "--json"])
        self.assertEqual(code, 2)
        [error] = json.loads(out)["errors"]
        self.assertIn("fixtures live under evals/", error["message"])

    def test_a_fixture_linked_into_the_package_is_refused(self) -> None:
        root = root_skill_repo(self.tmp.path)
        os.symlink("../../references/style.md", root / "evals/files/style.md")
        suite = json.loads(json.dumps(SUITE))
        suite["evals"][0]["files"] = ["evals/files/style.md"]
        (root / "evals/evals.json").write_text(json.dumps(suite))
        code, out, _ = call_main(["validate", str(root / "evals/evals.json"), "--json"])
        self.assertEqual(code, 2)
        [error] = json.loads(out)["errors"]
        self.assertIn("holds the target skill's package", error["message"])

    def test_a_linked_root_skill_md_is_never_the_skill(self) -> None:
        root = root_skill_repo(self.tmp.path)
        elsewhere = self.tmp.path / "SKILL.md"
        elsewhere.write_text(SKILL)
        os.remove(root / "SKILL.md")
        os.symlink(elsewhere, root / "SKILL.md")
        code, out, _ = call_main(["validate", str(root / "evals/evals.json"), "--json"])
        self.assertEqual(code, 2)
        self.assertIn("is a link", json.loads(out)["errors"][0]["message"])

    def test_an_untracked_root_skill_md_is_refused_before_any_agent(self) -> None:
        root = root_skill_repo(self.tmp.path, track=False)
        env = fake_env(self.tmp.path)
        code, _, err = call_main(["run", str(root), "--agent", "claude"], env=env)
        self.assertEqual(code, 2)
        self.assertIn("is not a file git tracks", err)
        self.assertFalse(any((self.tmp.path / "log").iterdir()), "an agent was started")

    def test_a_fixture_that_copies_a_package_file_is_kept_from_every_sandbox(self) -> None:
        suite = json.loads(json.dumps(SUITE))
        suite["evals"][0]["files"].append("evals/files/notes.md")
        root = root_skill_repo(self.tmp.path, {"evals/files/notes.md": STYLE,
                                               "evals/evals.json": json.dumps(suite)})
        code, out, _ = call_main(["validate", str(root), "--json"])
        self.assertEqual(code, 0, out)
        kept = [w["message"] for w in json.loads(out)["warnings"] if "no sandbox" in w["message"]]
        self.assertEqual(kept, ["evals/files/notes.md is a copy of references/style.md; no "
                                "sandbox gets it"])

    def test_validate_reports_an_untracked_root_skill_md(self) -> None:
        root = root_skill_repo(self.tmp.path, track=False)
        code, out, _ = call_main(["validate", str(root / "evals/evals.json"), "--json"])
        self.assertEqual(code, 2)
        [error] = json.loads(out)["errors"]
        self.assertIn("is not a file git tracks", error["message"])

    def test_arms_at_a_revision_are_refused(self) -> None:
        root = root_skill_repo(self.tmp.path)
        code, _, err = call_main(["run", str(root), "--agent", "claude", "--config",
                                  "with_skill@HEAD,without_skill", "--dry-run"],
                                 env=fake_env(self.tmp.path))
        self.assertEqual(code, 2)
        self.assertIn("the skill is the repository itself", err)


class RootSkillRunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = TempDir()
        # A host copy of the skill where an agent CLI would find it: never the package.
        cls.root = root_skill_repo(cls.tmp.path, {".claude/skills/tidy/SKILL.md": SKILL})
        cls.code, cls.out, cls.err = call_main(
            ["run", str(cls.root), "--agent", "claude", "--keep-sandboxes", "--quiet"],
            env=fake_env(cls.tmp.path))
        cls.iteration = cls.root / "evals/tidy/workspace/claude/iteration-1"

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def sandbox(self, eval_id: int, config: str) -> Path:
        run = json.loads((self.iteration / f"eval-{eval_id}/{config}/run-1/run.json").read_text())
        return Path(run["sandbox"]["path"])

    def test_the_run_finishes_with_both_arms_scored(self) -> None:
        self.assertEqual(self.code, 0, self.out + self.err)
        self.assertIn("tidy with claude (4 runs, 4 scored, 0 excluded)", self.out)

    def test_with_skill_gets_the_tracked_package_at_skills_name(self) -> None:
        box = self.sandbox(1, "with_skill")
        delivered = sorted(p.relative_to(box).as_posix() for p in box.rglob("*")
                           if p.is_file() and ".git" not in p.parts
                           and ".skill-eval" not in p.parts)
        self.assertEqual(delivered, ["evals/files/in.txt", "skills/tidy/README.md",
                                     "skills/tidy/SKILL.md", "skills/tidy/references/style.md",
                                     "skills/tidy/scripts/tidy.py"])
        prompt = (self.iteration / "eval-1/with_skill/run-1/prompt.md").read_text()
        self.assertIn(f"Skill path: {box / 'skills/tidy/SKILL.md'}", prompt)

    def test_the_baseline_holds_no_file_of_the_package_by_hash(self) -> None:
        package = content_hashes(self.sandbox(1, "with_skill") / "skills" / "tidy")
        for eval_id in (1, 2):
            box = self.sandbox(eval_id, "without_skill")
            shared = set(package) & set(content_hashes(box))
            self.assertEqual(shared, set(), [package[h] for h in shared])
            self.assertFalse((box / "SKILL.md").exists())
        self.assertTrue((self.sandbox(1, "without_skill") / "evals/files/in.txt").is_file())

    def test_the_workspace_is_out_of_the_package_and_ignored(self) -> None:
        self.assertTrue((self.root / "evals/tidy/workspace/claude/.gitignore").is_file())
        self.assertEqual(git(self.root, "status", "--porcelain"), "")


class RootSkillBaselineAttackTest(unittest.TestCase):
    """A hostile baseline executor, unconfined, reads the checkout's own SKILL.md."""

    def test_the_read_is_flagged_as_baseline_contamination(self) -> None:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        root = root_skill_repo(tmp.path)
        script = {"cases": [{"match": "Use no agent skill", "role": "executor",
                             "spec": {"read_paths": [str(root / "SKILL.md")]}}]}
        code, out, err = call_main(["run", str(root), "--agent", "claude", "--eval-id", "1",
                                    "--quiet"], env=fake_env(tmp.path, script))
        self.assertEqual(code, 1, out + err)
        iteration = root / "evals/tidy/workspace/claude/iteration-1"
        run = json.loads((iteration / "eval-1/without_skill/run-1/run.json").read_text())
        self.assertEqual(run["skill_read"]["state"], "read")
        self.assertIn("baseline_contamination", out)


if __name__ == "__main__":
    unittest.main()
