"""`run --agent gemini` and `run --agent opencode` end to end with the fake CLIs.

Each run gets a fresh home written by the adapter: the user's installed skills and settings
never reach the CLI, the user's sign-in and provider do; metrics come from the CLI's events.
"""

from __future__ import annotations

import json
import os
import unittest
from pathlib import Path

from tests.helpers import TempDir, call_main, demo_suite, fake_calls, fake_env, make_repo


class MoreAgentsTestBase(unittest.TestCase):
    agent = ""

    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.repo = make_repo(self.tmp.path, demo_suite(cases=1))
        self.home = self.tmp.path / "home"
        self.home.mkdir()
        # A skill the user installed where every agent looks: it must reach no run.
        for place in (".gemini/skills/demo", ".agents/skills/demo", ".claude/skills/demo",
                      ".config/opencode/skills/demo"):
            (self.home / place).mkdir(parents=True)
            (self.home / place / "SKILL.md").write_text("USER-INSTALLED-COPY\n")

    def user_env(self) -> dict:
        raise NotImplementedError

    def run_suite(self, *args: str, script: dict | None = None) -> tuple[int, str, str]:
        env = fake_env(self.tmp.path, script or {"executor": {"write_artifact": "# Plan\n"},
                                                 "grader": {"verdicts": {"fail_ids": [2]}}},
                       extra={"HOME": str(self.home), **self.user_env()})
        argv = ["run", str(self.repo / "evals" / "demo" / "evals.json"), "--agent", self.agent,
                "--workspace", str(self.tmp.path / "ws"), "--timeout", "30", "--quiet", *args]
        return call_main(argv, env)

    def cell(self, config: str) -> Path:
        return self.tmp.path / "ws" / "iteration-1" / "eval-E01" / config / "run-1"

    def record(self, config: str) -> dict:
        return json.loads((self.cell(config) / "run.json").read_text())

    def metrics(self, config: str) -> dict:
        return json.loads((self.cell(config) / "metrics.json").read_text())["metrics"]

    def check_scored_both(self) -> list[dict]:
        code, out, err = self.run_suite()
        self.assertEqual(code, 0, err)
        for config in ("with_skill", "without_skill"):
            rec = self.record(config)
            self.assertEqual(rec["status"], "ok", rec)
            grading = json.loads((self.cell(config) / "grading.json").read_text())
            self.assertEqual([e["passed"] for e in grading["expectations"]], [True, False, True])
            self.assertEqual(rec["skill_read"]["state"],
                             "read" if config == "with_skill" else "not_read")
            self.assertEqual(rec["sandbox"]["removed"], True)
        left = set(os.listdir(self.tmp.path / "sandboxes")) - {"opencode.json"}
        self.assertEqual(left, set())  # sandboxes and homes removed
        calls = [c for c in fake_calls(self.tmp.path) if c.get("role")]
        self.assertEqual(sorted(c["role"] for c in calls), ["executor", "executor",
                                                            "grader", "grader"])
        homes = {c["env"]["HOME"] for c in calls}
        self.assertEqual(len(homes), 4, "each process gets its own home")
        self.assertNotIn(str(self.home), homes)
        for call in calls:
            self.assertNotIn("USER-INSTALLED-COPY", json.dumps(call))
        return calls


class GeminiE2ETest(MoreAgentsTestBase):
    agent = "gemini"

    def user_env(self) -> dict:
        (self.home / ".gemini").mkdir(exist_ok=True)
        (self.home / ".gemini" / "settings.json").write_text(json.dumps({
            "security": {"auth": {"selectedType": "oauth-personal"}},
            "skills": {"enabled": True}, "mcpServers": {"x": {"command": "evil"}}}))
        (self.home / ".gemini" / "oauth_creds.json").write_text('{"token": "t"}')
        return {"GEMINI_CLI_SYSTEM_SETTINGS_PATH": "/nonexistent/system.json"}

    def test_with_and_without_skill_graded_in_fresh_homes(self) -> None:
        calls = self.check_scored_both()
        for call in calls:
            settings = call["settings"]
            self.assertEqual(call["env"]["GEMINI_CLI_HOME"], call["env"]["HOME"])
            self.assertEqual(call["env"]["GEMINI_CLI_NO_RELAUNCH"], "1")
            self.assertTrue(call["env"]["TMPDIR"].startswith(call["env"]["HOME"]))
            self.assertEqual(settings["security"]["auth"]["selectedType"], "oauth-personal")
            self.assertEqual(settings["general"]["maxAttempts"], 1)
            self.assertIs(settings["skills"]["enabled"], False)
            self.assertNotIn("mcpServers", settings)
            self.assertNotIn("GEMINI_CLI_SYSTEM_SETTINGS_PATH", call["env_names"])
            if call["role"] == "grader":
                self.assertEqual(settings["tools"]["core"], [])
                alias = settings["modelConfigs"]["customAliases"]["skill-eval-verdict"]
                schema = alias["modelConfig"]["generateContentConfig"]["responseJsonSchema"]
                self.assertEqual(schema["required"], ["verdicts"])
                self.assertIn("GEMINI_SYSTEM_MD", call["env"])
            else:
                self.assertIn("yolo", call["argv"])
        metrics = self.metrics("without_skill")
        self.assertEqual(metrics["input_tokens"]["value"], 200)  # the artifact write, an answer
        self.assertEqual(metrics["tokens"]["value"], 240)
        self.assertEqual(metrics["time_seconds"]["value"], 1.234)
        self.assertIsNone(metrics["total_cost_usd"]["value"])
        self.assertEqual(self.metrics("with_skill")["tool_calls"]["value"], 2)  # read + write

    def test_agent_config_reaches_the_settings_and_codex_alias_is_refused_nowhere(self) -> None:
        code, _, err = self.run_suite("--config", "without_skill",
                                      "--agent-config", "general.maxAttempts=3",
                                      "--agent-config", "ui.theme=Dracula")
        self.assertEqual(code, 0, err)
        settings = [c["settings"] for c in fake_calls(self.tmp.path) if c.get("role")]
        self.assertEqual({s["general"]["maxAttempts"] for s in settings}, {3})
        self.assertEqual({s["ui"]["theme"] for s in settings}, {"Dracula"})

    def test_api_error_and_unreachable_model_are_failed_runs(self) -> None:
        script = {"cases": [{"match": "Task", "role": "executor",
                             "spec": {"fault": "unreachable"}}]}
        code, _, err = self.run_suite("--config", "without_skill", script=script)
        self.assertEqual(code, 1, err)
        rec = self.record("without_skill")
        self.assertEqual(rec["status"], "executor_failed", rec)  # one attempt, not ten
        self.assertIn("fetch failed", rec["failure"]["detail"])
        self.assertFalse(rec["executor"]["timed_out"])

    def test_grader_prose_is_unparseable(self) -> None:
        code, _, err = self.run_suite("--config", "without_skill", script={
            "grader": {"verdict_form": "prose"}})
        self.assertEqual(code, 1, err)
        self.assertEqual(self.record("without_skill")["status"], "grader_unparseable")


class OpenCodeE2ETest(MoreAgentsTestBase):
    agent = "opencode"

    def user_env(self) -> dict:
        config = self.home / ".config" / "opencode"
        config.mkdir(parents=True, exist_ok=True)
        (config / "opencode.json").write_text(json.dumps({
            "model": "fake/fake-model",
            "provider": {"fake": {"options": {"baseURL": "http://127.0.0.1:9/v1"},
                                  "models": {"fake-model": {}}}},
            "instructions": ["USER-INSTRUCTIONS.md"], "plugin": ["evil-plugin"]}))
        data = self.home / ".local" / "share" / "opencode"
        data.mkdir(parents=True)
        (data / "auth.json").write_text('{"fake": {"type": "api", "key": "k"}}')
        # an ancestor's opencode.json, which the real CLI would merge
        (self.tmp.path / "sandboxes" / "opencode.json").parent.mkdir(exist_ok=True)
        (self.tmp.path / "sandboxes" / "opencode.json").write_text('{"agent": {"evil": {}}}')
        return {"OPENCODE_CONFIG": str(self.tmp.path / "missing.json")}

    def test_a_model_it_cannot_find_fails_the_cell_and_points_at_the_model(self) -> None:
        # nope/x: no provider the runner can check beforehand (no cached catalog); the CLI
        # then prints only "UnknownError: Unexpected server error", as 1.18.33 does
        code, _, err = self.run_suite("--config", "without_skill", "--model", "nope/x")
        self.assertEqual(code, 1, err)
        rec = self.record("without_skill")
        self.assertEqual(rec["status"], "executor_failed")
        self.assertIn("UnknownError: Unexpected server error", rec["failure"]["detail"])
        self.assertIn("check --model and `opencode models`", rec["failure"]["detail"])

    def test_with_and_without_skill_graded_in_fresh_homes(self) -> None:
        calls = self.check_scored_both()
        for call in calls:
            config = call["config"]
            self.assertEqual(call["project_configs"], [])
            self.assertEqual(call["env"]["OPENCODE_DISABLE_PROJECT_CONFIG"], "1")
            self.assertEqual(call["env"]["npm_config_offline"], "true")
            self.assertNotIn("OPENCODE_CONFIG", call["env"])
            self.assertEqual(config["model"], "fake/fake-model")
            self.assertNotIn("instructions", config)
            self.assertNotIn("plugin", config)
            self.assertEqual(config["share"], "disabled")
            auth = Path(call["env"]["XDG_DATA_HOME"]) / "opencode" / "auth.json"
            self.assertTrue(str(auth).startswith(call["env"]["HOME"]))
            if call["role"] == "grader":
                self.assertEqual(config["agent"]["skill-eval-grader"]["permission"],
                                 {"*": "deny"})
            else:
                self.assertEqual(config["permission"], {"skill": "deny"})
        metrics = self.metrics("without_skill")
        self.assertEqual(metrics["input_tokens"]["value"], 80 * 2)  # a write step, an answer
        self.assertEqual(metrics["tokens"]["value"], 120 * 2)
        self.assertEqual(metrics["num_turns"]["value"], 2)
        self.assertIsNone(metrics["total_cost_usd"]["value"])

    def test_refused_permission_is_a_failed_run_not_an_empty_answer(self) -> None:
        (self.tmp.path / "sandboxes").mkdir(exist_ok=True)
        script = {"executor": {"write_files": {"/var/tmp/skill-eval-outside.txt": "x"}}}
        code, _, err = self.run_suite("--config", "without_skill", script=script)
        self.assertEqual(code, 1, err)
        rec = self.record("without_skill")
        self.assertEqual(rec["status"], "executor_failed", rec)
        self.assertIn("stopped after a tool call", rec["failure"]["detail"])
        self.assertFalse(os.path.exists("/var/tmp/skill-eval-outside.txt"))

    def test_api_error_is_a_failed_run(self) -> None:
        (self.tmp.path / "sandboxes").mkdir(exist_ok=True)
        code, _, err = self.run_suite("--config", "without_skill", script={
            "executor": {"fault": "is_error"}})
        self.assertEqual(code, 1, err)
        rec = self.record("without_skill")
        self.assertEqual(rec["status"], "executor_failed")
        self.assertIn("APIError: fake bad request (status 400)", rec["failure"]["detail"])


del MoreAgentsTestBase

if __name__ == "__main__":
    unittest.main()
