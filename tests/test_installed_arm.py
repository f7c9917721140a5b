"""Issue 27: the `installed` arm. The skill package sits where the agent CLI discovers project
skills, and the executor's prompt is the without_skill prompt: does the agent find it itself?

The fake executors list their discovery folder from inside the cell (`list_paths`), so a test
sees what each cell was given.
"""

from __future__ import annotations

import json
import unittest
from pathlib import Path

from tests.helpers import (
    PROJECT,
    TempDir,
    call_main,
    demo_suite,
    fake_env,
    git,
    make_repo,
    runner,
)

SAMPLES = PROJECT.parent / "shared" / "cli-samples"

DISCOVERY = {"claude": ".claude/skills", "codex": ".agents/skills", "gemini": ".agents/skills",
             "opencode": ".agents/skills"}


def agent_env(tmp: Path, script: dict) -> dict:
    """The fakes' environment, with what gemini (a key) and opencode (a model) need."""
    env = fake_env(tmp, script, {"GEMINI_API_KEY": "test-key"})
    config = Path(env["HOME"]) / ".config" / "opencode" / "opencode.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"model": "fake/fake-model", "provider": {"fake": {
        "options": {"baseURL": "http://127.0.0.1:9/v1"}, "models": {"fake-model": {}}}}}))
    return env


class InstalledCase(unittest.TestCase):
    cases = 2

    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.root = self.make_root()
        self.suite = str(self.root / "evals/demo/evals.json")
        self.workspace = self.tmp.path / "ws"

    def make_root(self) -> Path:
        return make_repo(self.tmp.path, demo_suite(self.cases))

    def run_main(self, agent: str, configs: str, script: dict | None = None, *extra: str):
        env = agent_env(self.tmp.path, script or {})
        return call_main(["run", self.suite, "--agent", agent, "--config", configs, "--quiet",
                          "--workspace", str(self.workspace), *extra], env)

    def run_dir(self, case: str, config: str, number: int = 1) -> Path:
        return self.workspace / "iteration-1" / f"eval-{case}" / config / f"run-{number}"

    def run_json(self, case: str, config: str, number: int = 1) -> dict:
        return json.loads((self.run_dir(case, config, number) / "run.json").read_text())

    def answer(self, case: str, config: str, number: int = 1) -> str:
        return (self.run_dir(case, config, number) / "outputs/output.txt").read_text()


class InstalledArmTest(InstalledCase):
    def test_each_agent_finds_the_package_in_its_own_discovery_folder(self) -> None:
        for agent, folder in DISCOVERY.items():
            with self.subTest(agent=agent):
                self.workspace = self.tmp.path / f"ws-{agent}"
                script = {"executor": {"list_paths": [folder, f"{folder}/demo", "skills"]}}
                code, out, err = self.run_main(agent, "installed,without_skill", script)
                self.assertEqual(code, 0, out + err)
                installed = self.answer("E01", "installed")
                self.assertIn(f"listing {folder}: demo\n", installed + "\n")
                self.assertIn(f"listing {folder}/demo: SKILL.md", installed)
                self.assertNotIn("demo", installed.split("listing skills:")[1])
                baseline = self.answer("E01", "without_skill")
                self.assertIn(f"listing {folder}: <No such file or directory>", baseline)
                record = self.run_json("E01", "installed")
                self.assertEqual(record["sandbox"]["installed_skills"],
                                 {"folder": folder, "skills": ["demo"], "files": 1})
                # installed by the runner, committed in the baseline: not the executor's work
                self.assertEqual(record["changes"]["added"], [])
                self.assertNotIn("installed_skills", self.run_json("E01", "without_skill")
                                 ["sandbox"])

    def test_the_prompt_is_the_without_skill_prompt_byte_for_byte(self) -> None:
        code, out, err = self.run_main("claude", "installed,without_skill")
        self.assertEqual(code, 0, out + err)
        for case in ("E01", "E02"):
            prompts = []
            for config in ("installed", "without_skill"):
                sandbox = self.run_json(case, config)["sandbox"]["path"]
                text = (self.run_dir(case, config) / "prompt.md").read_bytes()
                prompts.append(text.replace(sandbox.encode(), b"<sandbox>"))
            self.assertEqual(prompts[0], prompts[1])
            self.assertNotIn(b"skills/demo", prompts[0])
            self.assertNotIn(b"Skill path", prompts[0])
            # a ban on skills would stop the very discovery the arm measures
            self.assertNotIn(b"Use no agent skill", prompts[0])

    def test_without_an_installed_arm_the_baseline_still_bans_skills(self) -> None:
        code, out, err = self.run_main("claude", "with_skill,without_skill")
        self.assertEqual(code, 0, out + err)
        self.assertIn("Use no agent skill", (self.run_dir("E01", "without_skill")
                                             / "prompt.md").read_text())

    def test_installed_at_a_revision_installs_that_revisions_package(self) -> None:
        skill = self.root / "skills/demo/SKILL.md"
        skill.write_text(skill.read_text() + "\nMARKER-V2\n")
        git(self.root, "commit", "-qam", "v2")
        script = {"executor": {"read_paths": [".claude/skills/demo/SKILL.md"],
                               "quote_reads": True}}
        code, out, err = self.run_main("claude", "installed,installed@HEAD~1", script)
        self.assertEqual(code, 0, out + err)
        self.assertIn("MARKER-V2", self.answer("E01", "installed"))
        self.assertNotIn("MARKER-V2", self.answer("E01", "installed@HEAD~1"))
        self.assertIn("Say hello.", self.answer("E01", "installed@HEAD~1"))

    def test_unconfined_the_run_warns_that_the_users_skills_compete(self) -> None:
        home_skills = self.tmp.path / "home/.claude/skills/other"
        home_skills.mkdir(parents=True)
        code, out, err = self.run_main("claude", "installed,without_skill", None,
                                       "--isolation", "none")
        self.assertEqual(code, 0, out + err)
        self.assertIn("can compete with demo for activation", err)
        self.assertIn(str(self.tmp.path / "home/.claude/skills"), err)
        code, out, err = self.run_main("claude", "with_skill,without_skill", None,
                                       "--isolation", "none")
        self.assertNotIn("can compete", err)

    def test_an_unknown_config_lists_installed_among_the_choices(self) -> None:
        code, out, err = self.run_main("claude", "instaled,without_skill")
        self.assertEqual(code, 2)
        self.assertIn("did you mean 'installed'?", err)


MIGRATION_SKILL = ("---\nname: demo\ndescription: Use when planning a database migration.\n"
                   "---\n\n# Demo\n\nList the steps.\n")
ACTIVATION_TOOL = {"claude": ("Skill", "skill tool"), "gemini": ("activate_skill", "skill tool"),
                   "opencode": ("skill", "skill tool"),
                   "codex": ("command_execution", "read of the installed SKILL.md")}


def migration_suite() -> dict:
    """E01 is the skill's kind of task, E02 is not."""
    return {"skill_name": "demo", "evals": [
        {"id": "E01", "prompt": "Plan the migration of the orders table.",
         "expectations": ["It lists steps."]},
        {"id": "E02", "prompt": "Write a haiku about autumn.", "expectations": ["It rhymes."]}]}


class ActivationTest(InstalledCase):
    def make_root(self) -> Path:
        return make_repo(self.tmp.path, migration_suite(), skill_md=MIGRATION_SKILL)

    def test_a_fitting_description_activates_in_each_agents_stream_and_a_misfit_does_not(
            self) -> None:
        for agent, (tool, signal) in ACTIVATION_TOOL.items():
            with self.subTest(agent=agent):
                self.workspace = self.tmp.path / f"ws-{agent}"
                code, out, err = self.run_main(agent, "installed,without_skill")
                self.assertEqual(code, 0, out + err)
                found = self.run_json("E01", "installed")["activation"]
                self.assertIs(found["activated"], True, found)
                self.assertEqual((found["signal"], found["evidence"]["tool"]), (signal, tool))
                self.assertEqual(found["evidence"]["call"], 0)
                self.assertIsInstance(found["evidence"]["event"], int)
                stream = (self.run_dir("E01", "installed") / "logs/executor_stream.txt")
                events = [json.loads(line) for line in stream.read_text().splitlines()
                          if line.startswith("{")]
                self.assertIn("demo", json.dumps(events[found["evidence"]["event"]]))
                self.assertIs(self.run_json("E02", "installed")["activation"]["activated"],
                              False)
                self.assertIsNone(self.run_json("E01", "without_skill")["activation"])

    def test_a_stream_the_adapter_cannot_read_is_unknown_never_false(self) -> None:
        script = {"cases": [{"match": "haiku", "role": "executor",
                             "spec": {"fault": "invalid_json"}},
                            {"match": "migration", "role": "executor",
                             "spec": {"fault": "exit_nonzero"}}]}
        code, out, err = self.run_main("claude", "installed", script)
        self.assertEqual(code, 1, out + err)
        for case in ("E01", "E02"):
            found = self.run_json(case, "installed")["activation"]
            self.assertEqual(found["activated"], "unknown", found)
            self.assertTrue(found["reason"])

    def test_an_executor_that_failed_before_activating_is_unknown(self) -> None:
        script = {"executor": {"fault": "is_error"}}
        code, out, err = self.run_main("claude", "installed", script)
        self.assertEqual(code, 1, out + err)
        self.assertEqual(self.run_json("E02", "installed")["activation"]["activated"], "unknown")


class RealStreamSamplesTest(unittest.TestCase):
    """Streams the real CLIs printed (tests/../shared/cli-samples), read by the adapters."""

    def activation(self, agent: str, sample: str, skill: str) -> dict:
        path = SAMPLES / sample
        if not path.is_file():
            self.skipTest(f"no sample {path}")
        result = runner.ProcessResult([agent], 0, path.read_text(encoding="utf-8"), "", 1.0)
        provider = runner.PROVIDERS[agent]()
        reply = provider.read_executor(result)
        return runner.activation_evidence(provider, reply.trace, skill, reply.ok, False)

    def test_gemini_activate_skill_and_opencode_skill_tool_are_found(self) -> None:
        for agent, sample, skill, event in (
                ("gemini", "gemini_stream_json_activate_skill.jsonl", "s-proj-gemini", 2),
                ("opencode", "opencode_json_skill_tool.jsonl", "s-proj-opencode", 1)):
            with self.subTest(agent=agent):
                found = self.activation(agent, sample, skill)
                self.assertIs(found["activated"], True, found)
                self.assertEqual(found["evidence"]["event"], event)
                self.assertIs(self.activation(agent, sample, "another")["activated"], False)

    def test_a_shell_only_stream_is_not_an_activation(self) -> None:
        found = self.activation("gemini", "gemini_stream_json_shell.jsonl", "demo")
        self.assertIs(found["activated"], False, found)


class EightConcurrentCellsTest(InstalledCase):
    cases = 8

    def test_each_of_eight_concurrent_cells_sees_exactly_one_copy(self) -> None:
        script = {"executor": {"list_paths": [".claude/skills"], "sleep_s": 0.3}}
        code, out, err = self.run_main("claude", "installed", script, "--concurrency", "8")
        self.assertEqual(code, 0, out + err)
        sandboxes = set()
        for number in range(1, 9):
            case = f"E{number:02d}"
            self.assertIn("listing .claude/skills: demo\n", self.answer(case, "installed") + "\n")
            sandboxes.add(self.run_json(case, "installed")["sandbox"]["path"])
        self.assertEqual(len(sandboxes), 8)  # each cell its own copy


if __name__ == "__main__":
    unittest.main()
