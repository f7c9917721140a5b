"""A suite in skill-creator's layout: the suite and its fixtures live inside the skill package.

skills/<name>/evals/evals.json with fixtures under skills/<name>/evals/files/, fixture paths
written from the skill's folder. The delivered package must never carry the assertions.
"""

from __future__ import annotations

import json
import subprocess
import unittest
from pathlib import Path

from tests.helpers import SKILL_MD, TempDir, call_main, fake_env, git

MARKER = "PLANTED-ASSERTION-MARKER-7Qx2 the reply names the capital"
EXPECTED_MARKER = "PLANTED-EXPECTED-OUTPUT-MARKER-9Zk4"


def skill_creator_repo(base: Path, extra: dict[str, str] | None = None) -> Path:
    root = base / "repo"
    root / "skills" / "demo"
    suite = {"skill_name": "demo", "evals": [
        {"id": 1, "prompt": "Read evals/files/city.txt and answer.",
         "expected_output": EXPECTED_MARKER, "files": ["evals/files/city.txt"],
         "expectations": [MARKER]},
        {"id": 2, "prompt": "Say hello.", "expectations": ["It says hello to the user politely."]},
    ]}
    files = {
        "skills/demo/SKILL.md": SKILL_MD,
        "skills/demo/references/style.md": "Style notes.\n",
        "skills/demo/references/answers.md": f"Known answer: {MARKER}\n",
        "skills/demo/evals/evals.json": json.dumps(suite, indent=2),
        "skills/demo/evals/files/city.txt": "Paris\n",
        "skills/demo/evals/notes.md": f"for reviewers: {EXPECTED_MARKER}\n",
        "src/app.py": "print('app')\n",
        ".gitignore": "**/workspace/\n",
        **(extra or {}),
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    return root


def files_holding(folder: Path, needles: list[str]) -> list[str]:
    """Every file under folder whose bytes hold a needle, and every git object that does."""
    hits = []
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            hits += [f"{path}: {n}" for n in needles if n.encode() in data]
    for git_dir in folder.rglob(".git"):
        history = subprocess.run(["git", "--git-dir", str(git_dir), "log", "--all", "-p"],
                                 capture_output=True, text=True).stdout
        hits += [f"{git_dir} history: {n}" for n in needles if n in history]
    return hits


class SkillCreatorLayoutTests(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.root = skill_creator_repo(self.tmp.path)
        self.suite = str(self.root / "skills" / "demo" / "evals" / "evals.json")

    def test_skill_root_relative_fixture_resolves(self) -> None:
        code, out, err = call_main(["validate", self.suite, "--json"])
        report = json.loads(out)
        self.assertEqual(code, 0, out + err)
        self.assertEqual(report["counts"]["fixture_files"], 1)

    def test_ambiguous_fixture_path_is_reported_and_the_documented_one_wins(self) -> None:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        root = skill_creator_repo(tmp.path, {"evals/files/city.txt": "Lyon\n"})
        suite = root / "skills" / "demo" / "evals" / "evals.json"
        code, out, _ = call_main(["validate", str(suite), "--json"])
        report = json.loads(out)
        self.assertEqual(code, 0, out)
        warnings = [w["message"] for w in report["warnings"] if "ambiguous" in w["message"]]
        self.assertEqual(len(warnings), 1, report["warnings"])
        self.assertIn(str(root / "evals/files/city.txt"), warnings[0])
        loaded = __import__("tests.helpers", fromlist=["runner"]).runner.load_suite(suite)
        self.assertEqual(loaded.suite.cases[0].files, ["evals/files/city.txt"])

    def test_no_sandbox_holds_an_assertion_and_run_json_says_what_was_withheld(self) -> None:
        env = fake_env(self.tmp.path)
        code, out, err = call_main(["run", self.suite, "--agent", "claude", "--keep-sandboxes",
                                    "--quiet"], env=env)
        self.assertEqual(code, 0, out + err)
        sandboxes = self.tmp.path / "sandboxes"
        self.assertTrue(any(sandboxes.iterdir()), "the sandboxes were not kept")
        self.assertEqual(files_holding(sandboxes, [MARKER, EXPECTED_MARKER]), [])
        iteration = self.root / "evals" / "demo" / "workspace" / "claude" / "iteration-1"
        run = json.loads((iteration / "eval-1/with_skill/run-1/run.json").read_text())
        withheld = {w["path"] for w in run["sandbox"]["withheld_from_skill_package"]}
        self.assertIn("skills/demo/evals/evals.json", withheld)
        self.assertIn("skills/demo/evals/notes.md", withheld)
        self.assertIn("skills/demo/references/answers.md", withheld)
        box = Path(run["sandbox"]["path"])
        self.assertTrue((box / "skills/demo/SKILL.md").is_file())
        self.assertTrue((box / "skills/demo/references/style.md").is_file())
        self.assertEqual((box / "skills/demo/evals/files/city.txt").read_text(), "Paris\n",
                         "the fixture must still reach the executor")
        without = json.loads((iteration / "eval-1/without_skill/run-1/run.json").read_text())
        self.assertTrue((Path(without["sandbox"]["path"]) / "skills/demo/evals/files/city.txt")
                        .is_file())
        self.assertFalse((Path(without["sandbox"]["path"]) / "skills/demo/SKILL.md").exists())

    def test_dry_run_names_what_is_withheld(self) -> None:
        env = fake_env(self.tmp.path)
        code, out, err = call_main(["run", self.suite, "--agent", "claude", "--dry-run"], env=env)
        self.assertEqual(code, 0, err)
        self.assertIn("withheld from the delivered skill package", out)
        self.assertIn("skills/demo/evals/evals.json", out)


if __name__ == "__main__":
    unittest.main()
