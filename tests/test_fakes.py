"""The fake agent CLIs in tests/fakes keep the real CLIs' contracts.

Every test runs a fake as a subprocess (with the interpreter running the
tests, so both supported Pythons exercise the fake code), with a timeout, in
a scratch directory, and leaves no process behind.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import uuid
from pathlib import Path

FAKES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fakes")
FAKES = {"claude": os.path.join(FAKES_DIR, "claude"),
         "codex": os.path.join(FAKES_DIR, "codex")}
TIMEOUT_S = 15
SCHEMA = {"type": "object", "properties": {"verdicts": {"type": "array"}},
          "required": ["verdicts"]}
ENVELOPE_KEYS = [
    "type", "subtype", "is_error", "api_error_status", "duration_ms",
    "duration_api_ms", "ttft_ms", "ttft_stream_ms", "time_to_request_ms",
    "num_turns", "result", "stop_reason", "session_id", "total_cost_usd",
    "usage", "modelUsage", "permission_denials", "terminal_reason",
    "fast_mode_state", "uuid",
]
CODEX_USAGE_KEYS = ["input_tokens", "cached_input_tokens", "cache_write_input_tokens",
                    "output_tokens", "reasoning_output_tokens"]
GRADER_PROMPT = """Grade the recorded output.

## Assertions
1. The answer mentions apples
2. The answer is polite
3. The answer cites a source

## Recorded output
4. this numbered line belongs to the output, not to the assertions
"""


def compact(data):
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


# ============================================================================
# process helpers
# ============================================================================


def marked_processes(token):
    """pids whose environment carries FAKE_AGENT_MARKER=token."""
    needle = (f"FAKE_AGENT_MARKER={token}").encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                if needle in handle.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            continue
    return found


def process_group(pid):
    with open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[2])


def process_name(pid):
    with open(f"/proc/{pid}/comm") as handle:
        return handle.read().strip()


def read_lines(stream, count, timeout_s):
    """Up to `count` lines from a pipe, giving up after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    buffer = b""
    fd = stream.fileno()
    while buffer.count(b"\n") < count and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buffer += chunk
    return buffer.decode().splitlines()[:count]


# ============================================================================
# shared fixture
# ============================================================================


class FakeCase(unittest.TestCase):
    """A scratch directory, a log directory and a clean environment."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="fakes-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.work = os.path.join(self.tmp, "work")
        self.logdir = os.path.join(self.tmp, "log")
        os.mkdir(self.work)
        os.mkdir(os.path.join(self.tmp, "home"))
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("FAKE_") and k != "IS_SANDBOX"}
        self.env.update(FAKE_AGENT_LOG=self.logdir, HOME=os.path.join(self.tmp, "home"))

    def script(self, data):
        path = os.path.join(self.tmp, f"script-{uuid.uuid4().hex[:8]}.json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        self.env["FAKE_AGENT_SCRIPT"] = path

    def run_fake(self, cli, *args, stdin_text=None, cwd=None, env=None):
        extra = {"input": stdin_text} if stdin_text is not None else {"stdin": subprocess.DEVNULL}
        return subprocess.run(
            [sys.executable, FAKES[cli]] + list(args), capture_output=True, text=True,
            cwd=cwd or self.work, env=dict(self.env, **(env or {})), timeout=TIMEOUT_S,
            **extra)

    def start_fake(self, cli, *args, stdout=subprocess.DEVNULL, env=None):
        """A long-running fake in its own process group, killed at cleanup."""
        proc = subprocess.Popen(
            [sys.executable, FAKES[cli]] + list(args), stdin=subprocess.DEVNULL,
            stdout=stdout, stderr=subprocess.DEVNULL, cwd=self.work,
            env=dict(self.env, **(env or {})), start_new_session=True)
        self.addCleanup(self.kill_group, proc)
        return proc

    def kill_group(self, proc):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=TIMEOUT_S)
        if proc.stdout:
            proc.stdout.close()

    def logs(self):
        if not os.path.isdir(self.logdir):
            return []
        records = []
        for name in sorted(os.listdir(self.logdir)):
            with open(os.path.join(self.logdir, name), encoding="utf-8") as handle:
                records.append(json.load(handle))
        return records

    def wait_for_log(self, timeout_s=5.0):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            records = self.logs()
            if records:
                return records[0]
            time.sleep(0.02)
        self.fail(f"the fake wrote no log record within {timeout_s:.1f}s")

    def claude_json(self, *args, **kw):
        proc = self.run_fake("claude", "-p", "--output-format", "json", *args, **kw)
        return proc, (json.loads(proc.stdout) if proc.stdout.strip() else None)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)


# ============================================================================
# claude: argv
# ============================================================================


class ClaudeArgvTest(FakeCase):

    def test_version_prints_the_real_string(self):
        for flag in ("-v", "--version"):
            proc = self.run_fake("claude", flag)
            self.assertEqual((proc.returncode, proc.stdout), (0, "2.1.197 (Claude Code)\n"))

    def test_unknown_option_exits_1_commander_style(self):
        proc = self.run_fake("claude", "-p", "hi", "--foo")
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(proc.stderr, "error: unknown option '--foo'\n")
        self.assertEqual(proc.stdout, "")

    def test_value_syntax_and_choices(self):
        cases = [
            (["-p", "hi", "--model"], "error: option '--model <model>' argument missing\n"),
            (["-p", "hi", "--output-format", "xml"],
             "error: option '--output-format <format>' argument 'xml' is invalid. "
             "Allowed choices are text, json, stream-json.\n"),
            (["-p", "hi", "--verbose=1"], "error: unknown option '--verbose=1'\n"),
        ]
        for argv, stderr in cases:
            with self.subTest(argv=argv):
                proc = self.run_fake("claude", *argv)
                self.assertEqual((proc.returncode, proc.stderr), (1, stderr))

    def test_variadic_and_optional_values_swallow_the_prompt(self):
        # A prompt after `--allowedTools X` or `-r` is taken as the option's value.
        for argv in (["--allowedTools", "Bash", "Edit", "say hi"], ["-r", "say hi"]):
            with self.subTest(argv=argv):
                proc = self.run_fake("claude", "-p", *argv)
                self.assertEqual(proc.returncode, 1)
                self.assertIn("Input must be provided", proc.stderr)

    def test_options_end_a_variadic_list(self):
        proc, env = self.claude_json("--tools", "", "--model=opus", "say hi")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(self.logs()[0]["prompt"], "say hi")

    def test_stream_json_requires_verbose(self):
        proc = self.run_fake("claude", "-p", "hi", "--output-format", "stream-json")
        self.assertEqual(proc.returncode, 1)
        self.assertIn("Error: When using --print, --output-format=stream-json requires "
                      "--verbose", proc.stderr)

    def test_json_schema_must_be_inline_json(self):
        proc, _ = self.claude_json("--json-schema", "/tmp/schema.json", "grade")
        self.assertEqual(proc.returncode, 1)
        self.assertIn("--json-schema", proc.stderr)

    def test_runs_directly_through_its_shebang(self):
        proc = subprocess.run([FAKES["claude"], "--version"], capture_output=True,
                              text=True, timeout=TIMEOUT_S, env=self.env)
        self.assertEqual(proc.stdout, "2.1.197 (Claude Code)\n")

    @unittest.skipUnless(hasattr(os, "geteuid") and os.geteuid() == 0, "needs root")
    def test_bypass_as_root_needs_is_sandbox(self):
        for argv in (["--dangerously-skip-permissions"],
                     ["--permission-mode", "bypassPermissions"]):
            with self.subTest(argv=argv):
                proc, _ = self.claude_json(*argv, "hi")
                self.assertEqual(proc.returncode, 1)
                self.assertIn("root/sudo", proc.stderr)
        proc, env = self.claude_json("--dangerously-skip-permissions", "hi",
                                     env={"IS_SANDBOX": "1"})
        self.assertEqual(proc.returncode, 0, proc.stderr)


# ============================================================================
# claude: input and output
# ============================================================================


class ClaudeOutputTest(FakeCase):

    def test_json_envelope_has_the_real_fields(self):
        proc, env = self.claude_json("say hi")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(list(env), ENVELOPE_KEYS)
        self.assertEqual((env["type"], env["subtype"], env["is_error"]),
                         ("result", "success", False))
        self.assertEqual(env["result"], "fake executor answer")
        self.assertEqual(env["num_turns"], 1)
        for key in ("input_tokens", "cache_creation_input_tokens",
                    "cache_read_input_tokens", "output_tokens"):
            self.assertIsInstance(env["usage"][key], int)
        self.assertEqual(list(env["modelUsage"]), ["claude-opus-4-8[1m]"])
        self.assertEqual(env["total_cost_usd"], 0.001)

    def test_text_format_prints_the_result(self):
        proc = self.run_fake("claude", "-p", "say hi")
        self.assertEqual((proc.returncode, proc.stdout), (0, "fake executor answer\n"))

    def test_scripted_numbers_override_defaults(self):
        self.script({"executor": {"text": "custom", "usage": {"input_tokens": 7},
                                  "duration_ms": 1234, "total_cost_usd": 0.5,
                                  "num_turns": 9}})
        _, env = self.claude_json("say hi")
        self.assertEqual((env["result"], env["usage"]["input_tokens"], env["duration_ms"],
                          env["total_cost_usd"], env["num_turns"]),
                         ("custom", 7, 1234, 0.5, 9))

    def test_stream_json_ends_with_the_envelope_and_shows_the_skill_read(self):
        skill = self.path("work", "skill", "SKILL.md")
        os.makedirs(os.path.dirname(skill))
        with open(skill, "w") as handle:
            handle.write("# demo skill\n")
        artifact = self.path("work", "a.md")
        prompt = f"Do it.\nSkill path: {skill}\nArtifact path: {artifact}\n"
        proc = self.run_fake("claude", "-p", prompt, "--output-format", "stream-json", "--verbose")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        lines = [json.loads(line) for line in proc.stdout.splitlines()]
        self.assertEqual((lines[0]["type"], lines[0]["subtype"]), ("system", "init"))
        self.assertEqual(list(lines[-1]), ENVELOPE_KEYS)
        self.assertEqual(lines[-1]["num_turns"], 2)
        use = lines[1]["message"]["content"][0]
        self.assertEqual((use["type"], use["name"], use["input"]),
                         ("tool_use", "Read", {"file_path": skill}))
        result = lines[2]["message"]["content"][0]
        self.assertEqual(result["tool_use_id"], use["id"])
        self.assertIn("# demo skill", result["content"])

    def test_prompt_from_stdin_and_the_log_record(self):
        proc, _ = self.claude_json(stdin_text="prompt via stdin")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        [record] = self.logs()
        self.assertEqual(record["cli"], "claude")
        self.assertEqual(record["argv"], ["-p", "--output-format", "json"])
        self.assertEqual(record["cwd"], os.path.realpath(self.work))
        self.assertEqual((record["role"], record["prompt"], record["stdin"]),
                         ("executor", "prompt via stdin", "prompt via stdin"))
        self.assertEqual(record["env"]["HOME"], self.env["HOME"])
        self.assertNotIn("IS_SANDBOX", record["env"])
        self.assertEqual(record["env_names"], sorted(record["env_names"]))
        self.assertIn("FAKE_AGENT_LOG", record["env_names"])
        self.assertIsInstance(record["pid"], int)
        self.assertIsInstance(record["pgid"], int)

    def test_rejected_and_version_calls_are_logged(self):
        self.run_fake("claude", "--bogus")
        self.run_fake("claude", "--version")
        records = self.logs()
        self.assertEqual([r["argv"] for r in records], [["--bogus"], ["--version"]])
        self.assertEqual({r["role"] for r in records}, {None})
        self.assertFalse([n for n in os.listdir(self.logdir) if not n.endswith(".json")])

    def test_open_stdin_pipe_warns_and_proceeds(self):
        env = dict(self.env, FAKE_CLAUDE_STDIN_WAIT_S="0.3")
        proc = subprocess.Popen([sys.executable, FAKES["claude"], "-p", "hi"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=self.work, env=env)
        try:
            proc.wait(timeout=TIMEOUT_S)    # stdin stays open the whole time
            out, err = proc.stdout.read().decode(), proc.stderr.read().decode()
        finally:
            proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                stream.close()
        self.assertEqual(proc.returncode, 0)
        self.assertEqual(out, "fake executor answer\n")
        self.assertIn("Warning: no stdin data received in 0s, proceeding without it...", err)

    def test_first_matching_case_is_merged_over_the_role_default(self):
        self.script({"executor": {"text": "default", "usage": {"output_tokens": 3}},
                     "cases": [{"match": "apple", "role": "grader", "spec": {"text": "no"}},
                               {"match": "apple", "spec": {"text": "first"}},
                               {"match": "apple", "spec": {"text": "second"}}]})
        _, env = self.claude_json("an apple a day")
        self.assertEqual((env["result"], env["usage"]["output_tokens"]), ("first", 3))
        _, env = self.claude_json("a pear")
        self.assertEqual(env["result"], "default")

    def test_a_broken_script_fails_loudly(self):
        self.script({"executor": {"falt": "hang"}})
        proc, _ = self.claude_json("hi")
        self.assertEqual(proc.returncode, 3)
        self.assertIn("unknown spec field(s): falt", proc.stderr)


# ============================================================================
# claude: grading
# ============================================================================


class ClaudeGraderTest(FakeCase):

    def grade(self, spec=None):
        self.script({"grader": spec or {}})
        proc, env = self.claude_json("--json-schema", json.dumps(SCHEMA), "--tools", "",
                                     stdin_text=GRADER_PROMPT)
        return proc, env

    def test_structured_verdicts_follow_the_assertions_section(self):
        proc, env = self.grade({"verdicts": {"fail_ids": [2]}})
        self.assertEqual(proc.returncode, 0, proc.stderr)
        verdicts = env["structured_output"]["verdicts"]
        self.assertEqual([(v["id"], v["passed"]) for v in verdicts],
                         [(1, True), (2, False), (3, True)])
        self.assertEqual(env["result"], compact(env["structured_output"]))
        self.assertEqual((env["num_turns"], env["stop_reason"]), (2, "tool_use"))
        keys = list(env)
        self.assertEqual(keys.index("structured_output"), keys.index("permission_denials") + 1)
        self.assertEqual(self.logs()[0]["role"], "grader")

    def test_verdict_policies(self):
        cases = [("all_pass", [True, True, True]), ("all_fail", [False, False, False]),
                 ({"fail_if_text_contains": ["POLITE", "source"]}, [True, False, False])]
        for policy, expected in cases:
            with self.subTest(policy=policy):
                _, env = self.grade({"verdicts": policy})
                self.assertEqual([v["passed"] for v in env["structured_output"]["verdicts"]],
                                 expected)

    def test_raw_verdicts_are_emitted_verbatim(self):
        raw = [{"id": "1", "passed": True}, {"id": 9, "passed": False}, {"id": 1}]
        _, env = self.grade({"raw_verdicts": raw})
        self.assertEqual(env["structured_output"], {"verdicts": raw})

    def test_verdict_forms(self):
        _, env = self.grade({"verdict_form": "text"})
        self.assertNotIn("structured_output", env)
        self.assertEqual(len(json.loads(env["result"])["verdicts"]), 3)
        _, env = self.grade({"verdict_form": "fenced"})
        fenced = env["result"].split("```json\n", 1)[1].split("\n```", 1)[0]
        self.assertEqual(len(json.loads(fenced)["verdicts"]), 3)
        _, env = self.grade({"verdict_form": "legacy", "verdicts": "all_fail"})
        rows = env["structured_output"]["expectations"]
        self.assertEqual(rows[0], {"text": "The answer mentions apples", "passed": False,
                                   "evidence": rows[0]["evidence"]})
        _, env = self.grade({"verdict_form": "prose"})
        self.assertEqual(env["result"], "Looks fine to me.")
        self.assertNotIn("structured_output", env)


# ============================================================================
# claude: permissions
# ============================================================================


class ClaudePermissionTest(FakeCase):

    def prompt(self):
        return f"Write it.\nArtifact path: {self.path('work', 'out', 'plan.md')}\n"

    def test_default_mode_refuses_writes_and_records_a_denial(self):
        self.script({"executor": {"write_artifact": "# plan\n"}})
        for argv in ([], ["--permission-mode", "default"]):
            with self.subTest(argv=argv):
                proc, env = self.claude_json(*argv, self.prompt())
                self.assertEqual((proc.returncode, env["subtype"], env["is_error"]),
                                 (0, "success", False))
                self.assertFalse(os.path.exists(self.path("work", "out", "plan.md")))
                [denial] = env["permission_denials"]
                self.assertEqual(denial["tool_name"], "Write")
                self.assertEqual(denial["tool_input"]["file_path"],
                                 self.path("work", "out", "plan.md"))

    def test_accept_edits_writes_inside_cwd_only(self):
        outside = self.path("outside.txt")
        self.script({"executor": {"write_artifact": "# plan\n",
                                  "write_files": {"rel/x.txt": "x", outside: "escape"}}})
        proc, env = self.claude_json("--permission-mode", "acceptEdits", self.prompt())
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(self.path("work", "out", "plan.md")) as handle:
            self.assertEqual(handle.read(), "# plan\n")
        self.assertTrue(os.path.exists(self.path("work", "rel", "x.txt")))
        self.assertFalse(os.path.exists(outside))
        self.assertEqual([d["tool_input"]["file_path"] for d in env["permission_denials"]],
                         [outside])

    def test_accept_edits_resolves_symlinks_before_deciding(self):
        os.symlink(self.tmp, self.path("work", "link"))
        self.script({"executor": {"write_files": {"link/escaped.txt": "x"}}})
        _, env = self.claude_json("--permission-mode", "acceptEdits", "go")
        self.assertFalse(os.path.exists(self.path("escaped.txt")))
        self.assertEqual(len(env["permission_denials"]), 1)

    @unittest.skipUnless(hasattr(os, "geteuid") and os.geteuid() == 0, "needs root")
    def test_bypass_writes_anywhere_and_non_utf8_bytes(self):
        outside = self.path("outside.bin")
        self.script({"executor": {"write_artifact_hex": "ff00fe", "write_files": {outside: "o"}}})
        proc, env = self.claude_json("--dangerously-skip-permissions", self.prompt(),
                                     env={"IS_SANDBOX": "1"})
        self.assertEqual((proc.returncode, env["permission_denials"]), (0, []))
        with open(self.path("work", "out", "plan.md"), "rb") as handle:
            self.assertEqual(handle.read(), b"\xff\x00\xfe")
        self.assertTrue(os.path.exists(outside))

    def test_scripted_denials_are_copied(self):
        denial = {"tool_name": "Bash", "tool_use_id": "toolu_x", "tool_input": {"command": "ls"}}
        self.script({"executor": {"permission_denials": [denial]}})
        _, env = self.claude_json("hi")
        self.assertEqual(env["permission_denials"], [denial])


# ============================================================================
# claude: faults
# ============================================================================


class ClaudeFaultTest(FakeCase):

    def fault(self, fault, *args, **spec):
        self.script({"executor": dict(spec, fault=fault), "grader": dict(spec, fault=fault)})
        return self.run_fake("claude", "-p", "--output-format", "json", *args, "hi")

    def test_api_error_envelopes(self):
        cases = {"is_error": (1, 400, "API Error: 400"),
                 "is_error_exit0": (0, 400, "API Error: 400"),
                 "unreachable": (1, None,
                                 "API Error: Unable to connect to API (ConnectionRefused)")}
        for fault, (code, status, result) in cases.items():
            with self.subTest(fault=fault):
                proc = self.fault(fault)
                env = json.loads(proc.stdout)
                self.assertEqual(proc.returncode, code)
                self.assertEqual((env["subtype"], env["is_error"], env["api_error_status"]),
                                 ("success", True, status))
                self.assertTrue(env["result"].startswith(result))

    def test_max_structured_retries(self):
        proc = self.fault("max_structured_retries", "--json-schema", json.dumps(SCHEMA))
        env = json.loads(proc.stdout)
        self.assertEqual(proc.returncode, 1)
        self.assertEqual((env["subtype"], env["is_error"]),
                         ("error_max_structured_output_retries", True))
        self.assertEqual(env["errors"],
                         ["Failed to provide valid structured output after 5 attempts"])
        self.assertNotIn("result", env)
        self.assertNotIn("structured_output", env)

    def test_output_faults(self):
        proc = self.fault("exit_nonzero")
        self.assertEqual((proc.returncode, proc.stdout), (1, ""))
        self.assertTrue(proc.stderr)
        proc = self.fault("silent")
        self.assertEqual((proc.returncode, proc.stdout), (0, ""))
        proc = self.fault("invalid_json")
        self.assertEqual((proc.returncode, proc.stdout), (0, "not json {\n"))
        proc = self.fault("truncated")
        self.assertEqual(proc.returncode, 0)
        self.assertTrue(proc.stdout.startswith('{"type":"result"'))
        self.assertRaises(ValueError, json.loads, proc.stdout)

    def test_flood_then_a_valid_result(self):
        proc = self.fault("flood", flood_bytes=3_000_000)
        self.assertEqual(proc.returncode, 0)
        lines = proc.stdout.splitlines()
        self.assertEqual(lines[0], "x" * 3_000_000)
        self.assertEqual(json.loads(lines[-1])["result"], "fake executor answer")

    def test_delete_cwd_removes_the_directory_and_still_answers(self):
        proc = self.fault("delete_cwd", write_files={"made.txt": "x"})
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertFalse(os.path.exists(self.work))
        self.assertEqual(json.loads(proc.stdout)["result"], "fake executor answer")

    def test_sleep_delays_the_answer(self):
        started = time.monotonic()
        proc = self.fault(None, sleep_s=0.3)
        self.assertGreaterEqual(time.monotonic() - started, 0.3)
        self.assertEqual(proc.returncode, 0)

    def test_hang_is_logged_first_and_streams_the_init_line(self):
        self.script({"executor": {"fault": "hang"}})
        proc = self.start_fake("claude", "-p", "hi", "--output-format", "stream-json",
                               "--verbose", stdout=subprocess.PIPE)
        [line] = read_lines(proc.stdout, 1, 5.0)
        self.assertEqual(json.loads(line)["subtype"], "init")
        self.assertEqual(self.wait_for_log()["prompt"], "hi")
        self.assertIsNone(proc.poll())


# ============================================================================
# codex: argv and checks
# ============================================================================


class CodexArgvTest(FakeCase):

    def test_version(self):
        for argv in (["--version"], ["-V"]):
            proc = self.run_fake("codex", *argv)
            self.assertEqual((proc.returncode, proc.stdout), (0, "codex-cli 0.171.0\n"))

    def test_unknown_option_exits_2_clap_style(self):
        proc = self.run_fake("codex", "exec", "--skip-git-repo-check", "--foo", "hi")
        self.assertEqual(proc.returncode, 2)
        self.assertTrue(proc.stderr.startswith("error: unexpected argument '--foo' found\n"))
        self.assertEqual(self.logs()[0]["role"], None)

    def test_usage_errors(self):
        cases = [(["-m"], "error: a value is required for '--model <MODEL>'"),
                 (["-s", "sandboxed", "hi"], "error: invalid value 'sandboxed' for '--sandbox"),
                 (["--json", "--json", "hi"], "error: the argument '--json' cannot be used"),
                 (["-a", "never", "hi"], "error: unexpected argument '-a' found"),
                 (["one", "two"], "error: unexpected argument 'two' found")]
        for argv, stderr in cases:
            with self.subTest(argv=argv):
                proc = self.run_fake("codex", "exec", "--skip-git-repo-check", *argv)
                self.assertEqual(proc.returncode, 2)
                self.assertTrue(proc.stderr.startswith(stderr), proc.stderr)

    def test_git_repo_check(self):
        above = [os.path.join(folder, ".git") for folder in Path(self.work).parents
                 if os.path.lexists(os.path.join(folder, ".git"))]
        if above:
            self.skipTest(f"{above[0]} makes every temp folder part of a git repository")
        proc = self.run_fake("codex", "exec", "hi")
        self.assertEqual(proc.returncode, 1)
        self.assertIn("Not inside a trusted directory and --skip-git-repo-check was not "
                      "specified.", proc.stderr)
        os.mkdir(self.path("work", ".git"))
        os.mkdir(self.path("work", "sub"))
        self.assertEqual(self.run_fake("codex", "exec", "-C", "sub", "hi").returncode, 0)

    def test_output_schema_file_must_exist_and_be_json(self):
        bad = self.path("bad.json")
        with open(bad, "w") as handle:
            handle.write("{nope")
        for schema in (self.path("missing.json"), bad):
            with self.subTest(schema=schema):
                proc = self.run_fake("codex", "exec", "--skip-git-repo-check",
                                     "--output-schema", schema, "grade")
                self.assertEqual(proc.returncode, 1)
                self.assertIn(schema, proc.stderr)

    def test_prompt_dash_reads_stdin(self):
        proc = self.run_fake("codex", "exec", "--skip-git-repo-check", "-",
                             stdin_text="from stdin")
        self.assertEqual((proc.returncode, proc.stdout), (0, "fake executor answer\n"))
        self.assertEqual(self.logs()[0]["prompt"], "from stdin")

    def test_prompt_and_piped_stdin_block_until_eof(self):
        proc = subprocess.Popen(
            [sys.executable, FAKES["codex"], "exec", "--skip-git-repo-check", "task"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=self.work, env=self.env)
        try:
            time.sleep(0.5)
            self.assertIsNone(proc.poll(), "codex must wait for stdin EOF")
            out, err = proc.communicate(b"extra", timeout=TIMEOUT_S)
        finally:
            proc.kill()
            proc.wait()
        self.assertIn(b"Reading additional input from stdin...", err)
        self.assertEqual(out, b"fake executor answer\n")
        self.assertEqual(self.logs()[0]["prompt"], "task\n\n<stdin>\nextra\n</stdin>")


# ============================================================================
# codex: events, sandbox, grading, faults
# ============================================================================


class CodexRunTest(FakeCase):

    def codex_json(self, *args, **kw):
        proc = self.run_fake("codex", "exec", "--json", "--skip-git-repo-check", *args, **kw)
        return proc, [json.loads(line) for line in proc.stdout.splitlines()]

    def test_executor_events_and_last_message_file(self):
        skill = self.path("SKILL.md")
        with open(skill, "w") as handle:
            handle.write("skill body\n")
        last = self.path("last.txt")
        self.script({"executor": {"text": "all done"}})
        proc, events = self.codex_json("-o", last, f"Skill path: {skill}\nGo.")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        types = [e["type"] for e in events]
        self.assertEqual(types[:2], ["thread.started", "turn.started"])
        self.assertEqual(types[-1], "turn.completed")
        self.assertEqual(list(events[-1]["usage"]), CODEX_USAGE_KEYS)
        started, done = events[2]["item"], events[3]["item"]
        self.assertEqual((started["status"], started["exit_code"]), ("in_progress", None))
        self.assertEqual((done["type"], done["status"], done["exit_code"]),
                         ("command_execution", "completed", 0))
        self.assertIn(f"cat {skill}", done["command"])
        self.assertEqual(done["aggregated_output"], "skill body\n")
        message = [e["item"] for e in events if e["type"] == "item.completed"][-1]
        self.assertEqual((message["type"], message["text"]), ("agent_message", "all done"))
        with open(last) as handle:
            self.assertEqual(handle.read(), "all done")

    def test_read_only_sandbox_refuses_writes(self):
        target = self.path("work", "plan.md")
        self.script({"executor": {"write_artifact": "x"}})
        for argv in ([], ["-s", "read-only"]):
            with self.subTest(argv=argv):
                proc, events = self.codex_json(*argv, f"Artifact path: {target}")
                self.assertEqual(proc.returncode, 0)
                self.assertFalse(os.path.exists(target))
                self.assertNotIn("file_change", [e.get("item", {}).get("type") for e in events])

    def test_workspace_write_stays_under_the_working_root(self):
        os.mkdir(self.path("work", "root"))
        outside = self.path("outside.txt")
        self.script({"executor": {"write_artifact": "plan",
                                  "write_files": {"notes.txt": "n", outside: "escape"}}})
        prompt = f"Artifact path: {self.path('work', 'root', 'plan.md')}"
        proc, events = self.codex_json("-s", "workspace-write", "-C", "root", prompt)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertTrue(os.path.exists(self.path("work", "root", "plan.md")))
        self.assertTrue(os.path.exists(self.path("work", "root", "notes.txt")))
        self.assertFalse(os.path.exists(outside))
        changes = [e["item"]["changes"][0]["path"] for e in events
                   if e["type"] == "item.completed" and e["item"]["type"] == "file_change"]
        self.assertEqual(len(changes), 2)
        proc, _ = self.codex_json("-s", "danger-full-access", "-C", "root", prompt)
        self.assertTrue(os.path.exists(outside))

    def test_grader_answers_compact_json_without_checking_the_schema(self):
        schema, last = self.path("schema.json"), self.path("last.txt")
        with open(schema, "w") as handle:
            json.dump(SCHEMA, handle)
        self.script({"grader": {"verdicts": {"fail_ids": [3]}},
                     "cases": [{"match": "PROSE", "role": "grader",
                                "spec": {"verdict_form": "prose"}}]})
        proc, events = self.codex_json("-s", "read-only", "--output-schema", schema,
                                       "-o", last, "-", stdin_text=GRADER_PROMPT)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        text = events[-2]["item"]["text"]
        self.assertEqual([v["passed"] for v in json.loads(text)["verdicts"]], [True, True, False])
        self.assertEqual(text, compact(json.loads(text)))
        with open(last) as handle:
            self.assertEqual(handle.read(), text)
        self.assertEqual(self.logs()[0]["role"], "grader")
        proc, events = self.codex_json("--output-schema", schema, "-", stdin_text="PROSE")
        self.assertEqual((proc.returncode, events[-2]["item"]["text"]), (0, "Looks fine to me."))

    def test_is_error_emits_error_and_turn_failed(self):
        last = self.path("last.txt")
        self.script({"executor": {"fault": "is_error"}})
        proc, events = self.codex_json("-o", last, "hi")
        self.assertEqual(proc.returncode, 1)
        self.assertEqual([e["type"] for e in events[-2:]], ["error", "turn.failed"])
        self.assertEqual(events[-1]["error"]["message"], events[-2]["message"])
        with open(last) as handle:
            self.assertEqual(handle.read(), "")

    def test_output_faults(self):
        for fault, code, stdout in (("exit_nonzero", 1, ""), ("silent", 0, ""),
                                    ("invalid_json", 0, "not json {\n")):
            with self.subTest(fault=fault):
                self.script({"executor": {"fault": fault}})
                proc = self.run_fake("codex", "exec", "--json", "--skip-git-repo-check", "hi")
                self.assertEqual((proc.returncode, proc.stdout), (code, stdout))
        self.script({"executor": {"fault": "is_error_exit0"}})
        proc = self.run_fake("codex", "exec", "--json", "--skip-git-repo-check", "hi")
        self.assertEqual(proc.returncode, 3, "claude-only faults are script errors for codex")

    def test_unreachable_reconnects_forever(self):
        self.script({"executor": {"fault": "unreachable"}})
        proc = self.start_fake("codex", "exec", "--json", "--skip-git-repo-check", "hi",
                               stdout=subprocess.PIPE)
        events = [json.loads(line) for line in read_lines(proc.stdout, 5, 5.0)]
        self.assertEqual([e["type"] for e in events],
                         ["thread.started", "turn.started", "error", "error", "error"])
        self.assertTrue(events[2]["message"].startswith("Reconnecting... 1/5"))
        self.assertIsNone(proc.poll())


# ============================================================================
# process groups
# ============================================================================


@unittest.skipUnless(os.path.isdir("/proc/self"), "needs /proc")
class ProcessGroupTest(FakeCase):

    def test_hang_with_child_leaves_a_grandchild_in_the_group(self):
        for cli, argv in (("claude", ["-p", "hi"]),
                          ("codex", ["exec", "--skip-git-repo-check", "hi"])):
            with self.subTest(cli=cli):
                token = uuid.uuid4().hex
                self.script({"executor": {"fault": "hang_with_child"}})
                proc = self.start_fake(cli, *argv, env={"FAKE_AGENT_MARKER": token})
                sleeper = self.find_sleeper(token, proc.pid)
                self.assertEqual(process_group(sleeper), proc.pid)
                self.assertIsNone(proc.poll())
                self.kill_group(proc)
                self.assertEqual(self.live(token), [])

    def find_sleeper(self, token, parent, timeout_s=5.0):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for pid in marked_processes(token):
                if pid != parent and process_name(pid) == "sleep":
                    return pid
            time.sleep(0.02)
        self.fail("no grandchild carrying the marker appeared")

    def live(self, token, timeout_s=5.0):
        """Marked processes still running (zombies have no readable environ)."""
        deadline = time.monotonic() + timeout_s
        while True:
            alive = marked_processes(token)
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.02)


if __name__ == "__main__":
    unittest.main()
