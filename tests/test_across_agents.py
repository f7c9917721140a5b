"""Issue 18, part 3: which agents does the skill help? `report ITER --across`.

One suite run by two fake agents in the default workspace: claude's grader passes an answer
only when the executor was given the skill (so the skill helps there), gemini's passes every
answer (so it makes no difference there). The report puts both agents' verdicts and per-eval
lifts side by side and says which agent the skill helps.
"""

from __future__ import annotations

import json
import shutil
import unittest
from pathlib import Path

from tests.helpers import TempDir, call_main, demo_suite, fake_env, make_repo

CASES = 6  # MIN_PAIRED_EVALS: fewer and no verdict could be "improved"
# The executor quotes what it read; only a with_skill answer holds the skill's text.
HELPED = {"executor": {"quote_reads": True},
          "grader": {"verdicts": "all_fail"},
          "cases": [{"match": "Say hello.", "role": "grader", "spec": {"verdicts": "all_pass"}}]}
INDIFFERENT = {"executor": {}, "grader": {"verdicts": "all_pass"}}
# The exit code of each run: HELPED's without_skill runs all score zero (a scored_zero
# warning per eval), so its run asks for review; INDIFFERENT's run of every case is clean,
# and of some cases only it asks for review too (partial_selection). `report` on an iteration
# exits as its run did.
REVIEW, CLEAN = 1, 0


class AcrossAgentsTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.repo = make_repo(self.tmp.path, demo_suite(cases=CASES))
        self.suite = str(self.repo / "evals" / "demo" / "evals.json")
        self.workspace = self.repo / "evals" / "demo" / "workspace"

    def run_agent(self, agent: str, script: dict, *args: str, exit_code: int) -> Path:
        # gemini needs a sign-in it can carry into its fresh home; an API key is one.
        env = fake_env(self.tmp.path, script, {"GEMINI_API_KEY": "test-key"})
        code, _, err = call_main(["run", self.suite, "--agent", agent, "--timeout", "60",
                                  "--quiet", *args], env)
        self.assertEqual(code, exit_code, err)
        folders = sorted((self.workspace / agent).glob("iteration-*"))
        return folders[-1]

    def report(self, *argv: str) -> tuple[int, str, str]:
        return call_main(["report", *argv])

    def test_each_agents_verdict_and_lift_side_by_side(self) -> None:
        claude = self.run_agent("claude", HELPED, exit_code=REVIEW)
        gemini = self.run_agent("gemini", INDIFFERENT, exit_code=CLEAN)
        code, out, err = self.report(str(claude), "--across")  # found in the workspace
        self.assertEqual(code, REVIEW, err)  # as claude's run
        self.assertIn("Helps on: claude. Hurts on: none. No verdict either way: gemini.", out)
        text = (claude / "agents.md").read_text(encoding="utf-8")
        table = [line for line in text.splitlines() if line.startswith("| claude |")
                 or line.startswith("| gemini |")]
        self.assertEqual(len(table), 2, text)
        self.assertIn("| improved |", table[0])
        self.assertIn("+100.0 pp", table[0])
        self.assertIn("| inconclusive |", table[1])
        self.assertIn("+0.0 pp", table[1])
        self.assertTrue(all("same suite, skill and fixtures" in line for line in table))
        self.assertIn("| eval | claude | gemini |", text)
        for i in range(1, CASES + 1):
            self.assertIn(f"| E{i:02d} | +100.0 pp | +0.0 pp |", text)
        # The same table from the other side, naming the folder instead of searching.
        code, out, err = self.report(str(gemini), "--across", str(claude))
        self.assertEqual(code, 0, err)
        self.assertIn("Helps on: claude.", out)
        self.assertIn("| eval | gemini | claude |", (gemini / "agents.md").read_text())

    def test_the_same_tables_as_a_page(self) -> None:
        claude = self.run_agent("claude", HELPED, exit_code=REVIEW)
        gemini = self.run_agent("gemini", INDIFFERENT, exit_code=CLEAN)
        code, out, err = self.report(str(claude), "--across")
        self.assertEqual(code, REVIEW, err)  # as claude's run
        self.assertIn("(and agents.html)", out)
        page = (claude / "agents.html").read_text(encoding="utf-8")
        self.assertIn("Content-Security-Policy", page)
        self.assertIn("<strong>Helps on: claude. Hurts on: none. "
                      "No verdict either way: gemini.</strong>", page)
        self.assertIn("<tr><td>claude</td><td>", page)
        self.assertIn("<td>improved</td><td>+100.0 pp</td>", page)
        self.assertIn("<tr><th>eval</th><th>claude</th><th>gemini</th></tr>", page)
        for i in range(1, CASES + 1):
            self.assertIn(f"<tr><td>E{i:02d}</td><td>+100.0 pp</td><td>+0.0 pp</td></tr>", page)
        self.assertNotIn("<script", page)
        # A folder name is text on the page, never markup.
        odd = self.tmp.path / "<script>alert(1)</script>"
        shutil.copytree(gemini, odd)
        code, _, err = self.report(str(claude), "--across", str(odd))
        self.assertEqual(code, REVIEW, err)  # as claude's run
        page = (claude / "agents.html").read_text(encoding="utf-8")
        self.assertNotIn("<script", page)
        self.assertIn("&lt;script&gt;alert(1)&lt;/script&gt;", page)

    def test_an_eval_one_agent_did_not_run_is_not_run_never_zero(self) -> None:
        claude = self.run_agent("claude", HELPED, exit_code=REVIEW)
        self.run_agent("gemini", INDIFFERENT, "--eval-id", "E01,E02", exit_code=REVIEW)
        code, _, err = self.report(str(claude), "--across")
        self.assertEqual(code, REVIEW, err)  # as claude's run
        text = (claude / "agents.md").read_text(encoding="utf-8")
        self.assertIn("| E01 | +100.0 pp | +0.0 pp |", text)
        self.assertIn("| E05 | +100.0 pp | not run |", text)

    def test_another_skill_version_needs_review(self) -> None:
        claude = self.run_agent("claude", HELPED, exit_code=REVIEW)
        skill = self.repo / "skills" / "demo" / "SKILL.md"
        skill.write_text(skill.read_text() + "\nSay it twice.\n", encoding="utf-8")
        self.run_agent("gemini", INDIFFERENT, exit_code=CLEAN)
        code, out, err = self.report(str(claude), "--across")
        self.assertEqual(code, 1, out)
        self.assertIn("REVIEW REQUIRED", err)
        self.assertIn("skill differ", err)
        self.assertIn("NOT comparable: skill differ", (claude / "agents.md").read_text())

    def test_a_changed_run_file_of_the_other_agent_needs_review(self) -> None:
        claude = self.run_agent("claude", HELPED, exit_code=REVIEW)
        gemini = self.run_agent("gemini", INDIFFERENT, exit_code=CLEAN)
        grading = next(gemini.glob("eval-E01/without_skill/run-1/grading.json"))
        data = json.loads(grading.read_text())
        data["expectations"][0]["passed"] = not data["expectations"][0]["passed"]
        grading.write_text(json.dumps(data))
        code, _, err = self.report(str(claude), "--across")
        self.assertEqual(code, 1)
        self.assertIn(f"{gemini}: 1 run file(s) changed", err)
        self.assertIn("REVIEW: 1 run file(s) changed", (claude / "agents.md").read_text())

    def test_no_other_agent_says_how_to_get_one_and_writes_nothing(self) -> None:
        claude = self.run_agent("claude", HELPED, exit_code=REVIEW)
        written = {p.name: p.stat().st_mtime_ns for p in claude.glob("benchmark.*")}
        (claude / "benchmark.md").unlink()  # were report to write first, it would be back
        code, _, err = self.report(str(claude), "--across")
        self.assertEqual(code, 2)
        self.assertIn("no iteration of skill demo by another agent", err)
        self.assertIn("--agent OTHER", err)
        self.assertFalse((claude / "agents.md").exists())
        self.assertFalse((claude / "agents.html").exists())
        self.assertFalse((claude / "benchmark.md").exists())
        self.assertEqual(written["benchmark.html"], (claude / "benchmark.html").stat().st_mtime_ns)

    def test_a_malformed_other_iteration_changes_nothing(self) -> None:
        claude = self.run_agent("claude", HELPED, exit_code=REVIEW)
        gemini = self.run_agent("gemini", INDIFFERENT, exit_code=CLEAN)
        good = json.loads((gemini / "benchmark.json").read_text(encoding="utf-8"))
        (claude / "benchmark.md").unlink()
        for label, text in (("not JSON", "{not json"),
                            ("a per-eval row that is a number",
                             json.dumps({**good, "per_eval": [1]}))):
            with self.subTest(label):
                (gemini / "benchmark.json").write_text(text, encoding="utf-8")
                code, _, err = self.report(str(claude), "--across", str(gemini))
                self.assertEqual(code, 2, err)  # the user's input, not the runner's fault
                self.assertIn(str(gemini / "benchmark.json"), err)
                self.assertFalse((claude / "benchmark.md").exists())
                self.assertFalse((claude / "agents.md").exists())

    def test_across_and_merge_do_not_go_together(self) -> None:
        code, _, err = self.report(str(self.tmp.path / "merged"), "--merge", "a", "b",
                                   "--across")
        self.assertEqual(code, 2)
        self.assertIn("--across and --merge do not go together", err)


if __name__ == "__main__":
    unittest.main()
