"""Regression guards for the runner's own cost that do not time anything.

A change that makes per-cell work grow (another git call per sandbox, a re-read of
the repository) or makes `report` read more than benchmark.json fails here.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import unittest
from pathlib import Path

from tests.helpers import TempDir, call_main, demo_suite, fake_env, make_repo

GIT = shutil.which("git")


def git_counting_env(tmp: Path, env: dict) -> tuple[dict, Path]:
    bin_dir = tmp / "gitbin"
    bin_dir.mkdir()
    log = tmp / "git-calls.log"
    wrapper = bin_dir / "git"
    wrapper.write_text(f'#!/bin/sh\necho "$1 $2 $3" >> "{log}"\nexec "{GIT}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    env = dict(env)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env, log


@unittest.skipIf(GIT is None, "git is not installed")
class GitCallsPerCellTests(unittest.TestCase):
    def count_git_calls(self, cases: int) -> int:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        root = make_repo(tmp.path, demo_suite(cases), files={f"src/f{i}.txt": "x" * i
                                                              for i in range(50)})
        env, log = git_counting_env(tmp.path, fake_env(tmp.path))
        code, _, err = call_main(["run", str(root / "evals/demo/evals.json"), "--agent", "claude",
                                  "--quiet"], env=env)
        self.assertIn(code, (0, 1), err)
        return len(log.read_text().splitlines())

    def test_git_calls_grow_by_a_constant_per_cell(self) -> None:
        small, large = self.count_git_calls(2), self.count_git_calls(6)
        extra_cells = (6 - 2) * 2
        # The baseline (with and without the skill package) is built once per iteration; a
        # cell without fixtures costs one `git status` after its executor, nothing more.
        self.assertLessEqual((large - small) / extra_cells, 1.0,
                             f"{small} git calls for 4 cells, {large} for 12")
        self.assertLessEqual(small - 4, 8, "per-iteration git work grew")


class ReportReadsOnlyBenchmarkTests(unittest.TestCase):
    def test_report_needs_nothing_but_benchmark_json(self) -> None:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        root = make_repo(tmp.path, demo_suite(2))
        env = fake_env(tmp.path)
        code, _, err = call_main(["run", str(root / "evals/demo/evals.json"), "--agent",
                                  "claude", "--quiet"], env=env)
        self.assertIn(code, (0, 1), err)
        iteration = root / "evals/demo/workspace/claude/iteration-1"
        written = (iteration / "benchmark.md").read_text(encoding="utf-8")
        lonely = tmp.path / "lonely"
        lonely.mkdir()
        shutil.copy(iteration / "benchmark.json", lonely / "benchmark.json")
        code, out, err = call_main(["report", str(lonely)], env=env)
        self.assertEqual(code, 0, err)
        self.assertEqual(out, written)
        self.assertEqual(sorted(p.name for p in lonely.iterdir()),
                         ["benchmark.json", "benchmark.md"])
        json.loads((lonely / "benchmark.json").read_text(encoding="utf-8"))


if __name__ == "__main__":
    unittest.main()
