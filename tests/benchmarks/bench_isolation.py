#!/usr/bin/env python3
"""What confinement costs: the same matrix with --isolation none and --isolation bwrap.

An instant lean fake agent; each repetition runs both modes back to back on the same
repository, so a slow spell of the machine hits both. Reported per cell (one executor and one
grader call): the wall difference, and the mean agent-call duration recorded in run.json (which
includes starting bwrap and its namespaces). Then, with --parallel, the parallel-efficiency
matrix of bench_parallel (64 cells, concurrency 8, 1 s agents) under bwrap.

    python3 tests/benchmarks/bench_isolation.py [--quick] [--reps N] [--cases 50] [--parallel]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path

import _common as c


def call_seconds(iteration: Path) -> list[float]:
    durations = []
    for path in iteration.glob("eval-*/*/run-*/run.json"):
        record = json.loads(path.read_text(encoding="utf-8"))
        for role in ("executor", "grader"):
            durations.append(float((record.get(role) or {}).get("duration_s") or 0.0))
    return durations


def one_matrix(repo: Path, tmp: Path, env: dict[str, str], name: str, isolation: str,
               concurrency: int, cells: int) -> tuple[float, list[float]]:
    workspace = tmp / name
    result = c.run_matrix(repo, workspace, env, concurrency, extra=["--isolation", isolation])
    iteration = c.only_iteration(workspace)
    c.check_all_ok(iteration, cells)
    calls = call_seconds(iteration)
    c.remove(workspace)
    return result.wall_s, calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 cases, 1 rep: a smoke run")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--cases", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--parallel", action="store_true",
                        help="also 64 cells at concurrency 8 with 1 s agents, under bwrap")
    args = parser.parse_args()
    c.exit_on_sigterm()
    if shutil.which("bwrap") is None:
        print("bench_isolation: bwrap is not installed; nothing to compare")
        return 2
    if args.quick:
        args.cases, args.reps = 5, 1
    cells = args.cases * 2
    tmp = c.temp_dir("isolation")
    try:
        bin_dir = c.install_fakes(tmp)
        env = c.fake_env(tmp, bin_dir)
        repo = c.make_repo(tmp, args.cases, c.small_project_files())
        print(f"bench_isolation: {cells} cells at concurrency {args.concurrency}, instant fake, "
              f"{args.reps} rep(s); {c.machine_note()}")
        print(f"  {c.runner_note()}")
        walls: dict[str, list[float]] = {"none": [], "bwrap": []}
        calls: dict[str, list[float]] = {"none": [], "bwrap": []}
        for rep in range(args.reps):
            for mode in ("none", "bwrap"):
                wall, durations = one_matrix(repo, tmp, env, f"{mode}-{rep}", mode,
                                             args.concurrency, cells)
                walls[mode].append(wall)
                calls[mode].append(sum(durations) / len(durations))
            print(f"  rep {rep + 1}: none {walls['none'][-1]:.2f} s, bwrap "
                  f"{walls['bwrap'][-1]:.2f} s", flush=True)
        per_cell = [(b - n) / cells * args.concurrency * 1000
                    for n, b in zip(walls["none"], walls["bwrap"])]
        per_call = [(b - n) * 1000 for n, b in zip(calls["none"], calls["bwrap"])]
        rows = [["wall, none, s", c.fmt_mmm(walls["none"])],
                ["wall, bwrap, s", c.fmt_mmm(walls["bwrap"])],
                ["wall bwrap / none", c.fmt_mmm([b / n for n, b in zip(walls["none"],
                                                                       walls["bwrap"])], 3)],
                ["added agent-slot time per cell, ms", c.fmt_mmm(per_cell, 1)],
                ["mean agent call, none, ms", c.fmt_mmm(calls["none"], 1, 1000)],
                ["mean agent call, bwrap, ms", c.fmt_mmm(calls["bwrap"], 1, 1000)],
                ["added per agent call, ms", c.fmt_mmm(per_call, 1)]]
        summary = [f"added per agent call median {c.mmm(per_call)[1]:.1f} ms",
                   f"added slot time per cell median {c.mmm(per_cell)[1]:.1f} ms"]
        if args.parallel:
            sleep, pcells, concurrency = 1.0, 64, 8
            slow_env = c.fake_env(tmp, bin_dir, sleep_s=sleep)
            slow_repo = c.make_repo(tmp / "parallel", pcells // 2, c.small_project_files())
            ideal = math.ceil(pcells / concurrency) * 2 * sleep
            ratios = []
            for rep in range(args.reps):
                wall, _ = one_matrix(slow_repo, tmp, slow_env, f"parallel-{rep}", "bwrap",
                                     concurrency, pcells)
                ratios.append(wall / ideal)
                print(f"  parallel rep {rep + 1}: {wall:.2f} s (ideal {ideal:g} s)", flush=True)
            rows.append(["parallel wall / ideal under bwrap (64 cells, C=8, 1 s)",
                         c.fmt_mmm(ratios, 3)])
            summary.append(f"parallel wall/ideal under bwrap median {c.mmm(ratios)[1]:.3f} "
                           f"(target <= 1.05: {c.verdict(c.mmm(ratios)[1], 1.05)})")
        c.print_table("isolation cost (min / median / max)", ["measure", "value"], rows)
        c.print_summary("bench_isolation", summary)
    finally:
        c.remove(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
