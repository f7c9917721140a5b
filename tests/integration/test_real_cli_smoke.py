"""Smoke tests that drive the REAL ``claude`` and ``codex`` binaries offline.

Each CLI talks to a scripted fake model server on 127.0.0.1 (see
``model_servers.py``), with exactly the argv the skill-eval runner uses for the
executor and grader roles.  Skipped when the binary is not on PATH; install the
pinned versions with::

    PATH="$(.ci/install-clis | tail -1):$PATH" python3 -m unittest -v tests.integration.test_real_cli_smoke

HOME and CODEX_HOME always point at temporary folders, every process runs in
its own process group with a timeout, and leftover groups are killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path

from tests.helpers import remove_new_empty_temp_git_dirs, runner, temp_git_dirs

try:
    from . import model_servers as ms
except ImportError:  # run from inside tests/integration
    import model_servers as ms  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent
# SKILL_EVAL_CLI_VERSIONS names another versions file: CI's advisory run against the newest
# releases (.ci/run) installs and tests those instead of the pins.
PINS = json.loads(Path(os.environ.get("SKILL_EVAL_CLI_VERSIONS") or HERE / "cli_versions.json")
                  .read_text(encoding="utf-8"))
INSTALL_HINT = 'install the pinned CLIs: PATH="$(.ci/install-clis | tail -1):$PATH"'
REPO_ROOT = HERE.parent.parent


def _real_cli(name: str) -> str | None:
    """``name`` on PATH, ignoring stand-ins kept inside this repository (tests/fakes)."""
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        found = shutil.which(name, path=entry) if entry else None
        if found and not os.path.realpath(found).startswith(str(REPO_ROOT) + os.sep):
            return found
    return None


CLAUDE = _real_cli("claude")
CODEX = _real_cli("codex")

RUN_TIMEOUT = 30  # seconds for one CLI run; normal runs take < 2 s

# The runner's own schema, so the real CLIs are proven with exactly what the runner sends.
GRADER_SCHEMA = runner.VERDICT_SCHEMA
GRADER_SCHEMA_JSON = json.dumps(GRADER_SCHEMA, separators=(",", ":"))

CLAUDE_EXECUTOR_TOOLS = "Bash,Read,Write,Edit,Glob,Grep"
# Claude Code's own nudge when a --json-schema run answers with plain text.
CLAUDE_ENFORCE_MARKER = "[structured-output-enforce]"


# --------------------------------------------------------------------------
# process helpers
# --------------------------------------------------------------------------

def _kill_group(proc: subprocess.Popen) -> None:
    """Stop the process group started for ``proc`` (if still alive) and close its pipes.

    SIGTERM first so that codex's node launcher forwards it and reaps its native child
    (a straight SIGKILL leaves that child as a zombie for init), then SIGKILL.
    """
    for sig, grace in ((signal.SIGTERM, 2), (signal.SIGKILL, 5)):
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
    # anything else left in the group (e.g. a shell the agent started)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


class Run:
    def __init__(self, argv, returncode, stdout, stderr, seconds):
        self.argv, self.returncode = argv, returncode
        self.stdout, self.stderr, self.seconds = stdout, stderr, seconds

    def jsonl(self) -> list:
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]

    def json(self):
        return json.loads(self.stdout)

    def __repr__(self) -> str:
        return (f"<Run rc={self.returncode} {self.seconds:.2f}s argv={self.argv!r}\n"
                f"--- stdout ---\n{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-2000:]}>")


class CLITestCase(unittest.TestCase):
    def tmpdir(self, prefix: str) -> Path:
        d = tempfile.mkdtemp(prefix=f"skill-eval-it-{prefix}-")
        self.addCleanup(shutil.rmtree, d, ignore_errors=True)
        return Path(d)

    def codex_home_dir(self, prefix: str) -> Path:
        """An empty CODEX_HOME outside the temp folder (see ms.make_codex_home), removed after."""
        d = ms.make_codex_home(prefix)
        self.addCleanup(shutil.rmtree, d, ignore_errors=True)
        return Path(d)

    def spawn(self, argv, *, env, cwd=None, stdin_text=None) -> subprocess.Popen:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env, start_new_session=True,
            stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(_kill_group, proc)
        return proc

    def run_cli(self, argv, *, env, cwd=None, stdin_text=None, timeout=RUN_TIMEOUT) -> Run:
        start = time.monotonic()
        proc = self.spawn(argv, env=env, cwd=cwd, stdin_text=stdin_text)
        try:
            out, err = proc.communicate(
                stdin_text.encode() if stdin_text is not None else None, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, err = proc.communicate()
            self.fail(f"{argv[0]} did not finish in {timeout}s:\n{Run(argv, None, out.decode(errors='replace'), err.decode(errors='replace'), timeout)!r}")
        return Run(argv, proc.returncode, out.decode(errors="replace"),
                   err.decode(errors="replace"), time.monotonic() - start)


def _git_init(path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(path)], check=True, timeout=15,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _requests_with(server, marker: str) -> list:
    return [r for r in server.model_requests() if marker in r.text]


def _version(binary: str) -> str:
    with tempfile.TemporaryDirectory(prefix="skill-eval-it-version-") as scratch:
        env = dict(ms.clean_base_env(), HOME=scratch, CODEX_HOME=scratch)
        return subprocess.run([binary, "--version"], capture_output=True, text=True, env=env,
                              timeout=20, stdin=subprocess.DEVNULL).stdout.strip()


# --------------------------------------------------------------------------
# claude
# --------------------------------------------------------------------------

@unittest.skipUnless(CLAUDE, f"claude not on PATH ({INSTALL_HINT})")
class ClaudeRealCLITest(CLITestCase):
    server: ms.AnthropicServer

    @classmethod
    def setUpClass(cls):
        cls.server = ms.AnthropicServer().start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def env(self) -> dict:
        env = ms.clean_base_env()
        env.update(ms.claude_env(self.server, str(self.tmpdir("home"))))
        return env

    def executor_argv(self, model=None) -> list:
        argv = [CLAUDE, "-p", "--output-format", "stream-json", "--verbose",
                "--no-session-persistence", "--permission-mode", "acceptEdits",
                "--allowedTools", CLAUDE_EXECUTOR_TOOLS]
        return argv + (["--model", model] if model else [])

    def grader_argv(self) -> list:
        return [CLAUDE, "-p", "--output-format", "json", "--json-schema", GRADER_SCHEMA_JSON,
                "--tools", "", "--no-session-persistence"]

    def grade(self, marker: str) -> Run:
        return self.run_cli(self.grader_argv(), env=self.env(), cwd=self.tmpdir("grader"),
                            stdin_text=f"{marker}\nGrade the transcript against the expectations.")

    # ---- tests ----

    def test_version_is_pinned(self):
        self.assertIn(PINS["claude"], _version(CLAUDE))

    def test_executor_writes_file_and_reports_summed_usage(self):
        marker = "[[MARK-CLAUDE-EXEC-WRITE]]"
        u1 = ms.Usage(input_tokens=100, output_tokens=20)
        u2 = ms.Usage(input_tokens=150, output_tokens=7, cache_read=11, cache_creation=3)
        self.server.add_rule(ms.contains(marker), [
            ms.anthropic_write("out.txt", "hello from executor\n", usage=u1),
            ms.anthropic_text("done writing", usage=u2),
        ])
        sandbox = self.tmpdir("sandbox")
        _git_init(sandbox)
        run = self.run_cli(self.executor_argv(), env=self.env(), cwd=sandbox,
                           stdin_text=f"{marker}: create out.txt")
        self.assertEqual(run.returncode, 0, run)
        self.assertEqual((sandbox / "out.txt").read_text(), "hello from executor\n")

        events = run.jsonl()
        init = events[0]
        self.assertEqual((init["type"], init["subtype"]), ("system", "init"), run)
        self.assertEqual(os.path.realpath(init["cwd"]), os.path.realpath(sandbox))
        self.assertEqual(init["permissionMode"], "acceptEdits")
        self.assertEqual(init["apiKeySource"], "ANTHROPIC_API_KEY")
        self.assertEqual(init["claude_code_version"], PINS["claude"])
        tool_uses = [b for e in events if e["type"] == "assistant"
                     for b in e["message"]["content"] if b["type"] == "tool_use"]
        self.assertEqual([t["name"] for t in tool_uses], ["Write"])
        self.assertTrue(all(e.get("request_id", "").startswith("req_fake_")
                            for e in events if e["type"] == "assistant"))

        result = events[-1]
        self.assertEqual(result["type"], "result")
        self.assertEqual(result["subtype"], "success")
        self.assertIs(result["is_error"], False)
        self.assertEqual(result["result"], "done writing")
        self.assertEqual(result["num_turns"], 2)
        self.assertEqual(result["permission_denials"], [])
        usage = result["usage"]
        self.assertEqual(usage["input_tokens"], u1.input_tokens + u2.input_tokens)
        self.assertEqual(usage["output_tokens"], u1.output_tokens + u2.output_tokens)
        self.assertEqual(usage["cache_read_input_tokens"], u1.cache_read + u2.cache_read)
        self.assertEqual(usage["cache_creation_input_tokens"], u1.cache_creation + u2.cache_creation)
        (model_id, mu), = result["modelUsage"].items()
        self.assertEqual(mu["inputTokens"], 250)
        self.assertEqual(mu["outputTokens"], 27)
        self.assertGreater(result["total_cost_usd"], 0)

        reqs = _requests_with(self.server, marker)
        self.assertEqual([r.step for r in reqs], [0, 1])
        first = reqs[0]
        self.assertEqual((first.path, first.query), ("/v1/messages", "beta=true"))
        self.assertIs(first.body["stream"], True)
        self.assertEqual(first.auth_headers, ("x-api-key",))
        self.assertEqual(first.headers.get("anthropic-version"), "2023-06-01")
        self.assertIn("Write", first.tool_names)
        # 2.1.197 sent a `HEAD /` preflight first; 2.1.332 does not, and the runner needs neither.

    def test_executor_bash_read_and_model_flag(self):
        marker = "[[MARK-CLAUDE-EXEC-BASH]]"
        self.server.add_rule(ms.contains(marker), [
            ms.anthropic_bash("printf 'from bash\\n' > b.txt"),
            ms.anthropic_read("b.txt"),
            ms.anthropic_text("bash and read done"),
        ])
        sandbox = self.tmpdir("sandbox")
        _git_init(sandbox)
        run = self.run_cli(self.executor_argv(model="claude-sonnet-4-5"), env=self.env(),
                           cwd=sandbox, stdin_text=f"{marker}: use bash")
        self.assertEqual(run.returncode, 0, run)
        self.assertEqual((sandbox / "b.txt").read_text(), "from bash\n")
        result = run.jsonl()[-1]
        self.assertIs(result["is_error"], False, run)
        self.assertEqual(result["result"], "bash and read done")
        self.assertEqual(list(result["modelUsage"]), ["claude-sonnet-4-5"])
        reqs = _requests_with(self.server, marker)
        self.assertEqual([r.step for r in reqs], [0, 1, 2])
        self.assertEqual({r.body["model"] for r in reqs}, {"claude-sonnet-4-5"})
        # the Read tool result carries the file content back to the model
        self.assertIn("from bash", json.dumps(reqs[-1].body["messages"][-1]))

    def test_grader_structured_output(self):
        marker = "[[MARK-CLAUDE-GRADE-OK]]"
        verdicts = {"verdicts": [{"id": 1, "passed": True, "evidence": "out.txt exists"},
                                 {"id": 2, "passed": False, "evidence": "no tests ran"}]}
        self.server.add_rule(ms.contains(marker), [ms.structured_output(verdicts)])
        run = self.grade(marker)
        self.assertEqual(run.returncode, 0, run)
        env = run.json()
        self.assertIs(env["is_error"], False)
        self.assertEqual(env["subtype"], "success")
        self.assertEqual(env["structured_output"], verdicts)
        self.assertEqual(json.loads(env["result"]), verdicts)
        self.assertEqual(env["stop_reason"], "tool_use")
        req, = _requests_with(self.server, marker)
        self.assertEqual(ms.callable_tool_names(req), ["StructuredOutput"])
        structured, = (tool for tool in req.body["tools"] if tool["name"] == "StructuredOutput")
        self.assertEqual(structured["input_schema"], GRADER_SCHEMA)

    def test_grader_schema_never_satisfied(self):
        marker = "[[MARK-CLAUDE-GRADE-BADSCHEMA]]"
        self.server.add_rule(ms.contains(marker), [ms.structured_output({"verdicts": "nope"})])
        run = self.grade(marker)
        self.assertEqual(run.returncode, 1, run)
        env = run.json()
        self.assertEqual(env["subtype"], "error_max_structured_output_retries")
        self.assertIs(env["is_error"], True)
        self.assertNotIn("structured_output", env)
        self.assertNotIn("result", env)
        error, = env["errors"]  # 2.1.3xx appends the last schema error to this text
        self.assertTrue(error.startswith("Failed to provide valid structured output after 5 attempts"),
                        error)
        reqs = _requests_with(self.server, marker)
        self.assertEqual([r.step for r in reqs], [0, 1, 2, 3, 4])
        self.assertIn("does not match required schema", json.dumps(reqs[-1].body["messages"][-1]))

    def test_grader_http_errors(self):
        for status in (400, 500):
            with self.subTest(status=status):
                marker = f"[[MARK-CLAUDE-GRADE-HTTP{status}]]"
                self.server.add_rule(ms.contains(marker), [ms.http_error(status, f"scripted {status}")])
                run = self.grade(marker)
                self.assertEqual(run.returncode, 1, run)
                env = run.json()
                self.assertIs(env["is_error"], True)
                self.assertEqual(env["subtype"], "success")  # sic: decide by is_error
                self.assertEqual(env["api_error_status"], status)
                self.assertTrue(env["result"].startswith(f"API Error: {status} scripted {status}"), env)
                self.assertNotIn("structured_output", env)
                reqs = _requests_with(self.server, marker)
                if status == 400:  # the CLI's own fallback without optional betas, one step
                    self.assertLessEqual(len(reqs), ms.CLAUDE_400_ATTEMPTS_MAX)
                    self.assertEqual({r.step for r in reqs}, {0})
                else:
                    self.assertEqual(len(reqs), 1)  # MAX_RETRIES=0

    def test_grader_plain_text_without_tool(self):
        """Observed: one enforcement nudge, then the text run *succeeds* (exit 0) with no structured_output."""
        marker = "[[MARK-CLAUDE-GRADE-TEXT]]"
        self.server.add_rule(ms.contains(marker), [ms.anthropic_text("I think it passed")])
        run = self.grade(marker)
        self.assertEqual(run.returncode, 0, run)
        env = run.json()
        self.assertIs(env["is_error"], False)
        self.assertEqual(env["subtype"], "success")
        self.assertEqual(env["result"], "I think it passed")
        self.assertNotIn("structured_output", env)
        reqs = _requests_with(self.server, marker)
        self.assertEqual(len(reqs), 2)
        self.assertEqual([r.step for r in reqs], [0, 0])  # the nudge is user text, not a tool_result
        self.assertIn(CLAUDE_ENFORCE_MARKER, reqs[1].last_user_text)

    def test_grader_text_then_tool_after_nudge(self):
        marker = "[[MARK-CLAUDE-GRADE-NUDGED]]"
        verdicts = {"verdicts": [{"id": 1, "passed": True, "evidence": "second try"}]}
        self.server.add_rule(ms.all_of(ms.contains(marker), ms.last_user_contains(CLAUDE_ENFORCE_MARKER)),
                             [ms.structured_output(verdicts)])
        self.server.add_rule(ms.contains(marker), [ms.anthropic_text("forgot the tool")])
        run = self.grade(marker)
        self.assertEqual(run.returncode, 0, run)
        env = run.json()
        self.assertIs(env["is_error"], False)
        self.assertEqual(env["structured_output"], verdicts)
        self.assertEqual(len(_requests_with(self.server, marker)), 2)


# --------------------------------------------------------------------------
# codex
# --------------------------------------------------------------------------

@unittest.skipUnless(CODEX, f"codex not on PATH ({INSTALL_HINT})")
class CodexRealCLITest(CLITestCase):
    server: ms.ResponsesServer

    @classmethod
    def setUpClass(cls):
        cls.temp_git_dirs = temp_git_dirs()
        cls.server = ms.ResponsesServer().start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        for path in remove_new_empty_temp_git_dirs(cls.temp_git_dirs):
            print(f"removed an empty {path} left behind by the real codex", file=sys.stderr)

    def codex_home(self, server=None) -> Path:
        """A CODEX_HOME whose config.toml selects the fake provider (the user's way)."""
        home = self.codex_home_dir("codex-home")
        ms.write_codex_config(server or self.server, str(home))
        return home

    def env(self, codex_home: Path) -> dict:
        env = ms.clean_base_env()
        env.update(ms.codex_env(self.server, str(codex_home), home=str(self.tmpdir("home"))))
        return env

    def executor_argv(self, sandbox: Path, extra=()) -> list:
        return [CODEX, "exec", "--json", "--skip-git-repo-check", "--ephemeral",
                "--sandbox", "workspace-write", "--cd", str(sandbox), *extra, "-"]

    def grader_argv(self, workdir: Path, schema_file: Path, last_file: Path) -> list:
        return [CODEX, "exec", "--json", "--skip-git-repo-check", "--ephemeral",
                "--sandbox", "read-only", "--cd", str(workdir),
                "--output-schema", str(schema_file), "--output-last-message", str(last_file), "-"]

    def grade(self, marker: str, codex_home: Path | None = None):
        work = self.tmpdir("grader-files")
        schema_file, last_file = work / "schema.json", work / "last_message.txt"
        schema_file.write_text(GRADER_SCHEMA_JSON)
        empty = self.tmpdir("grader-cwd")
        home = codex_home or self.codex_home()
        run = self.run_cli(self.grader_argv(empty, schema_file, last_file), env=self.env(home),
                           stdin_text=f"{marker}\nGrade the transcript against the expectations.")
        return run, last_file, empty

    # ---- tests ----

    def test_version_is_pinned(self):
        self.assertIn(PINS["codex"], _version(CODEX))

    def test_executor_workspace_write_with_user_config_toml(self):
        marker = "[[MARK-CODEX-EXEC]]"
        u = [ms.Usage(input_tokens=120, cache_read=20, output_tokens=15, reasoning=5),
             ms.Usage(input_tokens=130, cache_read=30, output_tokens=16, reasoning=6),
             ms.Usage(input_tokens=140, cache_read=40, output_tokens=17, reasoning=7)]
        patch = "*** Begin Patch\n*** Add File: hello.py\n+print('hi')\n*** End Patch"
        self.server.add_rule(ms.contains(marker), [
            ms.responses_exec("echo hello-from-codex > out.txt && cat out.txt", usage=u[0]),
            ms.responses_apply_patch(patch, usage=u[1]),
            ms.responses_text("executor done", reasoning="wrapping up", usage=u[2]),
        ])
        sandbox = self.tmpdir("sandbox")
        _git_init(sandbox)
        run = self.run_cli(self.executor_argv(sandbox), env=self.env(self.codex_home()),
                           stdin_text=f"{marker}: write out.txt and hello.py")
        self.assertEqual(run.returncode, 0, run)
        self.assertEqual((sandbox / "out.txt").read_text(), "hello-from-codex\n")
        self.assertEqual((sandbox / "hello.py").read_text(), "print('hi')\n")

        events = run.jsonl()
        self.assertEqual([e["type"] for e in events[:2]], ["thread.started", "turn.started"])
        done = [e["item"] for e in events if e["type"] == "item.completed"]
        kinds = [i["type"] for i in done]
        self.assertEqual(kinds, ["command_execution", "file_change", "reasoning", "agent_message"], run)
        self.assertEqual(done[0]["exit_code"], 0)
        self.assertEqual(done[0]["aggregated_output"], "hello-from-codex\n")
        self.assertEqual(done[1]["changes"], [{"path": str(sandbox / "hello.py"), "kind": "add"}])
        self.assertEqual(done[-1]["text"], "executor done")
        last = events[-1]
        self.assertEqual(last["type"], "turn.completed")
        self.assertEqual(last["usage"], {
            "input_tokens": sum(x.input_tokens for x in u),
            "cached_input_tokens": sum(x.cache_read for x in u),
            "cache_write_input_tokens": 0,
            "output_tokens": sum(x.output_tokens for x in u),
            "reasoning_output_tokens": sum(x.reasoning for x in u),
        })

        reqs = _requests_with(self.server, marker)
        self.assertEqual([r.step for r in reqs], [0, 1, 2])
        self.assertEqual({r.body["model"] for r in reqs}, {ms.CODEX_MODEL})  # from config.toml
        self.assertEqual(reqs[0].auth_headers, ("authorization",))
        self.assertIs(reqs[0].body["stream"], True)
        self.assertIn("exec_command", reqs[0].tool_names)

    def test_executor_sandbox_confines_writes(self):
        """workspace-write: writes outside cwd and /tmp fail (bwrap read-only mount)."""
        marker = "[[MARK-CODEX-EXEC-OUTSIDE]]"
        if not os.access("/var/tmp", os.W_OK):
            self.skipTest("needs a writable /var/tmp (outside the sandbox's writable roots)")
        outside = Path(tempfile.mkdtemp(prefix="skill-eval-it-outside-", dir="/var/tmp"))
        self.addCleanup(shutil.rmtree, outside, ignore_errors=True)
        self.server.add_rule(ms.contains(marker), [
            ms.responses_exec(f"echo x > {outside}/escape.txt; echo rc=$?"),
            ms.responses_text("tried"),
        ])
        sandbox = self.tmpdir("sandbox")
        run = self.run_cli(self.executor_argv(sandbox), env=self.env(self.codex_home()),
                           stdin_text=marker)
        self.assertEqual(run.returncode, 0, run)
        self.assertFalse((outside / "escape.txt").exists(), run)
        cmd = next(e["item"] for e in run.jsonl()
                   if e["type"] == "item.completed" and e["item"]["type"] == "command_execution")
        self.assertIn("Read-only file system", cmd["aggregated_output"])

    def test_config_passthrough_and_ignore_user_config(self):
        # (a) user config.toml + a runner --codex-config KEY=VALUE passed as -c KEY=VALUE
        marker = "[[MARK-CODEX-PASSTHROUGH]]"
        self.server.add_rule(ms.contains(marker), [ms.responses_text("ok")])
        sandbox = self.tmpdir("sandbox")
        run = self.run_cli(self.executor_argv(sandbox, extra=["-c", 'model_reasoning_effort="low"']),
                           env=self.env(self.codex_home()), stdin_text=marker)
        self.assertEqual(run.returncode, 0, run)
        req, = _requests_with(self.server, marker)
        self.assertEqual(req.body["reasoning"]["effort"], "low")
        self.assertEqual(req.body["model"], ms.CODEX_MODEL)

        # (b) no config.toml at all: --ignore-user-config plus -c provider overrides
        marker = "[[MARK-CODEX-IGNORE-USER-CONFIG]]"
        self.server.add_rule(ms.contains(marker), [ms.responses_text("ok")])
        bare_home = self.codex_home_dir("codex-home-bare")
        run = self.run_cli(self.executor_argv(sandbox, extra=[
            "--ignore-user-config", *ms.codex_config_overrides(self.server)]),
            env=self.env(bare_home), stdin_text=marker)
        self.assertEqual(run.returncode, 0, run)
        self.assertEqual(len(_requests_with(self.server, marker)), 1)

    def test_concurrent_executors_are_independent(self):
        sandboxes, procs = [], []
        for n in range(2):
            marker = f"[[MARK-CODEX-PARALLEL-{n}]]"
            self.server.add_rule(ms.contains(marker), [
                ms.responses_exec(f"echo run{n} > run{n}.txt"), ms.responses_text(f"run{n} done")])
            sb = self.tmpdir(f"sandbox{n}")
            sandboxes.append(sb)
            procs.append(self.spawn(self.executor_argv(sb), env=self.env(self.codex_home()),
                                    stdin_text=marker))
        results = {}

        def talk(n, proc):
            results[n] = proc.communicate(f"[[MARK-CODEX-PARALLEL-{n}]]".encode(), timeout=RUN_TIMEOUT)

        threads = [threading.Thread(target=talk, args=(n, p)) for n, p in enumerate(procs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(RUN_TIMEOUT + 5)
        for n, p in enumerate(procs):
            out, err = results[n]
            self.assertEqual(p.returncode, 0, err)
            self.assertEqual((sandboxes[n] / f"run{n}.txt").read_text(), f"run{n}\n")
            self.assertIn(f'"text":"run{n} done"', out.decode())

    def test_grader_output_schema(self):
        marker = "[[MARK-CODEX-GRADE-OK]]"
        verdicts = {"verdicts": [{"id": 1, "passed": True, "evidence": "a"},
                                 {"id": 2, "passed": False, "evidence": "b"}]}
        self.server.add_rule(ms.all_of(ms.contains(marker), ms.has_json_schema()),
                             [ms.responses_json(verdicts)])
        run, last_file, _ = self.grade(marker)
        self.assertEqual(run.returncode, 0, run)
        events = run.jsonl()
        msg = [e["item"]["text"] for e in events
               if e["type"] == "item.completed" and e["item"]["type"] == "agent_message"]
        self.assertEqual([json.loads(m) for m in msg], [verdicts])
        self.assertEqual(json.loads(last_file.read_text()), verdicts)
        self.assertEqual(events[-1]["type"], "turn.completed")
        req, = _requests_with(self.server, marker)
        fmt = req.body["text"]["format"]
        self.assertEqual((fmt["type"], fmt["strict"], fmt["name"]),
                         ("json_schema", True, "codex_output_schema"))
        self.assertEqual(fmt["schema"], GRADER_SCHEMA)

    def test_grader_read_only_sandbox_blocks_writes(self):
        marker = "[[MARK-CODEX-GRADE-RO]]"
        self.server.add_rule(ms.contains(marker), [
            ms.responses_exec("echo x > should_not_exist.txt"),
            ms.responses_json({"verdicts": []}),
        ])
        run, _, workdir = self.grade(marker)
        self.assertEqual(run.returncode, 0, run)
        self.assertFalse((workdir / "should_not_exist.txt").exists())
        reqs = _requests_with(self.server, marker)
        self.assertIn("Read-only file system", reqs[-1].body["input"][-1]["output"])
        # observed both ways: usually a command that the sandbox refuses emits no
        # command_execution item, but under heavy load one sometimes appears (status "failed")
        items = [e["item"] for e in run.jsonl()
                 if e["type"] == "item.completed" and e["item"]["type"] == "command_execution"]
        for item in items:
            self.assertEqual((item["status"], item["exit_code"]), ("failed", 1), run)

    def test_grader_non_json_reply_is_passed_through(self):
        marker = "[[MARK-CODEX-GRADE-TEXT]]"
        self.server.add_rule(ms.contains(marker), [ms.responses_text("not json at all")])
        run, last_file, _ = self.grade(marker)
        self.assertEqual(run.returncode, 0, run)  # codex does not validate --output-schema
        self.assertEqual(last_file.read_text(), "not json at all")

    def test_grader_http_errors(self):
        expected = {400: "scripted 400",
                    500: "We\u2019re currently experiencing high demand"}
        for status, needle in expected.items():
            with self.subTest(status=status):
                marker = f"[[MARK-CODEX-GRADE-HTTP{status}]]"
                self.server.add_rule(ms.contains(marker), [ms.http_error(status, f"scripted {status}")])
                run, last_file, _ = self.grade(marker)
                self.assertEqual(run.returncode, 1, run)
                events = run.jsonl()
                self.assertEqual(events[-1]["type"], "turn.failed")
                self.assertIn(needle, events[-1]["error"]["message"])
                self.assertIn("error", [e["type"] for e in events])
                # observed: the -o file is created but left empty
                self.assertEqual(last_file.read_text() if last_file.exists() else "", "")
                self.assertEqual(len(_requests_with(self.server, marker)), 1)

    def test_unreachable_server_never_gives_up(self):
        class Dead:  # what write_codex_config needs from a server
            base_url = f"http://127.0.0.1:{_closed_port()}/v1"
        home = self.codex_home_dir("codex-home-dead")
        ms.write_codex_config(Dead, str(home))
        work = self.tmpdir("grader-files")
        schema_file = work / "schema.json"
        schema_file.write_text(GRADER_SCHEMA_JSON)
        out_file = work / "stdout.jsonl"
        with open(out_file, "wb") as out:
            proc = subprocess.Popen(
                self.grader_argv(self.tmpdir("grader-cwd"), schema_file, work / "last.txt"),
                env=self.env(home), start_new_session=True, stdin=subprocess.PIPE,
                stdout=out, stderr=subprocess.DEVNULL)
            self.addCleanup(_kill_group, proc)
            proc.stdin.write(b"MARK-CODEX-DEAD grade")
            proc.stdin.close()

            def events():  # complete lines only: codex may be mid-write
                found = []
                for line in out_file.read_text().splitlines():
                    with contextlib.suppress(ValueError):
                        found.append(json.loads(line))
                return found

            # wait for the first retry notice (about 1 s when idle, more on a loaded machine)
            deadline = time.monotonic() + RUN_TIMEOUT
            while time.monotonic() < deadline and proc.poll() is None and not any(
                    e.get("type") == "error" for e in events()):
                time.sleep(0.2)
            time.sleep(1)
            self.assertIsNone(proc.poll(), "codex exited although the model is unreachable")
            _kill_group(proc)
        self.assertIsNotNone(proc.poll())
        events = [json.loads(line) for line in out_file.read_text().splitlines() if line.strip()]
        self.assertTrue(any(e["type"] == "error" and e["message"].startswith("Reconnecting")
                            for e in events), events)
        self.assertNotIn("turn.failed", [e["type"] for e in events])


if __name__ == "__main__":
    unittest.main()
