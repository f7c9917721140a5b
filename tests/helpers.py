"""Shared test helpers: import the runner by path, build throwaway repositories."""

from __future__ import annotations

import ast
import atexit
import contextlib
import functools
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

from tests import TIER, TIERS

PROJECT = Path(__file__).resolve().parent.parent
RUNNER_PATH = PROJECT / "skills" / "skill-eval" / "scripts" / "eval_runner.py"
FAKES = PROJECT / "tests" / "fakes"
PEER_CORPUS = PROJECT.parent / "shared" / "peer-corpus"


# Test tiers (README, "Tests"; the names and the default are in tests/__init__.py): `unit`,
# the default, runs the modules tests/__init__.py lists; `core` leaves out the volume tests
# (thousands of generated inputs, all seven peer suites, timing), which test no behaviour the
# other tests miss, only more of it; `full` runs everything. CI names each version's tier.
if TIER not in TIERS:
    raise SystemExit(f"SKILL_EVAL_TEST_TIER={TIER!r}: use one of {', '.join(TIERS)}")


def volume_test(test):
    """Mark a test (or class) of volume: it runs in the full tier only."""
    return unittest.skipUnless(TIER == "full", "a volume test: it runs in the full tier "
                               "(SKILL_EVAL_TEST_TIER=full)")(test)


def load_runner():
    spec = importlib.util.spec_from_file_location("eval_runner", RUNNER_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("eval_runner", module)
    spec.loader.exec_module(module)
    return sys.modules["eval_runner"]


runner = load_runner()


@functools.cache
def runner_source() -> str:
    """The runner's text, read once per test run (the static tests all scan it)."""
    return RUNNER_PATH.read_text(encoding="utf-8")


@functools.lru_cache(maxsize=32)
def parsed(source: str) -> ast.Module:
    """`ast.parse(source)`, once per text: parsing the runner costs a third of a second, and
    the static tests walk its tree many times. Shared, so a caller must not change the tree."""
    return ast.parse(source)


@functools.lru_cache(maxsize=32)
def walked(tree: ast.AST) -> tuple[ast.AST, ...]:
    """Every node of `tree` in `ast.walk` order, listed once per tree (shared like `parsed`)."""
    return tuple(ast.walk(tree))

SKILL_MD = "---\nname: demo\ndescription: Use when testing skill-eval.\n---\n\n# Demo\n\nSay hello.\n"


def git(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          check=True, stdin=subprocess.DEVNULL)
    return done.stdout


def make_repo(base: Path, suite: dict, files: dict[str, str] | None = None,
              skill_md: str = SKILL_MD, use_git: bool = True) -> Path:
    """A small repository: skills/<name>/SKILL.md, evals/<name>/evals.json, extra files."""
    root = base / "repo"
    name = suite.get("skill_name", "demo") if isinstance(suite, dict) else "demo"
    (root / "skills" / name).mkdir(parents=True)
    (root / "skills" / name / "SKILL.md").write_text(skill_md, encoding="utf-8")
    (root / "evals" / name).mkdir(parents=True)
    suite_text = suite if isinstance(suite, str) else json.dumps(suite, indent=2)
    (root / "evals" / name / "evals.json").write_text(suite_text, encoding="utf-8")
    for rel, text in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    if use_git:
        git(root, "init", "-q")
        git(root, "add", "-A")
        git(root, "commit", "-qm", "init")
    return root


def demo_suite(cases: int = 2, **extra) -> dict:
    suite = {"skill_name": "demo", "common_assertions": ["The reply is in English."],
             "evals": [{"id": f"E{i:02d}", "name": f"case {i}", "prompt": f"Task number {i}.",
                        "expectations": [f"It mentions item {i}.", "It is polite."]}
                       for i in range(1, cases + 1)]}
    suite.update(extra)
    return suite


def temp_git_dirs() -> set[str]:
    """`.git` entries directly inside the system temp folders."""
    found = (os.path.join(folder, ".git") for folder in {tempfile.gettempdir(), "/tmp"})
    return {path for path in found if os.path.lexists(path)}


def remove_new_empty_temp_git_dirs(before: set[str]) -> list[str]:
    """Remove empty `.git` folders that appeared in the temp folder since `before`.

    The real codex CLI's workspace-write sandbox counts /tmp as a writable root and guards the
    `.git` of each writable root; once in CI an empty /tmp/.git was left behind while the
    real-CLI tier ran, and every later test then found /tmp inside a "git repository".
    """
    removed = []
    for path in sorted(temp_git_dirs() - before):
        with contextlib.suppress(OSError):
            os.rmdir(path)  # only an empty folder: nothing of anyone's is lost
            removed.append(path)
    return removed


def unconfined(argv: list[str]) -> list[str]:
    """A `run` without --isolation gets --isolation none.

    The fake agents log their calls into the test's folder and read scripts from it, which a
    confined agent cannot reach; the confinement tests pass --isolation themselves.
    """
    if "run" in argv[:2] and not any(a.startswith("--isolation") for a in argv):
        return [*argv, "--isolation", "none"]
    return list(argv)


def call_main(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run main(argv) in-process with stdout/stderr captured and env patched."""
    argv = unconfined(argv)
    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = runner.main(argv)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return code, out.getvalue(), err.getvalue()


def run_script(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(RUNNER_PATH), *unconfined(argv)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


class TempDir:
    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="skill-eval-test-"))

    def cleanup(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


_PYTHON_DIR: list[str] = []


def this_python_dir() -> str:
    """A folder whose `python3` is the interpreter running the tests, for the fakes'
    `#!/usr/bin/env python3`: they then run on the Python under test, and skip the version
    manager's shim (pyenv's costs 0.2 s of CPU a call, most of a fake call's time)."""
    if not _PYTHON_DIR:
        folder = tempfile.mkdtemp(prefix="skill-eval-python-")
        os.symlink(sys.executable, os.path.join(folder, "python3"))
        atexit.register(shutil.rmtree, folder, True)
        _PYTHON_DIR.append(folder)
    return _PYTHON_DIR[0]


def fake_env(tmp: Path, script: dict | None = None, extra: dict[str, str] | None = None) -> dict:
    """An environment with the fake CLIs first on PATH, logging into tmp/log."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CLAUDECODE",) and not k.startswith("FAKE_AGENT")}
    env["PATH"] = os.pathsep.join((str(FAKES), this_python_dir(), env.get("PATH", "")))
    log = tmp / "log"
    log.mkdir(exist_ok=True)
    env["FAKE_AGENT_LOG"] = str(log)
    env["HOME"] = str(tmp / "home")
    (tmp / "home").mkdir(exist_ok=True)
    env["SKILL_EVAL_SANDBOX_ROOT"] = str(tmp / "sandboxes")
    (tmp / "sandboxes").mkdir(exist_ok=True)
    if script is not None:
        path = tmp / "script.json"
        path.write_text(json.dumps(script), encoding="utf-8")
        env["FAKE_AGENT_SCRIPT"] = str(path)
    env.update(extra or {})
    return env


def fake_calls(tmp: Path) -> list[dict]:
    log = tmp / "log"
    if not log.is_dir():
        return []
    calls = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(log.glob("*.json"))]
    return calls


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under root except .git internals and workspaces."""
    import hashlib
    digest = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(".git/") or "/workspace/" in f"/{rel}/" or path.is_dir():
            continue
        data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
        digest[rel] = hashlib.sha256(data).hexdigest()
    return digest


# A launcher, run as `python -c LAUNCHER RSS_FILE ARGV...`: it forks the runner from its own
# small image and writes the runner's peak memory (KiB, its reaped descendants included) to
# RSS_FILE. Linux carries a process's resident size at fork into ru_maxrss across exec, so a
# runner forked straight from a test process grown large by earlier tests would "peak" at that
# size. The child dies with the launcher (PR_SET_PDEATHSIG) so killing the launcher is enough.
LAUNCHER = """
import ctypes, os, signal, sys
rss_file, argv = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid == 0:
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)
    os.execv(argv[0], argv)
signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGTERM))
_, status, usage = os.wait4(pid, 0)
with open(rss_file, "w") as handle:
    handle.write(str(usage.ru_maxrss))
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def start_script(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None,
                 out_dir: Path | None = None, rss_file: Path | None = None) -> subprocess.Popen:
    """run_script's Popen twin: the runner in the background, output to files in out_dir.

    Files, not pipes, so a test can leave the process alone (signal it, time it) without a
    reader thread; read them back with read_output(). With rss_file the runner starts through
    LAUNCHER, which writes its peak memory there once it has ended.
    """
    out_dir = out_dir or Path(tempfile.mkdtemp(prefix="skill-eval-out-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    tag = f"{time.time_ns()}"
    stdout = open(out_dir / f"stdout-{tag}.txt", "wb")  # noqa: SIM115 (kept by the Popen)
    stderr = open(out_dir / f"stderr-{tag}.txt", "wb")  # noqa: SIM115
    try:
        command = [sys.executable, str(RUNNER_PATH), *unconfined(argv)]
        if rss_file is not None:
            command = [sys.executable, "-c", LAUNCHER, str(rss_file), *command]
        proc = subprocess.Popen(command, env=env, cwd=cwd,
                                stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr)
    finally:
        stdout.close()
        stderr.close()
    proc.output_files = (Path(stdout.name), Path(stderr.name))  # type: ignore[attr-defined]
    return proc


def read_output(proc: subprocess.Popen) -> tuple[str, str]:
    """(stdout, stderr) of a process started with start_script."""
    out, err = proc.output_files  # type: ignore[attr-defined]
    return (out.read_text(encoding="utf-8", errors="replace"),
            err.read_text(encoding="utf-8", errors="replace"))


def marked_processes(token: str) -> list[int]:
    """pids, other than ours, whose environment holds FAKE_AGENT_MARKER=token.

    Zombies have an empty environ and so never count: they are dead already.
    """
    needle = f"FAKE_AGENT_MARKER={token}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                if needle in handle.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            continue
    return found


def wait_until(predicate, timeout_s: float, interval_s: float = 0.05) -> bool:
    """Poll predicate() until it is true or timeout_s passes; its last answer."""
    end = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(interval_s)


def run_result(**fields) -> runner.RunResult:
    """A run as aggregate() builds it, with the given fields and the rest empty."""
    empty = runner.RunScore(None, None, None, None, None, None, 0)
    base = {"eval_id": "E1", "eval_name": "E1", "configuration": "with_skill", "run_number": 1,
            "status": "ok", "scored": True, "result": empty, "expectations": (),
            "failure": None, "permission_denials": 0, "skill_read": None, "activation": None,
            "metric_sources": None, "files_sha256": None, "grader": None}
    return runner.RunResult(**{**base, **fields})


def per_eval_row(eval_id, **rates: list) -> runner.PerEval:
    """A per_eval row holding only what the paired statistics read: each config's pass rates
    of its scored runs."""
    return runner.PerEval(eval_id, eval_id, {
        config: runner.EvalConfigRates(tuple(values), ("ok",) * len(values),
                                       sum(values) / len(values) if values else None,
                                       len(values))
        for config, values in rates.items()}, None)
