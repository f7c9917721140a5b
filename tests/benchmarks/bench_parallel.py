#!/usr/bin/env python3
"""Parallel efficiency of `eval_runner.py run`: do all --concurrency slots stay busy?

A lean fake agent sleeps 1.0 s per call. 64 cells (32 cases x 2 configs) at concurrency 8;
each cell is an executor call then a grader call, so

    ideal = ceil(cells / concurrency) x 2 x sleep = 16 s      target: wall / ideal <= 1.05

In the same process run, a plain ThreadPoolExecutor of the same size spawns the same fake for
the same schedule (executor then grader per cell, nothing else): its wall is the floor this
machine reaches, so runner / floor is the runner's own share. The table also shows how much of
the slot time (wall x concurrency) the agent calls filled, from the durations in run.json.

With --phases (claude only) the fake stamps each call's start and end into its result
envelope, and the table splits the runner's overhead: before the first agent starts (the
interpreter, validation, snapshots, probes), between the first start and the last end beyond
the ideal (per step of a lane), and after the last agent ends (checks, aggregation, reports).
The stamps cost each call two `date` processes, inside the agent's time, in both runs.

    python3 tests/benchmarks/bench_parallel.py [--quick] [--reps N] [--cases 32] [--concurrency 8]
        [--sleep 1.0] [--agent claude|codex] [--phases]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import _common as c

TARGET = 1.05


def floor_run(bin_dir: Path, env: dict[str, str], cwd: Path, cells: int, concurrency: int,
              agent: str) -> float:
    """The same schedule without the runner: executor then grader call per cell."""
    fake = str(bin_dir / agent)
    executor = [fake, "-p", "--output-format", "stream-json", "--verbose"] if agent == "claude" \
        else [fake, "exec", "--json", "-"]
    grader = [fake, "-p", "--output-format", "json", "--json-schema", "{}"] if agent == "claude" \
        else [fake, "exec", "--json", "--output-schema", "s.json", "-"]

    def one_cell(_: int) -> None:
        for argv in (executor, grader):
            subprocess.run(argv, input=b"prompt\n", capture_output=True, cwd=cwd, env=env,
                           check=True)

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(one_cell, range(cells)))
    return time.perf_counter() - started


def agent_seconds(iteration: Path) -> float:
    """Sum of executor and grader call durations recorded in every run.json."""
    total = 0.0
    for path in iteration.glob("eval-*/*/run-*/run.json"):
        record = json.loads(path.read_text(encoding="utf-8"))
        for role in ("executor", "grader"):
            total += float((record.get(role) or {}).get("duration_s") or 0.0)
    return total


def call_stamps(iteration: Path) -> list[tuple[float, float]]:
    """(start, end) of every stamped agent call, read from the outputs the runner kept."""
    stamps = []
    for log in iteration.glob("eval-*/*/run-*/*/*_*.txt"):  # logs/, or outputs/ in round 1
        for line in log.read_text(encoding="utf-8").splitlines():
            if '"bench_started"' in line:
                event = json.loads(line)
                stamps.append((float(event["bench_started"]), float(event["bench_ended"])))
    return stamps


def phases(stamps: list[tuple[float, float]], started: float, ended: float, ideal: float,
           steps: int) -> dict[str, float]:
    first, last = min(s for s, _ in stamps), max(e for _, e in stamps)
    return {"before": first - started, "after": ended - last,
            "per_step_ms": (last - first - ideal) / steps * 1000}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="8 cells, 0.2 s sleep: a smoke run")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--cases", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--sleep", type=float, default=1.0, help="seconds per fake call")
    parser.add_argument("--agent", choices=("claude", "codex"), default="claude")
    parser.add_argument("--phases", action="store_true",
                        help="split the overhead into before, between and after the agents")
    args = parser.parse_args()
    if args.phases and args.agent != "claude":
        parser.error("--phases needs --agent claude (its lean fake stamps its calls)")
    c.exit_on_sigterm()
    if args.quick:
        args.cases, args.sleep = 4, 0.2
    cells = args.cases * 2
    ideal = math.ceil(cells / args.concurrency) * 2 * args.sleep

    tmp = c.temp_dir("parallel")
    try:
        bin_dir = c.install_fakes(tmp)
        env = c.fake_env(tmp, bin_dir, sleep_s=args.sleep)
        if args.phases:
            env["BENCH_FAKE_STAMP"] = "1"
        repo = c.make_repo(tmp, args.cases, c.small_project_files())
        floor_cwd = tmp / "floor-cwd"
        floor_cwd.mkdir()
        print(f"bench_parallel: {args.agent} lean fake sleeping {args.sleep:g} s a call, {cells} "
              f"cells ({args.cases} cases x 2 configs) at concurrency {args.concurrency}; "
              f"ideal {ideal:g} s; {args.reps} rep(s); {c.machine_note()}")
        print(f"  {c.runner_note()}")
        walls, floors, fills, splits = [], [], [], []
        steps = math.ceil(cells / args.concurrency) * 2
        for rep in range(args.reps):
            workspace = tmp / f"ws-{rep}"
            started = time.time()
            result = c.run_matrix(repo, workspace, env, args.concurrency, agent=args.agent)
            ended = time.time()
            iteration = c.only_iteration(workspace)
            c.check_all_ok(iteration, cells)
            if args.phases:
                splits.append(phases(call_stamps(iteration), started, ended, ideal, steps))
            fills.append(agent_seconds(iteration) / (result.wall_s * args.concurrency))
            c.remove(workspace)
            floor = floor_run(bin_dir, env, floor_cwd, cells, args.concurrency, args.agent)
            walls.append(result.wall_s)
            floors.append(floor)
            print(f"  rep {rep + 1}: runner {result.wall_s:.2f} s ({result.cpu_s:.2f} s CPU), "
                  f"floor {floor:.2f} s", flush=True)
        ratios = [w / ideal for w in walls]
        c.print_table("parallel efficiency (min / median / max)", ["measure", "value"], [
            ["runner wall, s", c.fmt_mmm(walls)],
            ["floor wall (thread pool + fake only), s", c.fmt_mmm(floors)],
            ["ideal, s", f"{ideal:g}"],
            ["runner wall / ideal", c.fmt_mmm(ratios, 3)],
            ["floor wall / ideal", c.fmt_mmm([f / ideal for f in floors], 3)],
            ["runner wall / floor wall", c.fmt_mmm([w / f for w, f in zip(walls, floors)], 3)],
            ["slot time filled by agent calls", c.fmt_mmm(fills, 3)],
        ] + ([
            ["before the first agent starts, s", c.fmt_mmm([p["before"] for p in splits])],
            ["first start to last end beyond ideal, ms a step",
             c.fmt_mmm([p["per_step_ms"] for p in splits], 1)],
            ["after the last agent ends, s", c.fmt_mmm([p["after"] for p in splits])],
        ] if splits else []))
        median = c.mmm(ratios)[1]
        c.print_summary("bench_parallel", [
            f"wall/ideal median {median:.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}; "
            f"target <= {TARGET}: {c.verdict(median, TARGET)})",
            f"floor/ideal median {c.mmm([f / ideal for f in floors])[1]:.3f}",
            f"runner/floor median {c.mmm([w / f for w, f in zip(walls, floors)])[1]:.3f}",
        ])
        return 0
    finally:
        c.remove(tmp)


if __name__ == "__main__":
    sys.exit(main())
