#!/usr/bin/env python3
"""Per-cell overhead of `eval_runner.py run` with an instant fake agent.

The fake answers at once, so what is left is the runner's own cost: start-up, sandboxes, git,
threads, result files and aggregation. In the same process run, the cost of merely spawning the
fake (twice per cell, executor then grader, with the same argv and prompt size, from a
ThreadPoolExecutor of the same concurrency) is measured and subtracted.

    overhead wall per cell = (runner wall - spawn-only wall) / cells
    overhead CPU per cell  = (runner CPU - spawn-only CPU) / cells   (user+sys, all descendants)

Targets (issue 6): <= 25 ms per cell, and t(5000) / t(500) <= 11 (runner wall, medians).

    python3 tests/benchmarks/bench_overhead.py [--quick] [--reps N] [--sizes 500,5000]
        [--agent claude|codex] [--concurrency 8] [--keep-iteration DIR]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import _common as c

RUNS = 5  # every size is cases x 2 configs x 5 runs, so the statistics follow the same path
TARGET_MS = 25.0
SCALING_SLACK = 1.1  # t(5000)/t(500) <= 11 is 1.1 x the ideal 10


def spawn_only(bin_dir: Path, env: dict[str, str], cwd: Path, cells: int, concurrency: int,
               agent: str) -> tuple[float, float]:
    """Wall and CPU (self + children) of spawning the fake 2 x cells times, nothing else."""
    fake = str(bin_dir / agent)
    if agent == "claude":
        executor = [fake, "-p", "--output-format", "stream-json", "--verbose",
                    "--no-session-persistence", "--permission-mode", "acceptEdits",
                    "--allowedTools", "Bash,Read,Write,Edit,Glob,Grep"]
        grader = [fake, "-p", "--output-format", "json", "--json-schema", '{"type":"object"}',
                  "--tools", "", "--no-session-persistence"]
    else:
        common = [fake, "exec", "--json", "--skip-git-repo-check", "--ephemeral", "--cd",
                  str(cwd)]
        executor = [*common, "--sandbox", "workspace-write", "-"]
        grader = [*common, "--sandbox", "read-only", "--output-schema", "schema.json",
                  "--output-last-message", "last.txt", "-"]
    prompt = ("x" * 70 + "\n") * 12  # about the size of an executor prompt

    def one_cell(_: int) -> None:
        for argv in (executor, grader):
            done = subprocess.run(argv, input=prompt.encode(), capture_output=True, cwd=cwd,
                                  env=env, check=False)
            if done.returncode != 0 or not done.stdout:
                raise RuntimeError(f"fake {argv[0]} failed: {done.stderr[-300:]!r}")

    before = _cpu_now()
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(one_cell, range(cells)))
    wall = time.perf_counter() - started
    return wall, _cpu_now() - before


def _cpu_now() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 and 20 cells: a smoke run")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--sizes", default="500,5000",
                        help="two cell counts, multiples of 10 (cases x 2 configs x 5 runs)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--agent", choices=("claude", "codex"), default="claude")
    parser.add_argument("--keep-iteration", metavar="DIR",
                        help="move the last iteration of the larger size here (for bench_report)")
    args = parser.parse_args()
    c.exit_on_sigterm()
    sizes = [10, 20] if args.quick else [int(s) for s in args.sizes.split(",")]
    if len(sizes) != 2 or any(s % (2 * RUNS) for s in sizes) or args.reps < 1:
        parser.error("--sizes takes two multiples of 10; --reps at least 1")

    tmp = c.temp_dir("overhead")
    try:
        bin_dir = c.install_fakes(tmp)
        env = c.fake_env(tmp, bin_dir)
        spawn_cwd = tmp / "spawn-cwd"
        spawn_cwd.mkdir()
        repos = {n: c.make_repo(tmp / f"size-{n}", n // (2 * RUNS), c.small_project_files())
                 for n in sizes}
        print(f"bench_overhead: {args.agent} lean fake, concurrency {args.concurrency}, "
              f"sizes {sizes} cells (cases x 2 configs x {RUNS} runs), {args.reps} rep(s), "
              f"{c.machine_note()}")
        print(f"  {c.runner_note()}")
        data: dict[int, dict[str, list[float]]] = {
            n: {"wall": [], "cpu": [], "spawn_wall": [], "spawn_cpu": [], "late_early": []}
            for n in sizes}
        kept = None
        for rep in range(args.reps):
            for n in sizes:  # interleaved, so a slow spell hits both sizes
                workspace = tmp / f"ws-{n}-{rep}"
                result = c.run_matrix(repos[n], workspace, env, args.concurrency, runs=RUNS,
                                      agent=args.agent)
                iteration = c.only_iteration(workspace)
                c.check_all_ok(iteration, n)
                data[n]["late_early"].append(late_over_early_throughput(iteration))
                left = list((tmp / "sandboxes").iterdir())
                if left:
                    raise SystemExit(f"sandboxes left behind: {left[:3]}")
                spawn_wall, spawn_cpu = spawn_only(bin_dir, env, spawn_cwd, n,
                                                   args.concurrency, args.agent)
                row = data[n]
                row["wall"].append(result.wall_s)
                row["cpu"].append(result.cpu_s)
                row["spawn_wall"].append(spawn_wall)
                row["spawn_cpu"].append(spawn_cpu)
                print(f"  rep {rep + 1} {n:>5} cells: runner {result.wall_s:7.2f} s wall "
                      f"{result.cpu_s:7.2f} s CPU; spawn-only {spawn_wall:6.2f} s wall "
                      f"{spawn_cpu:6.2f} s CPU", flush=True)
                if args.keep_iteration and n == max(sizes) and rep == args.reps - 1:
                    kept = Path(args.keep_iteration)
                    if kept.exists():
                        shutil.rmtree(kept)
                    shutil.move(str(iteration), str(kept))
                c.remove(workspace)

        rows, per_cell = [], {}
        for n in sizes:
            d = data[n]
            over_wall = [(w - s) / n * 1000 for w, s in zip(d["wall"], d["spawn_wall"])]
            over_cpu = [(w - s) / n * 1000 for w, s in zip(d["cpu"], d["spawn_cpu"])]
            per_cell[n] = (over_wall, over_cpu)
            rows += [
                [f"{n}", "runner wall, s", c.fmt_mmm(d["wall"])],
                [f"{n}", "runner CPU, s", c.fmt_mmm(d["cpu"])],
                [f"{n}", "spawn-only wall, s", c.fmt_mmm(d["spawn_wall"])],
                [f"{n}", "spawn-only CPU, s", c.fmt_mmm(d["spawn_cpu"])],
                [f"{n}", "overhead wall per cell, ms", c.fmt_mmm(over_wall, 1)],
                [f"{n}", "overhead CPU per cell, ms", c.fmt_mmm(over_cpu, 1)],
                [f"{n}", "runner / spawn-only wall",
                 c.fmt_mmm([w / s for w, s in zip(d["wall"], d["spawn_wall"])])],
            ]
        c.print_table("per-cell overhead (min / median / max)", ["cells", "measure", "value"],
                      rows)
        small, large = sizes
        # Each repetition runs both sizes back to back, so a slow spell of the machine hits
        # both: the ratio within a repetition is the side-by-side figure.
        paired = [w_large / w_small
                  for w_large, w_small in zip(data[large]["wall"], data[small]["wall"])]
        scaling = c.mmm(paired)[1]
        ideal = large / small
        c.print_table("linearity (min / median / max)", ["measure", "value"], [
            [f"t({large}) / t({small}), same repetition", c.fmt_mmm(paired)],
            [f"t({large}) / t({small}), ratio of the median walls",
             f"{c.mmm(data[large]['wall'])[1] / c.mmm(data[small]['wall'])[1]:.2f}"],
            [f"cells/s in the last fifth / first fifth of the {large}-cell run",
             c.fmt_mmm(data[large]["late_early"])],
        ])
        worst_wall = max(c.mmm(per_cell[n][0])[1] for n in sizes)
        worst_cpu = max(c.mmm(per_cell[n][1])[1] for n in sizes)
        if kept:
            print(f"\nkept the last {large}-cell iteration at {kept}")
        c.print_summary("bench_overhead", [
            f"overhead wall/cell median {small}={c.mmm(per_cell[small][0])[1]:.1f} ms, "
            f"{large}={c.mmm(per_cell[large][0])[1]:.1f} ms (target <= {TARGET_MS:g}: "
            f"{c.verdict(worst_wall, TARGET_MS)})",
            f"CPU/cell median {small}={c.mmm(per_cell[small][1])[1]:.1f} ms, "
            f"{large}={c.mmm(per_cell[large][1])[1]:.1f} ms "
            f"({c.verdict(worst_cpu, TARGET_MS)})",
            f"t({large})/t({small}) median of same-repetition ratios={scaling:.2f} "
            f"(ideal {ideal:g}, target <= "
            f"{SCALING_SLACK * ideal:g}: {c.verdict(scaling, SCALING_SLACK * ideal)})",
        ])
        return 0
    finally:
        c.remove(tmp)


def late_over_early_throughput(iteration: Path) -> float:
    """Cells finished per second in the last fifth of a run over the first fifth: about 1
    when the runner's cost per cell does not grow as the run goes on (whole-second stamps)."""
    stamps = sorted(datetime.datetime.strptime(
        json.loads(path.read_text(encoding="utf-8"))["finished_at"], "%Y-%m-%dT%H:%M:%SZ"
    ).timestamp() for path in iteration.glob("eval-*/*/run-*/run.json"))
    span = stamps[-1] - stamps[0]
    if span < 10:
        return float("nan")  # too short for whole-second stamps
    early = sum(t <= stamps[0] + span / 5 for t in stamps)
    late = sum(t >= stamps[-1] - span / 5 for t in stamps)
    return late / early


if __name__ == "__main__":
    sys.exit(main())
