"""A suite written for skill-creator, as its authors write them, run end to end with the fake
CLIs: `run`, `report`, the HTML page and skill-creator's own viewer (issue 34).

The suite uses `assertions` ({"id", "text"} entries), descriptive keys skill-eval ignores, an
anti-expectation, and a fixture under evals/files/.agents/ that the task needs where it is.
"""

from __future__ import annotations

import json
import subprocess
import unittest
from pathlib import Path

from tests.helpers import SKILL_MD, TempDir, call_main, fake_env, git, runner
from tests.test_revision_arms import python_for_skill_creator
from tests.test_skill_creator_layout import files_holding
from tests.test_skill_creator_tools import VIEWER

ANTI = "It deletes ANTI-MARKER-5Rt8 files the user did not name."
LINT_SKILL = ".agents/skills/lint/SKILL.md"
SCRIPT = {
    "executor": {"text": "I removed the build folder as asked."},
    "cases": [
        # The with_skill executor does the forbidden thing; its grader says the negated
        # sentence does not hold. The runner must record that verdict as it is.
        {"match": "Skill path:", "role": "executor",
         "spec": {"text": "I also deleted every other file."}},
        {"match": "I also deleted every other file.", "role": "grader",
         "spec": {"verdicts": {"fail_if_text_contains": ["ANTI-MARKER-5Rt8"]}}},
    ],
}


def skill_creator_suite() -> dict:
    return {
        "skill_name": "demo", "version": "0.3", "description": "cleanup skill evals",
        "evals": [
            {"id": 0, "eval_name": "remove-build", "category": "cleanup",
             "prompt": "Remove the build folder. The linter config is in "
                       "evals/files/.agents/skills/lint/SKILL.md.",
             "files": ["evals/files/" + LINT_SKILL],
             "assertions": [{"id": "a1", "text": "It says the build folder was removed."},
                            {"id": "a2", "text": "It names the folder it removed."}],
             "anti_expectations": [ANTI]},
            {"id": 1, "eval_name": "explain", "category": "docs",
             "prompt": "Explain what the cleanup does.",
             "assertions": ["It explains the cleanup in one paragraph."]},
        ],
    }


class SkillCreatorSuiteRunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = TempDir()
        root = cls.tmp.path / "repo"
        files = {"skills/demo/SKILL.md": SKILL_MD,
                 "skills/demo/evals/evals.json": json.dumps(skill_creator_suite(), indent=2),
                 "skills/demo/evals/files/" + LINT_SKILL: "---\nname: lint\n---\nLint.\n",
                 "src/app.py": "print('app')\n"}
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text, encoding="utf-8")
        git(root, "init", "-q")
        git(root, "add", "-A")
        git(root, "commit", "-qm", "init")
        cls.root = root
        cls.env = fake_env(cls.tmp.path, SCRIPT)
        cls.code, cls.out, cls.err = call_main(
            ["run", str(root / "skills/demo"), "--agent", "claude", "--keep-sandboxes",
             "--quiet"], env=cls.env)
        # The default workspace, as for any suite: evals/<skill>/workspace/, out of the package.
        cls.iteration = root / "evals/demo/workspace/claude/iteration-1"

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def run_json(self, eval_id: int, config: str) -> dict:
        return json.loads((self.iteration / f"eval-{eval_id}/{config}/run-1/run.json")
                          .read_text(encoding="utf-8"))

    def grading(self, eval_id: int, config: str) -> dict:
        return json.loads((self.iteration / f"eval-{eval_id}/{config}/run-1/grading.json")
                          .read_text(encoding="utf-8"))

    def test_the_run_finishes_on_the_folder_of_the_skill(self) -> None:
        # 1: with_skill did the forbidden thing, so it scores below the baseline (review).
        self.assertEqual(self.code, 1, self.out + self.err)
        self.assertIn("candidate_below_baseline", self.out)
        self.assertTrue((self.iteration / "benchmark.json").is_file(), self.out + self.err)
        for eval_id in (0, 1):
            for config in runner.CONFIGS:
                self.assertEqual(self.run_json(eval_id, config)["status"], "ok")

    def test_the_grader_gets_the_negated_sentence_and_its_verdict_is_kept(self) -> None:
        negated = runner.ANTI_EXPECTATION_PREFIX + ANTI
        for config, passed in (("with_skill", False), ("without_skill", True)):
            with self.subTest(config):
                prompt = (self.iteration / f"eval-0/{config}/run-1/grader_prompt.md").read_text()
                self.assertIn(negated, prompt)
                rows = {row["text"]: row["passed"] for row in self.grading(0, config)
                        ["expectations"] if row.get("kind") != "check"}
                self.assertEqual(list(rows), ["It says the build folder was removed.",
                                              "It names the folder it removed.", negated])
                self.assertIs(rows[negated], passed)

    def test_no_executor_sees_the_anti_expectation(self) -> None:
        for config in runner.CONFIGS:
            prompt = (self.iteration / f"eval-0/{config}/run-1/prompt.md").read_text()
            self.assertNotIn("ANTI-MARKER", prompt)
        self.assertEqual(files_holding(self.tmp.path / "sandboxes", ["ANTI-MARKER-5Rt8"]), [])

    def test_the_agents_fixture_reaches_both_arms_where_the_task_names_it(self) -> None:
        for config in runner.CONFIGS:
            box = Path(self.run_json(0, config)["sandbox"]["path"])
            self.assertEqual((box / "skills/demo/evals/files" / LINT_SKILL).read_text(),
                             "---\nname: lint\n---\nLint.\n", config)
            self.assertFalse((box / ".agents").exists(), "never at the top, where agents look")

    def test_report_and_html_and_skill_creator_s_viewer_read_it(self) -> None:
        code, out, err = call_main(["report", str(self.iteration), "--html"])
        self.assertEqual(code, self.code, out + err)  # the run's review, said again
        self.assertTrue((self.iteration / "benchmark.html").is_file())
        python = python_for_skill_creator()
        if python is None or not VIEWER.is_file():
            self.skipTest("skill-creator's viewer needs Python 3.10+ and its pinned copy")
        page = self.tmp.path / "review.html"
        done = subprocess.run([python, str(VIEWER), str(self.iteration), "--static", str(page),
                               "--benchmark", str(self.iteration / "benchmark.json")],
                              capture_output=True, text=True, timeout=120, cwd=self.tmp.path,
                              stdin=subprocess.DEVNULL)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("Remove the build folder", page.read_text(encoding="utf-8"))


if __name__ == "__main__":
    unittest.main()
