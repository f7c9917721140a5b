"""Provider parsing: recorded claude and codex output read into an AgentReply.

Each test builds the ProcessResult that run_process would return for one agent process,
from output the real CLIs printed (tests/data/cli-samples, see tests/data/README.md), or
from those samples changed into the error shapes the CLI contracts describe.
"""

from __future__ import annotations

import json
import math
import unittest
from pathlib import Path

from tests.helpers import TempDir, runner

SAMPLES = Path(__file__).resolve().parent.parent / "data" / "cli-samples"
MISSING = Path("/nonexistent/skill-eval-test/last_message.txt")

CLAUDE_STREAM = "claude_stream_json_executor.jsonl"
CLAUDE_ENVELOPE = "claude_json_envelope.json"
CODEX_EXECUTOR = "codex_exec_json_executor.jsonl"
CODEX_GRADER = "codex_exec_json_grader.jsonl"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text(encoding="utf-8")


def sample_lines(name: str) -> list[str]:
    return sample(name).splitlines()


def finished(stdout: str, returncode: int | None = 0, stderr: str = "",
             duration_s: float = 2.5, **flags) -> runner.ProcessResult:
    """A ProcessResult as run_process returns it for one agent process."""
    return runner.ProcessResult(argv=["agent"], returncode=returncode, stdout=stdout,
                                stderr=stderr, duration_s=duration_s,
                                stdout_bytes=len(stdout.encode("utf-8")), **flags)


def envelope(**changes) -> dict:
    """The recorded claude json envelope with some fields changed (None removes one)."""
    data = json.loads(sample(CLAUDE_ENVELOPE))
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def codex_events(*events: dict) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


CODEX_START = ({"type": "thread.started", "thread_id": "01a2297d-0000-7000-8000-000000000000"},
               {"type": "turn.started"})


class MetricAsserts(unittest.TestCase):
    """Every metric is either captured (a number and its source) or absent with a reason."""

    def assert_metric_shapes(self, metrics: dict) -> None:
        self.assertTrue(metrics)
        for name, metric in metrics.items():
            with self.subTest(metric=name):
                self.assertIsInstance(metric, runner.Metric)
                if metric.value is None:
                    self.assertTrue(metric.absent_reason, metric)
                    self.assertIsNone(metric.source)
                else:
                    self.assertIsInstance(metric.value, (int, float))
                    self.assertNotIsInstance(metric.value, bool)
                    self.assertTrue(metric.source, metric)
                    self.assertIsNone(metric.absent_reason)

    def assert_captured(self, metric: runner.Metric, value: float, source_part: str) -> None:
        self.assertEqual(metric.value, value)
        self.assertIn(source_part, metric.source)

    def assert_absent(self, metric: runner.Metric, reason_part: str = "") -> None:
        self.assertIsNone(metric.value, "an absent metric must not read as a number (0)")
        self.assertIn(reason_part, metric.absent_reason)


# ---------------------------------------------------------------------------
# shared parsing helpers
# ---------------------------------------------------------------------------


class ParseJsonLinesTest(unittest.TestCase):
    def test_reads_every_event_of_a_recorded_stream_in_order(self):
        events = runner.parse_json_lines(sample(CLAUDE_STREAM))
        self.assertEqual([e["type"] for e in events],
                         ["system", "assistant", "user", "assistant", "user", "assistant",
                          "result"])

    def test_skips_lines_that_are_not_json_objects(self):
        text = ("Reading additional input from stdin...\n"
                "\n"
                '  {"type": "a"}  \n'
                "[1, 2]\n"
                '"a string"\n'
                '{"type": "cut off in the mid\n'
                "{not json}\n"
                '{"type": "b"}')
        self.assertEqual(runner.parse_json_lines(text), [{"type": "a"}, {"type": "b"}])

    def test_empty_output_gives_no_events(self):
        self.assertEqual(runner.parse_json_lines(""), [])

    def test_a_line_separator_inside_a_string_cannot_hide_a_tool_call(self):
        # node and serde_json print U+2028, U+2029 and U+0085 unescaped; an executor that
        # puts one in its command must not drop that command from the trace (not_ran, max_*).
        use = {"type": "tool_use", "id": "t1", "name": "Bash",
               "input": {"command": "git push \u2028\u2029\x85 # hidden"}}
        stream = "\r\n".join(json.dumps(e, ensure_ascii=False) for e in (
            {"type": "system", "session_id": "s"},
            {"type": "assistant", "message": {"content": [use]}})) + "\r\n"
        reply = runner.PROVIDERS["claude"]().read_executor(finished(stream))
        self.assertEqual([c["input"] for c in reply.trace], [use["input"]])
        self.assertEqual(reply.actions.count("command"), 1)
        self.assertEqual(len(runner.parse_json_lines(stream)), 2)


class ProcessFailureTest(unittest.TestCase):
    def test_a_process_that_ran_to_the_end_is_no_process_failure(self):
        self.assertIsNone(runner._process_failure(finished("", returncode=0)))
        # a non-zero exit is for the provider to explain from what the CLI printed
        self.assertIsNone(runner._process_failure(finished("", returncode=1)))

    def test_spawn_error_timeout_and_cancel_are_named(self):
        self.assertEqual(runner._process_failure(
            finished("", returncode=None, spawn_error="FileNotFoundError: claude")),
            "could not start: FileNotFoundError: claude")
        self.assertEqual(runner._process_failure(finished("", returncode=-9, timed_out=True)),
                         "timed out")
        self.assertEqual(runner._process_failure(finished("", returncode=-15, cancelled=True)),
                         "cancelled")

    def test_could_not_start_wins_over_the_other_flags(self):
        result = finished("", returncode=None, spawn_error="OSError: x", timed_out=True,
                          cancelled=True)
        self.assertTrue(runner._process_failure(result).startswith("could not start"))


# ---------------------------------------------------------------------------
# claude
# ---------------------------------------------------------------------------


class ClaudeExecutorTest(MetricAsserts):
    def setUp(self):
        self.provider = runner.ClaudeProvider()

    def test_recorded_stream_gives_text_metrics_and_tool_calls(self):
        reply = self.provider.read_executor(finished(sample(CLAUDE_STREAM)))
        self.assertTrue(reply.ok)
        self.assertEqual(reply.failure, "")
        self.assertEqual(reply.text, "done")
        self.assertEqual(reply.trace, [
            {"tool": "Write", "input": {"file_path": "sandbox_claude_exec/out.txt",
                                        "content": "hello from executor\n"}, "event": 1},
            {"tool": "Bash", "input": {"command": "cat out.txt", "description": "show"},
             "event": 3},
        ])  # event: the call's place among the stream's JSON events
        self.assertEqual(reply.permission_denials, [])
        m = reply.metrics
        self.assert_metric_shapes(m)
        self.assert_captured(m["input_tokens"], 300, "usage.input_tokens")
        self.assert_captured(m["output_tokens"], 60, "usage.output_tokens")
        self.assert_captured(m["num_turns"], 3, "num_turns")
        self.assert_captured(m["duration_ms"], 396, "duration_ms")
        self.assert_captured(m["time_seconds"], 0.396, "duration_ms")
        self.assert_captured(m["total_cost_usd"], 0.003, "total_cost_usd")
        # a reported zero is a captured zero, not an absent value
        self.assert_captured(m["cache_read_input_tokens"], 0, "usage.cache_read_input_tokens")
        self.assert_captured(m["tokens"], 300 + 60, "input + output")

    def test_the_envelope_not_the_runner_clock_gives_the_time(self):
        reply = self.provider.read_executor(finished(sample(CLAUDE_STREAM), duration_s=99.0))
        self.assertEqual(reply.metrics["time_seconds"].value, 0.396)

    def test_recorded_trace_shows_no_skill_read(self):
        reply = self.provider.read_executor(finished(sample(CLAUDE_STREAM)))
        evidence = runner._skill_read_evidence(reply.trace, "demo", "with_skill").to_json()
        self.assertEqual(evidence["state"], "not_read")
        self.assertEqual(evidence["calls"], 2)

    def test_a_read_of_the_skill_file_in_the_stream_counts_as_read(self):
        lines = sample_lines(CLAUDE_STREAM)
        call = json.loads(lines[1])
        call["message"]["content"] = [{"type": "tool_use", "id": "toolu_1", "name": "Read",
                                       "input": {"file_path": "/tmp/sb/skills/demo/SKILL.md"}}]
        lines.insert(1, json.dumps(call))
        reply = self.provider.read_executor(finished("\n".join(lines) + "\n"))
        evidence = runner._skill_read_evidence(reply.trace, "demo", "with_skill").to_json()
        self.assertEqual(evidence["state"], "read")
        self.assertEqual(evidence["reads"], ["Read"])
        other = runner._skill_read_evidence(reply.trace, "other", "with_skill").to_json()
        self.assertEqual(other["state"], "not_read")

    def test_stream_cut_before_the_result_envelope_fails_with_every_metric_absent(self):
        # The process ended (exit 0) but the last line, the result envelope, never came.
        stdout = "\n".join(sample_lines(CLAUDE_STREAM)[:-1]) + "\n"
        reply = self.provider.read_executor(finished(stdout))
        self.assertFalse(reply.ok)
        self.assertIn("exited 0 without a result envelope", reply.failure)
        self.assertEqual(reply.text, "")
        self.assert_metric_shapes(reply.metrics)
        for name, metric in reply.metrics.items():
            with self.subTest(metric=name):
                self.assert_absent(metric)
        # the tool calls before the cut are still evidence
        self.assertEqual([c["tool"] for c in reply.trace], ["Write", "Bash"])

    def test_stream_cut_inside_the_result_line_is_not_read_as_an_envelope(self):
        lines = sample_lines(CLAUDE_STREAM)
        stdout = "\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2]
        reply = self.provider.read_executor(finished(stdout, returncode=-9, timed_out=True))
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure, "timed out")
        self.assert_absent(reply.metrics["tokens"])
        self.assertIn("timed out", reply.metrics["input_tokens"].absent_reason)

    def test_stream_cut_in_the_middle_by_the_runner_still_reads_the_envelope(self):
        # run_process keeps the head and the tail of a huge stream and marks the gap.
        lines = sample_lines(CLAUDE_STREAM)
        stdout = ("\n".join(lines[:2]) + "\n" + lines[2][:40]
                  + "\n[... output cut by skill-eval ...]\n" + lines[4][-30:] + "\n"
                  + "\n".join(lines[5:]) + "\n")
        reply = self.provider.read_executor(finished(stdout, stdout_truncated=True))
        self.assertTrue(reply.ok, reply.failure)
        self.assertEqual(reply.text, "done")
        self.assertEqual(reply.metrics["tokens"].value, 360)
        self.assertEqual([c["tool"] for c in reply.trace], ["Write"])

    def test_is_error_envelope_with_exit_1_fails_although_subtype_says_success(self):
        # The contract: an HTTP 500 from the API ends with subtype "success", is_error true,
        # exit code 1.
        lines = sample_lines(CLAUDE_STREAM)
        bad = json.loads(lines[-1])
        bad.update(is_error=True, api_error_status=500,
                   result="API Error: 500 Internal Server Error")
        stdout = "\n".join([lines[0], json.dumps(bad)]) + "\n"
        reply = self.provider.read_executor(finished(stdout, returncode=1))
        self.assertFalse(reply.ok)
        self.assertIn("exit 1", reply.failure)
        self.assertIn("subtype 'success'", reply.failure)
        self.assertIn("api_error_status 500", reply.failure)
        self.assertIn("API Error: 500 Internal Server Error", reply.failure)
        # the envelope still reports what was spent
        self.assert_captured(reply.metrics["input_tokens"], 300, "usage.input_tokens")
        self.assertEqual(reply.trace, [])

    def test_is_error_decides_even_with_exit_0(self):
        stdout = json.dumps(envelope(is_error=True, result="API Error: 400 bad request"))
        reply = self.provider.read_executor(finished(stdout, returncode=0))
        self.assertFalse(reply.ok)
        self.assertIn("API Error: 400 bad request", reply.failure)

    def test_non_zero_exit_fails_even_with_a_clean_envelope(self):
        reply = self.provider.read_executor(finished(sample(CLAUDE_ENVELOPE), returncode=2))
        self.assertFalse(reply.ok)
        self.assertIn("exit 2", reply.failure)

    def test_error_subtype_without_result_names_the_errors(self):
        stdout = json.dumps(envelope(
            subtype="error_max_structured_output_retries", is_error=True, result=None,
            errors=["Failed to provide valid structured output after 5 attempts"]))
        reply = self.provider.read_executor(finished(stdout, returncode=1))
        self.assertFalse(reply.ok)
        self.assertEqual(reply.text, "")
        self.assertIn("error_max_structured_output_retries", reply.failure)
        self.assertIn("Failed to provide valid structured output after 5 attempts", reply.failure)

    def test_output_that_is_not_json_fails_and_quotes_the_stderr_error(self):
        result = finished("", returncode=1, stderr=(
            "some banner\nError: When using --print, --output-format=stream-json requires "
            "--verbose\nlast line\n"))
        reply = self.provider.read_executor(result)
        self.assertFalse(reply.ok)
        self.assertIn("exited 1 without a result envelope", reply.failure)
        self.assertIn("stderr: Error: When using --print", reply.failure)
        self.assertIsNone(reply.trace, "no events: no trace was captured, not an empty one")
        for metric in reply.metrics.values():
            self.assert_absent(metric)
        self.assertEqual(runner._skill_read_evidence(reply.trace, "demo", "with_skill").state,
                         "unknown")

    def test_plain_text_output_with_exit_0_is_a_failure_not_an_answer(self):
        reply = self.provider.read_executor(finished("hi from fake anthropic\n"))
        self.assertFalse(reply.ok)
        self.assertIn("without a result envelope", reply.failure)

    def test_a_process_that_could_not_start(self):
        reply = self.provider.read_executor(finished(
            "", returncode=None, duration_s=0.0, spawn_error="FileNotFoundError: claude"))
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure, "could not start: FileNotFoundError: claude")
        self.assert_absent(reply.metrics["time_seconds"], "could not start")

    def test_permission_denials_are_passed_on(self):
        denial = {"tool_name": "Write", "tool_use_id": "toolu_9",
                  "tool_input": {"file_path": "/etc/x"}}
        reply = self.provider.read_executor(finished(json.dumps(envelope(
            permission_denials=[denial]))))
        self.assertTrue(reply.ok)
        self.assertEqual(reply.permission_denials, [denial])


class ClaudeGraderTest(MetricAsserts):
    def setUp(self):
        self.provider = runner.ClaudeProvider()
        self.verdicts = {"verdicts": [{"id": 1, "passed": True, "evidence": "says hi"}]}

    def test_structured_output_is_the_reply(self):
        # The contract: a schema run adds structured_output and puts the same object,
        # compact, in result.
        text = json.dumps(self.verdicts, separators=(",", ":"))
        stdout = json.dumps(envelope(structured_output=self.verdicts, result=text, num_turns=2))
        reply = self.provider.read_grader(finished(stdout), MISSING)
        self.assertTrue(reply.ok, reply.failure)
        self.assertEqual(reply.structured, self.verdicts)
        self.assertEqual(reply.text, text)
        self.assert_metric_shapes(reply.metrics)
        self.assert_captured(reply.metrics["tokens"], 120, "claude envelope usage")
        self.assertEqual(runner.parse_verdict_payload(reply.structured, reply.text),
                         self.verdicts)

    def test_recorded_plain_envelope_has_no_structured_output(self):
        reply = self.provider.read_grader(finished(sample(CLAUDE_ENVELOPE)), MISSING)
        self.assertTrue(reply.ok)
        self.assertIsNone(reply.structured)
        self.assertEqual(reply.text, "hi from fake anthropic")
        self.assertIsNone(runner.parse_verdict_payload(reply.structured, reply.text))

    def test_a_stream_instead_of_one_object_is_read_from_its_last_result_line(self):
        reply = self.provider.read_grader(finished(sample(CLAUDE_STREAM)), MISSING)
        self.assertTrue(reply.ok)
        self.assertEqual(reply.text, "done")
        self.assertEqual(reply.metrics["num_turns"].value, 3)

    def test_schema_never_satisfied_is_a_failure_without_structured_output(self):
        stdout = json.dumps(envelope(
            subtype="error_max_structured_output_retries", is_error=True, result=None,
            errors=["Failed to provide valid structured output after 5 attempts"]))
        reply = self.provider.read_grader(finished(stdout, returncode=1), MISSING)
        self.assertFalse(reply.ok)
        self.assertIsNone(reply.structured)
        self.assertIn("after 5 attempts", reply.failure)

    def test_not_json_fails(self):
        reply = self.provider.read_grader(
            finished("API Error: Unable to connect\n", returncode=1), MISSING)
        self.assertFalse(reply.ok)
        self.assertIn("exited 1 without a result envelope", reply.failure)
        self.assertIsNone(reply.structured)
        for metric in reply.metrics.values():
            self.assert_absent(metric)


class ClaudeMetricsTest(MetricAsserts):
    def test_no_envelope_makes_every_metric_absent_with_the_reason(self):
        metrics = runner._claude_metrics(None, "timed out")
        self.assertEqual(set(metrics), {
            "duration_ms", "num_turns", "input_tokens", "output_tokens",
            "cache_read_input_tokens", "cache_creation_input_tokens", "total_cost_usd",
            "time_seconds", "tokens"})
        self.assert_metric_shapes(metrics)
        for metric in metrics.values():
            self.assertIsNone(metric.value)
        self.assertIn("timed out", metrics["input_tokens"].absent_reason)

    def test_missing_or_non_numeric_fields_are_absent_not_zero(self):
        data = envelope(total_cost_usd="0.001", duration_ms=True)
        del data["usage"]["cache_creation_input_tokens"]
        metrics = runner._claude_metrics(data, "")
        self.assert_metric_shapes(metrics)
        self.assert_absent(metrics["total_cost_usd"], "total_cost_usd")
        self.assert_absent(metrics["duration_ms"], "duration_ms")
        self.assert_absent(metrics["time_seconds"])
        self.assert_absent(metrics["cache_creation_input_tokens"], "cache_creation_input_tokens")
        # one missing part makes the total unknown rather than too small
        self.assert_absent(metrics["tokens"])
        self.assert_captured(metrics["input_tokens"], 100, "usage.input_tokens")

    def test_non_finite_numbers_are_absent(self):
        metrics = runner._claude_metrics(envelope(total_cost_usd=math.inf), "")
        self.assert_absent(metrics["total_cost_usd"])

    def test_tokens_add_cache_reads_and_writes(self):
        data = envelope()
        data["usage"].update(cache_read_input_tokens=7, cache_creation_input_tokens=5)
        self.assertEqual(runner._claude_metrics(data, "")["tokens"].value, 100 + 20 + 7 + 5)


# ---------------------------------------------------------------------------
# codex
# ---------------------------------------------------------------------------


class CodexExecutorTest(MetricAsserts):
    def setUp(self):
        self.provider = runner.CodexProvider()

    def test_recorded_stream_gives_text_metrics_and_tool_calls(self):
        reply = self.provider.read_executor(finished(sample(CODEX_EXECUTOR), duration_s=0.4141))
        self.assertTrue(reply.ok, reply.failure)
        self.assertEqual(reply.failure, "")
        self.assertEqual(reply.text, "done")
        # completed items only: an item.started twin is not a second call
        self.assertEqual(reply.trace, [
            {"tool": "command_execution", "input": {
                "command": "/bin/bash -lc 'echo hello-from-codex > out.txt && cat out.txt'"},
             "event": 3},
            {"tool": "file_change", "input": {"paths": ["sandbox_codex_exec/hello.py"]},
             "event": 5},
        ])
        m = reply.metrics
        self.assert_metric_shapes(m)
        self.assert_captured(m["input_tokens"], 360, "turn.completed usage.input_tokens")
        self.assert_captured(m["cached_input_tokens"], 60, "usage.cached_input_tokens")
        self.assert_captured(m["output_tokens"], 45, "usage.output_tokens")
        self.assert_captured(m["reasoning_output_tokens"], 15, "usage.reasoning_output_tokens")
        self.assert_captured(m["tokens"], 360 + 45, "input (incl. cached) + output")
        # codex exec is one turn per call: counting turn.completed would measure nothing.
        self.assert_absent(m["num_turns"], "one turn per call")
        self.assert_captured(m["time_seconds"], 0.414, "runner wall clock")
        self.assert_absent(m["total_cost_usd"], "no cost")

    def test_recorded_trace_and_a_skill_read_through_the_shell(self):
        reply = self.provider.read_executor(finished(sample(CODEX_EXECUTOR)))
        self.assertEqual(runner._skill_read_evidence(reply.trace, "demo", "with_skill").state,
                         "not_read")
        lines = sample_lines(CODEX_EXECUTOR)
        read = {"type": "item.completed", "item": {
            "id": "item_9", "type": "command_execution",
            "command": "/bin/bash -lc 'cat skills/demo/SKILL.md'", "aggregated_output": "",
            "exit_code": 0, "status": "completed"}}
        lines.insert(2, json.dumps(read))
        reply = self.provider.read_executor(finished("\n".join(lines) + "\n"))
        evidence = runner._skill_read_evidence(reply.trace, "demo", "with_skill").to_json()
        self.assertEqual(evidence["state"], "read")
        self.assertEqual(evidence["reads"], ["command_execution"])
        self.assertEqual(evidence["calls"], 3)

    def test_usage_of_several_turns_is_summed(self):
        lines = sample_lines(CODEX_EXECUTOR)
        stdout = "\n".join(lines + [lines[-1]]) + "\n"
        reply = self.provider.read_executor(finished(stdout))
        self.assertTrue(reply.ok)
        self.assertEqual(reply.metrics["input_tokens"].value, 720)
        self.assertIsNone(reply.metrics["num_turns"].value)
        self.assertEqual(reply.metrics["tokens"].value, 810)

    def test_the_last_agent_message_is_the_answer(self):
        stdout = codex_events(
            *CODEX_START,
            {"type": "item.completed", "item": {"id": "item_0", "type": "agent_message",
                                                "text": "first"}},
            {"type": "item.completed", "item": {"id": "item_1", "type": "reasoning",
                                                "text": "thinking"}},
            {"type": "item.completed", "item": {"id": "item_2", "type": "agent_message",
                                                "text": "final"}},
            {"type": "turn.completed", "usage": {"input_tokens": 1, "output_tokens": 1}})
        reply = self.provider.read_executor(finished(stdout))
        self.assertEqual(reply.text, "final")
        self.assertEqual(reply.trace, [])

    def test_turn_failed_is_a_failure_that_quotes_the_message(self):
        # The contract: HTTP 400 gives an `error` event, then `turn.failed`, exit 1.
        stdout = codex_events(
            *CODEX_START,
            {"type": "error", "message": "unexpected status 400 Bad Request: no such model"},
            {"type": "turn.failed",
             "error": {"message": "unexpected status 400 Bad Request: no such model"}})
        reply = self.provider.read_executor(finished(stdout, returncode=1))
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure,
                         "codex failed (exit 1): unexpected status 400 Bad Request: no such model")
        self.assertEqual(reply.text, "")
        self.assertEqual(reply.trace, [])
        m = reply.metrics
        self.assert_metric_shapes(m)
        self.assert_absent(m["input_tokens"], "codex failed (exit 1)")
        self.assert_absent(m["tokens"])
        self.assert_absent(m["num_turns"])

    def test_turn_failed_fails_the_run_even_with_exit_0(self):
        stdout = codex_events(
            *CODEX_START,
            {"type": "turn.completed", "usage": {"input_tokens": 4, "output_tokens": 2}},
            {"type": "turn.failed", "error": {"message": "stream disconnected"}})
        reply = self.provider.read_executor(finished(stdout, returncode=0))
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure, "codex failed (exit 0): stream disconnected")

    def test_non_zero_exit_without_events_quotes_stderr(self):
        stderr = ("Error loading config.toml: `wire_api = \"chat\"` is no longer supported.\n"
                  "more detail\n")
        reply = self.provider.read_executor(finished("", returncode=1, stderr=stderr))
        self.assertFalse(reply.ok)
        self.assertIn("codex failed (exit 1): no turn.failed event", reply.failure)
        self.assertIn("stderr: Error loading config.toml", reply.failure)
        self.assertIsNone(reply.trace)

    def test_non_zero_exit_after_a_completed_turn_is_still_a_failure(self):
        reply = self.provider.read_executor(finished(sample(CODEX_EXECUTOR), returncode=1))
        self.assertFalse(reply.ok)
        self.assertIn("exit 1", reply.failure)

    def test_plain_text_output_is_not_an_answer(self):
        # Without --json codex prints only the final message; the runner cannot use that.
        reply = self.provider.read_executor(finished("done\n"))
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure, "codex printed no events")
        self.assertIsNone(reply.trace)
        self.assert_absent(reply.metrics["tokens"])

    def test_stream_cut_before_turn_completed_fails_and_keeps_the_trace(self):
        stdout = "\n".join(sample_lines(CODEX_EXECUTOR)[:-1]) + "\n"
        reply = self.provider.read_executor(finished(stdout))
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure, "codex stream ended without turn.completed")
        self.assertEqual([c["tool"] for c in reply.trace], ["command_execution", "file_change"])
        self.assert_absent(reply.metrics["input_tokens"], "without turn.completed")
        self.assert_absent(reply.metrics["num_turns"])

    def test_a_timeout_while_reconnecting(self):
        # The contract: an unreachable model makes codex print `error` events forever.
        stdout = codex_events(*CODEX_START, *[
            {"type": "error", "message": "Reconnecting... waiting for network"}] * 3)
        reply = self.provider.read_executor(finished(stdout, returncode=-9, timed_out=True,
                                                     duration_s=3.0))
        self.assertFalse(reply.ok)
        self.assertEqual(reply.failure, "timed out")
        self.assert_absent(reply.metrics["tokens"])
        self.assert_captured(reply.metrics["time_seconds"], 3.0, "runner wall clock")

    def test_a_non_fatal_error_item_does_not_fail_the_run(self):
        lines = sample_lines(CODEX_EXECUTOR)
        warning = {"type": "item.completed", "item": {
            "id": "item_x", "type": "error",
            "message": "Model metadata for `gpt-5.1-codex` not found."}}
        lines.insert(2, json.dumps(warning))
        reply = self.provider.read_executor(finished("\n".join(lines) + "\n"))
        self.assertTrue(reply.ok, reply.failure)
        self.assertEqual(reply.text, "done")

    def test_a_usage_field_missing_from_one_turn_is_absent_not_partly_summed(self):
        stdout = codex_events(
            *CODEX_START,
            {"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 2,
                                                 "reasoning_output_tokens": 1}},
            {"type": "turn.completed", "usage": {"input_tokens": 5, "output_tokens": 1}})
        reply = self.provider.read_executor(finished(stdout))
        self.assertTrue(reply.ok)
        self.assert_captured(reply.metrics["input_tokens"], 15, "usage.input_tokens")
        self.assert_absent(reply.metrics["reasoning_output_tokens"], "reasoning_output_tokens")
        self.assert_absent(reply.metrics["cached_input_tokens"], "cached_input_tokens")
        self.assert_captured(reply.metrics["tokens"], 18, "codex usage")


class CodexGraderTest(unittest.TestCase):
    def setUp(self):
        self.provider = runner.CodexProvider()
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)

    def test_recorded_grader_reply_in_another_shape_holds_no_verdicts(self):
        # codex does not check --output-schema; this recorded answer is not our verdict list.
        reply = self.provider.read_grader(finished(sample(CODEX_GRADER)), MISSING)
        self.assertTrue(reply.ok, reply.failure)
        self.assertEqual(json.loads(reply.text), {"passed": True, "score": 1.0, "reason": "ok"})
        self.assertIsNone(reply.structured)
        self.assertEqual(reply.metrics["tokens"].value, 135)
        self.assertIsNone(runner.parse_verdict_payload(reply.structured, reply.text))

    def test_a_verdict_list_in_the_agent_message_is_found(self):
        answer = {"verdicts": [{"id": 1, "passed": False, "evidence": "no greeting"}]}
        stdout = sample(CODEX_GRADER).replace(
            json.dumps(json.dumps({"passed": True, "score": 1.0, "reason": "ok"})),
            json.dumps(json.dumps(answer)))
        self.assertNotEqual(stdout, sample(CODEX_GRADER))
        reply = self.provider.read_grader(finished(stdout), MISSING)
        self.assertEqual(runner.parse_verdict_payload(reply.structured, reply.text), answer)

    def test_empty_agent_message_falls_back_to_the_last_message_file(self):
        last = self.tmp.path / "grader_last_message.txt"
        last.write_text('{"verdicts": []}', encoding="utf-8")
        stdout = codex_events(*CODEX_START, {"type": "turn.completed", "usage": {
            "input_tokens": 3, "output_tokens": 1}})
        reply = self.provider.read_grader(finished(stdout), last)
        self.assertTrue(reply.ok)
        self.assertEqual(reply.text, '{"verdicts": []}')
        self.assertEqual(self.provider.read_grader(finished(stdout), MISSING).text, "")

    def test_a_failed_grader_does_not_read_the_last_message_file(self):
        last = self.tmp.path / "grader_last_message.txt"
        last.write_text("stale", encoding="utf-8")
        stdout = codex_events(*CODEX_START, {"type": "turn.failed",
                                             "error": {"message": "boom"}})
        reply = self.provider.read_grader(finished(stdout, returncode=1), last)
        self.assertFalse(reply.ok)
        self.assertEqual(reply.text, "")


class CodexPiecesTest(MetricAsserts):
    def test_trace_entries(self):
        self.assertEqual(runner._codex_trace_entry(
            {"type": "command_execution", "command": "ls", "aggregated_output": "x"}),
            {"tool": "command_execution", "input": {"command": "ls"}})
        self.assertEqual(runner._codex_trace_entry(
            {"type": "file_change", "changes": [{"path": "a.py", "kind": "add"}, "junk",
                                                {"path": "b.py", "kind": "delete"}]}),
            {"tool": "file_change", "input": {"paths": ["a.py", "b.py"]}})
        self.assertEqual(runner._codex_trace_entry({"type": "file_change", "changes": None}),
                         {"tool": "file_change", "input": {"paths": []}})

    def test_no_usage_makes_tokens_absent_but_keeps_the_wall_clock(self):
        metrics = runner._codex_metrics([], finished("", duration_s=1.23456), "timed out")
        self.assert_metric_shapes(metrics)
        for name in ("input_tokens", "cached_input_tokens", "output_tokens",
                     "reasoning_output_tokens"):
            self.assert_absent(metrics[name], "timed out")
        self.assert_absent(metrics["tokens"])
        self.assert_absent(metrics["num_turns"])
        self.assert_captured(metrics["time_seconds"], 1.235, "runner wall clock")

    def test_non_numeric_usage_is_absent(self):
        usage = {"input_tokens": "12", "cached_input_tokens": 0, "output_tokens": None,
                 "reasoning_output_tokens": False}
        metrics = runner._codex_metrics([usage], finished(""), None)
        self.assert_metric_shapes(metrics)
        self.assert_absent(metrics["input_tokens"])
        self.assert_absent(metrics["output_tokens"])
        self.assert_absent(metrics["reasoning_output_tokens"])
        self.assert_captured(metrics["cached_input_tokens"], 0, "cached_input_tokens")
        self.assert_absent(metrics["tokens"])


class FoundByDirectTestsTest(MetricAsserts):
    """Two faults these direct tests found (both fixed); kept as regression tests."""

    def test_codex_run_that_never_started_has_no_wall_clock_time(self):
        # time_seconds was captured as 0.0 ("runner wall clock") for a codex process that
        # could not be started; claude marks the same metric absent.
        reply = runner.CodexProvider().read_executor(finished(
            "", returncode=None, duration_s=0.0002, spawn_error="FileNotFoundError: codex"))
        self.assertFalse(reply.ok)
        self.assert_absent(reply.metrics["time_seconds"])

    def test_claude_grader_needs_a_result_envelope_not_any_json_object(self):
        # read_executor refuses a lone non-result object; read_grader took it as the
        # envelope and called the run ok, so a broken grader read as unparseable, not failed.
        stdout = sample_lines(CLAUDE_STREAM)[0]
        executor = runner.ClaudeProvider().read_executor(finished(stdout))
        self.assertFalse(executor.ok)
        grader = runner.ClaudeProvider().read_grader(finished(stdout), MISSING)
        self.assertFalse(grader.ok)
        self.assertIn("without a result envelope", grader.failure)
