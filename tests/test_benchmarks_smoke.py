"""Smoke test of the benchmark scripts: each runs with --quick and ends with its summary line.

The scripts run at the same time (each is mostly waiting on child processes), so the
test takes about as long as the slowest one. No figure is checked against a target here: a
loaded CI machine would make that flaky. What is checked is that every script still runs
against the current runner and prints its summary.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

from tests.helpers import volume_test

PROJECT = Path(__file__).resolve().parent.parent
BENCHMARKS = PROJECT / "tests" / "benchmarks"
SCRIPTS = ("bench_parallel", "bench_overhead", "bench_report", "bench_sandbox",
           "bench_checkout", "bench_test_command")
EXTRA_ARGS = {"bench_parallel": ["--phases"]}  # the stamped fake and the overhead split too
TIMEOUT_S = 600


@unittest.skipUnless(sys.platform != "win32" and shutil.which("git") and os.path.exists("/bin/sh"),
                     "the benchmarks need git and a POSIX /bin/sh")
@volume_test
class BenchmarkSmokeTest(unittest.TestCase):
    def test_every_script_runs_quick_and_prints_its_summary(self):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("GIT_", "FAKE_AGENT", "BENCH_FAKE_"))
               and k not in ("CLAUDECODE", "SKILL_EVAL_SANDBOX_ROOT", "SKILL_EVAL_BENCH_RUNNER")}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        logs = Path(tempfile.mkdtemp(prefix="skill-eval-bench-smoke-"))
        self.addCleanup(shutil.rmtree, logs, True)
        private_tmp = logs / "tmp"  # the scripts' temp folders go here, to check clean-up
        private_tmp.mkdir()
        env["TMPDIR"] = str(private_tmp)
        procs = {}
        started = time.monotonic()
        for name in SCRIPTS:
            out = open(logs / f"{name}.log", "wb")  # noqa: SIM115 - closed below
            self.addCleanup(out.close)
            procs[name] = subprocess.Popen(
                [sys.executable, str(BENCHMARKS / f"{name}.py"), "--quick", *EXTRA_ARGS.get(name, [])],
                cwd=PROJECT,
                env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        for name, proc in procs.items():
            try:
                code = proc.wait(timeout=max(1.0, TIMEOUT_S - (time.monotonic() - started)))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                code = "timeout"
            text = (logs / f"{name}.log").read_text(encoding="utf-8", errors="replace")
            with self.subTest(script=name):
                self.assertEqual(code, 0, f"{name} --quick failed:\n{text[-4000:]}")
                last = text.rstrip().splitlines()[-1] if text.strip() else ""
                self.assertTrue(last.startswith(f"summary: {name}: "),
                                f"{name} did not end with its summary line:\n{text[-2000:]}")
        self.assertIn("before the first agent starts, s", (logs / "bench_parallel.log").read_text())
        # The scripts clean up after themselves: nothing is left in their temp folder.
        self.assertEqual(sorted(p.name for p in private_tmp.iterdir()), [])


class ZeroClockReadingTest(unittest.TestCase):
    """A CPU clock reads 0.00 s for a copy shorter than its resolution (CI stop 23 crashed
    with ZeroDivisionError on one): the ratio is left out and shown absent, never divided."""

    def setUp(self):
        sys.path.insert(0, str(BENCHMARKS))
        self.addCleanup(sys.path.remove, str(BENCHMARKS))
        import bench_sandbox
        self.bench = bench_sandbox

    def cell(self, plain_cpu):
        cell = {"plain": [0.05, 0.04], "plain_cpu": plain_cpu, "template": [0.0]}
        for config, _ in self.bench.CONFIGS:
            cell.update({f"{config}|build": [0.03, 0.02], f"{config}|build_cpu": [0.02, 0.01],
                         f"{config}|nongit": [0.01, 0.01], f"{config}|calls": [0, 0],
                         f"{config}|status": [0.0, 0.0], f"{config}|remove": [0.0, 0.0]})
        return cell

    def test_a_zero_cpu_reading_is_left_out_of_the_ratio(self):
        rows = dict(self.bench.cell_rows(self.cell([0.0, 0.01])))
        self.assertEqual(rows["  build / plain copy, CPU"], "1.00 / 1.00 / 1.00")
        self.assertIn("in CPU with_skill 1.00", self.bench.build_summary(self.cell([0.0, 0.01])))

    def test_every_cpu_reading_zero_shows_the_ratio_absent(self):
        summary = self.bench.build_summary(self.cell([0.0, 0.0]))
        self.assertIn("in CPU with_skill absent (clock read 0 s)", summary)
        rows = dict(self.bench.cell_rows(self.cell([0.0, 0.0])))
        self.assertTrue(rows["  build / plain copy, CPU"].startswith("absent"))


if __name__ == "__main__":
    unittest.main()
