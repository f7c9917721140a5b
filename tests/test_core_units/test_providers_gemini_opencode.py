"""The gemini and opencode adapters called directly: argv, home and environment, and the
reading of what the real CLIs printed.

The recorded outputs are in tests/data/cli-samples (gemini 0.61.0, opencode 1.18.33, run
offline against a fake model server; see tests/data/README.md). Error shapes the samples do
not hold are built from them, after the notes in /work/shared/cli-contracts.md, sections 6
and 7; each test says which shape it builds.
"""

from __future__ import annotations

import json
import stat
import unittest
from pathlib import Path

from tests.helpers import TempDir, runner
from tests.test_core_units.test_providers import MISSING, MetricAsserts, finished

DATA = Path(__file__).resolve().parent.parent / "data"
SAMPLES = DATA / "cli-samples"
GEMINI_HELP = DATA / "cli-help" / "gemini-0.61.0-help.txt"
OPENCODE_RUN_HELP = DATA / "cli-help" / "opencode-1.18.33-run-help.txt"

GEMINI_SHELL = "gemini_stream_json_shell.jsonl"
GEMINI_SKILL = "gemini_stream_json_activate_skill.jsonl"
GEMINI_WRITE = "gemini_stream_json_yolo_write_file.jsonl"
GEMINI_500 = "gemini_stream_json_error_500.jsonl"
GEMINI_GRADER = "gemini_grader_json.json"
GEMINI_REFUSED_STDERR = "gemini_json_conn_refused.stderr.txt"
OPENCODE_BASH = "opencode_json_bash_tool.jsonl"
OPENCODE_PLAIN = "opencode_json_plain.jsonl"
OPENCODE_SKILL = "opencode_json_skill_tool.jsonl"
OPENCODE_400 = "opencode_json_error_400.jsonl"
OPENCODE_REJECTED = "opencode_json_permission_autorejected.jsonl"
OPENCODE_GRADER = "opencode_grader_json.jsonl"

VERDICTS = {"verdicts": [{"id": 1, "passed": True, "evidence": "says hi"},
                         {"id": 2, "passed": False, "evidence": "no file"}]}


def sample(name: str) -> str:
    return (SAMPLES / name).read_text(encoding="utf-8")


def events_of(name: str) -> list[dict]:
    return [json.loads(line) for line in sample(name).splitlines() if line.strip()]


def jsonl(events: list[dict]) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


def help_flags(path: Path) -> set[str]:
    return {word.rstrip(",") for word in path.read_text(encoding="utf-8").split()
            if word.startswith("--")}


def flags_of(argv: list[str]) -> list[str]:
    return [arg for arg in argv if arg.startswith("--")]


class HomeCase(unittest.TestCase):
    """A user's home with settings, and an empty fresh home for one process."""

    def setUp(self):
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.user = self.tmp.path / "user"
        self.user.mkdir()
        self.home = self.tmp.path / "fresh"
        self.home.mkdir()
        self.user_env = {"HOME": str(self.user), "PATH": "/usr/bin", "LANG": "C.UTF-8"}

    def write(self, rel: str, data) -> Path:
        path = self.user / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
        return path

    def read_json(self, rel: str) -> dict:
        return json.loads((self.home / rel).read_text(encoding="utf-8"))

    def assert_private_copy(self, rel: str, content: str) -> None:
        path = self.home / rel
        self.assertEqual(path.read_text(encoding="utf-8"), content)
        self.assertEqual(stat.S_IMODE(path.stat().st_mode), 0o600)


# ---------------------------------------------------------------------------
# gemini
# ---------------------------------------------------------------------------


class GeminiInvocationTest(unittest.TestCase):
    def setUp(self):
        self.provider = runner.GeminiProvider()
        self.sandbox = Path("/tmp/sb/work")

    def test_executor_argv_streams_events_approves_tools_and_trusts_the_folder(self):
        call = self.provider.executor_invocation("write hello.txt", self.sandbox, None)
        self.assertEqual(call.argv, ["gemini", "--output-format", "stream-json",
                                     "--approval-mode", "yolo", "--skip-trust"])
        # headless mode reads the prompt from stdin; the folder is the process's cwd
        self.assertEqual(call.stdin_text, "write hello.txt")
        self.assertEqual(call.cwd, self.sandbox)
        self.assertFalse(call.skills_on)

    def test_executor_argv_names_the_model_only_when_one_is_chosen(self):
        call = self.provider.executor_invocation("p", self.sandbox, "gemini-2.5-pro")
        self.assertEqual(call.argv[-2:], ["--model", "gemini-2.5-pro"])
        self.assertNotIn("--model", self.provider.executor_invocation("p", self.sandbox,
                                                                      None).argv)

    def test_grader_argv_prints_one_json_object_and_uses_the_schema_alias(self):
        call = self.provider.grader_invocation("grade this", Path("/tmp/g"), "gemini-2.5-pro",
                                               Path("/tmp/g/schema.json"),
                                               Path("/tmp/g/last.txt"))
        self.assertEqual(call.argv, ["gemini", "--output-format", "json", "--skip-trust",
                                     "--model", "skill-eval-verdict"])
        # the real model goes into the alias (prepare_home), never on the command line
        self.assertNotIn("gemini-2.5-pro", call.argv)
        self.assertNotIn("--approval-mode", call.argv)  # a grader runs no tools
        self.assertEqual(call.stdin_text, "grade this")
        self.assertEqual(call.cwd, Path("/tmp/g"))
        self.assertFalse(self.provider.grader_uses_files)

    def test_every_flag_is_one_the_recorded_cli_knows(self):
        known = help_flags(GEMINI_HELP)
        for call in (self.provider.executor_invocation("p", self.sandbox, "m"),
                     self.provider.grader_invocation("p", self.sandbox, "m", MISSING, MISSING)):
            with self.subTest(argv=call.argv):
                self.assertLessEqual(set(flags_of(call.argv)), known)
        self.assertIn('"stream-json"', GEMINI_HELP.read_text(encoding="utf-8"))
        self.assertIn('"yolo"', GEMINI_HELP.read_text(encoding="utf-8"))

    def test_version_argv(self):
        self.assertEqual(self.provider.version_argv(), ["gemini", "--version"])


class GeminiHomeTest(HomeCase):
    def setUp(self):
        super().setUp()
        self.provider = runner.GeminiProvider()

    def prepare(self, role: str, model: str | None = None, env: dict | None = None,
                provider=None) -> dict:
        env = dict(self.user_env if env is None else env)
        return (provider or self.provider).prepare_home(self.home, env, role, model,
                                                        "/home/inside", env)

    def test_environment_points_every_home_at_the_fresh_one(self):
        env = self.prepare("executor", env={
            **self.user_env, "GEMINI_API_KEY": "k", "GEMINI_SYSTEM_MD": "/evil.md",
            "GEMINI_CLI_SYSTEM_SETTINGS_PATH": "/etc/x.json", "GEMINI_CLI_TRUST_WORKSPACE": "1",
            "GEMINI_CLI_SYSTEM_DEFAULTS_PATH": "/d", "GEMINI_WRITE_SYSTEM_MD": "1"})
        self.assertEqual(env["HOME"], "/home/inside")
        self.assertEqual(env["GEMINI_CLI_HOME"], "/home/inside")
        self.assertEqual(env["TMPDIR"], "/home/inside/tmp")
        self.assertTrue((self.home / "tmp").is_dir())
        # the relaunching parent ignores SIGTERM: one process that a timeout can end
        self.assertEqual(env["GEMINI_CLI_NO_RELAUNCH"], "1")
        for name in runner.GeminiProvider.dropped_vars:
            self.assertNotIn(name, env)
        self.assertEqual(env["GEMINI_API_KEY"], "k")  # the sign-in travels by environment
        self.assertEqual(env["PATH"], "/usr/bin")

    def test_executor_settings_are_quiet_single_attempt_and_skill_free(self):
        self.write(".gemini/settings.json", {
            "security": {"auth": {"selectedType": "oauth-personal"}},
            "model": {"name": "gemini-2.5-pro"}, "mcpServers": {"x": {"command": "evil"}},
            "hooks": {"BeforeTool": []}, "tools": {"core": ["run_shell_command"]}})
        self.prepare("executor")
        settings = self.read_json(".gemini/settings.json")
        self.assertEqual(settings, {
            "general": {"maxAttempts": 1, "enableAutoUpdate": False,
                        "enableAutoUpdateNotification": False},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "security": {"folderTrust": {"enabled": False},
                         "auth": {"selectedType": "oauth-personal"}},
            "skills": {"enabled": False},
            "model": {"name": "gemini-2.5-pro"}})  # sign-in and model only; no mcp, no hooks
        self.assertFalse((self.home / "grader_system.md").exists())

    def test_grader_settings_carry_the_verdict_schema_in_a_model_alias(self):
        env = self.prepare("grader", model="gemini-2.5-flash",
                           env={**self.user_env, "GEMINI_API_KEY": "k"})
        settings = self.read_json(".gemini/settings.json")
        alias = settings["modelConfigs"]["customAliases"]["skill-eval-verdict"]
        self.assertEqual(alias, {"extends": "chat-base", "modelConfig": {
            "model": "gemini-2.5-flash", "generateContentConfig": {
                "responseMimeType": "application/json",
                "responseJsonSchema": runner.VERDICT_SCHEMA}}})
        self.assertEqual(settings["tools"], {"core": []})  # no tools at all
        self.assertEqual(settings["experimental"], {"enableAgents": False})
        self.assertEqual(settings["skills"], {"enabled": False})
        self.assertEqual(settings["security"]["auth"], {"selectedType": "gemini-api-key"})
        # its own short system prompt instead of the 25 KB agent one
        self.assertEqual(env["GEMINI_SYSTEM_MD"], "/home/inside/grader_system.md")
        self.assertEqual((self.home / "grader_system.md").read_text(encoding="utf-8"),
                         runner._SYSTEM_PROMPTS["grader"])

    def test_grader_alias_takes_the_users_model_or_none(self):
        self.write(".gemini/settings.json", {"model": {"name": "user-model"}})
        self.prepare("grader")
        alias = self.read_json(".gemini/settings.json")["modelConfigs"]["customAliases"]
        self.assertEqual(alias["skill-eval-verdict"]["modelConfig"]["model"], "user-model")
        (self.user / ".gemini" / "settings.json").unlink()
        self.home = self.tmp.path / "fresh-2"
        self.home.mkdir()
        self.prepare("grader")
        alias = self.read_json(".gemini/settings.json")["modelConfigs"]["customAliases"]
        self.assertNotIn("model", alias["skill-eval-verdict"]["modelConfig"])

    def test_sign_in_method_from_the_environment(self):
        cases = (({"GEMINI_API_KEY": "k"}, "gemini-api-key"),
                 ({"GOOGLE_GENAI_USE_VERTEXAI": "True", "GEMINI_API_KEY": "k"}, "vertex-ai"),
                 ({}, None))
        for extra, expected in cases:
            with self.subTest(env=extra):
                settings = self.provider.settings_for("executor", None,
                                                      {**self.user_env, **extra}, {})
                self.assertEqual(runner._dig(settings, ("security", "auth", "selectedType")),
                                 expected)

    def test_user_settings_under_gemini_cli_home_are_the_ones_read(self):
        other = self.tmp.path / "elsewhere"
        (other / ".gemini").mkdir(parents=True)
        (other / ".gemini" / "settings.json").write_text(
            '{"model": {"name": "from-cli-home"}}', encoding="utf-8")
        self.write(".gemini/settings.json", {"model": {"name": "from-home"}})
        self.prepare("executor", env={**self.user_env, "GEMINI_CLI_HOME": str(other)})
        self.assertEqual(self.read_json(".gemini/settings.json")["model"],
                         {"name": "from-cli-home"})

    def test_oauth_files_are_carried_private_and_nothing_else(self):
        self.write(".gemini/oauth_creds.json", '{"token": "t"}')
        self.write(".gemini/google_accounts.json", '{"active": "a"}')
        self.write(".gemini/history/secret.txt", "chat log")
        self.write(".gemini/skills/demo/SKILL.md", "---\nname: demo\n---\n")
        self.prepare("executor")
        self.assert_private_copy(".gemini/oauth_creds.json", '{"token": "t"}')
        self.assert_private_copy(".gemini/google_accounts.json", '{"active": "a"}')
        self.assertEqual(sorted(p.name for p in (self.home / ".gemini").iterdir()),
                         ["google_accounts.json", "oauth_creds.json", "settings.json"])

    def test_agent_config_settings_are_applied_last(self):
        provider = runner.GeminiProvider(["general.maxAttempts=3", "model.name=pinned",
                                          'security.auth={"selectedType": "vertex-ai"}'])
        self.prepare("executor", provider=provider)
        settings = self.read_json(".gemini/settings.json")
        self.assertEqual(settings["general"]["maxAttempts"], 3)
        self.assertEqual(settings["model"], {"name": "pinned"})
        self.assertEqual(settings["security"]["auth"], {"selectedType": "vertex-ai"})

    def test_allow_skills_turns_skills_on_and_keeps_the_rest(self):
        env = self.prepare("executor")
        self.assertIs(self.provider.allow_skills(self.home, env), env)
        settings = self.read_json(".gemini/settings.json")
        self.assertEqual(settings["skills"], {"enabled": True})
        self.assertEqual(settings["general"]["maxAttempts"], 1)


class GeminiReadinessTest(HomeCase):
    def problem(self, extra_env: dict | None = None):
        return runner.GeminiProvider().readiness_problem({**self.user_env, **(extra_env or {})})

    def test_no_sign_in_method_would_fail_every_call_with_exit_41(self):
        what, fix = self.problem()
        self.assertIn("no sign-in method", what)
        self.assertIn("exit 41", what)
        self.assertIn("GEMINI_API_KEY", fix)

    def test_an_api_key_method_without_the_key(self):
        self.write(".gemini/settings.json", {"security": {"auth": {
            "selectedType": "gemini-api-key"}}})
        what, _ = self.problem()
        self.assertIn("GEMINI_API_KEY is not set", what)
        self.assertIsNone(self.problem({"GEMINI_API_KEY": "k"}))

    def test_google_sign_in_needs_its_credentials_file(self):
        self.write(".gemini/settings.json", {"security": {"auth": {
            "selectedType": "oauth-personal"}}})
        what, _ = self.problem()
        self.assertIn("oauth_creds.json", what)
        self.write(".gemini/oauth_creds.json", "{}")
        self.assertIsNone(self.problem())

    def test_vertex_from_the_environment_is_ready(self):
        self.assertIsNone(self.problem({"GOOGLE_GENAI_USE_VERTEXAI": "true"}))


class GeminiExecutorTest(MetricAsserts):
    def setUp(self):
        self.provider = runner.GeminiProvider()

    def test_recorded_shell_stream_gives_answer_trace_and_metrics(self):
        reply = self.provider.read_executor(finished(sample(GEMINI_SHELL), duration_s=99.0))
        self.assertTrue(reply.ok, reply.failure)
        self.assertEqual(reply.failure, "")
        self.assertEqual(reply.text, "All done.")
        self.assertEqual(reply.trace, [{"tool": "run_shell_command", "input": {
            "command": "echo shell-ran > marker.txt; ls", "description": "test"}, "event": 2}])
        m = reply.metrics
        self.assert_metric_shapes(m)
        self.assert_captured(m["input_tokens"], 22, "stats.input_tokens")
        self.assert_captured(m["output_tokens"], 14, "stats.output_tokens")
        self.assert_captured(m["tokens"], 36, "stats.total_tokens")
        self.assert_captured(m["cached_input_tokens"], 0, "stats.cached")  # a reported zero
        self.assert_captured(m["tool_calls"], 1, "stats.tool_calls")
        # the CLI's own duration, not the runner's clock (99 s here)
        self.assert_captured(m["time_seconds"], 0.109, "stats.duration_ms")
        self.assert_absent(m["num_turns"], "no turn count")
        self.assert_absent(m["total_cost_usd"], "no cost")

    def test_recorded_write_file_stream(self):
        reply = self.provider.read_executor(finished(sample(GEMINI_WRITE)))
        self.assertTrue(reply.ok, reply.failure)
        self.assertEqual(reply.text, "Done, wrote hello.txt")
        self.assertEqual(reply.trace, [{"tool": "write_file", "input": {
            "file_path": "hello.txt", "content": "hi there\n"}, "event": 2}])
        self.assertEqual(reply.metrics["tokens"].value, 54)

    def test_recorded_activate_skill_call_is_the_activation_signal(self):
        reply = self.provider.read_executor(finished(sample(GEMINI_SKILL)))
        self.assertEqual(reply.text, "BANANA")
        evidence = runner._activation_evidence(self.provider, reply.trace, "s-proj-gemini",
                                               True, False)
        self.assertIs(evidence.activated, True)
        # the real sample's tool name, and where in the stream the call is
        self.assertEqual(evidence.signal, 'gemini\'s skill tool "activate_skill" called with '
                         'name="s-proj-gemini" (tool call 1, JSON event 3 (index 2) of '
                         'logs/executor_stream.txt)')
        self.assertEqual(evidence.evidence.event, 2)
        other = runner._activation_evidence(self.provider, reply.trace, "other", True, False)
        self.assertIs(other.activated, False)

    def test_assistant_chunks_are_joined_and_text_before_the_last_tool_is_not_the_answer(self):
        # The contract: assistant text arrives in "delta" chunks to be concatenated.
        events = events_of(GEMINI_SHELL)
        said_first = {"type": "message", "role": "assistant", "content": "Let me look.",
                      "delta": True}
        answer = events[4]
        chunks = [dict(answer, content="All "), dict(answer, content="done.")]
        stdout = jsonl(events[:2] + [said_first] + events[2:4] + chunks + events[5:])
        reply = self.provider.read_executor(finished(stdout))
        self.assertTrue(reply.ok, reply.failure)
        self.assertEqual(reply.text, "All done.")
        # the user's own message is no answer either
        self.assertNotIn("run a shell command", reply.text)

    def test_recorded_http_500_is_a_failure_that_quotes_the_api_error(self):
        reply = self.provider.read_executor(finished(sample(GEMINI_500), returncode=1))
        self.assertFalse(reply.ok)
        self.assertTrue(reply.failure.startswith(
            "gemini reported an error (exit 1, status 'error'): [API Error:"), reply.failure)
        self.assertIn("fake failure", reply.failure)
        self.assertEqual(reply.text, "")
        self.assertEqual(reply.trace, [])  # events were read: an empty trace, not none
        self.assert_metric_shapes(reply.metrics)

    def test_error_status_fails_even_with_exit_0(self):
        stdout = sample(GEMINI_500)
        reply = self.provider.read_executor(finished(stdout, returncode=0))
        self.assertFalse(reply.ok)
        self.assertIn("exit 0, status 'error'", reply.failure)

    def test_non_zero_exit_fails_even_after_a_success_result(self):
        reply = self.provider.read_executor(finished(sample(GEMINI_SHELL), returncode=244))
        self.assertFalse(reply.ok)
        self.assertIn("exit 244, status 'success'", reply.failure)
        self.assertIn("no error message", reply.failure)

    def test_stream_cut_before_the_result_event_fails_with_every_metric_absent(self):
        stdout = jsonl(events_of(GEMINI_SHELL)[:-1])
        reply = self.provider.read_executor(finished(stdout))
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure, "gemini exited 0 without a result event")
        self.assertEqual(reply.text, "All done.")  # what it said is kept; the run still failed
        self.assertEqual([c["tool"] for c in reply.trace], ["run_shell_command"])
        for name in ("input_tokens", "output_tokens", "tokens", "time_seconds", "tool_calls"):
            with self.subTest(metric=name):
                self.assert_absent(reply.metrics[name], "without a result event")

    def test_no_output_and_an_exit_code_quotes_the_stderr_error(self):
        # The contract: a missing sign-in exits 41 before any event is printed.
        reply = self.provider.read_executor(finished(
            "", returncode=41, stderr="Loaded cached credentials.\nError: Invalid auth method "
                                      "selected.\n"))
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure, "gemini exited 41 without a result event; stderr: "
                                        "Error: Invalid auth method selected.")
        self.assertIsNone(reply.trace, "no events: no trace was captured, not an empty one")
        self.assertEqual(runner._skill_read_evidence(reply.trace, "demo", "with_skill").state,
                         "unknown")

    def test_plain_text_output_is_not_an_answer(self):
        reply = self.provider.read_executor(finished("All done.\n"))
        self.assertFalse(reply.ok)
        self.assertIn("without a result event", reply.failure)
        self.assertEqual(reply.text, "")

    def test_a_timeout_keeps_the_trace_and_names_itself_in_each_absent_metric(self):
        stdout = jsonl(events_of(GEMINI_SHELL)[:4])
        reply = self.provider.read_executor(finished(stdout, returncode=-9, timed_out=True))
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure, "timed out")
        self.assertEqual([c["tool"] for c in reply.trace], ["run_shell_command"])
        self.assert_absent(reply.metrics["tokens"], "timed out")
        self.assert_absent(reply.metrics["time_seconds"], "timed out")

    def test_a_process_that_could_not_start(self):
        reply = self.provider.read_executor(finished(
            "", returncode=None, duration_s=0.0, spawn_error="FileNotFoundError: gemini"))
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure, "could not start: FileNotFoundError: gemini")
        self.assertIsNone(reply.trace)
        self.assert_absent(reply.metrics["time_seconds"], "could not start")

    def test_a_timeout_wins_over_a_success_result(self):
        reply = self.provider.read_executor(finished(sample(GEMINI_SHELL), returncode=-15,
                                                     timed_out=True))
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure, "timed out")


class GeminiMetricsTest(MetricAsserts):
    def test_missing_non_numeric_and_implausible_stats_are_absent_not_zero(self):
        stats = {"input_tokens": "22", "output_tokens": -1, "total_tokens": True,
                 "duration_ms": 10**15}
        metrics = runner._gemini_metrics(stats, "")
        self.assert_metric_shapes(metrics)
        self.assert_absent(metrics["input_tokens"], "a str, not a number")
        self.assert_absent(metrics["output_tokens"], "a negative amount")
        self.assert_absent(metrics["tokens"], "a bool, not a number")
        self.assert_absent(metrics["cached_input_tokens"], "reported no stats.cached")
        self.assert_absent(metrics["time_seconds"], "not a plausible measurement")
        self.assertTrue(metrics["time_seconds"].implausible)

    def test_no_stats_names_the_failure(self):
        metrics = runner._gemini_metrics(None, "timed out")
        self.assert_metric_shapes(metrics)
        self.assertEqual(set(metrics), {"input_tokens", "output_tokens", "cached_input_tokens",
                                        "tokens", "tool_calls", "time_seconds", "num_turns",
                                        "total_cost_usd"})
        for metric in metrics.values():
            self.assertIsNone(metric.value)
        self.assertIn("(timed out)", metrics["tokens"].absent_reason)


class GeminiGraderTest(MetricAsserts):
    def setUp(self):
        self.provider = runner.GeminiProvider()

    def envelope(self, response) -> str:
        data = json.loads(sample(GEMINI_GRADER))
        if response is None:
            del data["response"]
        else:
            data["response"] = response
        return json.dumps(data, indent=2)

    def test_recorded_reply_in_another_shape_holds_no_verdicts(self):
        # The alias asks the model for the verdict schema; the runner still checks the answer.
        reply = self.provider.read_grader(finished(sample(GEMINI_GRADER)), MISSING)
        self.assertTrue(reply.ok, reply.failure)
        self.assertEqual(reply.text, '{"score": 0.8, "reason": "ok"}')
        self.assertIsNone(reply.structured)
        self.assertIsNone(runner.parse_verdict_payload(reply.structured, reply.text))

    def test_a_schema_shaped_response_is_the_verdict_list(self):
        reply = self.provider.read_grader(
            finished(self.envelope(json.dumps(VERDICTS))), MISSING)
        self.assertTrue(reply.ok, reply.failure)
        self.assertEqual(runner.parse_verdict_payload(reply.structured, reply.text), VERDICTS)
        grading = runner.grade_assertions(["says hi", "wrote a file"],
                                          runner.parse_verdict_payload(None, reply.text))
        self.assertEqual([e.passed for e in grading.expectations], [True, False])

    def test_recorded_reply_reports_what_the_grader_spent(self):
        # -o json has no flat stats: its tokens are per model, under stats.models.
        reply = self.provider.read_grader(finished(sample(GEMINI_GRADER), duration_s=1.25),
                                          MISSING)
        m = reply.metrics
        self.assert_metric_shapes(m)
        self.assert_captured(m["tokens"], 18, "stats.models")
        self.assert_captured(m["input_tokens"], 11, "tokens.prompt")
        self.assert_captured(m["output_tokens"], 7, "tokens.candidates")
        self.assert_captured(m["cached_input_tokens"], 0, "tokens.cached")
        self.assert_captured(m["time_seconds"], 1.25, "runner wall clock")
        self.assert_absent(m["total_cost_usd"], "no cost")
        self.assert_absent(m["num_turns"], "no turn count")

    def test_tokens_of_several_models_are_summed(self):
        data = json.loads(sample(GEMINI_GRADER))
        data["stats"]["models"]["router"] = data["stats"]["models"]["fake-gemini"]
        reply = self.provider.read_grader(finished(json.dumps(data)), MISSING)
        self.assertEqual(reply.metrics["tokens"].value, 36)

    def test_recorded_connection_refused_quotes_the_error_json_from_stderr(self):
        # The contract: with -o json a failure writes its error object to stderr, not stdout.
        reply = self.provider.read_grader(finished(
            "", returncode=1, stderr=sample(GEMINI_REFUSED_STDERR)), MISSING)
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure, "gemini grader failed (exit 1): exception TypeError: "
                                        "fetch failed sending request")
        self.assertEqual(reply.text, "")
        self.assertIsNone(reply.structured)
        self.assert_metric_shapes(reply.metrics)
        self.assert_absent(reply.metrics["tokens"], "gemini grader failed (exit 1)")

    def test_stderr_without_an_error_object_falls_back_to_its_error_line(self):
        reply = self.provider.read_grader(finished(
            "", returncode=55, stderr="Error: this folder is not trusted\n"), MISSING)
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure, "gemini grader failed (exit 55): ; stderr: Error: this "
                                        "folder is not trusted")

    def test_non_zero_exit_fails_even_with_a_response(self):
        reply = self.provider.read_grader(finished(self.envelope(json.dumps(VERDICTS)),
                                                   returncode=1), MISSING)
        self.assertFalse(reply.ok)
        self.assertIn("exit 1", reply.failure)

    def test_an_envelope_without_a_response_string_fails(self):
        for response in (None, {"verdicts": []}):
            with self.subTest(response=response):
                reply = self.provider.read_grader(finished(self.envelope(response)), MISSING)
                self.assertFalse(reply.ok)
                self.assertIn("gemini grader failed (exit 0)", reply.failure)
                self.assertEqual(reply.text, "")

    def test_a_stream_instead_of_one_object_is_a_failure(self):
        reply = self.provider.read_grader(finished(sample(GEMINI_SHELL)), MISSING)
        self.assertFalse(reply.ok)

    def test_a_timeout_is_named(self):
        reply = self.provider.read_grader(finished("", returncode=-9, timed_out=True), MISSING)
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure, "timed out")
        self.assert_absent(reply.metrics["tokens"], "timed out")


# ---------------------------------------------------------------------------
# opencode
# ---------------------------------------------------------------------------


class OpenCodeInvocationTest(unittest.TestCase):
    def setUp(self):
        self.provider = runner.OpenCodeProvider()
        self.sandbox = Path("/tmp/sb/work")

    def test_executor_argv_prints_json_events_in_the_sandbox_with_a_fixed_title(self):
        call = self.provider.executor_invocation("write hello.txt", self.sandbox, None)
        self.assertEqual(call.argv, ["opencode", "run", "--format", "json", "--dir",
                                     "/tmp/sb/work", "--title", "skill-eval executor"])
        # the prompt on stdin (closed after it), never as a message argument
        self.assertEqual(call.stdin_text, "write hello.txt")
        self.assertEqual(call.cwd, self.sandbox)
        self.assertNotIn("--auto", call.argv)  # a write outside the folder stays refused

    def test_the_model_is_passed_as_given(self):
        call = self.provider.executor_invocation("p", self.sandbox, "fake/fake-model")
        self.assertEqual(call.argv[-2:], ["--model", "fake/fake-model"])

    def test_grader_argv_runs_the_no_tools_agent(self):
        call = self.provider.grader_invocation("grade this", Path("/tmp/g"), "fake/m",
                                               Path("/tmp/g/schema.json"),
                                               Path("/tmp/g/last.txt"))
        self.assertEqual(call.argv, ["opencode", "run", "--format", "json", "--dir", "/tmp/g",
                                     "--title", "skill-eval grader", "--model", "fake/m",
                                     "--agent", "skill-eval-grader"])
        self.assertEqual(call.stdin_text, "grade this")
        self.assertEqual(call.cwd, Path("/tmp/g"))
        self.assertFalse(self.provider.grader_uses_files)

    def test_every_flag_is_one_the_recorded_cli_knows(self):
        known = help_flags(OPENCODE_RUN_HELP)
        for call in (self.provider.executor_invocation("p", self.sandbox, "m"),
                     self.provider.grader_invocation("p", self.sandbox, "m", MISSING, MISSING)):
            with self.subTest(argv=call.argv):
                self.assertEqual(call.argv[:2], ["opencode", "run"])
                self.assertLessEqual(set(flags_of(call.argv)), known)


class OpenCodeHomeTest(HomeCase):
    def setUp(self):
        super().setUp()
        self.provider = runner.OpenCodeProvider()

    def prepare(self, role: str, env: dict | None = None, provider=None) -> dict:
        env = dict(self.user_env if env is None else env)
        return (provider or self.provider).prepare_home(self.home, env, role, None,
                                                        "/home/inside", env)

    def config(self) -> dict:
        return self.read_json(".config/opencode/opencode.json")

    def test_environment_moves_every_folder_into_the_fresh_home_and_quiets_the_cli(self):
        env = self.prepare("executor", env={
            **self.user_env, "OPENCODE_CONFIG": "/evil.json", "OPENCODE_CONFIG_DIR": "/evil",
            "OPENCODE_CONFIG_CONTENT": "{}", "OPENCODE_PERMISSION": "{}",
            "OPENCODE_TUI_CONFIG": "/t"})
        self.assertEqual({k: env[k] for k in env if k.startswith("XDG_")}, {
            "XDG_CONFIG_HOME": "/home/inside/.config",
            "XDG_DATA_HOME": "/home/inside/.local/share",
            "XDG_CACHE_HOME": "/home/inside/.cache",
            "XDG_STATE_HOME": "/home/inside/.local/state"})
        self.assertEqual(env["HOME"], "/home/inside")
        self.assertEqual(env["TMPDIR"], "/home/inside/tmp")
        self.assertTrue((self.home / "tmp").is_dir())
        for name, value in (("OPENCODE_DISABLE_PROJECT_CONFIG", "1"),
                            ("OPENCODE_DISABLE_EXTERNAL_SKILLS", "1"),
                            ("OPENCODE_DISABLE_CLAUDE_CODE", "1"),
                            ("OPENCODE_DISABLE_AUTOUPDATE", "1"),
                            ("npm_config_offline", "true")):
            self.assertEqual(env.get(name), value, name)
        for name in runner.OpenCodeProvider.dropped_vars:
            self.assertNotIn(name, env)
        self.assertEqual(env["LANG"], "C.UTF-8")

    def test_executor_config_keeps_the_users_providers_and_nothing_else(self):
        provider_block = {"fake": {"npm": "@ai-sdk/openai-compatible",
                                   "options": {"baseURL": "http://127.0.0.1:9/v1"}}}
        self.write(".config/opencode/opencode.json", {
            "provider": provider_block, "model": "fake/fake-model",
            "agent": {"evil": {"prompt": "x"}}, "plugin": ["p"], "instructions": ["AGENTS.md"],
            "permission": {"*": "allow"}, "mcp": {"x": {}}})
        self.prepare("executor")
        self.assertEqual(self.config(), {
            "provider": provider_block, "model": "fake/fake-model", "share": "disabled",
            "autoupdate": False, "snapshot": False, "permission": {"skill": "deny"}})

    def test_grader_config_denies_every_tool_and_adds_its_agent(self):
        self.prepare("grader")
        config = self.config()
        self.assertEqual(config["permission"], {"*": "deny"})
        self.assertEqual(config["agent"], {"skill-eval-grader": {
            "mode": "primary", "prompt": runner._SYSTEM_PROMPTS["grader"],
            "permission": {"*": "deny"}}})

    def test_opencode_config_file_is_merged_into_the_user_config(self):
        extra = self.tmp.path / "extra.json"
        extra.write_text('{"model": "from/env-file", "agent": {"x": {}}}', encoding="utf-8")
        self.write(".config/opencode/opencode.json", {"model": "from/home", "small_model": "s"})
        self.prepare("executor", env={**self.user_env, "OPENCODE_CONFIG": str(extra)})
        config = self.config()
        self.assertEqual((config["model"], config["small_model"]), ("from/env-file", "s"))
        self.assertNotIn("agent", config)

    def test_sign_in_and_model_catalog_are_carried_private(self):
        self.write(".local/share/opencode/auth.json", '{"fake": {"key": "k"}}')
        self.write(".cache/opencode/models.json", "{}")
        self.write(".local/share/opencode/opencode.db", "sessions")
        self.prepare("executor")
        self.assert_private_copy(".local/share/opencode/auth.json", '{"fake": {"key": "k"}}')
        self.assert_private_copy(".cache/opencode/models.json", "{}")
        self.assertFalse((self.home / ".local/share/opencode/opencode.db").exists())

    def test_xdg_folders_of_the_user_are_where_the_sign_in_is_read(self):
        data = self.tmp.path / "xdg-data"
        (data / "opencode").mkdir(parents=True)
        (data / "opencode" / "auth.json").write_text("{}", encoding="utf-8")
        self.prepare("executor", env={**self.user_env, "XDG_DATA_HOME": str(data)})
        self.assertTrue((self.home / ".local/share/opencode/auth.json").is_file())

    def test_agent_config_settings_are_applied_last(self):
        provider = runner.OpenCodeProvider(["share=manual", 'permission.bash="ask"'])
        self.prepare("executor", provider=provider)
        config = self.config()
        self.assertEqual(config["share"], "manual")
        self.assertEqual(config["permission"], {"skill": "deny", "bash": "ask"})

    def test_allow_skills_allows_the_skill_tool_and_the_agents_folder(self):
        env = self.prepare("executor")
        allowed = self.provider.allow_skills(self.home, env)
        self.assertEqual(self.config()["permission"], {"skill": "allow"})
        self.assertNotIn("OPENCODE_DISABLE_EXTERNAL_SKILLS", allowed)
        self.assertEqual(allowed["OPENCODE_DISABLE_CLAUDE_CODE"], "1")  # .claude stays out
        self.assertIn("OPENCODE_DISABLE_EXTERNAL_SKILLS", env)  # the given env is not changed

    def test_allow_skills_keeps_a_permission_given_for_every_tool(self):
        provider = runner.OpenCodeProvider(['permission="ask"'])
        env = self.prepare("executor", provider=provider)
        provider.allow_skills(self.home, env)
        self.assertEqual(self.config()["permission"], {"*": "ask", "skill": "allow"})


class OpenCodeReadTest(MetricAsserts):
    def setUp(self):
        self.provider = runner.OpenCodeProvider()

    def test_recorded_bash_run_gives_answer_trace_and_summed_metrics(self):
        reply = self.provider.read_executor(finished(sample(OPENCODE_BASH), duration_s=2.2004))
        self.assertTrue(reply.ok, reply.failure)
        self.assertEqual(reply.failure, "")
        self.assertEqual(reply.text, "All done.")
        self.assertEqual(reply.trace, [{"tool": "bash", "input": {
            "command": "echo shell-ran > marker.txt; ls", "description": "test"}, "event": 1}])
        m = reply.metrics
        self.assert_metric_shapes(m)
        # two steps (a tool call, then the answer), 11 in / 7 out each
        self.assert_captured(m["input_tokens"], 22, "tokens.input, summed")
        self.assert_captured(m["output_tokens"], 14, "tokens.output, summed")
        self.assert_captured(m["reasoning_output_tokens"], 0, "tokens.reasoning")
        self.assert_captured(m["cache_read_input_tokens"], 0, "tokens.cache.read")
        self.assert_captured(m["cache_creation_input_tokens"], 0, "tokens.cache.write")
        self.assert_captured(m["tokens"], 36, "input + output + cache read + cache write")
        self.assert_captured(m["num_turns"], 2, "step_finish events")
        self.assert_captured(m["time_seconds"], 2.2, "runner wall clock")
        # it prints cost 0 when no price is configured: unknown, not free
        self.assert_absent(m["total_cost_usd"], "no price configured")

    def test_recorded_plain_answer(self):
        reply = self.provider.read_executor(finished(sample(OPENCODE_PLAIN)))
        self.assertTrue(reply.ok, reply.failure)
        self.assertEqual(reply.text, "FAKE_OK")
        self.assertEqual(reply.trace, [])
        self.assertEqual(reply.metrics["num_turns"].value, 1)
        self.assertEqual(reply.metrics["tokens"].value, 18)

    def test_recorded_skill_tool_call_is_the_activation_signal(self):
        reply = self.provider.read_executor(finished(sample(OPENCODE_SKILL)))
        self.assertEqual(reply.text, "BANANA")
        evidence = runner._activation_evidence(self.provider, reply.trace, "s-proj-opencode",
                                               True, False)
        self.assertIs(evidence.activated, True)
        self.assertTrue(evidence.signal.startswith(
            'opencode\'s skill tool "skill" called with name="s-proj-opencode" (tool call 1, '
            'JSON event '), evidence.signal)
        self.assertEqual(evidence.evidence.tool, "skill")

    def test_a_priced_model_reports_its_cost_summed_over_steps(self):
        events = events_of(OPENCODE_BASH)
        for event in events:
            if event["type"] == "step_finish":
                event["part"]["cost"] = 0.0125
        reply = self.provider.read_executor(finished(jsonl(events)))
        self.assert_captured(reply.metrics["total_cost_usd"], 0.025, "step_finish cost, summed")

    def test_text_before_the_last_tool_call_is_not_the_answer(self):
        events = events_of(OPENCODE_BASH)
        said_first = {"type": "text", "part": {"type": "text", "text": "Let me run it. "}}
        reply = self.provider.read_executor(finished(jsonl([events[0], said_first]
                                                           + events[1:])))
        self.assertEqual(reply.text, "All done.")

    def test_recorded_http_400_is_a_failure_with_its_status(self):
        reply = self.provider.read_executor(finished(sample(OPENCODE_400), returncode=1))
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure,
                         "opencode failed (exit 1): APIError: fake bad request (status 400)")
        self.assertEqual(reply.text, "")
        self.assertEqual(reply.trace, [])
        m = reply.metrics
        self.assert_metric_shapes(m)
        self.assert_absent(m["input_tokens"], "opencode failed (exit 1)")
        self.assert_absent(m["tokens"], "token counts are missing")
        self.assert_absent(m["num_turns"], "finished no step")

    def test_an_error_event_fails_the_run_even_with_exit_0(self):
        reply = self.provider.read_executor(finished(sample(OPENCODE_400), returncode=0))
        self.assertFalse(reply.ok)
        self.assertIn("(status 400)", reply.failure)

    def test_recorded_refused_permission_ends_quietly_and_is_a_failure(self):
        # The contract: a refused permission ends the session with rc 0 and no answer.
        reply = self.provider.read_executor(finished(sample(OPENCODE_REJECTED)))
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure, (
            "opencode stopped after a tool call without an answer (refused: write: The user "
            "rejected permission to use this specific tool call.)"))
        self.assertEqual([c["tool"] for c in reply.trace], ["write"])
        # what it spent before stopping is still reported
        self.assert_captured(reply.metrics["tokens"], 18, "opencode tokens")

    def test_a_run_ending_on_tool_calls_without_a_refusal_is_still_no_answer(self):
        events = events_of(OPENCODE_BASH)[:3]  # the first step only: a tool call
        reply = self.provider.read_executor(finished(jsonl(events)))
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure, "opencode stopped after a tool call without an answer")

    def test_non_zero_exit_without_events_quotes_stderr(self):
        reply = self.provider.read_executor(finished(
            "", returncode=1, stderr="Error: ripgrep execution failed\n"))
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure, "opencode failed (exit 1): no error event; stderr: "
                                        "Error: ripgrep execution failed")
        self.assertIsNone(reply.trace)

    def test_non_zero_exit_after_a_finished_answer_is_a_failure(self):
        reply = self.provider.read_executor(finished(sample(OPENCODE_PLAIN), returncode=1))
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure, "opencode failed (exit 1): no error event")

    def test_exit_0_with_no_output_or_no_finished_step(self):
        reply = self.provider.read_executor(finished(""))
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure, "opencode printed no events")
        self.assertIsNone(reply.trace)
        plain = "FAKE_OK\n"  # --format default prints text, no events
        self.assertEqual(self.provider.read_executor(finished(plain)).failure,
                         "opencode printed no events")
        started = jsonl(events_of(OPENCODE_PLAIN)[:2])
        reply = self.provider.read_executor(finished(started))
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure, "opencode finished no step")
        self.assert_absent(reply.metrics["num_turns"], "finished no step")

    def test_a_timeout_keeps_the_trace_and_the_wall_clock(self):
        # The contract: a 5xx is retried for over a minute; the runner's timeout ends it.
        stdout = jsonl(events_of(OPENCODE_BASH)[:3])
        reply = self.provider.read_executor(finished(stdout, returncode=-9, timed_out=True,
                                                     duration_s=30.0))
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure, "timed out")
        self.assertEqual([c["tool"] for c in reply.trace], ["bash"])
        self.assert_captured(reply.metrics["time_seconds"], 30.0, "runner wall clock")
        # the one step that finished is counted as reported
        self.assert_captured(reply.metrics["num_turns"], 1, "step_finish")

    def test_a_process_that_could_not_start_has_no_time(self):
        reply = self.provider.read_executor(finished(
            "", returncode=None, duration_s=0.0003, spawn_error="FileNotFoundError: opencode"))
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure, "could not start: FileNotFoundError: opencode")
        self.assert_absent(reply.metrics["time_seconds"], "never started")
        self.assert_absent(reply.metrics["tokens"])

    def test_a_step_missing_a_token_field_makes_it_and_the_total_absent(self):
        events = events_of(OPENCODE_BASH)
        del events[2]["part"]["tokens"]["cache"]
        events[5]["part"]["tokens"]["input"] = -4
        reply = self.provider.read_executor(finished(jsonl(events)))
        self.assertTrue(reply.ok, reply.failure)
        m = reply.metrics
        self.assert_metric_shapes(m)
        self.assert_absent(m["cache_read_input_tokens"], "no tokens.cache.read")
        self.assert_absent(m["input_tokens"], "a negative amount")
        self.assertTrue(m["input_tokens"].implausible)
        self.assert_absent(m["tokens"], "token counts are missing")
        self.assert_captured(m["output_tokens"], 14, "tokens.output")


class OpenCodeGraderTest(MetricAsserts):
    def setUp(self):
        self.provider = runner.OpenCodeProvider()

    def test_recorded_grader_reply_in_another_shape_holds_no_verdicts(self):
        # `run` has no structured output: the last text part is the answer, checked here.
        reply = self.provider.read_grader(finished(sample(OPENCODE_GRADER)), MISSING)
        self.assertTrue(reply.ok, reply.failure)
        self.assertEqual(reply.text, '{"score": 0.8, "reason": "ok"}')
        self.assertIsNone(reply.structured)
        self.assertIsNone(runner.parse_verdict_payload(reply.structured, reply.text))
        self.assert_metric_shapes(reply.metrics)
        self.assert_captured(reply.metrics["tokens"], 18, "opencode tokens")

    def test_a_verdict_list_in_the_last_text_part_is_found(self):
        events = events_of(OPENCODE_GRADER)
        events[1]["part"]["text"] = "```json\n" + json.dumps(VERDICTS) + "\n```"
        reply = self.provider.read_grader(finished(jsonl(events)), MISSING)
        self.assertTrue(reply.ok, reply.failure)
        self.assertEqual(runner.parse_verdict_payload(reply.structured, reply.text), VERDICTS)

    def test_a_failed_grader_has_no_answer(self):
        reply = self.provider.read_grader(finished(sample(OPENCODE_400), returncode=1), MISSING)
        self.assertFalse(reply.ok)
        self.assertEqual(reply.text, "")
        self.assertIn("fake bad request", reply.failure)

    def test_a_grader_tool_call_that_was_refused_is_no_verdict(self):
        reply = self.provider.read_grader(finished(sample(OPENCODE_REJECTED)), MISSING)
        self.assertFalse(reply.ok)
        self.assertIn("refused", reply.failure)


class RegisteredTest(unittest.TestCase):
    def test_both_adapters_are_registered_by_name(self):
        self.assertIs(runner.PROVIDERS["gemini"], runner.GeminiProvider)
        self.assertIs(runner.PROVIDERS["opencode"], runner.OpenCodeProvider)
        for kind in (runner.GeminiProvider, runner.OpenCodeProvider):
            with self.subTest(provider=kind.name):
                self.assertTrue(kind.fresh_home)
                self.assertTrue(kind.accepts_settings)
                self.assertFalse(kind.reports_cost)
                self.assertEqual(kind.skills_folder, ".agents/skills")


if __name__ == "__main__":
    unittest.main()
