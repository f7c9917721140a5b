"""Small things a reader of the results meets: file modes, chart labels, rate formats."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import unittest

from tests.helpers import RUNNER_PATH, TempDir, demo_suite, fake_env, make_repo
from tests.test_statistics import aggregate, model, runner

LONG_NAME = "migrates the billing schema without downtime"  # 48 characters with its id


class ResultFileModeTests(unittest.TestCase):
    def test_result_files_follow_the_umask_and_sandboxes_stay_private(self) -> None:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        root = make_repo(tmp.path, demo_suite(1))
        env = fake_env(tmp.path)
        done = subprocess.run([sys.executable, str(RUNNER_PATH), "run",
                               str(root / "evals/demo/evals.json"), "--agent", "claude", "--quiet",
                               "--isolation", "none",
                               "--keep-sandboxes"],
                              env=env, capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL, preexec_fn=lambda: os.umask(0o027))
        self.assertEqual(done.returncode, 0, done.stderr)
        iteration = root / "evals/demo/workspace/claude/iteration-1"
        for name in ("benchmark.json", "benchmark.md", "benchmark.html",
                     "eval-E01/with_skill/run-1/run.json",
                     "eval-E01/with_skill/run-1/outputs/output.txt"):
            mode = stat.S_IMODE((iteration / name).stat().st_mode)
            self.assertEqual(mode, 0o640, f"{name}: {oct(mode)}")
        for sandbox in (tmp.path / "sandboxes").iterdir():
            self.assertEqual(stat.S_IMODE(sandbox.stat().st_mode), 0o700, sandbox)


class LongPerAssertionTableTests(unittest.TestCase):
    def test_a_benchmark_read_back_cuts_its_long_table_in_benchmark_md(self) -> None:
        """Read from benchmark.json, per_assertion is a tuple: cutting a table longer than
        twice PER_ASSERTION_SHOWN_EACH_END once added a list to it (TypeError in `report`)."""
        from tests.test_statistics import CONFIGS, make_record
        records = [make_record(index, config, number, 1 if config == "with_skill" else 0, 2)
                   for index in range(1, 31) for config in CONFIGS for number in (1, 2)]
        built = runner.aggregate(records, runner.Metadata.from_json({
            "skill_name": "demo", "agent": "claude", "configs": list(CONFIGS),
            "runs_per_configuration": 2, "evals_run": [f"E{i:02d}" for i in range(1, 31)],
            "suite_case_count": 30}, "metadata"))
        read = runner.Benchmark.from_json(built.to_json(), "benchmark.json")
        rows = len(read.per_assertion)
        self.assertGreater(rows, 2 * runner._PER_ASSERTION_SHOWN_EACH_END)
        text = runner.render_markdown(read)
        self.assertEqual(text, runner.render_markdown(built))
        self.assertIn(f"{rows - 2 * runner._PER_ASSERTION_SHOWN_EACH_END}", text)


class ReportFormatTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.b = aggregate([([3, 2], [1, 1])] * 2, total=3, runs=2)
        cls.b["per_eval"][0]["eval_name"] = LONG_NAME
        cls.md = runner.render_markdown(model(cls.b))
        cls.html = runner.render_html(model(cls.b), {})

    def test_chart_shows_a_long_eval_name_whole(self) -> None:
        svg = self.html[self.html.index("<svg"):self.html.index("</svg>")]
        self.assertIn(f"</title>E01 {LONG_NAME}</text>", svg)

    def test_rates_are_percent_with_one_decimal_everywhere(self) -> None:
        overall = self.md.split("## Overall raw pass rate", 1)[1].split("##", 1)[0]
        self.assertIn("| with_skill | 83.3% ± 19.2 pp (n=4) |", overall)
        self.assertNotRegex(overall, r"\| 0\.\d{3}")
        svg = self.html[self.html.index("<svg"):self.html.index("</svg>")]
        labels = re.findall(r">(\d+(?:\.\d+)?)%</text>", svg)
        self.assertIn("83.3", labels)
        self.assertNotIn("83", labels)
        metrics = self.html[self.html.index("<h2>Execution metrics"):]
        self.assertIn("83.3% ± 19.2 pp (n=4)", metrics)


if __name__ == "__main__":
    unittest.main()
