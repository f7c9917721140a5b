"""``eval_runner.py run`` end to end with the REAL ``claude`` and ``codex`` binaries.

The runner runs as a subprocess, exactly as a user starts it. The CLIs it finds on PATH
are the pinned real ones (see ``cli_versions.json`` and ``.ci/install-clis``), and they reach
the loopback fake model servers of ``model_servers.py`` only through what a user would set:

* claude: ``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY``,
  ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1``, ``DISABLE_AUTOUPDATER=1``,
  ``CLAUDE_CODE_MAX_RETRIES=0`` (and ``IS_SANDBOX=1`` as root);
* codex: a model provider in ``$CODEX_HOME/config.toml``, or the same provider through the
  runner's documented ``--codex-config KEY=VALUE`` option, plus the provider's key variable.

The runner gets no test-only switch. ``HOME`` and ``CODEX_HOME`` are always temporary folders.
Every runner process has a timeout, and each one carries a unique marker variable that the
runner passes on to the CLIs. While it runs, a watcher samples ``/proc`` for processes carrying
the marker, and every test checks afterwards that none of them is still alive.

Environment variables:

* ``SKILL_EVAL_REAL_CLI_BIN``: a folder to search first for ``claude`` and ``codex``, for example
  ``~/.cache/skill-eval-ci/npm/bin``. Without it the CLIs come from PATH, which ``.ci/run``
  sets up. A CLI that is not found skips its test class, and the skip says why.
* ``SKILL_EVAL_IT_VERBOSE``: when set, print each run's cell statuses, failure details and the
  processes seen.
* ``SKILL_EVAL_RUNNER``: the runner script to test; default: this checkout's
  ``skills/skill-eval/scripts/eval_runner.py``. Point it at a copy with a broken flag to
  check that these tests catch it.

Run::

    PATH="$(.ci/install-clis | tail -1):$PATH" python3 -m unittest -v tests.integration.test_runner_real_cli
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent

try:
    from ..helpers import make_repo, remove_new_empty_temp_git_dirs, temp_git_dirs
    from ..helpers import runner as RUNNER_MODULE
    from . import model_servers as ms
except ImportError:  # run from inside tests/integration
    sys.path.insert(0, str(REPO_ROOT))
    from tests.helpers import make_repo, remove_new_empty_temp_git_dirs, temp_git_dirs  # type: ignore[no-redef]
    from tests.helpers import runner as RUNNER_MODULE  # type: ignore[no-redef]
    from tests.integration import model_servers as ms  # type: ignore[no-redef]

RUNNER = Path(os.environ.get("SKILL_EVAL_RUNNER")
              or REPO_ROOT / "skills" / "skill-eval" / "scripts" / "eval_runner.py").resolve()
# SKILL_EVAL_CLI_VERSIONS names another versions file: CI's advisory run against the newest
# releases (.ci/run) installs and tests those instead of the pins.
PINS = json.loads(Path(os.environ.get("SKILL_EVAL_CLI_VERSIONS") or HERE / "cli_versions.json")
                  .read_text(encoding="utf-8"))
BIN_ENV = "SKILL_EVAL_REAL_CLI_BIN"
INSTALL_HINT = (f'install the pinned CLIs: PATH="$(.ci/install-clis | tail -1):$PATH", '
                f"or set {BIN_ENV} to their bin folder")

RUNNER_TIMEOUT = 120     # seconds for one whole `eval_runner.py run`; a normal one takes < 10 s
AGENT_TIMEOUT = "60"     # the runner's --timeout for each CLI process, where a test sets none
MARKER_VAR = "SKILL_EVAL_IT_PROCESS_MARK"
VERBOSE_ENV = "SKILL_EVAL_IT_VERBOSE"  # set to print each run's statuses and processes

SKILL_NAME = "demo"
ASSERTIONS = ["The answer names the file it wrote.", "The answer includes passing tests."]
# What the scripted grader says: assertion 1 passes, assertion 2 fails.
VERDICTS = {"verdicts": [{"id": 1, "passed": True, "evidence": "notes.txt is named"},
                         {"id": 2, "passed": False, "evidence": "no test output is shown"}]}
NOTES_TEXT = "notes written by the scripted executor"
ARTIFACT_TEXT = "# Plan\n\n1. scripted step one\n2. scripted step two\n"
FINAL_TEXT = "Done: wrote notes.txt and the plan."
TRACED_TEXT = "traced-by-skill-eval"  # the command a trace check looks for (issue 37)
# Claude Code's own reminder when a --json-schema run answers with plain text.
CLAUDE_ENFORCE_MARKER = "[structured-output-enforce]"

_ARTIFACT_LINE = re.compile(r"^Artifact path: (/.+)$", re.MULTILINE)
_SKILL_LINE = re.compile(r"^Skill path: (/.+)$", re.MULTILINE)


# --------------------------------------------------------------------------
# which CLIs
# --------------------------------------------------------------------------

def _search_path() -> list[str]:
    entries = os.environ.get("PATH", "").split(os.pathsep)
    extra = os.environ.get(BIN_ENV)
    return ([os.path.expanduser(extra)] if extra else []) + [e for e in entries if e]


def _real_cli(name: str) -> str | None:
    """The first ``name`` on the search path, never a stand-in kept in this repository."""
    for entry in _search_path():
        found = shutil.which(name, path=entry)
        if found and not os.path.realpath(found).startswith(str(REPO_ROOT) + os.sep):
            return found
    return None


CLAUDE = _real_cli("claude")
CODEX = _real_cli("codex")
GEMINI = _real_cli("gemini")
OPENCODE = _real_cli("opencode")

# The same CLIs as `npm install --prefix DIR` lays them out (hoisted: codex's native binary is
# the sibling package node_modules/@openai/codex-linux-x64), outside every system folder.
HOISTED_ENV = "SKILL_EVAL_REAL_CLI_HOISTED"
HOISTED_PREFIX = Path(os.path.expanduser(
    os.environ.get(HOISTED_ENV) or "~/.cache/skill-eval-ci/npm-hoisted"))


NPM_PACKAGES = {"claude": "@anthropic-ai/claude-code", "codex": "@openai/codex",
                "gemini": "@google/gemini-cli", "opencode": "opencode-ai"}


def hoisted_cli(name: str) -> str | None:
    found = HOISTED_PREFIX / "node_modules" / ".bin" / name
    real = os.path.realpath(found)
    system = ("/usr/", "/bin/", "/sbin/", "/lib", "/etc/", "/opt/")
    if not found.exists() or real.startswith((str(REPO_ROOT) + os.sep, *system)):
        return None
    return str(found)


def hoisted_skip_reason(name: str) -> str:
    return (f"no hoisted npm install of {name} at {HOISTED_PREFIX}/node_modules/.bin "
            f"(.ci/install-clis makes one; {HOISTED_ENV} names another prefix)")


def _version(binary: str) -> str:
    with tempfile.TemporaryDirectory(prefix="skill-eval-it-version-") as scratch:
        env = dict(ms.clean_base_env(), HOME=scratch, CODEX_HOME=scratch)
        try:
            done = subprocess.run([binary, "--version"], capture_output=True, text=True, env=env,
                                  timeout=30, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"unknown ({exc})"
        return done.stdout.strip() or f"unknown (exit {done.returncode})"


_ran: dict = {"tests": 0, "temp_git_dirs": set()}


def setUpModule():  # noqa: N802 (unittest's name)
    _ran["temp_git_dirs"] = temp_git_dirs()
    lines = ["", f"real-CLI runner tests: runner {RUNNER}"]
    for name, binary in (("claude", CLAUDE), ("codex", CODEX), ("gemini", GEMINI),
                         ("opencode", OPENCODE)):
        if binary:
            lines.append(f"  {name}: {_version(binary)} at {binary} (pinned {PINS[name]})")
        else:
            lines.append(f"  {name}: not found, its tests are skipped ({INSTALL_HINT})")
    try:
        tier = unittest.TestLoader().discover(str(HERE), top_level_dir=str(REPO_ROOT))
        lines.append(f"  integration tier (tests/integration): {tier.countTestCases()} tests")
    except Exception as exc:  # counting is informative only
        lines.append(f"  integration tier: could not count tests ({exc})")
    print("\n".join(lines), file=sys.stderr, flush=True)


def tearDownModule():  # noqa: N802
    print(f"\nreal-CLI runner tests: {_ran['tests']} ran against the real CLIs",
          file=sys.stderr, flush=True)
    for path in remove_new_empty_temp_git_dirs(_ran["temp_git_dirs"]):
        print(f"removed an empty {path} left behind by a real CLI", file=sys.stderr)


# --------------------------------------------------------------------------
# processes
# --------------------------------------------------------------------------

def _proc_identity(pid: int) -> tuple[str, str] | None:
    """(start time, state) of a live process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19], fields[0]  # starttime (field 22), state (field 3)


def _proc_command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            text = fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return "?"
    return " ".join(text.split())[:160]


class MarkedProcesses:
    """Processes whose environment carries ``MARKER_VAR=<token>``, sampled from /proc.

    Samples are taken in a thread while the runner runs, so processes that were alive at some
    point are known even if they later turn into zombies (whose environment reads empty).
    """

    def __init__(self, token: str):
        self.needle = f"\0{MARKER_VAR}={token}\0".encode()
        self.seen: dict[int, tuple[str, str]] = {}   # pid -> (starttime, command)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def scan(self) -> None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    environ = b"\0" + fh.read() + b"\0"
            except OSError:
                continue
            if self.needle in environ:
                ident = _proc_identity(int(entry))
                if ident:
                    # refreshed on every sighting: a child first seen between fork and exec
                    # still shows its parent's command line
                    self.seen[int(entry)] = (ident[0], _proc_command(int(entry)))

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            self.scan()

    def __enter__(self) -> MarkedProcesses:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def alive(self) -> list[str]:
        """Marked processes still present (running or zombie), as readable strings."""
        self.scan()
        left = []
        for pid, (start, command) in sorted(list(self.seen.items())):
            ident = _proc_identity(pid)
            if ident and ident[0] == start:
                left.append(f"pid {pid} state {ident[1]}: {command}")
        return left

    def kill_alive(self) -> None:
        for pid, (start, _) in list(self.seen.items()):
            ident = _proc_identity(pid)
            if ident and ident[0] == start:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# --------------------------------------------------------------------------
# runner results
# --------------------------------------------------------------------------

class RunnerRun:
    """One finished ``eval_runner.py run`` and the files it wrote."""

    def __init__(self, argv, code, stdout, stderr, seconds, workspace: Path, leftovers):
        self.argv, self.code, self.stdout, self.stderr = argv, code, stdout, stderr
        self.seconds, self.workspace, self.leftovers = seconds, workspace, leftovers
        self.processes: list[str] = []   # command lines of the marked processes seen

    @property
    def iteration(self) -> Path:
        return self.workspace / "iteration-1"

    def cell(self, eval_id: str, config: str) -> Path:
        return self.iteration / f"eval-{eval_id}" / config / "run-1"

    def json(self, eval_id: str, config: str, name: str):
        return json.loads((self.cell(eval_id, config) / name).read_text(encoding="utf-8"))

    def run_json(self, eval_id: str, config: str) -> dict:
        return self.json(eval_id, config, "run.json")

    def benchmark(self) -> dict:
        return json.loads((self.iteration / "benchmark.json").read_text(encoding="utf-8"))

    def cell_summaries(self) -> list[str]:
        lines = []
        for path in sorted(self.iteration.glob("eval-*/*/run-*/run.json")):
            try:
                rec = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                lines.append(f"{path}: unreadable ({exc})")
                continue
            detail = (rec.get("failure") or {}).get("detail", "")
            lines.append(f"{rec.get('eval_id')}/{rec.get('configuration')}: {rec.get('status')}"
                         + (f": {detail[:400]}" if detail else ""))
        return lines

    def __repr__(self) -> str:
        cells = "\n".join(self.cell_summaries()) or "(no run.json written)"
        return (f"<runner exit {self.code} after {self.seconds:.1f}s: {shlex.join(self.argv)}\n"
                f"--- cells ---\n{cells}\n"
                f"--- stdout ---\n{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-4000:]}>")


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def prompt_paths(req: ms.RecordedRequest) -> tuple[str, str | None]:
    """The artifact path (and, for with_skill, the skill path) the executor prompt names."""
    text = "\n".join(_strings(req.body))
    artifact = _ARTIFACT_LINE.search(text)
    if artifact is None:
        raise AssertionError("the executor request has no 'Artifact path:' line")
    skill = _SKILL_LINE.search(text)
    return artifact.group(1).strip(), skill.group(1).strip() if skill else None


def _requests_with(server, marker: str) -> list:
    return [r for r in server.model_requests() if marker in r.text]


# --------------------------------------------------------------------------
# base class
# --------------------------------------------------------------------------

class RunnerRealCLITest(unittest.TestCase):
    agent = ""
    binary: str | None = None

    def setUp(self):
        if not os.path.exists("/proc/self/environ"):
            self.skipTest("needs /proc to check that no CLI process is left behind")
        _ran["tests"] += 1

    def tmpdir(self, prefix: str) -> Path:
        d = tempfile.mkdtemp(prefix=f"skill-eval-it-{prefix}-")
        self.addCleanup(shutil.rmtree, d, ignore_errors=True)
        return Path(d)

    def make_suite(self, cases: dict[str, str]) -> Path:
        """A tiny repository (skill ``demo``); one case per id with the given prompt."""
        suite = {"skill_name": SKILL_NAME,
                 "evals": [{"id": key, "prompt": prompt, "expectations": list(ASSERTIONS)}
                           for key, prompt in cases.items()]}
        return make_repo(self.tmpdir("repo"), suite)

    def agent_env(self, home: Path, codex_home: Path) -> dict:
        raise NotImplementedError

    def use_hoisted_install(self) -> None:
        """This test runs the CLI from the hoisted install, first on PATH, or skips."""
        found = hoisted_cli(self.agent)
        if found is None:
            self.skipTest(hoisted_skip_reason(self.agent))
        # Read from the package, not `--version`: gemini's can take 30 s on a loaded machine.
        package = HOISTED_PREFIX / "node_modules" / NPM_PACKAGES[self.agent] / "package.json"
        self.assertEqual(json.loads(package.read_text(encoding="utf-8"))["version"],
                         PINS[self.agent], package)
        self.binary = found

    def run_runner(self, repo: Path, *args: str, env: dict | None = None, agent_env=None,
                   timeout: float = RUNNER_TIMEOUT) -> RunnerRun:
        """``eval_runner.py run`` as a user starts it; asserts that no CLI process is left.

        ``agent_env(home, codex_home)`` replaces the class's :meth:`agent_env`; ``env`` is
        applied last.
        """
        home, codex_home = self.tmpdir("home"), Path(ms.make_codex_home())
        self.addCleanup(shutil.rmtree, codex_home, ignore_errors=True)
        sandboxes, workspace = self.tmpdir("sandboxes"), self.tmpdir("workspace")
        token = uuid.uuid4().hex
        full_env = ms.clean_base_env()
        full_env.update(
            HOME=str(home), CODEX_HOME=str(codex_home), SKILL_EVAL_SANDBOX_ROOT=str(sandboxes),
            PATH=os.pathsep.join([os.path.dirname(self.binary), *_search_path()]),
            PYTHONDONTWRITEBYTECODE="1", **{MARKER_VAR: token})
        full_env.update((agent_env or self.agent_env)(home, codex_home))
        full_env.update(env or {})
        argv = [sys.executable, str(RUNNER), "run",
                str(repo / "evals" / SKILL_NAME / "evals.json"), "--agent", self.agent,
                "--workspace", str(workspace), *args]
        if "--timeout" not in args:
            argv += ["--timeout", AGENT_TIMEOUT]
        watch = MarkedProcesses(token)
        self.addCleanup(watch.kill_alive)
        started = time.monotonic()
        with watch:
            proc = subprocess.Popen(argv, cwd=repo, env=full_env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True)
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                out, err = proc.communicate()
                watch.kill_alive()
                self.fail(f"the runner did not finish in {timeout}s:\n"
                          f"{RunnerRun(argv, None, out.decode(errors='replace'), err.decode(errors='replace'), timeout, workspace, [])!r}")
        seconds = time.monotonic() - started
        # the runner ends each CLI's process group before it returns; allow a moment for exit
        deadline = time.monotonic() + 3
        leftovers = watch.alive()
        while leftovers and time.monotonic() < deadline:
            time.sleep(0.1)
            leftovers = watch.alive()
        run = RunnerRun(argv, proc.returncode, out.decode(errors="replace"),
                        err.decode(errors="replace"), seconds, workspace, leftovers)
        run.processes = [command for _, command in watch.seen.values()]
        if os.environ.get(VERBOSE_ENV):
            self._describe(run, watch)
        self.assertTrue(watch.seen, f"the marker never showed up in /proc; is /proc readable?\n{run!r}")
        self.assertEqual(leftovers, [], f"processes left behind:\n{run!r}")
        self.assertEqual(sorted(os.listdir(sandboxes)), [],
                         f"sandboxes were not removed:\n{run!r}")
        self.assertTrue((run.iteration / "benchmark.json").is_file(), run)
        return run

    def _describe(self, run: RunnerRun, watch: MarkedProcesses) -> None:
        lines = [f"\n[{self.id()}] runner exit {run.code} in {run.seconds:.1f}s"]
        lines += [f"  {line}" for line in run.cell_summaries()]
        lines += [f"  saw pid {pid}: {cmd}" for pid, (_, cmd) in sorted(watch.seen.items())]
        print("\n".join(lines), file=sys.stderr, flush=True)

    # ---- shared checks ----

    def assert_not_scored(self, run: RunnerRun, eval_id: str, config: str, status: str,
                          *details: str) -> dict:
        rec = run.run_json(eval_id, config)
        self.assertEqual(rec["status"], status, run)
        self.assertIs(rec["scored"], False)
        self.assertFalse((run.cell(eval_id, config) / "grading.json").exists())
        detail = rec["failure"]["detail"]
        for needle in details:
            self.assertIn(needle, detail, run)
        benchmark = run.benchmark()  # unscored runs are kept apart from runs[]
        bench_run = next(r for r in benchmark["runs"] + benchmark.get("unscored_runs", [])
                         if r["eval_id"] == eval_id and r["configuration"] == config)
        self.assertEqual((bench_run["status"], bench_run["scored"]), (status, False))
        self.assertIsNone(bench_run["result"]["pass_rate"])
        return rec

    def assert_confinement_changes_no_result(self, repo: Path, env: dict | None = None) -> None:
        """The same suite unconfined and under bubblewrap: every run ok, the same verdicts and
        the same executor token counts; only the recorded isolation differs."""
        bwrap = shutil.which("bwrap")
        if bwrap is None or RUNNER_MODULE.probe_bwrap(bwrap) is not None:
            self.skipTest("needs working bubblewrap (.ci/run installs it)")
        runs = {mode: self.run_runner(repo, "--isolation", mode, env=env)
                for mode in ("none", "bwrap")}
        for config in ("with_skill", "without_skill"):
            with self.subTest(config=config):
                seen = {}
                for mode, run in runs.items():
                    self.assertEqual(run.code, 0, run)
                    rec = self.assert_scored_run(run, "E01", config)
                    for role in ("executor", "grader"):
                        self.assertEqual(rec[role]["isolation"]["mode"], mode, rec[role])
                    metrics = run.json("E01", config, "metrics.json")["metrics"]
                    seen[mode] = {name: m.get("value") for name, m in metrics.items()
                                  if "token" in name}
                self.assertEqual(seen["none"], seen["bwrap"])
                self.assertTrue(any(v for v in seen["bwrap"].values()), seen)

    def assert_checks_run_confined(self, marker: str, *args: str) -> RunnerRun:
        """One without_skill case with checks under bubblewrap (issue 26): the file check reads
        what the executor wrote, the run check runs confined with a fresh HOME, the protected
        folder is put back, and both join the grader's verdicts; the judge's paired verdict
        agrees with its check."""
        bwrap = shutil.which("bwrap")
        if bwrap is None or RUNNER_MODULE.probe_bwrap(bwrap) is not None:
            self.skipTest("needs working bubblewrap (.ci/run installs it)")
        checks = [{"name": "notes written", "file": "notes.txt", "contains": NOTES_TEXT},
                  {"name": "confined", "protect": ["src"],
                   "run": 'test -f notes.txt && test "$HOME" = /home/skill-eval && '
                          'test -z "$(ls -A "$HOME")" && grep -q delivered src/app.txt'}]
        suite = {"skill_name": SKILL_NAME, "evals": [{
            "id": "E01", "prompt": f"{marker} Write notes and a plan.", "checks": checks,
            "expectations": [{"text": ASSERTIONS[0], "check": "notes written"}, ASSERTIONS[1]]}]}
        repo = make_repo(self.tmpdir("repo"), suite, {"src/app.txt": "delivered\n"})
        run = self.run_runner(repo, "--isolation", "bwrap", "--config", "without_skill", *args)
        self.assertEqual(run.code, 0, run)
        rec = run.run_json("E01", "without_skill")
        self.assertEqual((rec["status"], rec["scored"]), ("ok", True), run)
        self.assertEqual(rec["executor"]["isolation"]["mode"], "bwrap")
        results = {r["name"]: r for r in rec["checks"]["results"]}
        self.assertTrue(all(r["passed"] for r in results.values()), rec["checks"])
        self.assertEqual(results["confined"]["isolation"]["mode"], "bwrap")
        self.assertEqual(rec["checks"]["protected"], {"src": {"changed_by_executor": []}})
        grading = run.json("E01", "without_skill", "grading.json")
        self.assertEqual([(e["passed"], e.get("kind")) for e in grading["expectations"]],
                         [(True, None), (False, None), (True, "check"), (True, "check")])
        versus = run.benchmark()["judge_vs_checks"]["overall"]
        self.assertEqual((versus["count"], versus["agreed"]), (1, 1))
        return run

    def assert_trace_check_sees_a_command(self, marker: str, shell_reply, text_reply,
                                          *args: str) -> dict:
        """Issue 37: under bubblewrap the model asks for one shell command; the trace checks
        read it from the real CLI's own events (ran passes, not_ran git push passes), and
        trace.json lists it. Checks only: no grader is called."""
        bwrap = shutil.which("bwrap")
        if bwrap is None or RUNNER_MODULE.probe_bwrap(bwrap) is not None:
            self.skipTest("needs working bubblewrap (.ci/run installs it)")
        command = f"echo {TRACED_TEXT} > traced.txt"

        def executor(req: ms.RecordedRequest) -> ms.Reply:
            return [shell_reply(command), text_reply(FINAL_TEXT)][min(req.step, 1)]
        self.server.add_rule(ms.contains(marker), [executor])
        checks = [{"name": "echo ran", "trace": "ran", "matches": f"echo {TRACED_TEXT}"},
                  {"name": "never pushed", "trace": "not_ran", "matches": "git push"},
                  {"name": "at most 3 commands", "max_commands": 3},
                  {"name": "traced written", "file": "traced.txt", "contains": TRACED_TEXT}]
        suite = {"skill_name": SKILL_NAME, "evals": [
            {"id": "E01", "prompt": f"{marker} Run one command.", "checks": checks}]}
        repo = make_repo(self.tmpdir("repo"), suite)
        run = self.run_runner(repo, "--isolation", "bwrap", "--config", "without_skill", *args)
        self.assertEqual(run.code, 0, run)
        rec = run.run_json("E01", "without_skill")
        self.assertEqual(rec["executor"]["isolation"]["mode"], "bwrap")
        results = {r["name"]: r for r in rec["checks"]["results"]}
        self.assertTrue(all(r["passed"] for r in results.values()), rec["checks"])
        self.assertEqual(rec["trace"]["cli"], self.agent)
        self.assertGreaterEqual(rec["trace"]["commands"], 1, rec["trace"])
        trace = run.json("E01", "without_skill", "trace.json")
        ran = [a for a in trace["actions"] if a["kind"] == "command"
               and TRACED_TEXT in (a.get("command") or "")]
        self.assertEqual(len(ran), 1, trace)
        return ran[0]

    def assert_scored_run(self, run: RunnerRun, eval_id: str, config: str) -> dict:
        """The common checks of a successful cell: status, grading, changes, artifact."""
        rec = run.run_json(eval_id, config)
        self.assertEqual(rec["status"], "ok", run)
        self.assertIs(rec["scored"], True)
        self.assertEqual(rec["executor"]["returncode"], 0)
        self.assertEqual(rec["grader"]["returncode"], 0)
        self.assertEqual(os.path.basename(rec["executor"]["argv"][0]), self.agent)

        grading = run.json(eval_id, config, "grading.json")
        self.assertEqual([(e["id"], e["text"], e["passed"], e["evidence"])
                          for e in grading["expectations"]],
                         [(1, ASSERTIONS[0], True, VERDICTS["verdicts"][0]["evidence"]),
                          (2, ASSERTIONS[1], False, VERDICTS["verdicts"][1]["evidence"])])
        self.assertEqual(grading["summary"], {"passed": 1, "failed": 1, "total": 2,
                                              "pass_rate": 0.5})

        self.assertIs(rec["changes"]["captured"], True, rec["changes"])
        self.assertEqual(rec["changes"]["added"], [".skill-eval/artifact.md", "notes.txt"])
        self.assertEqual((rec["changes"]["modified"], rec["changes"]["deleted"]), ([], []))
        self.assertIs(rec["written_artifact"]["captured"], True)
        outputs = run.cell(eval_id, config) / "outputs"
        self.assertEqual((outputs / "plan.md").read_text(encoding="utf-8").rstrip("\n"),
                         ARTIFACT_TEXT.rstrip("\n"))
        self.assertEqual((outputs / "output.txt").read_text(encoding="utf-8"), FINAL_TEXT)
        self.assertEqual(rec["skill_read"]["state"],
                         "read" if config == "with_skill" else "not_read", rec["skill_read"])
        return rec


# --------------------------------------------------------------------------
# claude
# --------------------------------------------------------------------------

def claude_usage(step: int) -> ms.Usage:
    return ms.Usage(input_tokens=1000 + 100 * step, output_tokens=40 + step,
                    cache_read=7 * step, cache_creation=3)


def claude_executor(req: ms.RecordedRequest) -> ms.Reply:
    """[Read SKILL.md,] Write notes.txt, Write the artifact, then answer; usage per step."""
    artifact, skill = prompt_paths(req)
    sandbox = Path(artifact).parent.parent
    plan = [ms.anthropic_read(skill)] if skill else []
    plan += [ms.anthropic_write(str(sandbox / "notes.txt"), NOTES_TEXT + "\n"),
             ms.anthropic_write(artifact, ARTIFACT_TEXT),
             ms.anthropic_text(FINAL_TEXT)]
    reply = plan[min(req.step, len(plan) - 1)]
    reply.usage = claude_usage(req.step)
    return reply


def is_claude_grader(marker: str):
    return ms.all_of(ms.contains(marker), ms.has_tool("StructuredOutput"))


@unittest.skipUnless(CLAUDE, f"claude not found ({INSTALL_HINT})")
class ClaudeRunnerTest(RunnerRealCLITest):
    agent = "claude"
    binary = CLAUDE
    server: ms.AnthropicServer

    @classmethod
    def setUpClass(cls):
        cls.server = ms.AnthropicServer().start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def agent_env(self, home: Path, codex_home: Path) -> dict:
        return ms.claude_env(self.server, str(home))

    def test_with_and_without_skill_writes_files_and_grades(self):
        marker = "[[RUN-CLAUDE-OK]]"
        self.server.add_rule(is_claude_grader(marker), [ms.structured_output(VERDICTS)])
        self.server.add_rule(ms.contains(marker), [claude_executor])
        repo = self.make_suite({"E01": f"{marker} Write notes and a plan."})
        run = self.run_runner(repo)
        self.assertEqual(run.code, 0, run)
        for config, requests in (("with_skill", 4), ("without_skill", 3)):
            with self.subTest(config=config):
                rec = self.assert_scored_run(run, "E01", config)
                self.assertEqual(rec["permission_denials"], [])
                metrics = run.json("E01", config, "metrics.json")["metrics"]
                steps = range(requests)
                expected = {
                    "input_tokens": sum(claude_usage(s).input_tokens for s in steps),
                    "output_tokens": sum(claude_usage(s).output_tokens for s in steps),
                    "cache_read_input_tokens": sum(claude_usage(s).cache_read for s in steps),
                    "cache_creation_input_tokens": sum(claude_usage(s).cache_creation
                                                       for s in steps),
                }
                for name, value in expected.items():
                    self.assertEqual(metrics[name]["value"], value, (name, metrics[name]))
                    self.assertTrue(metrics[name]["source"].startswith("claude envelope"))
                self.assertEqual(metrics["tokens"]["value"], sum(expected.values()))
                self.assertEqual(metrics["num_turns"]["value"], requests)
                self.assertGreater(metrics["total_cost_usd"]["value"], 0)
        execs = [r for r in _requests_with(self.server, marker)
                 if "StructuredOutput" not in r.tool_names]
        self.assertEqual(sorted(r.step for r in execs), [0, 0, 1, 1, 2, 2, 3])
        graders = [r for r in _requests_with(self.server, marker)
                   if "StructuredOutput" in r.tool_names]
        self.assertEqual(len(graders), 2)
        for req in graders:  # the grader saw the recorded answer and the written artifact
            self.assertEqual(ms.callable_tool_names(req), ["StructuredOutput"])
            self.assertIn(FINAL_TEXT, req.text)
            self.assertIn(json.dumps(ARTIFACT_TEXT)[1:-1], req.text)
        bench = run.benchmark()
        self.assertEqual((bench["scored_run_count"], bench["error_run_count"]), (2, 0))
        manifest = json.loads((run.iteration / "iteration_manifest.json").read_text())
        self.assertIn(PINS["claude"], manifest["cli_version"])

    def test_checks_run_under_bwrap(self):
        marker = "[[RUN-CLAUDE-CHECKS]]"
        self.server.add_rule(is_claude_grader(marker), [ms.structured_output(VERDICTS)])
        self.server.add_rule(ms.contains(marker), [claude_executor])
        self.assert_checks_run_confined(marker)

    def test_trace_check_sees_the_command(self):
        action = self.assert_trace_check_sees_a_command(
            "[[RUN-CLAUDE-TRACE]]", ms.anthropic_bash, ms.anthropic_text)
        self.assertEqual((action["tool"], action.get("failed")), ("Bash", False))

    def test_confined_and_unconfined_runs_agree(self, marker="[[RUN-CLAUDE-CONFINED]]"):
        self.server.add_rule(is_claude_grader(marker), [ms.structured_output(VERDICTS)])
        self.server.add_rule(ms.contains(marker), [claude_executor])
        self.assert_confinement_changes_no_result(
            self.make_suite({"E01": f"{marker} Write notes and a plan."}))

    def test_confined_from_a_hoisted_install(self):
        self.use_hoisted_install()
        self.test_confined_and_unconfined_runs_agree("[[RUN-CLAUDE-HOISTED]]")

    def test_api_errors_are_not_scored(self):
        exec_marker, grade_marker = "[[RUN-CLAUDE-EXEC400]]", "[[RUN-CLAUDE-GRADE500]]"
        self.server.add_rule(ms.contains(exec_marker), [ms.http_error(400, "scripted bad request")])
        self.server.add_rule(is_claude_grader(grade_marker),
                             [ms.http_error(500, "scripted server error")])
        self.server.add_rule(ms.contains(grade_marker), [ms.anthropic_text(FINAL_TEXT)])
        repo = self.make_suite({"E01": f"{exec_marker} task", "E02": f"{grade_marker} task"})
        run = self.run_runner(repo, "--config", "without_skill")
        self.assertEqual(run.code, 1, run)
        self.assert_not_scored(run, "E01", "without_skill", "executor_failed",
                               "api_error_status 400", "scripted bad request")
        self.assert_not_scored(run, "E02", "without_skill", "grader_failed",
                               "api_error_status 500", "scripted server error")
        self.assertEqual(run.benchmark()["scored_run_count"], 0)
        attempts = _requests_with(self.server, exec_marker)  # the CLI's beta fallback, one step
        self.assertLessEqual(len(attempts), ms.CLAUDE_400_ATTEMPTS_MAX)
        self.assertEqual({r.step for r in attempts}, {0})

    def test_unreachable_model_fails_fast(self):
        repo = self.make_suite({"E01": "[[RUN-CLAUDE-DEAD]] task"})
        run = self.run_runner(repo, "--config", "without_skill", "--timeout", "60", env={
            "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{_closed_port()}"})
        self.assertEqual(run.code, 1, run)
        rec = self.assert_not_scored(run, "E01", "without_skill", "executor_failed")
        self.assertIs(rec["executor"]["timed_out"], False)
        self.assertLess(rec["executor"]["duration_s"], 30, rec["executor"])

    def test_grader_plain_text_is_unparseable(self):
        marker = "[[RUN-CLAUDE-GRADE-TEXT]]"
        # text every time, also after Claude Code's StructuredOutput reminder
        self.server.add_rule(is_claude_grader(marker),
                             [ms.anthropic_text("All good, I think both hold.")])
        self.server.add_rule(ms.contains(marker), [ms.anthropic_text(FINAL_TEXT)])
        repo = self.make_suite({"E01": f"{marker} task"})
        run = self.run_runner(repo, "--config", "without_skill")
        self.assertEqual(run.code, 1, run)
        rec = self.assert_not_scored(run, "E01", "without_skill", "grader_unparseable")
        self.assertEqual(rec["grader"]["returncode"], 0)  # claude calls this a success
        graders = [r for r in _requests_with(self.server, marker)
                   if "StructuredOutput" in r.tool_names]
        self.assertEqual(len(graders), 2)
        self.assertIn(CLAUDE_ENFORCE_MARKER, graders[1].last_user_text)

    def test_structured_output_retries_exhausted(self):
        marker = "[[RUN-CLAUDE-GRADE-BADSCHEMA]]"
        self.server.add_rule(is_claude_grader(marker),
                             [ms.structured_output({"verdicts": "not a list"})])
        self.server.add_rule(ms.contains(marker), [ms.anthropic_text(FINAL_TEXT)])
        repo = self.make_suite({"E01": f"{marker} task"})
        run = self.run_runner(repo, "--config", "without_skill")
        self.assertEqual(run.code, 1, run)
        rec = self.assert_not_scored(run, "E01", "without_skill", "grader_failed",
                                     "error_max_structured_output_retries")
        self.assertEqual(rec["grader"]["returncode"], 1)
        graders = [r for r in _requests_with(self.server, marker)
                   if "StructuredOutput" in r.tool_names]
        self.assertEqual(len(graders), 5)


# --------------------------------------------------------------------------
# codex
# --------------------------------------------------------------------------

def codex_usage(step: int) -> ms.Usage:
    return ms.Usage(input_tokens=500 + 50 * step, cache_read=100 + step,
                    output_tokens=30 + step, reasoning=4 + step)


def codex_executor(req: ms.RecordedRequest) -> ms.Reply:
    """[cat SKILL.md,] write notes.txt and the artifact in one command, then answer."""
    artifact, skill = prompt_paths(req)
    notes = Path(artifact).parent.parent / "notes.txt"
    plan = [ms.responses_exec(f"cat {shlex.quote(skill)}")] if skill else []
    plan += [ms.responses_exec(
                f"printf '%s\\n' {shlex.quote(NOTES_TEXT)} > {shlex.quote(str(notes))} && "
                f"printf '%s' {shlex.quote(ARTIFACT_TEXT)} > {shlex.quote(artifact)}"),
             ms.responses_text(FINAL_TEXT)]
    reply = plan[min(req.step, len(plan) - 1)]
    reply.usage = codex_usage(req.step)
    return reply


def is_codex_grader(marker: str):
    return ms.all_of(ms.contains(marker), ms.has_json_schema())


@unittest.skipUnless(CODEX, f"codex not found ({INSTALL_HINT})")
class CodexRunnerTest(RunnerRealCLITest):
    agent = "codex"
    binary = CODEX
    server: ms.ResponsesServer

    @classmethod
    def setUpClass(cls):
        cls.server = ms.ResponsesServer().start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def agent_env(self, home: Path, codex_home: Path) -> dict:
        # the provider in $CODEX_HOME/config.toml, as a user would configure it
        ms.write_codex_config(self.server, str(codex_home))
        return ms.codex_env(self.server, str(codex_home), home=str(home))

    def test_with_and_without_skill_writes_files_and_grades(self):
        marker = "[[RUN-CODEX-OK]]"
        self.server.add_rule(is_codex_grader(marker), [ms.responses_json(VERDICTS)])
        self.server.add_rule(ms.contains(marker), [codex_executor])
        repo = self.make_suite({"E01": f"{marker} Write notes and a plan."})
        run = self.run_runner(repo)
        self.assertEqual(run.code, 0, run)
        for config, requests in (("with_skill", 3), ("without_skill", 2)):
            with self.subTest(config=config):
                self.assert_scored_run(run, "E01", config)
                metrics = run.json("E01", config, "metrics.json")["metrics"]
                steps = range(requests)
                expected = {
                    "input_tokens": sum(codex_usage(s).input_tokens for s in steps),
                    "cached_input_tokens": sum(codex_usage(s).cache_read for s in steps),
                    "output_tokens": sum(codex_usage(s).output_tokens for s in steps),
                    "reasoning_output_tokens": sum(codex_usage(s).reasoning for s in steps),
                }
                for name, value in expected.items():
                    self.assertEqual(metrics[name]["value"], value, (name, metrics[name]))
                    self.assertEqual(metrics[name]["source"], f"codex turn.completed usage.{name}")
                self.assertEqual(metrics["tokens"]["value"],
                                 expected["input_tokens"] + expected["output_tokens"])
                self.assertIsNone(metrics["num_turns"]["value"])  # codex exec: always one turn
                self.assertIn("absent_reason", metrics["num_turns"])
        execs = [r for r in _requests_with(self.server, marker) if not ms.has_json_schema()(r)]
        self.assertEqual(sorted(r.step for r in execs), [0, 0, 1, 1, 2])
        self.assertEqual({r.body["model"] for r in execs}, {ms.CODEX_MODEL})  # config.toml
        graders = [r for r in _requests_with(self.server, marker) if ms.has_json_schema()(r)]
        self.assertEqual(len(graders), 2)
        for req in graders:
            self.assertEqual(req.body["text"]["format"]["schema"]["required"], ["verdicts"])
            self.assertIn(FINAL_TEXT, req.text)
            self.assertIn(json.dumps(ARTIFACT_TEXT)[1:-1], req.text)
        self.assertEqual(run.benchmark()["scored_run_count"], 2)

    def test_checks_run_under_bwrap(self):
        marker = "[[RUN-CODEX-CHECKS]]"
        self.server.add_rule(is_codex_grader(marker), [ms.responses_json(VERDICTS)])
        self.server.add_rule(ms.contains(marker), [codex_executor])
        self.assert_checks_run_confined(marker)

    def test_trace_check_sees_the_command(self):
        action = self.assert_trace_check_sees_a_command(
            "[[RUN-CODEX-TRACE]]", ms.responses_exec, ms.responses_text)
        self.assertEqual((action["tool"], action.get("exit_code")), ("command_execution", 0))

    def test_confined_from_a_hoisted_install(self):
        self.use_hoisted_install()  # issue 24: every cell failed, the native binary unbound
        self.test_confined_and_unconfined_runs_agree("[[RUN-CODEX-HOISTED]]")

    def test_confined_and_unconfined_runs_agree(self, marker="[[RUN-CODEX-CONFINED]]"):
        self.server.add_rule(is_codex_grader(marker), [ms.responses_json(VERDICTS)])
        self.server.add_rule(ms.contains(marker), [codex_executor])
        # Unconfined codex with a system bwrap will not make its sandbox helper under a temp
        # folder, so this CODEX_HOME lives in the user's cache instead.
        codex_home = Path(ms.make_codex_home())
        self.addCleanup(shutil.rmtree, codex_home, ignore_errors=True)
        ms.write_codex_config(self.server, str(codex_home))
        self.assert_confinement_changes_no_result(
            self.make_suite({"E01": f"{marker} Write notes and a plan."}),
            env={"CODEX_HOME": str(codex_home)})

    def test_api_errors_are_not_scored_with_codex_config_option(self):
        """The provider comes from --codex-config this time; CODEX_HOME has no config.toml."""
        exec_marker, grade_marker = "[[RUN-CODEX-EXEC500]]", "[[RUN-CODEX-GRADE400]]"
        self.server.add_rule(ms.contains(exec_marker), [ms.http_error(500, "scripted 500")])
        self.server.add_rule(is_codex_grader(grade_marker), [ms.http_error(400, "scripted 400")])
        self.server.add_rule(ms.contains(grade_marker), [ms.responses_text(FINAL_TEXT)])
        repo = self.make_suite({"E01": f"{exec_marker} task", "E02": f"{grade_marker} task"})
        overrides = ms.codex_config_overrides(self.server)
        options = [arg for setting in overrides[1::2] for arg in ("--codex-config", setting)]
        run = self.run_runner(repo, "--config", "without_skill", *options, agent_env=(
            lambda home, codex_home: ms.codex_env(self.server, str(codex_home), home=str(home))))
        self.assertEqual(run.code, 1, run)
        rec = self.assert_not_scored(run, "E01", "without_skill", "executor_failed",
                                     "codex failed (exit 1)")
        for value in overrides[1::2]:
            self.assertIn(value, rec["executor"]["argv"])
        self.assert_not_scored(run, "E02", "without_skill", "grader_failed",
                               "codex failed (exit 1)", "scripted 400")
        self.assertEqual(len(_requests_with(self.server, exec_marker)), 1)

    def test_unreachable_model_ends_at_timeout_with_no_process_left(self):
        class Dead:  # what write_codex_config needs from a server
            base_url = f"http://127.0.0.1:{_closed_port()}/v1"

        def dead_env(home: Path, codex_home: Path) -> dict:
            ms.write_codex_config(Dead, str(codex_home))
            return ms.codex_env(self.server, str(codex_home), home=str(home))

        repo = self.make_suite({"E01": "[[RUN-CODEX-DEAD]] task"})
        run = self.run_runner(repo, "--config", "without_skill", "--timeout", "3",
                              agent_env=dead_env)
        self.assertEqual(run.code, 1, run)
        rec = self.assert_not_scored(run, "E01", "without_skill", "executor_timeout")
        self.assertIs(rec["executor"]["timed_out"], True)
        self.assertLess(rec["executor"]["duration_s"], 3 + 15, rec["executor"])
        self.assertGreaterEqual(rec["executor"]["duration_s"], 3)
        self.assertIsNone(rec["grader"])
        # the watcher saw the codex executor, so "nothing left behind" covers it
        self.assertTrue([c for c in run.processes if "codex exec" in c and "workspace-write" in c],
                        run.processes)
        # codex was still trying (its "Reconnecting..." notices start after about 1 s, later
        # on a loaded machine), not finished, when the runner stopped it
        stream = (run.cell("E01", "without_skill") / "logs" / "executor_stream.txt").read_text()
        self.assertNotIn('"turn.failed"', stream)
        self.assertNotIn('"turn.completed"', stream)

    def test_grader_plain_text_is_unparseable(self):
        marker = "[[RUN-CODEX-GRADE-TEXT]]"
        self.server.add_rule(is_codex_grader(marker),
                             [ms.responses_text("Both assertions look fine to me.")])
        self.server.add_rule(ms.contains(marker), [ms.responses_text(FINAL_TEXT)])
        repo = self.make_suite({"E01": f"{marker} task"})
        run = self.run_runner(repo, "--config", "without_skill")
        self.assertEqual(run.code, 1, run)
        rec = self.assert_not_scored(run, "E01", "without_skill", "grader_unparseable")
        self.assertEqual(rec["grader"]["returncode"], 0)  # codex does not enforce the schema
        graders = [r for r in _requests_with(self.server, marker) if ms.has_json_schema()(r)]
        self.assertEqual(len(graders), 1)


# --------------------------------------------------------------------------
# re-grading recorded answers (issue 17): no executor runs the second time
# --------------------------------------------------------------------------

REGRADE_EDIT = "[[EDITED]]"
EDITED_ASSERTION = f"{REGRADE_EDIT} The answer says what it wrote."
# What the scripted grader says once assertion 2 was reworded: both pass.
REGRADE_VERDICTS = {"verdicts": [{"id": 1, "passed": True, "evidence": "notes.txt is named"},
                                 {"id": 2, "passed": True, "evidence": "it says what it wrote"}]}


class RegradeRealCLIMixin:
    """Run once, reword an assertion, then `run --regrade` the first iteration with two graders.

    The second command must start no executor (no executor request reaches the model server
    and no executor process shows up), grade the recorded answer with the reworded assertion,
    and capture the graders' own metrics.
    """

    executor_flag = ""  # a word only the executor's argv holds

    def tmpdir(self, prefix: str) -> Path:
        if prefix != "codex-home":
            return super().tmpdir(prefix)
        # codex 0.171 with /usr/bin/bwrap needs a helper it will not create under /tmp
        folder = Path(ms.make_codex_home())
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        return folder

    def is_grader(self, marker: str):
        raise NotImplementedError

    def grader_reply(self, verdicts: dict) -> ms.Reply:
        raise NotImplementedError

    def check_regrade(self, marker: str, executor_reply: ms.Reply) -> None:
        self.server.add_rule(ms.all_of(self.is_grader(marker), ms.contains(REGRADE_EDIT)),
                             [self.grader_reply(REGRADE_VERDICTS)])
        self.server.add_rule(self.is_grader(marker), [self.grader_reply(VERDICTS)])
        self.server.add_rule(ms.contains(marker), [executor_reply])
        repo = self.make_suite({"E01": f"{marker} Write notes."})
        first = self.run_runner(repo, "--config", "without_skill")
        self.assertEqual(first.code, 0, first)
        graded = first.json("E01", "without_skill", "grading.json")
        self.assertEqual([e["passed"] for e in graded["expectations"]], [True, False])
        seen = len(_requests_with(self.server, marker))

        suite_path = repo / "evals" / SKILL_NAME / "evals.json"
        suite = json.loads(suite_path.read_text(encoding="utf-8"))
        suite["evals"][0]["expectations"][1] = EDITED_ASSERTION
        suite_path.write_text(json.dumps(suite), encoding="utf-8")
        again = self.run_runner(repo, "--regrade", str(first.iteration), "--grader-runs", "2")
        self.assertEqual(again.code, 0, again)

        later = _requests_with(self.server, marker)[seen:]
        self.assertEqual(len(later), 2, [r.text[-300:] for r in later])
        self.assertTrue(all(self.is_grader(marker)(r) for r in later))  # no executor request
        self.assertFalse([c for c in again.processes if self.executor_flag in c],
                         again.processes)
        rec = again.run_json("E01", "without_skill")
        self.assertEqual(rec["status"], "ok", again)
        self.assertEqual(len(rec["grader_calls"]), 2)
        self.assertEqual(rec["executor"], first.run_json("E01", "without_skill")["executor"])
        grading = again.json("E01", "without_skill", "grading.json")
        self.assertEqual([(e["text"], e["passed"], e["votes_passed"])
                          for e in grading["expectations"]],
                         [(ASSERTIONS[0], True, 2), (EDITED_ASSERTION, True, 2)])
        self.assertEqual((again.cell("E01", "without_skill") / "outputs/output.txt").read_text(),
                         FINAL_TEXT)
        metrics = again.json("E01", "without_skill", "grader_metrics.json")["metrics"]
        self.assertGreater(metrics["tokens"]["value"], 0)
        self.assertIn("sum over 2 grader calls", metrics["tokens"]["source"])
        manifest = json.loads((again.iteration / "iteration_manifest.json").read_text())
        self.assertEqual(manifest["regrade"]["source"], str(first.iteration.resolve()))
        return metrics


@unittest.skipUnless(CLAUDE, f"claude not found ({INSTALL_HINT})")
class ClaudeRegradeTest(RegradeRealCLIMixin, RunnerRealCLITest):
    agent = "claude"
    binary = CLAUDE
    executor_flag = "stream-json"
    server: ms.AnthropicServer

    @classmethod
    def setUpClass(cls):
        cls.server = ms.AnthropicServer().start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def agent_env(self, home: Path, codex_home: Path) -> dict:
        return ms.claude_env(self.server, str(home))

    def is_grader(self, marker: str):
        return is_claude_grader(marker)

    def grader_reply(self, verdicts: dict) -> ms.Reply:
        return ms.structured_output(verdicts)

    def test_regrade_grades_recorded_answers_again(self):
        metrics = self.check_regrade("[[REGRADE-CLAUDE]]", ms.anthropic_text(FINAL_TEXT))
        self.assertGreater(metrics["total_cost_usd"]["value"], 0)


@unittest.skipUnless(CODEX, f"codex not found ({INSTALL_HINT})")
class CodexRegradeTest(RegradeRealCLIMixin, RunnerRealCLITest):
    agent = "codex"
    binary = CODEX
    executor_flag = "workspace-write"
    server: ms.ResponsesServer

    @classmethod
    def setUpClass(cls):
        cls.server = ms.ResponsesServer().start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def agent_env(self, home: Path, codex_home: Path) -> dict:
        ms.write_codex_config(self.server, str(codex_home))
        return ms.codex_env(self.server, str(codex_home), home=str(home))

    def is_grader(self, marker: str):
        return is_codex_grader(marker)

    def grader_reply(self, verdicts: dict) -> ms.Reply:
        return ms.responses_json(verdicts)

    def test_regrade_grades_recorded_answers_again(self):
        metrics = self.check_regrade("[[REGRADE-CODEX]]", ms.responses_text(FINAL_TEXT))
        self.assertIsNone(metrics["total_cost_usd"]["value"])
        self.assertEqual(metrics["total_cost_usd"]["absent_reason"], "codex reports no cost")


# --------------------------------------------------------------------------
# gemini and opencode: fresh homes per process; the user's installed skills stay out
# --------------------------------------------------------------------------

PLANTED = "PLANTED-USER-SKILL-6b1f"  # text of a skill installed in the user's real home


def plant_user_skills(home: Path) -> None:
    for place in (".gemini/skills/demo", ".agents/skills/demo", ".claude/skills/demo",
                  ".config/opencode/skills/demo", ".gemini/skills/planted"):
        folder = home / place
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "SKILL.md").write_text(f"---\nname: {folder.name}\ndescription: {PLANTED} "
                                         f"use always\n---\n\n{PLANTED}\n")


class FreshHomeAgentTest(RunnerRealCLITest):
    """Shared scenario: executor [reads SKILL.md,] writes notes.txt and the plan, answers."""

    server: object
    server_class: type  # the loopback model server this agent's CLI talks to
    usage_for = staticmethod(lambda step: ms.Usage())

    @classmethod
    def setUpClass(cls):
        cls.server = cls.server_class().start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def down_server_run(self, marker: str, timeout_s: int, *args: str, **kw) -> RunnerRun:
        """One without_skill cell against a closed port: it must fail, never pass."""
        repo = self.make_suite({"E01": f"{marker} task"})
        run = self.run_runner(repo, "--config", "without_skill", "--timeout", str(timeout_s),
                              *args, **kw)
        self.assertEqual(run.code, 1, run)
        return run

    def executor(self, req: ms.RecordedRequest) -> ms.Reply:
        artifact, skill = prompt_paths(req)
        notes = str(Path(artifact).parent.parent / "notes.txt")
        plan = [self.read_reply(skill)] if skill else []
        plan += [self.write_reply(notes, NOTES_TEXT + "\n"),
                 self.write_reply(artifact, ARTIFACT_TEXT), self.text_reply(FINAL_TEXT)]
        reply = plan[min(req.step, len(plan) - 1)]
        reply.usage = self.usage_for(req.step)
        return reply

    def check_ok_run(self, marker: str, grader_matcher, grader_reply, *args: str) -> RunnerRun:
        self.server.add_rule(ms.all_of(ms.contains(marker), grader_matcher), [grader_reply])
        self.server.add_rule(ms.contains(marker), [self.executor])
        repo = self.make_suite({"E01": f"{marker} Write notes and a plan."})
        run = self.run_runner(repo, *args)
        self.assertEqual(run.code, 0, run)
        execs = [r for r in _requests_with(self.server, marker) if not grader_matcher(r)]
        for config, requests in (("with_skill", 4), ("without_skill", 3)):
            with self.subTest(config=config):
                rec = self.assert_scored_run(run, "E01", config)
                if rec["executor"]["isolation"]["mode"] == "bwrap":  # bwrap's fresh HOME
                    self.assertEqual(rec["executor"]["isolation"]["home_files"], [])
                else:  # one home per process, made by the runner next to the sandbox
                    self.assertEqual(len(rec["sandbox"]["agent_homes"]), 2)
                self.check_tokens(run.json("E01", config, "metrics.json")["metrics"], requests)
        self.assertEqual(sorted(r.step for r in execs), [0, 0, 1, 1, 2, 2, 3])
        graders = [r for r in _requests_with(self.server, marker) if grader_matcher(r)]
        self.assertEqual(len(graders), 2)
        for req in graders:
            self.assertEqual(req.tool_names, [])
            self.assertIn(FINAL_TEXT, req.text)
        for req in self.server.model_requests():  # the user's installed skills: nowhere
            self.assertNotIn(PLANTED, req.text)
        self.assertEqual(run.benchmark()["scored_run_count"], 2)
        return run

    def checks_run(self, marker: str, grader_matcher, grader_reply, *args: str) -> RunnerRun:
        self.server.add_rule(ms.all_of(ms.contains(marker), grader_matcher), [grader_reply])
        self.server.add_rule(ms.contains(marker), [self.executor])
        return self.assert_checks_run_confined(marker, *args)

    def assert_confined(self, run: RunnerRun) -> None:
        """Every cell ran under bwrap; check_ok_run checked the tokens against the script."""
        for config in ("with_skill", "without_skill"):
            rec = run.run_json("E01", config)
            for role in ("executor", "grader"):
                self.assertEqual(rec[role]["isolation"]["mode"], "bwrap", rec[role])

    def run_runner(self, repo: Path, *args: str, **kw) -> RunnerRun:
        base_env = kw.pop("agent_env", None) or self.agent_env

        def with_planted(home: Path, codex_home: Path) -> dict:
            plant_user_skills(home)
            return base_env(home, codex_home)
        return super().run_runner(repo, *args, agent_env=with_planted, **kw)


def gemini_usage(step: int) -> ms.Usage:
    return ms.Usage(input_tokens=700 + 10 * step, output_tokens=25 + step, cache_read=3 * step)


@unittest.skipUnless(GEMINI, f"gemini not found ({INSTALL_HINT})")
class GeminiRunnerTest(FreshHomeAgentTest):
    agent = "gemini"
    binary = GEMINI
    server_class = ms.GeminiServer
    usage_for = staticmethod(gemini_usage)
    read_reply = staticmethod(lambda path: ms.gemini_call("read_file", {"file_path": path}))
    write_reply = staticmethod(lambda path, text: ms.gemini_call(
        "write_file", {"file_path": path, "content": text}))
    text_reply = staticmethod(ms.gemini_text)

    def agent_env(self, home: Path, codex_home: Path) -> dict:
        return ms.gemini_env(self.server)

    def check_tokens(self, metrics: dict, requests: int) -> None:
        steps = range(requests)
        self.assertEqual(metrics["input_tokens"]["value"],
                         sum(gemini_usage(s).input_tokens for s in steps))
        self.assertEqual(metrics["output_tokens"]["value"],
                         sum(gemini_usage(s).output_tokens for s in steps))
        self.assertEqual(metrics["cached_input_tokens"]["value"],
                         sum(gemini_usage(s).cache_read for s in steps))
        self.assertEqual(metrics["tokens"]["value"], sum(
            gemini_usage(s).input_tokens + gemini_usage(s).output_tokens for s in steps))

    def test_confined_from_a_hoisted_install(self):
        self.use_hoisted_install()
        run = self.check_ok_run("[[RUN-GEMINI-HOISTED]]", ms.has_response_schema(),
                                ms.gemini_json(VERDICTS), "--model", ms.GEMINI_MODEL,
                                "--isolation", "bwrap")
        self.assert_confined(run)

    def test_with_and_without_skill_graded_and_user_skills_invisible(self):
        run = self.check_ok_run("[[RUN-GEMINI-OK]]", ms.has_response_schema(),
                                ms.gemini_json(VERDICTS), "--model", ms.GEMINI_MODEL)
        graders = [r for r in self.server.model_requests() if ms.has_response_schema()(r)
                   and "[[RUN-GEMINI-OK]]" in r.text]
        schema = graders[0].body["generationConfig"]["responseJsonSchema"]
        self.assertEqual(schema["required"], ["verdicts"])
        self.assertIn(PINS["gemini"], json.loads(
            (run.iteration / "iteration_manifest.json").read_text())["cli_version"])

    def test_checks_run_under_bwrap(self):
        self.checks_run("[[RUN-GEMINI-CHECKS]]", ms.has_response_schema(),
                        ms.gemini_json(VERDICTS), "--model", ms.GEMINI_MODEL)

    def test_trace_check_sees_the_command(self):
        action = self.assert_trace_check_sees_a_command(
            "[[RUN-GEMINI-TRACE]]",
            lambda command: ms.gemini_call("run_shell_command", {"command": command}),
            ms.gemini_text, "--model", ms.GEMINI_MODEL)
        self.assertEqual(action["tool"], "run_shell_command")

    def test_down_server_is_a_failed_run_within_the_timeout(self):
        run = self.down_server_run(
            "[[RUN-GEMINI-DEAD]]", 40, "--model", ms.GEMINI_MODEL,
            env={"GOOGLE_GEMINI_BASE_URL": f"http://127.0.0.1:{_closed_port()}"})
        rec = self.assert_not_scored(run, "E01", "without_skill", "executor_failed")
        self.assertIs(rec["executor"]["timed_out"], False)


def opencode_usage(step: int) -> ms.Usage:
    return ms.Usage(input_tokens=900 + 10 * step, output_tokens=30 + step, cache_read=5 + step)


@unittest.skipUnless(OPENCODE and shutil.which("rg"),
                     f"opencode or ripgrep not found ({INSTALL_HINT})")
class OpenCodeRunnerTest(FreshHomeAgentTest):
    agent = "opencode"
    binary = OPENCODE
    server_class = ms.ChatCompletionsServer
    usage_for = staticmethod(opencode_usage)
    read_reply = staticmethod(lambda path: ms.chat_tool("read", {"filePath": path}))
    write_reply = staticmethod(lambda path, text: ms.chat_tool(
        "write", {"filePath": path, "content": text}))
    text_reply = staticmethod(ms.chat_text)

    def agent_env(self, home: Path, codex_home: Path) -> dict:
        ms.write_opencode_config(self.server, str(home))  # as the user configured it
        return ms.opencode_env()

    def check_tokens(self, metrics: dict, requests: int) -> None:
        usages = [opencode_usage(s) for s in range(requests)]
        self.assertEqual(metrics["input_tokens"]["value"],  # opencode: without the cached part
                         sum(u.input_tokens - u.cache_read for u in usages))
        self.assertEqual(metrics["cache_read_input_tokens"]["value"],
                         sum(u.cache_read for u in usages))
        self.assertEqual(metrics["output_tokens"]["value"], sum(u.output_tokens for u in usages))
        self.assertEqual(metrics["tokens"]["value"],
                         sum(u.input_tokens + u.output_tokens for u in usages))
        self.assertEqual(metrics["num_turns"]["value"], requests)

    def test_with_and_without_skill_graded_and_user_skills_invisible(self):
        self.check_ok_run("[[RUN-OPENCODE-OK]]", ms.no_tools(), ms.chat_json(VERDICTS))

    def test_checks_run_under_bwrap(self):
        self.checks_run("[[RUN-OPENCODE-CHECKS]]", ms.no_tools(), ms.chat_json(VERDICTS))

    def test_trace_check_sees_the_command(self):
        action = self.assert_trace_check_sees_a_command(
            "[[RUN-OPENCODE-TRACE]]",
            lambda command: ms.chat_tool("bash", {"command": command,
                                                  "description": "run a command"}),
            ms.chat_text)
        self.assertEqual((action["tool"], action.get("exit_code")), ("bash", 0))

    def test_confined_from_a_hoisted_install(self):
        self.use_hoisted_install()
        self.assert_confined(self.check_ok_run("[[RUN-OPENCODE-HOISTED]]", ms.no_tools(),
                                               ms.chat_json(VERDICTS), "--isolation", "bwrap"))

    def test_down_server_is_a_failed_run_within_the_timeout(self):
        class Dead:  # what write_opencode_config needs from a server
            base_url = f"http://127.0.0.1:{_closed_port()}/v1"

        def dead_env(home: Path, codex_home: Path) -> dict:
            ms.write_opencode_config(Dead, str(home))
            return ms.opencode_env()
        run = self.down_server_run("[[RUN-OPENCODE-DEAD]]", 15, agent_env=dead_env)
        # opencode retries connection errors for 63-75 s whatever it is told: the timeout ends it
        rec = self.assert_not_scored(run, "E01", "without_skill", "executor_timeout")
        self.assertLess(rec["executor"]["duration_s"], 15 + 10)


del FreshHomeAgentTest


if __name__ == "__main__":
    unittest.main()
