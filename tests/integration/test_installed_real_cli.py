"""The `installed` arm with the REAL agent CLIs under bubblewrap (issue 27).

The loopback model server plays a model that loads the installed skill through the CLI's own
skill tool (codex has none: it reads SKILL.md with a command), and the run must record
`activated: true` from the CLI's stream; a model that never loads it must give `false`. The
next request the CLI sends must carry the skill's body: the CLI really found the copy the
runner installed. Setup, skips and process checks are those of test_runner_real_cli.
"""

from __future__ import annotations

import json
import shutil
import unittest
from pathlib import Path

try:
    from ..helpers import make_repo
    from . import model_servers as ms
    from . import test_runner_real_cli as real
except ImportError:  # run from inside tests/integration
    from tests.helpers import make_repo  # type: ignore[no-redef]
    from tests.integration import model_servers as ms  # type: ignore[no-redef]
    from tests.integration import test_runner_real_cli as real  # type: ignore[no-redef]

BODY = "INSTALLED-SKILL-BODY-2f7c"
SKILL = ("---\nname: demo\ndescription: Use when planning a database migration.\n---\n\n"
         f"# Demo\n\n{BODY}\n")
ANSWER = "Here is the migration plan."


class InstalledScenario:
    """The two runs per agent; mixed into a RunnerRealCLITest per agent below."""

    server_class: type
    skill_call: staticmethod
    shell_call: staticmethod  # a shell command, the CLI's own way
    text_reply: staticmethod
    grader_reply: staticmethod
    run_args: tuple[str, ...] = ()

    @classmethod
    def setUpClass(cls):
        cls.server = cls.server_class().start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def setUp(self):
        super().setUp()
        bwrap = shutil.which("bwrap")
        if bwrap is None or real.RUNNER_MODULE.probe_bwrap(bwrap) is not None:
            self.skipTest("needs working bubblewrap (.ci/run installs it)")

    def grader_matcher(self):
        raise NotImplementedError

    def run_installed(self, marker: str, loads: bool) -> dict:
        calls = [self.skill_call(), self.text_reply(ANSWER)] if loads else [
            self.text_reply(ANSWER)]

        def executor(req: ms.RecordedRequest) -> ms.Reply:
            return calls[min(req.step, len(calls) - 1)]
        self.server.add_rule(ms.all_of(ms.contains(marker), self.grader_matcher()),
                             [self.grader_reply(real.VERDICTS)])
        self.server.add_rule(ms.contains(marker), [executor])
        suite = {"skill_name": "demo", "evals": [
            {"id": "E01", "prompt": f"{marker} Plan the migration of the orders table.",
             "expectations": list(real.ASSERTIONS)}]}
        repo = make_repo(self.tmpdir("repo"), suite, skill_md=SKILL)
        run = self.run_runner(repo, "--config", "installed", "--isolation", "bwrap",
                              *self.run_args)
        # one config (single_config is info), confined (no unconfined flag), the graders' mixed
        # verdicts (no scored_zero): the only flag that asks for review is never_activated, a
        # warning when the installed arm never loaded the skill. So exit 0 when the model loads
        # it, 1 when it does not, as the fake-CLI twins in tests/test_installed_arm.py assert
        # (ActivationTest: 0; test_an_arm_that_never_activated_is_flagged_for_review: 1).
        self.assertEqual(run.code, 0 if loads else 1, run)
        rec = run.run_json("E01", "installed")
        self.assertEqual(rec["status"], "ok", run)
        self.assertEqual(rec["executor"]["isolation"]["mode"], "bwrap")
        execs = [r for r in real._requests_with(self.server, marker)
                 if not self.grader_matcher()(r)]
        # the prompt names no path (the CLI's own context lists its skills, as it should)
        self.assertNotIn("skills/demo", (run.cell("E01", "installed") / "prompt.md").read_text())
        if loads:  # the CLI sent the installed copy's text back to the model
            self.assertTrue(any(BODY in r.text for r in execs if r.step >= 1), run)
        return rec["activation"]

    def test_a_model_that_loads_the_skill_is_recorded_as_activated(self):
        found = self.run_installed(f"[[INSTALLED-{self.agent.upper()}-YES]]", True)
        self.assertIs(found["activated"], True, found)
        self.assertIsInstance(found["evidence"]["event"], int)

    def test_a_model_that_never_loads_it_is_recorded_as_not_activated(self):
        found = self.run_installed(f"[[INSTALLED-{self.agent.upper()}-NO]]", False)
        self.assertIs(found["activated"], False, found)

    def test_a_trigger_set_is_answered_from_the_stream_and_stopped_at_the_decision(self):
        """Issue 34: a query the skill is for (the model loads it, then would run `sleep 30`)
        and one it is not for (the model runs `ls` first, then would sleep). Each executor must
        be ended at its first tool call: no request after the sleep ever reaches the model.
        (Its time is no proof: a loaded machine can take a minute to start opencode.)"""
        yes, no = (f"[[TRIGGER-{self.agent.upper()}-{word}]]" for word in ("YES", "NO"))
        later = [self.shell_call("sleep 30"), self.text_reply(ANSWER)]
        self.server.add_rule(ms.contains(yes), [self.skill_call(), *later])
        self.server.add_rule(ms.contains(no), [self.shell_call("ls"), *later])
        suite = {"skill_name": "demo", "evals": [
            {"id": "E01", "prompt": "Plan it.", "expectations": list(real.ASSERTIONS)}]}
        repo = make_repo(self.tmpdir("repo"), suite, skill_md=SKILL, files={
            "evals/demo/trigger.json": json.dumps([
                {"query": f"{yes} Plan the migration of the orders table.",
                 "should_trigger": True},
                {"query": f"{no} What files are in this folder?", "should_trigger": False}])})
        run = self.run_runner(repo, "--config", "installed", "--isolation", "bwrap",
                              "--eval-id", "trigger-1,trigger-2", "--timeout", "150",
                              *self.run_args, timeout=300)
        # --eval-id leaves the suite's task case out: partial_selection, the one flag, asks for
        # review (exit 1); no run failed, none was graded
        self.assertEqual(run.code, 1, run)
        self.assertEqual([flag["kind"] for flag in run.benchmark()["sanity_checks"]["flags"]
                          if flag["severity"] != "info"], ["partial_selection"], run)
        arm = run.benchmark()["trigger"]["installed"]
        self.assertEqual((arm["recall"]["activated"], arm["recall"]["runs"]), (1, 1), run)
        self.assertEqual((arm["false_activation"]["activated"],
                          arm["false_activation"]["runs"]), (0, 1), run)
        self.assertEqual(arm["stopped_at_decision"]["runs"], 2, run)
        for eval_id, reason in (("trigger-1", "activated: "), ("trigger-2", "not activated: ")):
            rec = run.run_json(eval_id, "installed")
            self.assertEqual(rec["status"], "ok", run)
            stopped = rec["activation"]["stopped"]
            self.assertTrue(stopped["reason"].startswith(reason), stopped)
            self.assertEqual(rec["activation"]["calls"], 1, rec["activation"])
        for marker in (yes, no):
            late = [r.step for r in real._requests_with(self.server, marker) if r.step >= 2]
            self.assertEqual(late, [], f"{marker}: the CLI went on after the decision\n{run!r}")


@unittest.skipUnless(real.CLAUDE, f"claude not found ({real.INSTALL_HINT})")
class ClaudeInstalledTest(InstalledScenario, real.RunnerRealCLITest):
    agent, binary = "claude", real.CLAUDE
    server_class = ms.AnthropicServer
    skill_call = staticmethod(lambda: ms.anthropic_tool("Skill", {"skill": "demo"}))
    shell_call = staticmethod(ms.anthropic_bash)
    text_reply = staticmethod(ms.anthropic_text)
    grader_reply = staticmethod(ms.structured_output)

    def grader_matcher(self):
        return ms.has_tool("StructuredOutput")

    def agent_env(self, home: Path, codex_home: Path) -> dict:
        return ms.claude_env(self.server, str(home))


@unittest.skipUnless(real.CODEX, f"codex not found ({real.INSTALL_HINT})")
class CodexInstalledTest(InstalledScenario, real.RunnerRealCLITest):
    agent, binary = "codex", real.CODEX
    server_class = ms.ResponsesServer
    skill_call = staticmethod(lambda: ms.responses_exec("cat .agents/skills/demo/SKILL.md"))
    shell_call = staticmethod(ms.responses_exec)
    text_reply = staticmethod(ms.responses_text)
    grader_reply = staticmethod(ms.responses_json)

    def grader_matcher(self):
        return ms.has_json_schema()

    def agent_env(self, home: Path, codex_home: Path) -> dict:
        ms.write_codex_config(self.server, str(codex_home))
        return ms.codex_env(self.server, str(codex_home), home=str(home))


@unittest.skipUnless(real.GEMINI, f"gemini not found ({real.INSTALL_HINT})")
class GeminiInstalledTest(InstalledScenario, real.RunnerRealCLITest):
    agent, binary = "gemini", real.GEMINI
    server_class = ms.GeminiServer
    skill_call = staticmethod(lambda: ms.gemini_call("activate_skill", {"name": "demo"}))
    shell_call = staticmethod(lambda command: ms.gemini_call("run_shell_command",
                                                             {"command": command}))
    text_reply = staticmethod(ms.gemini_text)
    grader_reply = staticmethod(ms.gemini_json)
    run_args = ("--model", ms.GEMINI_MODEL)

    def grader_matcher(self):
        return ms.has_response_schema()

    def agent_env(self, home: Path, codex_home: Path) -> dict:
        return ms.gemini_env(self.server)


@unittest.skipUnless(real.OPENCODE and shutil.which("rg"),
                     f"opencode or ripgrep not found ({real.INSTALL_HINT})")
class OpenCodeInstalledTest(InstalledScenario, real.RunnerRealCLITest):
    agent, binary = "opencode", real.OPENCODE
    server_class = ms.ChatCompletionsServer
    skill_call = staticmethod(lambda: ms.chat_tool("skill", {"name": "demo"}))
    shell_call = staticmethod(lambda command: ms.chat_tool(
        "bash", {"command": command, "description": "run a command"}))
    text_reply = staticmethod(ms.chat_text)
    grader_reply = staticmethod(ms.chat_json)

    def grader_matcher(self):
        return ms.no_tools()

    def agent_env(self, home: Path, codex_home: Path) -> dict:
        ms.write_opencode_config(self.server, str(home))
        return ms.opencode_env()


if __name__ == "__main__":
    unittest.main()
