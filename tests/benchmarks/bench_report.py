#!/usr/bin/env python3
"""Wall time and peak memory of `eval_runner.py report` on a 5,000-run iteration.

The iteration is the one bench_overhead.py makes (500 cases x 2 configs x 5 runs, instant
lean fake): pass one kept with `bench_overhead.py --keep-iteration DIR` as --iteration DIR, or
let this script make its own (about as long as one 5,000-cell run of bench_overhead).

Each measurement is a fresh child process; peak memory is the child's ru_maxrss (os.wait4).
Side by side, in the same run: a child that only starts Python and json.load()s the same
benchmark.json, the floor any `report` that reads that file pays; and, when the runner has it,
`report --html` (which also reads every run's output files), measured the same way.

Targets (issue 6): report wall <= 1 s, peak memory <= 150 MB.

    python3 tests/benchmarks/bench_report.py [--quick] [--reps N] [--iteration DIR] [--cells 5000]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import _common as c

TARGET_WALL_S = 1.0
TARGET_RSS_MB = 150.0
RUNS = 5


def make_iteration(tmp: Path, cells: int) -> Path:
    bin_dir = c.install_fakes(tmp)
    env = c.fake_env(tmp, bin_dir)
    repo = c.make_repo(tmp, cells // (2 * RUNS), c.small_project_files())
    workspace = tmp / "ws"
    result = c.run_matrix(repo, workspace, env, 8, runs=RUNS)
    iteration = c.only_iteration(workspace)
    c.check_all_ok(iteration, cells)
    print(f"  made a {cells}-run iteration in {result.wall_s:.1f} s")
    return iteration


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 10-run iteration: a smoke run")
    parser.add_argument("--reps", type=int, help="default 5; 3 with --quick")
    parser.add_argument("--iteration", metavar="DIR", help="an existing iteration-N folder")
    parser.add_argument("--cells", type=int, default=5000,
                        help="size of the iteration to make when --iteration is not given")
    args = parser.parse_args()
    c.exit_on_sigterm()
    if args.quick:
        args.cells = 10
    if args.reps is None:
        args.reps = 3 if args.quick else 5
    if args.cells % (2 * RUNS) or args.reps < 1:
        parser.error("--cells must be a multiple of 10; --reps at least 1")

    tmp = c.temp_dir("report")
    try:
        print(f"bench_report: {args.reps} rep(s); {c.machine_note()}")
        print(f"  {c.runner_note()}")
        iteration = Path(args.iteration) if args.iteration else make_iteration(tmp, args.cells)
        bench_json = iteration / "benchmark.json"
        runs = sum(1 for _ in iteration.glob("eval-*/*/run-*/run.json"))
        print(f"  iteration {iteration}: {runs} runs, benchmark.json "
              f"{bench_json.stat().st_size / 1e6:.1f} MB")
        env = c.clean_env()
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        report_argv = c.runner_argv("report", str(iteration))
        floor_argv = [sys.executable, "-c", "import json, sys; json.load(open(sys.argv[1]))",
                      str(bench_json)]
        helped = c.run_child(c.runner_argv("report", "--help"), env=env, cwd=tmp)
        html_argv = (c.runner_argv("report", str(iteration), "--html", str(tmp / "page.html"))
                     if "--html" in helped.stdout else None)
        rep_wall, rep_rss, rep_cpu, floor_wall, floor_rss = [], [], [], [], []
        html_wall, html_rss = [], []
        for rep in range(args.reps):
            report = c.run_child(report_argv, env=env, cwd=tmp)
            c.check_ok(report, "eval_runner.py report", allowed=(0, 1))  # 1: review, as run says
            floor = c.run_child(floor_argv, env=env, cwd=tmp)
            c.check_ok(floor, "json.load floor")
            rep_wall.append(report.wall_s)
            rep_cpu.append(report.cpu_s)
            rep_rss.append(report.maxrss_kb / 1024)
            floor_wall.append(floor.wall_s)
            floor_rss.append(floor.maxrss_kb / 1024)
            line = (f"  rep {rep + 1}: report {report.wall_s:.3f} s, {rep_rss[-1]:.0f} MB; "
                    f"json.load floor {floor.wall_s:.3f} s, {floor_rss[-1]:.0f} MB")
            if html_argv:
                html = c.run_child(html_argv, env=env, cwd=tmp)
                c.check_ok(html, "eval_runner.py report --html", allowed=(0, 1))
                html_wall.append(html.wall_s)
                html_rss.append(html.maxrss_kb / 1024)
                line += f"; report --html {html.wall_s:.3f} s, {html_rss[-1]:.0f} MB"
            print(line, flush=True)
        c.print_table("report (min / median / max)", ["measure", "value"], [
            ["report wall, s", c.fmt_mmm(rep_wall, 3)],
            ["report CPU, s", c.fmt_mmm(rep_cpu, 3)],
            ["report peak RSS, MB", c.fmt_mmm(rep_rss, 1)],
            ["floor (python + json.load) wall, s", c.fmt_mmm(floor_wall, 3)],
            ["floor peak RSS, MB", c.fmt_mmm(floor_rss, 1)],
            ["report / floor wall", c.fmt_mmm([r / f for r, f in zip(rep_wall, floor_wall)])],
            ["report / floor RSS", c.fmt_mmm([r / f for r, f in zip(rep_rss, floor_rss)])],
        ] + ([["report --html wall, s", c.fmt_mmm(html_wall, 3)],
              ["report --html peak RSS, MB", c.fmt_mmm(html_rss, 1)],
              ["report --html page, MB", f"{(tmp / 'page.html').stat().st_size / 1e6:.1f}"]]
             if html_argv else []))
        wall, rss = c.mmm(rep_wall)[1], c.mmm(rep_rss)[1]
        c.print_summary("bench_report", [
            f"{runs} runs: wall median {wall:.3f} s = {wall / TARGET_WALL_S:.2f} x target "
            f"({c.verdict(wall, TARGET_WALL_S)}; CPU median {c.mmm(rep_cpu)[1]:.3f} s)",
            f"peak RSS median {rss:.0f} MB = {rss / TARGET_RSS_MB:.2f} x target "
            f"({c.verdict(rss, TARGET_RSS_MB)})",
            f"report/floor wall {c.mmm([r / f for r, f in zip(rep_wall, floor_wall)])[1]:.2f}, "
            f"RSS {c.mmm([r / f for r, f in zip(rep_rss, floor_rss)])[1]:.2f}",
        ] + ([f"--html wall median {c.mmm(html_wall)[1]:.3f} s "
              f"({c.verdict(c.mmm(html_wall)[1], TARGET_WALL_S)}), RSS "
              f"{c.mmm(html_rss)[1]:.0f} MB ({c.verdict(c.mmm(html_rss)[1], TARGET_RSS_MB)})"]
             if html_argv else []))
        return 0
    finally:
        c.remove(tmp)


if __name__ == "__main__":
    sys.exit(main())
