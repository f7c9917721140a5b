#!/usr/bin/env python3
"""Sandbox cost on a large repository: build time per cell, and peak disk during a run.

A synthetic git repository of 10,000 tracked text files totalling 100 MB (plus the skill and
its suite) is made once in a temporary folder. Then, in the same process run:

1. per cell: the runner's own build_sandbox() (imported from eval_runner.py by path, with one
   RepoSnapshot taken up front, as `run` does once per iteration) against a plain copy of the
   same delivered files (shutil.copyfile per file, directories made as needed), alternating.
   build_sandbox's git calls are timed and counted by wrapping the module's run_git, so the
   table splits the build into file copy and each git step. sandbox_changes() (git status
   after the agent) and removal are timed as well. Target: build / plain copy <= 1.5.
2. peak disk: `eval_runner.py run` of 32 cells (16 cases x 2 configs) at concurrency 4 with a
   lean fake agent that sleeps --sleep seconds a call (so built sandboxes live as long as an
   agent would keep them). A background thread walks SKILL_EVAL_SANDBOX_ROOT and sums allocated
   blocks (hard links once). Target: peak <= 4 x delivered size; the ratio is given against
   the delivered files' disk usage (du of the plain copy) and against their byte size.

    python3 tests/benchmarks/bench_sandbox.py [--quick] [--reps N] [--disk-reps N] [--files 10000]
        [--mb 100] [--sleep 0.5]
"""

from __future__ import annotations

import argparse
import inspect
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import _common as c

TARGET_BUILD_RATIO = 1.5
TARGET_DISK_RATIO = 4.0
WORDS_SEED = 20261129


# ---- the synthetic repository --------------------------------------------------------------


def text_pool(size: int) -> str:
    """Source-like text (compresses about as well as code does), made quickly and reproducibly."""
    rng = random.Random(WORDS_SEED)
    letters = "abcdefghijklmnopqrstuvwxyz_"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 12))) for _ in range(3000)]
    lines, total = [], 0
    while total < size:
        indent = " " * (4 * rng.randint(0, 3))
        line = indent + " ".join(rng.choice(words) for _ in range(rng.randint(2, 10))) + "\n"
        lines.append(line)
        total += len(line)
    return "".join(lines)[:size]


def file_writer(files: int, total_bytes: int) -> Any:
    def write(root: Path) -> None:
        mean = total_bytes // files
        pool = text_pool(4 * mean + 1_000_000)
        rng = random.Random(WORDS_SEED + 1)
        written = 0
        per_dir = 100
        for i in range(files):
            rel = f"src/pkg_{i // (per_dir * 10):03d}/mod_{(i // per_dir) % 10}/file_{i:05d}.txt"
            left = files - i
            size = (total_bytes - written if left == 1 else
                    max(200, min(int(rng.uniform(0.2, 1.8) * mean), total_bytes - written
                                 - 200 * (left - 1))))
            header = f"# {rel}\n"
            start = rng.randrange(0, len(pool) - size)
            body = (header + pool[start:start + size])[:size]
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body, encoding="ascii")
            written += len(body)
    return write


# ---- measuring disk use ----------------------------------------------------------------------


def disk_usage(root: Path) -> int:
    """Allocated bytes under root (st_blocks x 512), hard-linked files counted once."""
    total, seen = 0, set()
    stack = [str(root)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            elif st.st_nlink > 1:
                key = (st.st_dev, st.st_ino)
                if key in seen:
                    continue
                seen.add(key)
            total += st.st_blocks * 512
    return total


class DiskSampler(threading.Thread):
    """Walks the sandbox root and the workspace over and over; remembers the largest totals.

    The workspace counts because a runner may keep per-cell git data in the run folder (a
    baseline repository, say) rather than in the sandbox; it also holds the small result files.
    """

    def __init__(self, sandbox_root: Path, workspace: Path):
        super().__init__(daemon=True)
        self.sandbox_root, self.workspace = sandbox_root, workspace
        self.stop = threading.Event()
        self.peak_root = 0  # the sandbox root alone
        self.peak = 0  # sandbox root + workspace, walked in the same sample
        self.samples = 0
        self.fs_base = self._fs_used()
        self.fs_peak = 0

    def _fs_used(self) -> int:
        usage = shutil.disk_usage(self.sandbox_root)
        return usage.total - usage.free

    def run(self) -> None:
        while not self.stop.is_set():
            started = time.perf_counter()
            in_root = disk_usage(self.sandbox_root)
            self.peak_root = max(self.peak_root, in_root)
            self.peak = max(self.peak, in_root + disk_usage(self.workspace))
            self.fs_peak = max(self.fs_peak, self._fs_used() - self.fs_base)
            self.samples += 1
            # Rest as long as the walk took (at least 20 ms): at most half a CPU for sampling.
            self.stop.wait(max(0.02, time.perf_counter() - started))


# ---- per-cell build ---------------------------------------------------------------------------


class GitTimer:
    """Wraps the runner's run_git: time and count per git subcommand."""

    def __init__(self, runner: Any):
        self.runner = runner
        self.original = runner.run_git
        self.times: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def __enter__(self) -> GitTimer:
        def timed(args: list[str], *rest: Any, **kw: Any) -> Any:
            started = time.perf_counter()
            try:
                return self.original(args, *rest, **kw)
            finally:
                name = next((a for a in args if not a.startswith("-")), args[0])
                self.times[name] = self.times.get(name, 0.0) + time.perf_counter() - started
                self.counts[name] = self.counts.get(name, 0) + 1
        self.runner.run_git = timed
        return self

    def __exit__(self, *exc: Any) -> None:
        self.runner.run_git = self.original


def cpu_seconds() -> float:
    """User + system CPU of this process and of its waited-for children (git)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def plain_copy(root: Path, rels: list[str], dest: Path) -> None:
    made = set()
    for rel in rels:
        parent = os.path.dirname(rel)
        if parent and parent not in made:
            os.makedirs(dest / parent, exist_ok=True)
            made.add(parent)
        shutil.copyfile(root / rel, dest / rel)


def process_groups(runner: Any, function: Any) -> dict[str, Any]:
    """{"groups": a registry of the runner's processes} when `function` takes one (the
    runner's one spawner registers every git it starts), else nothing."""
    takes = "groups" in inspect.signature(function).parameters
    return {"groups": runner.ProcessGroups()} if takes else {}


def take_snapshot(runner: Any, repo: Path, base: Path) -> tuple[Any, float, float]:
    """RepoSnapshot.take, plus the once-per-iteration git template when the runner has one
    (as `run` does); returns the snapshot and the seconds each part took."""
    started = time.perf_counter()
    snapshot = runner.RepoSnapshot.take(repo, c.SKILL_NAME,
                                        **process_groups(runner, runner.RepoSnapshot.take))
    listed = time.perf_counter() - started
    template_s = 0.0
    if hasattr(runner, "build_git_template") and hasattr(snapshot, "template"):
        started = time.perf_counter()
        snapshot.template = runner.build_git_template(
            snapshot, base, **process_groups(runner, runner.build_git_template))
        if hasattr(runner, "add_runner_baselines"):  # in the run folder, as `run` does
            runner.add_runner_baselines(snapshot.template,
                                        Path(tempfile.mkdtemp(dir=base.parent)) / "baselines")
        template_s = time.perf_counter() - started
        if getattr(snapshot.template, "error", None):
            raise SystemExit(f"build_git_template failed: {snapshot.template.error}")
    return snapshot, listed, template_s


def drop_template(snapshot: Any) -> None:
    template = getattr(snapshot, "template", None)
    if template is not None:
        if hasattr(template, "remove_runner_baselines"):
            template.remove_runner_baselines()
        template.remove()


CONFIGS = (("with_skill", True), ("without_skill", False))


def call_build(runner: Any, snapshot: Any, case: Any, with_skill: bool, base: Path) -> Any:
    """build_sandbox as `run` calls it, whichever of its known signatures the runner has."""
    params = inspect.signature(runner.build_sandbox).parameters
    extra = {}
    run_folder = None
    if "baseline_git" in params or "sandbox" in params:  # the runner's own, in the run folder
        run_folder = Path(tempfile.mkdtemp(dir=base.parent))
        extra["baseline_git"] = run_folder / "baseline.git"
    extra.update(process_groups(runner, runner.build_sandbox))
    if "sandbox" in params:  # an empty Sandbox made by the caller, in `base`
        sandbox = runner.build_sandbox(snapshot, case, with_skill,
                                       runner.Sandbox.new(base, extra.pop("baseline_git")),
                                       **extra)
    else:
        sandbox = runner.build_sandbox(snapshot, case, with_skill, base, **extra)
    sandbox.bench_run_folder = run_folder  # the cell's folder; a shared baseline lives elsewhere
    return sandbox


def call_changes(runner: Any, sandbox: Any) -> Any:
    params = inspect.signature(runner.sandbox_changes).parameters
    git = sandbox_git(sandbox)
    if "groups" in params:
        changes = runner.sandbox_changes(sandbox.repo, sandbox.baseline_git, git,
                                         runner.ProcessGroups())
    elif "baseline" in params:
        changes = runner.sandbox_changes(sandbox.repo, sandbox.baseline_git, git)
    else:
        changes = runner.sandbox_changes(sandbox.repo, git)
    return changes if isinstance(changes, dict) else changes.to_json()


def sandbox_git(sandbox: Any) -> Any:
    """The sandbox's git record: a record on newer runners, a dict on older ones."""
    return sandbox.git if hasattr(type(sandbox), "git") else sandbox.record["git"]


def per_cell(runner: Any, repo: Path, base: Path, reps: int) -> dict[str, list[float]]:
    suite = runner.load_valid_suite(str(repo / "evals" / c.SKILL_NAME / "evals.json"), str(repo))
    case = suite.cases[0]
    snapshot, listed_s, template_s = take_snapshot(runner, repo, base)
    delivered = list(snapshot.base_files) + list(snapshot.skill_files)
    template = getattr(snapshot, "template", None)
    template_du = disk_usage(template.folder) if template is not None else 0
    print(f"  snapshot: {len(delivered)} delivered files, listed in {listed_s:.2f} s "
          f"({snapshot.listing_source}); git template "
          + (f"built in {template_s:.2f} s, {template_du / 1e6:.1f} MB" if template is not None
             else "none (this runner has no build_git_template)"))
    out: dict[str, list[float]] = {"template": [template_s], "template_du": [template_du]}
    warm = Path(tempfile.mkdtemp(dir=base))
    plain_copy(repo, delivered, warm)  # page cache warm-up, not timed
    c.remove(warm)
    try:
        for rep in range(reps):
            dest = Path(tempfile.mkdtemp(dir=base))
            t0, cpu0 = time.perf_counter(), cpu_seconds()
            plain_copy(repo, delivered, dest)
            out.setdefault("plain", []).append(time.perf_counter() - t0)
            out.setdefault("plain_cpu", []).append(cpu_seconds() - cpu0)
            c.remove(dest)
            line = [f"  rep {rep + 1}: plain copy {out['plain'][-1]:.2f} s"]
            for config, with_skill in CONFIGS:
                with GitTimer(runner) as timer:
                    t0, cpu0 = time.perf_counter(), cpu_seconds()
                    sandbox = call_build(runner, snapshot, case, with_skill, base)
                    build = time.perf_counter() - t0
                    build_cpu = cpu_seconds() - cpu0
                    build_git, calls = sum(timer.times.values()), sum(timer.counts.values())
                    split = dict(timer.times)
                    t0 = time.perf_counter()
                    changes = call_changes(runner, sandbox)
                    status = time.perf_counter() - t0
                git = sandbox_git(sandbox)
                if not (git.get("ok", False) if isinstance(git, dict) else git.ok):
                    raise SystemExit(f"build_sandbox's git step failed: {git}")
                if any(changes.get(k) for k in ("added", "modified", "deleted")):
                    raise SystemExit(f"a fresh sandbox shows changes: {str(changes)[:300]}")
                t0 = time.perf_counter()
                sandbox.remove()
                if sandbox.bench_run_folder is not None:
                    c.remove(sandbox.bench_run_folder)
                values = {"build": build, "build_cpu": build_cpu,
                          "nongit": build - build_git, "calls": calls,
                          "status": status, "remove": time.perf_counter() - t0,
                          **{f"git {name}": secs for name, secs in split.items()}}
                for key, value in values.items():
                    out.setdefault(f"{config}|{key}", []).append(value)
                line.append(f"{config} {build:.2f} s (git {build_git:.2f} s, {calls} calls)")
            print(", ".join(line), flush=True)
    finally:
        drop_template(snapshot)
    return out


def cell_rows(cell: dict[str, list[float]]) -> list[list[str]]:
    rows = [["plain copy of the delivered files, s", c.fmt_mmm(cell["plain"])],
            ["  CPU (user + sys), s", c.fmt_mmm(cell["plain_cpu"])]]
    for config, _ in CONFIGS:
        def get(key: str, config: str = config) -> list[float]:
            return cell.get(f"{config}|{key}", [])

        rows += [[f"build_sandbox {config}, s", c.fmt_mmm(get("build"))],
                 ["  CPU (user + sys, git included), s", c.fmt_mmm(get("build_cpu"))],
                 ["  non-git part (file copy, folders, .git files), s", c.fmt_mmm(get("nongit"))]]
        rows += [[f"  {key.split('|', 1)[1]}, s", c.fmt_mmm(values)]
                 for key, values in cell.items() if key.startswith(f"{config}|git ")]
        rows += [["  git calls", c.fmt_mmm(get("calls"), 0)],
                 ["  build / plain copy", c.fmt_mmm(
                     c.ratios(get("build"), cell["plain"]))],
                 ["  build / plain copy, CPU", c.fmt_mmm(
                     c.ratios(get("build_cpu"), cell["plain_cpu"]))],
                 ["  sandbox_changes (git status after the agent), s", c.fmt_mmm(get("status"))],
                 ["  sandbox removal, s", c.fmt_mmm(get("remove"))]]
    if cell["template"][0]:
        rows += [["git template, once per iteration, s", f"{cell['template'][0]:.2f}"],
                 ["git template disk usage, MB", f"{cell['template_du'][0] / 1e6:.1f}"]]
    return rows


def build_ratios(cell: dict[str, list[float]], kind: str = "") -> dict[str, float | None]:
    """Median build / plain copy for each config, of wall time or (kind "_cpu") CPU time;
    None where every plain copy read 0 s on that clock."""
    out: dict[str, float | None] = {}
    for config, _ in CONFIGS:
        values = c.ratios(cell[f"{config}|build{kind}"], cell[f"plain{kind}"])
        out[config] = c.mmm(values)[1] if values else None
    return out


def fmt_ratios(ratios: dict[str, float | None]) -> str:
    return ", ".join(f"{k} {v:.2f}" if v is not None else f"{k} absent (clock read 0 s)"
                     for k, v in ratios.items())


def build_summary(cell: dict[str, list[float]]) -> str:
    ratios = build_ratios(cell)
    measured = [v for v in ratios.values() if v is not None]
    verdict = c.verdict(max(measured), TARGET_BUILD_RATIO) if measured else "not measured"
    return (f"build/plain-copy median {fmt_ratios(ratios)} "
            f"(target <= {TARGET_BUILD_RATIO}: {verdict}); "
            f"in CPU {fmt_ratios(build_ratios(cell, '_cpu'))}")


# ---- peak disk during a run -----------------------------------------------------------------


def disk_run(repo: Path, tmp: Path, sleep_s: float, cells: int, rep: int) -> DiskSampler:
    bin_dir = c.install_fakes(tmp)
    root = tmp / f"disk-sandboxes-{rep}"
    env = c.fake_env(tmp, bin_dir, sleep_s=sleep_s, sandbox_root=root)
    workspace = tmp / f"disk-ws-{rep}"
    workspace.mkdir()
    sampler = DiskSampler(root, workspace)
    sampler.start()
    try:
        result = c.run_matrix(repo, workspace, env, 4)
    finally:
        sampler.stop.set()
        sampler.join()
    c.check_all_ok(c.only_iteration(workspace), cells)
    left = list(root.iterdir())
    c.remove(workspace)
    c.remove(root)
    if left:
        raise SystemExit(f"sandboxes left behind after the run: {left[:3]}")
    sampler.wall_s = result.wall_s
    return sampler


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="200 files, 2 MB, one 4-cell disk run: a smoke run")
    parser.add_argument("--reps", type=int, default=3, help="per-cell build repetitions")
    parser.add_argument("--disk-reps", type=int,
                        help="32-cell disk runs (default 3; 1 with --quick; 0 skips them)")
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--mb", type=float, default=100.0)
    parser.add_argument("--sleep", type=float, default=0.5,
                        help="seconds each fake agent call takes in the disk run")
    args = parser.parse_args()
    c.exit_on_sigterm()
    if args.quick:
        args.files, args.mb, args.sleep = 200, 2.0, 0.1
    if args.disk_reps is None:
        args.disk_reps = 1 if args.quick else 3
    cases = 2 if args.quick else 16  # x 2 configs: 32 cells, or 4 for --quick
    if args.reps < 1 or args.disk_reps < 0:
        parser.error("--reps takes at least 1, --disk-reps at least 0 (0 skips the disk run)")

    tmp = c.temp_dir("sandbox")
    saved_env = dict(os.environ)
    try:
        for name in list(os.environ):  # the runner's git calls must not be redirected
            if name.startswith("GIT_"):
                del os.environ[name]
        print(f"bench_sandbox: {args.files} files, {args.mb:g} MB; {c.machine_note()}")
        print(f"  {c.runner_note()}")
        t0 = time.perf_counter()
        repo = c.make_repo(tmp / "src", cases,
                           writer=file_writer(args.files, int(args.mb * 1e6)))
        print(f"  made the repository in {time.perf_counter() - t0:.1f} s")
        runner = c.load_runner()
        base = tmp / "cells"
        base.mkdir()
        cell = per_cell(runner, repo, base, args.reps)

        snapshot = runner.RepoSnapshot.take(repo, c.SKILL_NAME,
                                            **process_groups(runner, runner.RepoSnapshot.take))
        delivered = list(snapshot.base_files) + list(snapshot.skill_files)
        delivered_bytes = sum((repo / rel).stat().st_size for rel in delivered)
        copy_dir = Path(tempfile.mkdtemp(dir=base))
        plain_copy(repo, delivered, copy_dir)
        delivered_du = disk_usage(copy_dir)
        c.remove(copy_dir)

        peaks, root_peaks, fs_peaks, samples, walls = [], [], [], [], []
        for rep in range(args.disk_reps):
            run = disk_run(repo, tmp, args.sleep, 2 * cases, rep)
            peaks.append(run.peak)
            root_peaks.append(run.peak_root)
            fs_peaks.append(run.fs_peak)
            samples.append(run.samples)
            walls.append(run.wall_s)
            print(f"  disk run {rep + 1}: {run.wall_s:.1f} s, peak {run.peak / 1e6:.0f} MB "
                  f"(sandbox root alone {run.peak_root / 1e6:.0f} MB; {run.samples} samples; "
                  f"filesystem delta {run.fs_peak / 1e6:.0f} MB)", flush=True)

        mb = 1e6
        c.print_table(f"per-cell sandbox build, {len(delivered)} files (min / median / max)",
                      ["measure", "value"], cell_rows(cell))
        if not peaks:
            c.print_summary("bench_sandbox", [build_summary(cell), "peak disk: not measured "
                                              "(--disk-reps 0)"])
            return 0
        c.print_table(f"peak sandbox disk, {2 * cases} cells at concurrency 4 "
                      "(min / median / max)", ["measure", "value"], [
                          ["delivered files, MB (bytes)", f"{delivered_bytes / mb:.1f}"],
                          ["delivered files, MB (disk usage of a plain copy)",
                           f"{delivered_du / mb:.1f}"],
                          ["run wall, s", c.fmt_mmm(walls, 1)],
                          ["walk samples per run", c.fmt_mmm(samples, 0)],
                          ["peak, sandbox root + workspace, MB", c.fmt_mmm(peaks, 0, 1 / mb)],
                          ["peak, sandbox root alone, MB", c.fmt_mmm(root_peaks, 0, 1 / mb)],
                          ["filesystem used delta (statvfs; noisy), MB",
                           c.fmt_mmm(fs_peaks, 0, 1 / mb)],
                          ["peak / delivered disk usage", c.fmt_mmm(
                              [p / delivered_du for p in peaks], 2)],
                          ["peak / delivered bytes", c.fmt_mmm(
                              [p / delivered_bytes for p in peaks], 2)],
                      ])
        disk = c.mmm([p / delivered_du for p in peaks])[1]
        c.print_summary("bench_sandbox", [
            build_summary(cell),
            f"peak disk / delivered median {disk:.2f} of disk usage, "
            f"{c.mmm([p / delivered_bytes for p in peaks])[1]:.2f} of bytes (target <= "
            f"{TARGET_DISK_RATIO:g}: {c.verdict(disk, TARGET_DISK_RATIO)})",
        ])
        return 0
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        c.remove(tmp)


if __name__ == "__main__":
    sys.exit(main())
