#!/usr/bin/env python3
"""Where `eval_runner.py run` spends its time: cProfile in every thread, git calls counted.

Runs the runner in this process (its main(), on a fresh temporary repository, with the instant
lean fake agent) with one cProfile profiler per thread (the worker threads included: cProfile
alone would see only the main thread), merges them and prints the top functions. The default
timer is each thread's CPU time, so waiting for child processes does not show; --wall uses the
wall clock instead. Every run_git and run_process call is also timed (wall) and counted.

    python3 tests/benchmarks/profile_runner.py [--cells 500] [--concurrency 8] [--wall] [--top 30]
        [--out FILE.prof]

Not a benchmark with a target: a tool to find what to change. Standard library only.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import threading
import time
from typing import Any

import _common as c

RUNS = 5


class CallTimer:
    """Wall time and count of calls to one module function, keyed by a label."""

    def __init__(self, module: Any, name: str, label: Any):
        self.module, self.name, self.label = module, name, label
        self.original = getattr(module, name)
        self.times: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.lock = threading.Lock()

    def __enter__(self) -> CallTimer:
        def timed(*args: Any, **kw: Any) -> Any:
            started = time.perf_counter()
            try:
                return self.original(*args, **kw)
            finally:
                key = self.label(*args)
                with self.lock:
                    self.times[key] = self.times.get(key, 0.0) + time.perf_counter() - started
                    self.counts[key] = self.counts.get(key, 0) + 1
        setattr(self.module, self.name, timed)
        return self

    def __exit__(self, *exc: Any) -> None:
        setattr(self.module, self.name, self.original)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=500, help="a multiple of 10")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--wall", action="store_true", help="wall-clock timer, not thread CPU")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--out", help="also save the merged profile here (pstats format)")
    args = parser.parse_args()
    c.exit_on_sigterm()
    if args.cells % (2 * RUNS):
        parser.error("--cells must be a multiple of 10")

    tmp = c.temp_dir("profile")
    saved_env = dict(os.environ)
    original_run = threading.Thread.run
    timer = time.perf_counter if args.wall else time.thread_time
    profiles: list[cProfile.Profile] = []

    def profiled_run(self: threading.Thread) -> None:
        profile = cProfile.Profile(timer)
        profiles.append(profile)
        profile.enable()
        try:
            original_run(self)
        finally:
            profile.disable()

    try:
        bin_dir = c.install_fakes(tmp)
        env = c.fake_env(tmp, bin_dir)
        repo = c.make_repo(tmp, args.cells // (2 * RUNS), c.small_project_files())
        runner = c.load_runner()
        os.environ.clear()
        os.environ.update(env)
        argv = ["run", str(repo / "evals" / c.SKILL_NAME / "evals.json"), "--agent", "claude",
                "--concurrency", str(args.concurrency), "--runs", str(RUNS), "--workspace",
                str(tmp / "ws"), "--repo-root", str(repo), "--quiet"]
        git_timer = CallTimer(runner, "run_git", lambda git_args, *rest: next(
            (a for a in git_args if not a.startswith("-")), git_args[0]))
        process_timer = CallTimer(runner, "run_process",
                                  lambda invocation, *rest: os.path.basename(
                                      invocation.argv[0]) + (" (grader)" if any(
                                          a in ("--json-schema", "--output-schema")
                                          for a in invocation.argv) else ""))
        main_profile = cProfile.Profile(timer)
        threading.Thread.run = profiled_run
        cpu0 = time.process_time()
        started = time.perf_counter()
        with git_timer, process_timer, open(os.devnull, "w") as sink:
            saved_stdout = sys.stdout
            sys.stdout = sink
            try:
                main_profile.enable()
                code = runner.main(argv)
                main_profile.disable()
            finally:
                sys.stdout = saved_stdout
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu0
        threading.Thread.run = original_run
        if code not in (0, 1):
            raise SystemExit(f"runner exited {code}")

        print(f"profile_runner: {args.cells} cells at concurrency {args.concurrency}; "
              f"{c.machine_note()}")
        print(f"  {c.runner_note()}")
        print(f"in-process wall {wall:.2f} s ({wall / args.cells * 1000:.1f} ms a cell); "
              f"runner process CPU {cpu:.2f} s ({cpu / args.cells * 1000:.1f} ms a cell; "
              "children not included); profiler overhead included")
        rows = []
        for label, t in (("git", git_timer), ("agent", process_timer)):
            for key in sorted(t.times, key=t.times.get, reverse=True):
                rows.append([f"{label} {key}", str(t.counts[key]),
                             f"{t.counts[key] / args.cells:.2f}", f"{t.times[key]:.2f}",
                             f"{t.times[key] / t.counts[key] * 1000:.1f}"])
        c.print_table("subprocess calls (wall, summed over threads)",
                      ["call", "count", "per cell", "total s", "ms each"], rows)
        stats = pstats.Stats(main_profile, stream=io.StringIO())
        for profile in profiles:
            stats.add(profile)
        if args.out:
            stats.dump_stats(args.out)
        for key in ("tottime", "cumulative"):
            out = io.StringIO()
            stats.stream = out
            stats.sort_stats(key).print_stats(args.top)
            text = out.getvalue()
            print(f"\ntop {args.top} by {key} ({'wall' if args.wall else 'thread CPU'} time, "
                  f"{len(profiles) + 1} threads merged):")
            print(text[text.find("   ncalls"):].rstrip())
        return 0
    finally:
        threading.Thread.run = original_run
        os.environ.clear()
        os.environ.update(saved_env)
        c.remove(tmp)


if __name__ == "__main__":
    sys.exit(main())
