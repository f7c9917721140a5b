"""Regression guards for the runner's own cost that do not time anything.

A change that makes per-cell work grow (another git call per sandbox, a re-read of
the repository) or makes `report` read more than benchmark.json fails here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import threading
import time
import unittest
from pathlib import Path

from tests.helpers import TempDir, call_main, demo_suite, fake_env, make_repo, runner

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
        self.assertEqual(code, 0, err)
        return len(log.read_text().splitlines())

    def test_git_calls_grow_by_a_constant_per_cell(self) -> None:
        small, large = self.count_git_calls(2), self.count_git_calls(6)
        extra_cells = (6 - 2) * 2
        # The baseline (with and without the skill package) is built once per iteration; a
        # cell without fixtures costs one `git status` after its executor, nothing more. Per
        # iteration there are also four read-only `git ls-files` of the checkout (its files,
        # then the ones git ignores), before the first agent and after the last, to see
        # whether an agent changed it, and one when the suite is validated (the tree the
        # sandboxes get, which every protect path must name something of).
        self.assertLessEqual((large - small) / extra_cells, 1.0,
                             f"{small} git calls for 4 cells, {large} for 12")
        self.assertLessEqual(small - 4, 13, "per-iteration git work grew")


@unittest.skipIf(GIT is None, "git is not installed")
class FilesPerCellTests(unittest.TestCase):
    """Creating files is most of a cell's cost on a slow filesystem: a cell leaves exactly its
    documented files, and nothing of the runner's own git work stays behind."""

    DELIVERABLES = {"prompt.md", "grader_prompt.md", "run.json", "trace.json", "metrics.json",
                    "grading.json", "timing.json", "grader_metrics.json", "outputs/output.txt",
                    "logs/executor_stream.txt", "logs/grader_output.txt"}

    def test_a_cell_leaves_its_documented_files_and_nothing_else(self) -> None:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        root = make_repo(tmp.path, demo_suite(3), files={f"src/f{i}.txt": "x" for i in range(9)})
        env = fake_env(tmp.path)
        code, _, err = call_main(["run", str(root / "evals/demo/evals.json"), "--agent",
                                  "claude", "--quiet"], env=env)
        self.assertEqual(code, 0, err)
        iteration = root / "evals/demo/workspace/claude/iteration-1"
        run_dirs = sorted(iteration.glob("eval-*/*/run-*"))
        self.assertEqual(len(run_dirs), 6)
        for run_dir in run_dirs:
            left = {p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_file()}
            self.assertEqual(left, self.DELIVERABLES, run_dir)
        self.assertFalse((iteration / ".baselines").exists(), "the shared baselines stayed")
        self.assertEqual(list(Path(env["SKILL_EVAL_SANDBOX_ROOT"]).iterdir()), [])


class AgentCall:
    def __init__(self, invocation, started: float, live_sandboxes: set[str]):
        self.role = "grader" if "--json-schema" in invocation.argv else "executor"
        self.prompt = invocation.stdin_text or ""
        self.cwd = Path(invocation.cwd)
        self.lane = threading.get_ident()
        self.started, self.ended = started, started
        self.live_sandboxes = live_sandboxes


class LaneSchedulingTests(unittest.TestCase):
    """--concurrency bounds agents and sandboxes; each lane runs executor then grader; cells
    start in plan order; a lane's sandbox is gone before its next executor starts."""

    CASES, CONCURRENCY = 8, 3

    def run_recorded(self) -> list[AgentCall]:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        root = make_repo(tmp.path, demo_suite(self.CASES))
        env = fake_env(tmp.path, script={"executor": {"sleep_s": 0.15},
                                         "grader": {"sleep_s": 0.15}})
        sandbox_root = Path(env["SKILL_EVAL_SANDBOX_ROOT"])
        calls, lock = [], threading.Lock()
        real_run_process = runner.run_process

        def recording_run_process(invocation, *args, **kwargs):
            live = {p.name for p in sandbox_root.iterdir() if (p / "repo").is_dir()}
            call = AgentCall(invocation, time.monotonic(), live)
            try:
                return real_run_process(invocation, *args, **kwargs)
            finally:
                call.ended = time.monotonic()
                with lock:
                    calls.append(call)

        runner.run_process = recording_run_process
        try:
            code, _, err = call_main(["run", str(root / "evals/demo/evals.json"), "--agent",
                                      "claude", "--concurrency", str(self.CONCURRENCY),
                                      "--quiet"], env=env)
        finally:
            runner.run_process = real_run_process
        self.assertEqual(code, 0, err)
        self.assertEqual(len(calls), 2 * 2 * self.CASES + 1)  # + the version check
        return [call for call in calls if call.prompt]

    def test_concurrency_bounds_agents_and_sandboxes(self) -> None:
        calls = self.run_recorded()
        edges = sorted([(c.started, 1) for c in calls] + [(c.ended, -1) for c in calls])
        alive = peak = 0
        for _, step in edges:
            alive += step
            peak = max(peak, alive)
        self.assertEqual(peak, self.CONCURRENCY, "agents alive at once")
        self.assertEqual(len({c.lane for c in calls}), self.CONCURRENCY, "one lane per slot")
        self.assertLessEqual(max(len(c.live_sandboxes) for c in calls), self.CONCURRENCY,
                             "a lane holds at most one sandbox")

    def test_a_lane_runs_executor_then_grader_and_starts_cells_in_plan_order(self) -> None:
        calls = sorted(self.run_recorded(), key=lambda c: c.started)
        for lane in {c.lane for c in calls}:
            roles = [c.role for c in calls if c.lane == lane]
            self.assertEqual(roles, ["executor", "grader"] * (len(roles) // 2), roles)
        planned = [(case, config) for case in range(1, self.CASES + 1)
                   for config in ("with_skill", "without_skill")]
        started = [(int(re.search(r"Task number (\d+)", c.prompt).group(1)),
                    "with_skill" if "Skill path:" in c.prompt else "without_skill")
                   for c in calls if c.role == "executor"]
        self.assertEqual(sorted(started), planned)
        for position, cell in enumerate(started):
            self.assertLess(abs(planned.index(cell) - position), self.CONCURRENCY,
                            f"cell {cell} started out of plan order: {started}")

    def test_a_lane_removes_its_sandbox_before_its_next_executor(self) -> None:
        executors = [c for c in sorted(self.run_recorded(), key=lambda c: c.started)
                     if c.role == "executor"]
        for lane in {c.lane for c in executors}:
            mine = [c for c in executors if c.lane == lane]
            for before, after in zip(mine, mine[1:]):
                self.assertNotIn(before.cwd.parent.name, after.live_sandboxes)
        self.assertFalse(any(c.cwd.exists() for c in executors), "a sandbox was left behind")


class ReportReadsOnlyBenchmarkTests(unittest.TestCase):
    """`report` renders from benchmark.json alone; the only other files it reads are the run
    files whose SHA-256 benchmark.json records, because it verifies them every time (a
    changed or missing one is results_modified). The lonely copy holds exactly those."""

    def test_report_needs_nothing_but_benchmark_json_and_the_hashed_files(self) -> None:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        root = make_repo(tmp.path, demo_suite(2))
        env = fake_env(tmp.path)
        code, _, err = call_main(["run", str(root / "evals/demo/evals.json"), "--agent",
                                  "claude", "--quiet"], env=env)
        self.assertEqual(code, 0, err)
        iteration = root / "evals/demo/workspace/claude/iteration-1"
        written = (iteration / "benchmark.md").read_text(encoding="utf-8")
        lonely = tmp.path / "lonely"
        lonely.mkdir()
        shutil.copy(iteration / "benchmark.json", lonely / "benchmark.json")
        hashed = []
        for run in json.loads((lonely / "benchmark.json").read_text(encoding="utf-8"))["runs"]:
            run_rel = f"eval-{run['eval_id']}/{run['configuration']}/run-{run['run_number']}"
            hashed += [f"{run_rel}/{rel}" for rel in run["files_sha256"]]
        # every file a cell leaves (FilesPerCellTests)
        self.assertEqual(len(hashed), 4 * len(FilesPerCellTests.DELIVERABLES))
        for rel in hashed:
            (lonely / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(iteration / rel, lonely / rel)
        code, out, err = call_main(["report", str(lonely)], env=env)
        self.assertEqual(code, 0, err)
        self.assertEqual((lonely / "benchmark.md").read_text(encoding="utf-8"), written)
        self.assertIn(f"Benchmark: {lonely / 'benchmark.md'}", out)
        left = sorted(p.relative_to(lonely).as_posix() for p in lonely.rglob("*") if p.is_file())
        self.assertEqual(left, sorted(["benchmark.json", "benchmark.md", *hashed]))
        json.loads((lonely / "benchmark.json").read_text(encoding="utf-8"))


if __name__ == "__main__":
    unittest.main()
