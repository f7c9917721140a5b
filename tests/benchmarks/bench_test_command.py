#!/usr/bin/env python3
"""Wall time and peak memory of the README's test command, `python3 -m unittest`.

It runs the command from the repository root the way a new user does (no
SKILL_EVAL_TEST_TIER, so the default tier), --repeat times, and reports per run:

- the wall time, against the README's promise (--target-s, default 180 s on a quiet 2-core
  machine; a loaded machine makes this slower, so the machine's load is printed beside it);
- the peak of the summed resident memory of the command and every process under it (sampled
  every 0.2 s from /proc: tests start fake CLIs and runner subprocesses, and what a user's
  machine needs is their sum), against --target-mb (default 500);
- the largest single process (ru_maxrss of the children), which needs no sampling.

    python3 tests/benchmarks/bench_test_command.py [--quick] [--repeat 1] [--tier core]

--quick runs one small module instead of the whole command (a smoke run of this script).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402

SAMPLE_S = 0.2
QUICK_MODULE = "tests.test_layering"


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, resident KiB) of every process (Linux /proc)."""
    page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry.name}/statm", encoding="ascii") as f:
                rss = int(f.read().split()[1]) * page_kb
            found[int(entry.name)] = (int(fields[1]), rss)
        except (OSError, IndexError, ValueError):
            continue  # the process ended between the listing and the read
    return found


def tree_rss_kb(root: int) -> int:
    """The summed resident memory of `root` and all its descendants, in KiB. By parent, not
    by session: the runner starts each agent in a session of its own."""
    processes = _processes()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in processes.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += processes.get(pid, (0, 0))[1]
        todo.extend(children.get(pid, []))
    return total


class PeakSampler(threading.Thread):
    """Samples a process tree's summed RSS until stopped; `peak_kb` is the highest seen."""

    def __init__(self, root: int):
        super().__init__(daemon=True)
        self.root, self.peak_kb = root, 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(SAMPLE_S):
            self.peak_kb = max(self.peak_kb, tree_rss_kb(self.root))


def run_once(argv: list[str], env: dict[str, str],
             log: Path) -> tuple[float, int, int, str, int]:
    """(wall s, peak summed RSS KiB, exit code, the last 'Ran ...' line, the largest single
    process's KiB) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=c.PROJECT, env=env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT)
        sampler = PeakSampler(proc.pid)
        sampler.start()
        code = proc.wait()
        sampler.done.set()
        sampler.join()
    wall = time.monotonic() - started
    largest = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    text = log.read_text(encoding="utf-8", errors="replace")
    ran = next((line for line in reversed(text.splitlines()) if line.startswith("Ran ")), "")
    if largest <= before:  # ru_maxrss is a maximum over all children: it may not grow
        largest = before
    return wall, max(sampler.peak_kb, largest), code, ran, largest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"run only {QUICK_MODULE}")
    parser.add_argument("--repeat", type=int, default=1, help="runs (default: 1)")
    parser.add_argument("--tier", choices=("unit", "core", "full"),
                        help="set SKILL_EVAL_TEST_TIER (default: unset, as in the README)")
    parser.add_argument("--target-s", type=float, default=180.0)
    parser.add_argument("--target-mb", type=float, default=500.0)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items()
           if k not in ("SKILL_EVAL_TEST_TIER", "SKILL_EVAL_TEST_SHARD")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # as CI: no __pycache__ in the checkout
    if args.tier:
        env["SKILL_EVAL_TEST_TIER"] = args.tier
    argv = [sys.executable, "-m", "unittest", *([QUICK_MODULE] if args.quick else [])]
    print(f"command: {' '.join(['python3', *argv[1:]])} in {c.PROJECT}"
          f" (SKILL_EVAL_TEST_TIER={args.tier or 'unset'})")
    print(f"machine at the start: {c.machine_note()}")
    folder = c.temp_dir("tests")
    rows, walls, peaks, failed = [], [], [], 0
    try:
        for index in range(1, max(1, args.repeat) + 1):
            wall, peak_kb, code, ran, largest_kb = run_once(argv, env, folder / f"run-{index}.log")
            failed += code != 0
            walls.append(wall)
            peaks.append(peak_kb / 1024)
            rows.append([str(index), f"{wall:.1f}", f"{peak_kb / 1024:.0f}",
                         f"{largest_kb / 1024:.0f}", str(code), ran or "(no 'Ran' line)"])
    finally:
        c.remove(folder)
    c.print_table("runs", ["run", "wall s", "peak summed RSS MB", "largest process MB",
                           "exit", "unittest"], rows)
    worst_wall, worst_peak = max(walls), max(peaks)
    c.print_summary("bench_test_command", [
        f"wall {worst_wall:.1f} s (target {args.target_s:g} s on a quiet 2-core machine: "
        f"{c.verdict(worst_wall, args.target_s)})",
        f"peak memory {worst_peak:.0f} MB (target {args.target_mb:g} MB: "
        f"{c.verdict(worst_peak, args.target_mb)})",
        f"{failed} failed run(s)"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
