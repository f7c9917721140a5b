"""skill-creator's own viewer and aggregator, run on an iteration folder of ours.

They come from a pinned copy of Anthropic's skill-creator (Apache-2.0) in ../shared/; the
tests run its scripts as they are and skip, saying why, when the copy is absent.
"""

from __future__ import annotations

import json
import re
import subprocess
import unittest

from tests.helpers import PROJECT, TempDir, call_main, demo_suite, fake_env, make_repo
from tests.test_revision_arms import python_for_skill_creator

SKILL_CREATOR = PROJECT.parent / "shared" / "skill-creator"
VIEWER = SKILL_CREATOR / "eval-viewer" / "generate_review.py"
AGGREGATOR = SKILL_CREATOR / "scripts" / "aggregate_benchmark.py"


@unittest.skipUnless(VIEWER.is_file() and AGGREGATOR.is_file(),
                     f"skill-creator's scripts are not at {SKILL_CREATOR}")
class SkillCreatorToolsTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = TempDir()
        suite = demo_suite(3)
        suite["evals"][1]["prompt"] = "TASK-BROKEN: do the thing."
        root = make_repo(cls.tmp.path, suite)
        script = {"cases": [{"match": "TASK-BROKEN", "role": "executor",
                             "spec": {"fault": "exit_nonzero"}}]}
        code, out, err = call_main(["run", str(root / "evals/demo/evals.json"), "--agent",
                                    "claude", "--quiet"], env=fake_env(cls.tmp.path, script))
        # TASK-BROKEN's executor fails: an infrastructure_failure error, so review (exit 1).
        assert code == 1, (code, out + err)
        cls.iteration = root / "evals/demo/workspace/claude/iteration-1"
        cls.ours = (cls.iteration / "benchmark.json").read_bytes()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def tool(self, *argv: str) -> subprocess.CompletedProcess:
        python = python_for_skill_creator()
        if python is None:
            self.skipTest("skill-creator's scripts need Python 3.10 or newer; none found")
        done = subprocess.run([python, *argv], capture_output=True, text=True,
                              timeout=120, cwd=self.tmp.path, stdin=subprocess.DEVNULL)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        return done

    def viewer_data(self) -> dict:
        page = self.tmp.path / "review.html"
        self.tool(str(VIEWER), str(self.iteration), "--static", str(page), "--benchmark",
                  str(self.iteration / "benchmark.json"))
        text = page.read_text(encoding="utf-8")
        found = re.search(r"const EMBEDDED_DATA = (\{.*?\});\n", text, re.DOTALL)
        return json.loads(found.group(1))

    def test_viewer_shows_every_prompt_and_the_answer_first(self) -> None:
        data = self.viewer_data()
        self.assertEqual(len(data["runs"]), 6)
        for run in data["runs"]:
            self.assertNotEqual(run["prompt"], "(No prompt found)", run["id"])
            self.assertTrue(run["prompt"].startswith("Task number")
                            or run["prompt"].startswith("TASK-BROKEN"), run["prompt"])
            names = [o["name"] for o in run["outputs"]]
            self.assertEqual(names[0], "output.txt", run["id"])
            self.assertLessEqual(set(names), {"output.txt", "plan.md"}, "runner logs in outputs/")

    def test_viewer_never_shows_an_unscored_run_as_zero(self) -> None:
        data = self.viewer_data()
        runs = data["benchmark"]["runs"]
        self.assertEqual(len(runs), 4)
        self.assertTrue(all(r["result"]["pass_rate"] is not None for r in runs))
        self.assertNotIn("TASK-BROKEN", json.dumps(runs))
        unscored = data["benchmark"]["unscored_runs"]
        self.assertEqual({(r["eval_id"], r["status"]) for r in unscored},
                         {("E02", "executor_failed")})

    def test_aggregator_reads_captured_time_and_tokens_and_keeps_our_file(self) -> None:
        out = self.tmp.path / "skill-creator" / "benchmark.json"
        out.parent.mkdir(exist_ok=True)
        self.tool(str(AGGREGATOR), str(self.iteration), "-o", str(out))
        theirs = json.loads(out.read_text(encoding="utf-8"))
        self.assertEqual(len(theirs["runs"]), 4, "unscored runs must be skipped, not zeroed")
        ours = {(str(r["eval_id"]), r["configuration"], r["run_number"]): r["result"]
                for r in json.loads(self.ours)["runs"]}
        for run in theirs["runs"]:
            mine = ours[(str(run["eval_id"]), run["configuration"], run["run_number"])]
            # Read from timing.json: our captured values (a fast fake may report 0 ms), which a
            # missing file would have turned into the aggregator's default 0 tokens.
            self.assertIsNotNone(mine["time_seconds"])
            self.assertEqual(run["result"]["time_seconds"], mine["time_seconds"], run)
            self.assertEqual(run["result"]["tokens"], mine["tokens"], run)
            self.assertGreater(run["result"]["tokens"], 0, run)
        self.assertEqual((self.iteration / "benchmark.json").read_bytes(), self.ours)

    def test_timing_json_holds_captured_values_only(self) -> None:
        for run_dir in self.iteration.glob("eval-*/*/run-*"):
            metrics = json.loads((run_dir / "metrics.json").read_text())["metrics"]
            timing_path = run_dir / "timing.json"
            captured = {k: metrics[m]["value"] for k, m in (("total_duration_seconds",
                                                             "time_seconds"),
                                                            ("total_tokens", "tokens"))
                        if metrics.get(m, {}).get("value") is not None}
            if not captured:
                self.assertFalse(timing_path.exists(), run_dir)
                continue
            timing = json.loads(timing_path.read_text())
            self.assertEqual({k: timing[k] for k in captured}, captured)
            for key in ("total_duration_seconds", "total_tokens"):
                if key not in captured:
                    self.assertNotIn(key, timing, "a placeholder was written")


if __name__ == "__main__":
    unittest.main()
