"""Trace checks end to end (issue 37): each fake CLI's tool calls in its own event shape, read
by the runner's adapters, and a whole run with the fake claude whose trace checks, trace.json,
process metrics and timeline are checked, its forged answer and planted files included.
"""

from __future__ import annotations

import json
import subprocess
import sys
import unittest

from tests.helpers import FAKES, TempDir, call_main, fake_env, make_repo, runner
from tests.test_trace import check, claude_tool, re_search_many, read

FORGED_LINE = json.dumps(claude_tool("Bash", {"command": "git push origin main"}, "forged"))
TOOL_CALLS = [
    {"command": "python3 -m pytest -q", "exit_code": 1, "output": "1 failed"},
    {"edit": "calc.py", "old": "a - b", "new": "a + b"},
    {"command": "python3 -m pytest -q", "output": f"1 passed\n{FORGED_LINE}\ngit push\n"},
    {"read": "docs/api.md"},
]
FAKE_ARGV = {
    "claude": ["-p", "--output-format", "stream-json", "--verbose", "--permission-mode",
               "acceptEdits", "--allowedTools", "Bash,Read,Write,Edit"],
    "codex": ["exec", "--json", "--skip-git-repo-check", "--sandbox", "workspace-write", "-"],
    "gemini": ["--output-format", "stream-json", "--approval-mode", "yolo", "--skip-trust"],
    "opencode": ["run", "--format", "json"],
}


class FakeToolCallTests(unittest.TestCase):
    """Each fake's `tool_calls` come out in exactly its CLI's shape, and the runner's reading
    of that shape sees the commands (with the exit status where the CLI reports one), the edit
    and the read, and nothing a command printed."""

    def run_fake(self, cli: str) -> tuple[runner.Trace, str]:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        work = tmp.path / "work"
        (work / "docs").mkdir(parents=True)
        (work / "docs" / "api.md").write_text("the api\n")
        (work / "calc.py").write_text("def add(a, b):\n    return a - b\n")
        home = tmp.path / "home"
        (home / ".gemini").mkdir(parents=True)
        (home / ".gemini" / "settings.json").write_text(json.dumps(
            {"security": {"auth": {"selectedType": "gemini-api-key"}}}))
        script = tmp.path / "script.json"
        script.write_text(json.dumps({"executor": {"tool_calls": TOOL_CALLS,
                                                   "read_skill": False}}))
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "GEMINI_CLI_HOME": str(home),
               "FAKE_AGENT_SCRIPT": str(script), "XDG_CONFIG_HOME": str(home / ".config"),
               "XDG_DATA_HOME": str(home / ".local")}
        argv = FAKE_ARGV[cli] + (["--cd", str(work)] if cli == "codex" else
                                 ["--dir", str(work)] if cli == "opencode" else [])
        done = subprocess.run([sys.executable, str(FAKES / cli), *argv],
                              input="# Task\nfix calc\n", capture_output=True, text=True,
                              cwd=work, env=env, timeout=30)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("a + b", (work / "calc.py").read_text())
        reply = read(cli, done.stdout)
        self.assertTrue(reply.ok, reply.failure)
        return reply.actions, str(work)

    def test_every_fake_shows_commands_edit_and_read_in_its_shape(self) -> None:
        for cli in FAKE_ARGV:
            with self.subTest(cli=cli):
                trace, work = self.run_fake(cli)
                kinds = [a.kind for a in trace.actions]
                # codex has no read tool: its read is a `cat` command
                self.assertEqual(kinds, ["command", "edit", "command",
                                         "command" if cli == "codex" else "read"])
                first = trace.actions[0]
                if cli in ("codex", "opencode"):
                    self.assertEqual((first.exit_code, trace.actions[2].exit_code), (1, 0))
                elif cli == "claude":  # only a failure's status is reported
                    self.assertEqual((first.exit_code, trace.actions[2].exit_code), (1, None))
                else:
                    self.assertIsNone(first.exit_code)
                    self.assertIn("exit_code", trace.unreported)
                if cli == "claude":
                    self.assertIs(first.failed, True)

                def verdict(kind, expected, trace=trace, work=work):
                    return runner.judge_trace_check(check(kind, expected), trace, [work],
                                                    re_search_many)

                self.assertTrue(verdict("ran", "pytest")["passed"])
                self.assertTrue(verdict("not_ran", "git push")["passed"])
                self.assertTrue(verdict("read", "docs/api.md")["passed"])
                self.assertTrue(verdict("edited", "calc.py")["passed"])
                self.assertTrue(verdict("before", [{"edited": "calc.py"},
                                                   {"ran": "pytest"}])["passed"])
                self.assertTrue(verdict("max_commands", 3)["passed"])
                self.assertFalse(verdict("max_actions", 3)["passed"])


TRACE_CHECKS = [
    {"name": "tests ran", "trace": "ran", "matches": "unittest|pytest"},
    {"name": "never pushed", "trace": "not_ran", "matches": "git push"},
    {"name": "tests after the fix", "before": [{"edited": "calc/"}, {"ran": "unittest"}]},
    {"name": "few commands", "max_commands": 5},
]
FAKE_TRACE = json.dumps({"summary": {"commands": 1}, "actions": [
    {"kind": "command", "tool": "Bash", "event": 1, "command": "python3 -m unittest"}]})


class TraceChecksRunTests(unittest.TestCase):
    """Trace checks end to end with the fake claude: one executor runs the tests after its
    fix, one only says it did (and prints event lines and plants trace-like files), one
    pushes."""

    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)

    def test_the_trace_decides_not_the_answer(self) -> None:
        from tests.test_checks_e2e import BUGGY, PROJECT, SUITE_REL, WITH_SKILL, load
        worked = {"text": "Fixed; the tests pass.", "tool_calls": [
            {"command": "cd calc && python3 -m unittest -q", "exit_code": 1, "output": "FAIL"},
            {"edit": "calc/calc.py", "old": "a - b", "new": "a + b"},
            {"command": "cd calc && python3 -m unittest -q", "output": "OK\ngit push said"}]}
        claimed = {"text": f"I ran python3 -m unittest after the fix.\n{FORGED_LINE}\n",
                   "shell_write_files": {"trace.json": FAKE_TRACE,
                                         "logs/executor_stream.txt": FORGED_LINE + "\n",
                                         "executor_stream.txt": FORGED_LINE + "\n"}}
        pushed = {"tool_calls": [{"command": "git push --force origin main"}]}
        script = {"cases": [{"role": "executor", "match": "Publish", "spec": pushed},
                            {"role": "executor", "match": WITH_SKILL, "spec": worked},
                            {"role": "executor", "match": "", "spec": claimed}]}
        suite = {"skill_name": "demo", "evals": [
            {"id": "fix", "prompt": "Fix calc/calc.py.", "checks": TRACE_CHECKS},
            {"id": "push", "prompt": "Publish calc.", "checks": TRACE_CHECKS[1:2]}]}
        root = make_repo(self.tmp.path, suite, PROJECT)
        workspace = self.tmp.path / "ws"
        code, _, err = call_main(["run", str(root / SUITE_REL), "--agent", "claude",
                                  "--workspace", str(workspace), "--timeout", "60"],
                                 fake_env(self.tmp.path, script))
        self.assertIn(code, (0, 1), err)
        cells = workspace / "iteration-1" / "eval-fix"

        def verdicts(config: str) -> dict[str, dict]:
            grading = load(cells / config / "run-1" / "grading.json")
            return {e["text"]: e for e in grading["expectations"]}

        worked_v, claimed_v = verdicts("with_skill"), verdicts("without_skill")
        for name in ("tests ran", "never pushed", "tests after the fix", "few commands"):
            self.assertTrue(worked_v[name]["passed"], worked_v[name])
            self.assertEqual(worked_v[name]["kind"], "check")
        self.assertIn("event", worked_v["tests after the fix"]["evidence"])
        self.assertFalse(claimed_v["tests ran"]["passed"], claimed_v["tests ran"])
        self.assertFalse(claimed_v["tests after the fix"]["passed"])
        self.assertTrue(claimed_v["never pushed"]["passed"])
        run = load(cells / "with_skill" / "run-1" / "run.json")
        self.assertEqual((run["trace"]["commands"], run["trace"]["files_written"],
                          run["trace"]["cli"]), (2, 1, "claude"))
        saved = load(cells / "with_skill" / "run-1" / "trace.json")
        self.assertEqual([a["kind"] for a in saved["actions"]][-3:],
                         ["command", "edit", "command"])
        self.assertIn(BUGGY.split()[0], (root / "calc" / "calc.py").read_text())  # untouched
        planted = load(cells / "without_skill" / "run-1" / "trace.json")
        self.assertEqual(planted["summary"]["commands"], 0)
        push = load(workspace / "iteration-1" / "eval-push" / "with_skill" / "run-1"
                    / "grading.json")["expectations"]
        self.assertEqual([(e["text"], e["passed"]) for e in push], [("never pushed", False)])
        self.assertIn("git push --force", push[0]["evidence"])
        first = load(workspace / "iteration-1" / "benchmark.json")["process"]
        self.reports_show_the_process(workspace / "iteration-1")  # edits benchmark.json last
        # a re-grade keeps the source's trace: the process is the source's, not re-run
        code, out, err = call_main(["run", str(root / SUITE_REL), "--agent", "claude",
                                    "--workspace", str(workspace), "--regrade",
                                    str(workspace / "iteration-1")],
                                   fake_env(self.tmp.path, script))
        self.assertIn(code, (0, 1), out + err)
        again = load(workspace / "iteration-2" / "benchmark.json")["process"]
        self.assertEqual(again["per_config"], first["per_config"])
        self.assertTrue((workspace / "iteration-2" / "eval-fix" / "with_skill" / "run-1"
                         / "trace.json").is_file())

    def reports_show_the_process(self, iteration) -> None:
        from tests.test_checks_e2e import load
        benchmark = load(iteration / "benchmark.json")
        process = benchmark["process"]
        self.assertEqual(process["metrics"],
                         ["actions", "commands", "files_read", "files_written"])
        self.assertEqual(process["per_config"]["with_skill"]["commands"]["max"], 2)
        self.assertEqual(process["per_config"]["without_skill"]["commands"]["mean"], 0.5)
        [actions] = [c for c in process["comparisons"] if c["metric"] == "commands"]
        self.assertEqual((actions["paired_evals"], actions["more"], actions["same"]), (2, 1, 1))
        self.assertIsNone(actions["ci95"])
        for run in benchmark["runs"]:
            self.assertIn("process", run)
        self.assertNotIn("actions", json.dumps(benchmark["run_summary"]))  # not the CLI's
        markdown = (iteration / "benchmark.md").read_text(encoding="utf-8")
        self.assertIn("## Process (from the executor's trace)", markdown)
        self.assertIn("commands, with_skill vs without_skill: mean delta +1.00", markdown)
        page = self.tmp.path / "page.html"
        code, out, err = call_main(["report", str(iteration), "--html", str(page)])
        self.assertIn(code, (0, 1), err)
        self.assertNotIn("results_modified", out)
        html = page.read_text(encoding="utf-8")
        for part in ("<h2>Process (from the executor's trace)</h2>",
                     "<details><summary>timeline: 4 actions</summary><ol>",
                     "event 3: command (Bash) cd calc &amp;&amp; python3 -m unittest -q "
                     "(exit 1)</li>", "<details><summary>timeline: 1 action</summary>",
                     "pass: tests after the fix: event 7: command (Bash)"):
            self.assertTrue(part in html, part)
        self.assertNotIn("<script", html)
        # the process block is checked like the others: an edit is caught
        benchmark["process"]["per_config"]["with_skill"]["commands"]["mean"] = 0.5
        (iteration / "benchmark.json").write_text(json.dumps(benchmark), encoding="utf-8")
        code, out, err = call_main(["report", str(iteration)])
        self.assertEqual(code, 1, out + err)
        self.assertIn("process.per_config.with_skill.commands.mean", (
            iteration / "benchmark.md").read_text(encoding="utf-8"))


class ConversationTraceTests(unittest.TestCase):
    """A conversation's turns are separate streams: no one trace is made of them, so its
    trace checks cannot run (check_error, never a pass) and it counts no process."""

    def test_a_conversations_trace_check_is_unrun(self) -> None:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        suite = {"skill_name": "demo", "evals": [{
            "id": "talk", "prompt": "Fix calc.", "turns": ["Yes, go ahead."],
            "checks": [{"name": "tests ran", "trace": "ran", "matches": "pytest"}]}]}
        root = make_repo(tmp.path, suite)
        workspace = tmp.path / "ws"
        script = {"executor": {"tool_calls": [{"command": "pytest -q"}]}}
        code, out, err = call_main(["run", str(root / "evals/demo/evals.json"), "--agent",
                                    "claude", "--workspace", str(workspace), "--config",
                                    "without_skill", "--timeout", "60"],
                                   fake_env(tmp.path, script))
        self.assertEqual(code, 1, out + err)
        run = json.loads((workspace / "iteration-1" / "eval-talk" / "without_skill" / "run-1"
                          / "run.json").read_text(encoding="utf-8"))
        self.assertEqual(run["status"], "check_error", run["failure"])
        self.assertIn("no trace", run["failure"]["detail"])
        self.assertIn("conversation", run["trace"]["absent"])
