"""`report` on a 5,000-run iteration: flags grouped, benchmark.md bounded, stdout a summary."""

from __future__ import annotations

import json
import unittest

from tests.helpers import TempDir, call_main, runner
from tests.test_statistics import CONFIGS, make_record

EVALS, RUNS = 500, 5  # the shape of tests/benchmarks/bench_report.py's iteration: 5,000 runs
MD_LIMIT_BYTES = 100_000


def big_benchmark() -> dict:
    """Every with_skill run lacks a skill read (2,500 warnings); each run fails assertions."""
    records = []
    for index in range(1, EVALS + 1):
        for config in CONFIGS:
            for number in range(1, RUNS + 1):
                records.append(make_record(index, config, number,
                                           3 if config == "with_skill" else 2, 4,
                                           skill_read="not_read" if config == "with_skill"
                                           else "unknown"))
    ids = [f"E{i:02d}" for i in range(1, EVALS + 1)]
    meta = runner.Metadata(configs=tuple(CONFIGS), skill_name="demo", agent="claude",
                           runs_per_configuration=RUNS, evals_run=tuple(ids),
                           suite_case_count=EVALS)
    return runner.aggregate(records, meta)  # the sign-flip test costs well under a second here


class ReportAtScaleTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = TempDir()
        cls.iteration = cls.tmp.path / "iteration-1"
        cls.iteration.mkdir()
        benchmark = big_benchmark()
        cls.flag_count = len(benchmark.sanity_checks.flags)
        (cls.iteration / "benchmark.json").write_text(json.dumps(benchmark.to_json()),
                                                      encoding="utf-8")
        del benchmark
        cls.code, cls.out, cls.err = call_main(["report", str(cls.iteration), "--html"])

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def test_report_prints_the_summary_not_the_file(self) -> None:
        self.assertEqual(self.code, 1, self.err)  # its warnings ask for review, as in `run`
        self.assertNotIn("changed", self.err)
        self.assertLess(len(self.out), 2_000, self.out)
        self.assertIn(f"Benchmark: {self.iteration / 'benchmark.md'}", self.out)
        self.assertIn("[warning] skill_not_read (with_skill): 2,500, e.g. eval E01, run 1: ",
                      self.out)

    def test_benchmark_md_stays_small_and_groups_flags(self) -> None:
        md = (self.iteration / "benchmark.md").read_bytes()
        self.assertLess(len(md), MD_LIMIT_BYTES)
        text = md.decode("utf-8")
        self.assertIn("- [warning] skill_not_read (with_skill): 2,500 flags, for example:", text)
        self.assertEqual(text.count("the executor's trace shows no read"), 3)
        self.assertIn("2,497 more in benchmark.json", text)
        self.assertGreater(self.flag_count, 2_500, "the full list must stay in benchmark.json")

    def test_failed_assertions_are_grouped_and_capped(self) -> None:
        text = (self.iteration / "benchmark.md").read_text(encoding="utf-8")
        section = text.split("## Failed assertions", 1)[1]
        self.assertIn("- assertion 4 of eval 1: failed in 10 run(s) (with_skill 5, "
                      "without_skill 5)", section)
        self.assertIn("more assertions; every verdict is in benchmark.json", section)
        self.assertLessEqual(section.count("\n- "), runner._FAILED_ASSERTION_GROUPS + 1)

    def test_html_groups_flags_too(self) -> None:
        page = (self.iteration / "benchmark.html").read_text(encoding="utf-8")
        sanity = page[page.index("<h2>Sanity checks</h2>"):]
        sanity = sanity[:sanity.index("<h2>", 5)]
        self.assertIn("[warning] skill_not_read (with_skill): 2,500 flags", sanity)
        self.assertEqual(sanity.count("the executor&#x27;s trace shows no read"), 3)


if __name__ == "__main__":
    unittest.main()
