"""A two-turn conversation with the REAL agent CLIs under bubblewrap (issue 36).

Each CLI answers the case's prompt, then the follow-up in `turns` in the same session: the
loopback server's log must show the second request carrying the first turn's messages (the
prompt and the first reply), so the runner really continued the session, in the cell's
fresh home, confined alike for both turns. Setup, skips and process checks are those of
test_runner_real_cli.
"""

from __future__ import annotations

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

FIRST_REPLY = "FIRST-REPLY-7d1e: which folders should I delete?"
FOLLOW_UP = "FOLLOW-UP-3b9a: keep node_modules, delete dist/."
SECOND_REPLY = "SECOND-REPLY-c20f: deleted dist/, kept node_modules."


class ConversationScenario:
    """One two-turn run per agent; mixed into a RunnerRealCLITest per agent below."""

    server_class: type
    text_reply: staticmethod
    grader_reply: staticmethod
    run_args: tuple[str, ...] = ()
    runner_timeout = real.RUNNER_TIMEOUT

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

    def test_the_second_turn_continues_the_first_ones_session(self):
        marker = f"[[TALK-{self.agent.upper()}]]"
        self.server.add_rule(ms.all_of(ms.contains(marker), self.grader_matcher()),
                             [self.grader_reply(real.VERDICTS)])
        self.server.add_rule(ms.all_of(ms.contains(marker), ms.last_user_contains(FOLLOW_UP)),
                             [self.text_reply(SECOND_REPLY)])
        self.server.add_rule(ms.contains(marker), [self.text_reply(FIRST_REPLY)])
        suite = {"skill_name": "demo", "evals": [
            {"id": "E01", "prompt": f"{marker} Clean up the build folder.",
             "turns": [FOLLOW_UP], "expectations": list(real.ASSERTIONS)}]}
        repo = make_repo(self.tmpdir("repo"), suite)
        run = self.run_runner(repo, "--config", "with_skill", "--isolation", "bwrap",
                              *self.run_args, timeout=self.runner_timeout)
        rec = run.run_json("E01", "with_skill")
        self.assertEqual(rec["status"], "ok", run)
        talk = rec["conversation"]
        self.assertEqual((talk["turns_taken"], talk["ended"]), (2, "last turn"), run)
        self.assertEqual([t["executor"]["isolation"]["mode"] for t in talk["turns"]],
                         ["bwrap", "bwrap"])
        cell = run.cell("E01", "with_skill")
        self.assertEqual((cell / "outputs/turn-1.txt").read_text().strip(), FIRST_REPLY)
        self.assertEqual((cell / "outputs/output.txt").read_text().strip(), SECOND_REPLY)
        executor = [r for r in real._requests_with(self.server, marker)
                    if not self.grader_matcher()(r)]
        second = [r for r in executor if FOLLOW_UP in r.last_user_text]
        self.assertTrue(second, run)
        # the second turn's request carries the first turn: its prompt and its reply
        self.assertIn("Clean up the build folder.", second[0].text)
        self.assertIn(FIRST_REPLY.split(":")[0], second[0].text)
        grader = (cell / "grader_prompt.md").read_text()
        for text in (FIRST_REPLY, FOLLOW_UP, SECOND_REPLY):
            self.assertIn(text, grader)


@unittest.skipUnless(real.CLAUDE, f"claude not found ({real.INSTALL_HINT})")
class ClaudeConversationTest(ConversationScenario, real.RunnerRealCLITest):
    agent, binary = "claude", real.CLAUDE
    server_class = ms.AnthropicServer
    text_reply = staticmethod(ms.anthropic_text)
    grader_reply = staticmethod(ms.structured_output)

    def grader_matcher(self):
        return ms.has_tool("StructuredOutput")

    def agent_env(self, home: Path, codex_home: Path) -> dict:
        return ms.claude_env(self.server, str(home))


@unittest.skipUnless(real.CODEX, f"codex not found ({real.INSTALL_HINT})")
class CodexConversationTest(ConversationScenario, real.RunnerRealCLITest):
    agent, binary = "codex", real.CODEX
    server_class = ms.ResponsesServer
    text_reply = staticmethod(ms.responses_text)
    grader_reply = staticmethod(ms.responses_json)

    def grader_matcher(self):
        return ms.has_json_schema()

    def agent_env(self, home: Path, codex_home: Path) -> dict:
        ms.write_codex_config(self.server, str(codex_home))
        return ms.codex_env(self.server, str(codex_home), home=str(home))

    def test_a_user_agent_that_reads_the_suite_finds_nothing(self):
        """codex cannot run without its shell tool: its user agent, like its grader, has one
        in a read-only sandbox. Confined, the suite is out of its sight: a model that tries
        to read the assertions and pass them on passes on nothing."""
        marker = "[[TALK-CODEX-NOSY-USER]]"
        secret = "SECRET-ASSERTION-91c4 the reply names every folder."
        suite = {"skill_name": "demo", "evals": [
            {"id": "E01", "prompt": f"{marker} Clean up the build folder.",
             "user": {"persona": "A developer.", "goal": "Only dist/ deleted.",
                      "max_turns": 2}, "expectations": [secret]}]}
        repo = make_repo(self.tmpdir("repo"), suite)
        suite_path = repo / "evals" / "demo" / "evals.json"

        def passes_on_what_it_read(req: ms.RecordedRequest) -> ms.Reply:
            outputs = [str(item.get("output")) for item in req.body.get("input") or []
                       if isinstance(item, dict) and item.get("type") == "function_call_output"]
            return ms.responses_text("What I found: " + " ".join(outputs)[:2000])
        user_agent = ms.all_of(ms.contains(marker), ms.contains(real.RUNNER_MODULE
                                                                .USER_AGENT_HEADING))
        self.server.add_rule(ms.all_of(ms.contains(marker), self.grader_matcher()),
                             [self.grader_reply({"verdicts": [
                                 {"id": 1, "passed": True, "evidence": "x"}]})])
        self.server.add_rule(user_agent, [ms.responses_exec(f"cat {suite_path}"),
                                          passes_on_what_it_read])
        self.server.add_rule(ms.contains(marker), [self.text_reply(FIRST_REPLY)])
        run = self.run_runner(repo, "--config", "with_skill", "--isolation", "bwrap")
        rec = run.run_json("E01", "with_skill")
        self.assertEqual(rec["status"], "ok", run)
        self.assertEqual(rec["conversation"]["turns_taken"], 2, run)
        sent = (run.cell("E01", "with_skill") / "messages/turn-2.txt").read_text()
        self.assertTrue(sent.startswith("What I found:"), sent)
        self.assertIn("No such file", sent)  # it ran `cat`, which found no suite to read
        self.assertNotIn("SECRET-ASSERTION", sent)
        executor = [r for r in real._requests_with(self.server, marker)
                    if not self.grader_matcher()(r) and not user_agent(r)]
        self.assertTrue(executor)
        self.assertFalse([r for r in executor if "SECRET-ASSERTION" in r.text])


@unittest.skipUnless(real.GEMINI, f"gemini not found ({real.INSTALL_HINT})")
class GeminiConversationTest(ConversationScenario, real.RunnerRealCLITest):
    agent, binary = "gemini", real.GEMINI
    server_class = ms.GeminiServer
    text_reply = staticmethod(ms.gemini_text)
    grader_reply = staticmethod(ms.gemini_json)
    run_args = ("--model", ms.GEMINI_MODEL)

    def grader_matcher(self):
        return ms.has_response_schema()

    def agent_env(self, home: Path, codex_home: Path) -> dict:
        return ms.gemini_env(self.server)


@unittest.skipUnless(real.OPENCODE and shutil.which("rg"),
                     f"opencode or ripgrep not found ({real.INSTALL_HINT})")
class OpenCodeConversationTest(ConversationScenario, real.RunnerRealCLITest):
    agent, binary = "opencode", real.OPENCODE
    server_class = ms.ChatCompletionsServer
    text_reply = staticmethod(ms.chat_text)
    grader_reply = staticmethod(ms.chat_json)
    # three opencode processes of 8 to 45 s each on a loaded machine (README: one grader call
    # took 43.8 s at a load average of 15 to 21)
    run_args = ("--timeout", "150")
    runner_timeout = 600

    def grader_matcher(self):
        return ms.no_tools()

    def agent_env(self, home: Path, codex_home: Path) -> dict:
        ms.write_opencode_config(self.server, str(home))
        return ms.opencode_env()


if __name__ == "__main__":
    unittest.main()
