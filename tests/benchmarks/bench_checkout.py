#!/usr/bin/env python3
"""Cost of the checkout comparison `run` makes around its agents, on a large repository.

The repository is the one bench_sandbox.py builds: 10,000 tracked text files totalling 100 MB,
plus the skill and its suite. The runner's CheckoutSnapshot (imported from eval_runner.py by
path) is timed, per repetition:

1. before: list the checkout (git ls-files), stat every file and hash every file;
2. after, nothing changed: list and stat again; nothing is hashed;
3. after, every file touched (mtime moved, content unchanged): list, stat, and hash every file
   again, since each one's metadata changed; all are counted as touched, none as changed.

The files were just written, so their content is in the page cache: these are warm-cache
figures (a cold first read of 100 MB adds the disk's read time to step 1).

    python3 tests/benchmarks/bench_checkout.py [--quick] [--reps N] [--files 10000] [--mb 100]
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import time
from pathlib import Path

import _common as c
from bench_sandbox import file_writer


def touch_all(root: Path, names: list[str]) -> None:
    later = time.time_ns() + 1_000_000_000
    for name in names:
        # git's own files, and the skill package, where any write counts as a change
        if not name.startswith((".git/", "skills/")):
            os.utime(root / name, ns=(later, later))


def member(state, name):
    """A member of compare()'s result: a record now, a dict in runners before round 6."""
    return state[name] if isinstance(state, dict) else getattr(state, name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="500 files, 5 MB: a smoke run")
    parser.add_argument("--reps", type=int, help="default 5; 2 with --quick")
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--mb", type=float, default=100.0)
    args = parser.parse_args()
    c.exit_on_sigterm()
    if args.quick:
        args.files, args.mb = 500, 5.0
    reps = args.reps or (2 if args.quick else 5)
    runner = c.load_runner()
    tmp = c.temp_dir("checkout")
    try:
        print(f"bench_checkout: {reps} rep(s); {c.machine_note()}")
        print(f"  {c.runner_note()}")
        repo = c.make_repo(tmp, 2, writer=file_writer(args.files, int(args.mb * 1e6)))
        iteration = repo / "evals" / "demo" / "workspace" / "claude" / "iteration-1"
        iteration.mkdir(parents=True)
        before_s, same_s, touched_s = [], [], []
        files = 0
        for rep in range(reps):
            groups = ([runner.ProcessGroups()] if "groups" in
                      inspect.signature(runner.CheckoutSnapshot.compare).parameters else [])
            snapshot = runner.CheckoutSnapshot.take(repo, iteration,
                                                    **dict(zip(["groups"], groups)))
            files = len(snapshot.entries)
            started = time.monotonic()
            unchanged = snapshot.compare(*groups)
            same = time.monotonic() - started
            assert member(unchanged, "changed_count") == 0, unchanged
            touch_all(repo, list(snapshot.entries))
            started = time.monotonic()
            touched = snapshot.compare(*groups)
            touched_time = time.monotonic() - started
            assert (member(touched, "changed_count") == 0
                    and member(touched, "touched_only") >= args.files), touched
            before_s.append(snapshot.seconds)
            same_s.append(same)
            touched_s.append(touched_time)
            print(f"  rep {rep + 1}: before {snapshot.seconds:.3f} s, after (unchanged) "
                  f"{same:.3f} s, after (all touched) {touched_time:.3f} s", flush=True)
        rate = [files / s for s in before_s]
        c.print_table(f"checkout snapshot of {files} files, {args.mb:g} MB (min / median / max)",
                      ["step", "seconds", "files/s"], [
                          ["before: list, stat, hash all", c.fmt_mmm(before_s, 3),
                           c.fmt_mmm(rate, 0)],
                          ["after, unchanged: list, stat", c.fmt_mmm(same_s, 3),
                           c.fmt_mmm([files / s for s in same_s], 0)],
                          ["after, all touched: list, stat, hash all", c.fmt_mmm(touched_s, 3),
                           c.fmt_mmm([files / s for s in touched_s], 0)]])
        c.print_summary("bench_checkout", [
            f"{files} files: before median {c.mmm(before_s)[1]:.3f} s "
            f"({c.mmm(rate)[1]:.0f} files/s)",
            f"after median {c.mmm(same_s)[1]:.3f} s unchanged, "
            f"{c.mmm(touched_s)[1]:.3f} s with every file touched"])
        return 0
    finally:
        c.remove(tmp)


if __name__ == "__main__":
    sys.exit(main())
