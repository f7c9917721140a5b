"""Shared helpers for the skill-eval benchmarks: standard library only, Python 3.9+.

Each benchmark script imports this module from its own folder. Nothing here writes inside the
repository: all data lives in temporary folders that are removed at the end.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
PROJECT = BENCH_DIR.parent.parent
# SKILL_EVAL_BENCH_RUNNER=/path/to/eval_runner.py measures another copy (e.g. an older commit).
RUNNER_PATH = Path(os.environ.get("SKILL_EVAL_BENCH_RUNNER")
                   or PROJECT / "skills" / "skill-eval" / "scripts" / "eval_runner.py").resolve()
FAKES_DIR = BENCH_DIR / "fakes"
SUMMARY_PREFIX = "summary:"
SKILL_NAME = "demo"
SKILL_MD = ("---\nname: demo\ndescription: Use when benchmarking skill-eval.\n---\n\n"
            "# Demo\n\nSay hello.\n")
# Variables that would point git, or the fakes, somewhere else.
_DROPPED_PREFIXES = ("GIT_", "FAKE_AGENT", "BENCH_FAKE_")
_DROPPED_NAMES = ("CLAUDECODE", "SKILL_EVAL_SANDBOX_ROOT")


# ---- runner ---------------------------------------------------------------------------------


def load_runner() -> Any:
    """Import eval_runner.py by path (the file is a script, not a package)."""
    spec = importlib.util.spec_from_file_location("eval_runner", RUNNER_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("eval_runner", module)
    spec.loader.exec_module(module)
    return sys.modules["eval_runner"]


def runner_argv(*args: str) -> list[str]:
    return [sys.executable, str(RUNNER_PATH), *args]


# ---- statistics and tables --------------------------------------------------------------------


def mmm(values: list[float]) -> tuple[float, float, float]:
    """min, median, max."""
    return min(values), statistics.median(values), max(values)


def ratios(numerators: list[float], denominators: list[float]) -> list[float]:
    """Pairwise n / d, leaving out the pairs whose d is zero: a CPU clock can read 0.00 s
    for a step shorter than its resolution, and that pair measures nothing."""
    return [n / d for n, d in zip(numerators, denominators) if d > 0]


def fmt_mmm(values: list[float], digits: int = 2, scale: float = 1.0) -> str:
    if not values:
        return "absent (every denominator read 0, below the clock's resolution)"
    low, mid, high = mmm([v * scale for v in values])
    return f"{low:.{digits}f} / {mid:.{digits}f} / {high:.{digits}f}"


def print_table(title: str, headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    print(f"\n{title}")
    print("  " + "  ".join(str(h).ljust(w) for h, w in zip(headers, widths)))
    print("  " + "  ".join("-" * w for w in widths))
    for row in rows:
        print("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
    sys.stdout.flush()


def machine_note() -> str:
    """CPUs, load and CPU/IO pressure: the noise a reader needs to judge the figures."""
    parts = [f"{os.cpu_count()} CPUs", f"load average {os.getloadavg()[0]:.1f}"]
    for kind in ("cpu", "io"):
        try:
            with open(f"/proc/pressure/{kind}", encoding="ascii") as handle:
                some = handle.readline().split()
            parts.append(f"{kind} pressure avg10 {some[1].split('=')[1]}%")
        except (OSError, IndexError):
            pass
    return ", ".join(parts) + f", Python {sys.version.split()[0]}"


def runner_note() -> str:
    """Which runner is measured: its path and the start of its sha256."""
    digest = hashlib.sha256(RUNNER_PATH.read_bytes()).hexdigest()
    return f"runner {RUNNER_PATH} sha256 {digest[:12]}"


def verdict(value: float, target: float) -> str:
    return "PASS" if value <= target else "FAIL"


def print_summary(name: str, parts: list[str]) -> None:
    """The one line a script ends with; the smoke test looks for it."""
    print(f"\nmachine at the end: {machine_note()}")
    print(f"{SUMMARY_PREFIX} {name}: " + "; ".join(parts))
    sys.stdout.flush()


# ---- processes ----------------------------------------------------------------------------


class ChildResult:
    def __init__(self, returncode: int, wall_s: float, cpu_s: float, maxrss_kb: int,
                 stdout: str, stderr: str):
        self.returncode = returncode
        self.wall_s = wall_s
        self.cpu_s = cpu_s  # user + system of the child and every descendant it waited for
        self.maxrss_kb = maxrss_kb
        self.stdout = stdout
        self.stderr = stderr


def run_child(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None,
              timeout_s: float = 1800.0) -> ChildResult:
    """Run one child; its wall time and its own rusage (os.wait4), output through files."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err)
        timer = threading.Timer(timeout_s, proc.kill)
        timer.daemon = True
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:  # interrupted: leave no runner behind
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise
        finally:
            timer.cancel()
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status) if hasattr(
            os, "waitstatus_to_exitcode") else (status >> 8)
        out.seek(0)
        err.seek(0)
        return ChildResult(proc.returncode, wall, usage.ru_utime + usage.ru_stime,
                           usage.ru_maxrss, out.read().decode("utf-8", "replace"),
                           err.read().decode("utf-8", "replace"))


def check_ok(result: ChildResult, what: str, allowed: tuple[int, ...] = (0,)) -> None:
    if result.returncode not in allowed:
        sys.stderr.write(f"{what} exited {result.returncode}\n--- stdout\n{result.stdout[-3000:]}"
                         f"\n--- stderr\n{result.stderr[-3000:]}\n")
        raise SystemExit(f"{what} failed")


# ---- data -----------------------------------------------------------------------------------


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith(_DROPPED_PREFIXES) and k not in _DROPPED_NAMES}


def git(cwd: Path, *args: str) -> str:
    env = clean_env()
    env.update(GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="bench@localhost",
               GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="bench@localhost",
               GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          check=True, stdin=subprocess.DEVNULL)
    return done.stdout


def suite_json(cases: int) -> dict[str, Any]:
    """Every case has three assertions (one common, two own): the fakes answer ids 1..3."""
    return {"skill_name": SKILL_NAME, "common_assertions": ["The reply is in English."],
            "evals": [{"id": f"E{i:04d}", "name": f"case {i}", "prompt": f"Task number {i}.",
                       "expectations": [f"It mentions item {i}.", "It is polite."]}
                      for i in range(1, cases + 1)]}


def make_repo(base: Path, cases: int, files: dict[str, str] | None = None,
              writer: Any = None) -> Path:
    """A git repository with skills/demo/SKILL.md, evals/demo/evals.json and extra files.

    `writer(root)` may add many files itself before the commit.
    """
    root = base / "repo"
    (root / "skills" / SKILL_NAME).mkdir(parents=True)
    (root / "skills" / SKILL_NAME / "SKILL.md").write_text(SKILL_MD, encoding="utf-8")
    (root / "evals" / SKILL_NAME).mkdir(parents=True)
    (root / "evals" / SKILL_NAME / "evals.json").write_text(
        json.dumps(suite_json(cases), indent=2), encoding="utf-8")
    for rel, text in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    if writer is not None:
        writer(root)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    return root


def small_project_files() -> dict[str, str]:
    """A handful of ordinary files, so each sandbox copies something."""
    files = {"README.md": "# Project\n\nA small project used by the benchmarks.\n",
             "pyproject.toml": "[project]\nname = \"bench\"\nversion = \"0\"\n"}
    for i in range(8):
        files[f"src/module_{i}.py"] = "".join(f"def f{j}(x):\n    return x + {j}\n"
                                              for j in range(40))
    return files


def install_fakes(folder: Path) -> Path:
    """Copy the lean fakes into folder/bin with the executable bit set (git may drop it)."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in ("claude", "codex"):
        shutil.copyfile(FAKES_DIR / name, bin_dir / name)
        os.chmod(bin_dir / name, 0o755)
    return bin_dir


def fake_env(tmp: Path, bin_dir: Path, sleep_s: float = 0.0,
             sandbox_root: Path | None = None) -> dict[str, str]:
    env = clean_env()
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["BENCH_FAKE_SLEEP"] = f"{sleep_s:g}"
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    env["HOME"] = str(home)
    root = sandbox_root or tmp / "sandboxes"
    root.mkdir(parents=True, exist_ok=True)
    env["SKILL_EVAL_SANDBOX_ROOT"] = str(root)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_matrix(repo: Path, workspace: Path, env: dict[str, str], concurrency: int,
               runs: int = 1, agent: str = "claude", extra: list[str] | None = None
               ) -> ChildResult:
    """`eval_runner.py run` on the repository's suite; exit 1 (REVIEW REQUIRED) is fine."""
    suite = repo / "evals" / SKILL_NAME / "evals.json"
    argv = runner_argv("run", str(suite), "--agent", agent, "--concurrency", str(concurrency),
                       "--runs", str(runs), "--workspace", str(workspace), "--repo-root",
                       str(repo), "--quiet", *(extra or []))
    result = run_child(argv, env=env, cwd=repo)
    check_ok(result, "eval_runner.py run", allowed=(0, 1))
    return result


def only_iteration(workspace: Path) -> Path:
    found = sorted(workspace.glob("iteration-*"))
    if len(found) != 1:
        raise SystemExit(f"expected one iteration under {workspace}, found {len(found)}")
    return found[0]


def check_all_ok(iteration: Path, expected_runs: int) -> None:
    data = json.loads((iteration / "benchmark.json").read_text(encoding="utf-8"))
    counts = data.get("status_counts") or {}
    if counts.get("ok") != expected_runs:
        raise SystemExit(f"expected {expected_runs} ok runs in {iteration}, got {counts}")


def exit_on_sigterm() -> None:
    """SIGTERM raises SystemExit, so `finally` blocks remove the temporary folders."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def temp_dir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"skill-eval-bench-{prefix}-"))


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
