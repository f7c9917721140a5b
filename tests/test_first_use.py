"""What a new user and a skill author hit on first use (issue 28): a workspace that ignores
itself, resuming after Ctrl-C, like-with-like comparisons, plans that cannot give a verdict,
a CLI that is not signed in, `report` flags typed the natural way, and small validation notes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import signal
import subprocess
import unittest
from pathlib import Path

from tests.helpers import (
    FAKES,
    TempDir,
    call_main,
    demo_suite,
    fake_calls,
    fake_env,
    git,
    make_repo,
    per_eval_row,
    read_output,
    runner,
    start_script,
    this_python_dir,
    wait_until,
)


class FirstUseBase(unittest.TestCase):
    """A `run` with the fakes' defaults exits 0, never 1: every cell is ok, the with_skill
    executor reads SKILL.md and the grader passes every assertion, so the only sanity flags are
    info (non_discriminating_assertion, and unconfined from --isolation none); fewer evals than
    MIN_PAIRED_EVALS give an inconclusive verdict but raise no flag. The tests below that run
    with these defaults assert exit 0."""

    cases = 2

    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.root = make_repo(self.tmp.path, demo_suite(self.cases))
        self.suite = str(self.root / "evals" / "demo" / "evals.json")
        self.env = fake_env(self.tmp.path)

    def run_main(self, *args: str, env: dict | None = None) -> tuple[int, str, str]:
        return call_main(list(args), env=env or self.env)


class WorkspaceIgnoresItselfTests(FirstUseBase):
    """A repository with no .gitignore: the workspace still stays out of `git status`."""

    def test_a_new_workspace_holds_a_gitignore_of_everything(self) -> None:
        self.assertFalse((self.root / ".gitignore").exists())
        code, _, err = self.run_main("run", self.suite, "--agent", "claude", "--quiet")
        self.assertEqual(code, 0, err)  # the fakes' defaults: info flags only (FirstUseBase)
        workspace = self.root / "evals" / "demo" / "workspace" / "claude"
        self.assertEqual((workspace / ".gitignore").read_text(), "*\n")
        self.assertTrue((workspace / "iteration-1" / "benchmark.json").is_file())
        self.assertEqual(git(self.root, "status", "--porcelain", "--untracked-files=all"), "")

    def test_an_existing_folder_given_as_workspace_is_left_as_it_is(self) -> None:
        mine = self.tmp.path / "mine"
        mine.mkdir()
        code, _, err = self.run_main("run", self.suite, "--agent", "claude", "--quiet",
                                     "--workspace", str(mine))
        self.assertEqual(code, 0, err)  # the fakes' defaults: info flags only (FirstUseBase)
        self.assertFalse((mine / ".gitignore").exists())
        self.assertTrue((mine / "iteration-1" / "benchmark.json").is_file())


def slow_script(*cases: int, seconds: float = 30.0) -> dict:
    """Executors of these case numbers sleep; the others answer at once."""
    return {"cases": [{"match": f"Task number {i}.", "role": "executor",
                       "spec": {"sleep_s": seconds}} for i in cases]}


class CopiedFakesBesideTheCheckoutTests(FirstUseBase):
    def test_a_folder_whose_name_extends_the_checkouts_is_not_inside_it(self) -> None:
        # Issue 33: the checkout at /tmp/rc and TMPDIR=/tmp/rctmp: the README's copied fakes
        # counted as "inside the checkout" (compared as strings), were taken off the agents'
        # PATH, and the run stopped with exit 3 saying the CLI was not on that PATH.
        copied = Path(f"{self.root}tmp") / "fakes"
        copied.mkdir(parents=True)
        for name in ("claude", "_fakecore.py"):
            shutil.copy2(FAKES / name, copied / name)
        env = {**self.env, "PATH": os.pathsep.join(
            (str(copied), this_python_dir(), "/usr/bin", "/bin")),
            "TMPDIR_BESIDE": f"{self.root}tmp", "INSIDE": str(self.root / "x")}
        code, out, err = self.run_main("run", self.suite, "--agent", "claude", "--quiet",
                                       env=env)
        self.assertEqual(code, 0, out + err)
        scrub = json.loads((self.root / "evals/demo/workspace/claude/iteration-1/"
                            "iteration_manifest.json").read_text())["environment_scrub"]
        self.assertEqual(scrub["dropped"], ["INSIDE"])
        self.assertNotIn("PATH", scrub["filtered_path_lists"])

    def test_a_mention_is_compared_by_whole_path_parts(self) -> None:
        names = runner._path_mention({"/tmp/rc"})
        for text in ("/tmp/rc", "/tmp/rc/bin", "/a:/tmp/rc/bin", "--dir=/tmp/rc", "'/tmp/rc'"):
            self.assertTrue(names(text), text)
        for text in ("/tmp/rctmp", "/tmp/rctmp/x", "/tmp/rc.old", "/tmp/rc-2", "/home/u/tmp/rc"):
            self.assertFalse(names(text), text)


class ResumeTests(FirstUseBase):
    """After Ctrl-C or the deadline: the exact command to resume, and `run --resume DIR` alone
    finishes the iteration with the suite, agent and options it was started with."""

    cases = 4

    def iteration(self) -> Path:
        return self.root / "evals" / "demo" / "workspace" / "claude" / "iteration-1"

    def test_ctrl_c_prints_the_command_that_finishes_the_iteration(self) -> None:
        env = fake_env(self.tmp.path, slow_script(3, 4))
        proc = start_script(["run", self.suite, "--agent", "claude", "--timeout", "60"],
                            env=env, cwd=self.root, out_dir=self.tmp.path / "out")
        self.addCleanup(lambda: proc.poll() is None and proc.kill())

        def slow_started() -> bool:
            return any("Task number 3." in json.dumps(c) for c in fake_calls(self.tmp.path))
        self.assertTrue(wait_until(slow_started, 60), "no slow executor started")
        proc.send_signal(signal.SIGINT)
        self.assertEqual(proc.wait(timeout=60), 130)
        out, err = read_output(proc)
        self.assertIn("of them cancelled)", out)
        self.assertIn("[warning] cancelled", out)
        self.assertNotIn("infrastructure_failure", out)
        self.assertRegex(err, r"\] ok \d+, failed 0, cancelled [1-9]")
        lines = err.splitlines()
        hint = next(i for i, line in enumerate(lines) if "to run them, resume" in line)
        command = shlex.split(lines[hint + 1])
        self.assertEqual(command[2:4], ["run", "--resume"])
        self.assertEqual((self.root / command[4]).resolve(), self.iteration().resolve())
        before = len(fake_calls(self.tmp.path))
        done = subprocess.run(command, env=fake_env(self.tmp.path, {}), cwd=self.root,
                              capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("(8 runs, 8 scored, 0 excluded)", done.stdout)
        benchmark = json.loads((self.iteration() / "benchmark.json").read_text())
        self.assertFalse(benchmark["metadata"]["incomplete"])
        self.assertGreater(len(fake_calls(self.tmp.path)), before)

    def test_resume_alone_keeps_the_options_the_iteration_started_with(self) -> None:
        failing = {"cases": [{"match": "Task number 2.", "role": "executor",
                              "spec": {"fault": "exit_nonzero"}}]}
        code, out, err = self.run_main("run", self.suite, "--agent", "claude", "--runs", "2",
                                       "--eval-id", "E01,E02", "--config",
                                       "without_skill,with_skill", "--quiet",
                                       env=fake_env(self.tmp.path, failing))
        self.assertEqual(code, 1, err)
        code, out, err = self.run_main("run", "--resume", str(self.iteration()), "--quiet",
                                       env=fake_env(self.tmp.path, {}))
        self.assertEqual(code, 1, err)  # 2 of the 4 cases: a partial selection to review
        self.assertIn("(8 runs, 8 scored, 0 excluded)", out)
        self.assertIn("partial_selection", out)
        meta = json.loads((self.iteration() / "benchmark.json").read_text())["metadata"]
        self.assertEqual((meta["runs_per_configuration"], meta["evals_run"], meta["configs"]),
                         (2, ["E01", "E02"], ["without_skill", "with_skill"]))

    def test_the_deadline_prints_the_resume_command_too(self) -> None:
        code, _, err = self.run_main("run", self.suite, "--agent", "claude", "--deadline", "1",
                                     "--timeout", "60", "--quiet",
                                     env=fake_env(self.tmp.path, slow_script(1, 2, 3, 4)))
        self.assertEqual(code, 1, err)
        self.assertIn("stopped (deadline)", err)
        self.assertIn(f"run --resume {self.iteration()}", err)

    def test_an_option_that_differs_is_named_with_both_values_before_any_plan(self) -> None:
        code, _, err = self.run_main("run", self.suite, "--agent", "claude", "--quiet")
        self.assertEqual(code, 0, err)  # the fakes' defaults: info flags only (FirstUseBase)
        calls = len(fake_calls(self.tmp.path))
        code, out, err = self.run_main("run", self.suite, "--agent", "claude", "--runs", "2",
                                       "--model", "m-1", "--resume", str(self.iteration()))
        self.assertEqual(code, 2, out + err)
        first = err.splitlines()[0]
        self.assertIn("--runs 2 here, 1 in that iteration", first)
        self.assertIn("--model m-1 here, (not set) in that iteration", first)
        self.assertIn("fix: drop --runs, --model", err)
        self.assertNotIn("cells (", err, "a plan line was printed first")
        self.assertEqual(len(fake_calls(self.tmp.path)), calls, "an agent was launched")

    def test_without_resume_the_suite_and_agent_are_still_required(self) -> None:
        code, out, err = self.run_main("run")
        self.assertEqual(code, 2, out + err)
        self.assertIn("required: SUITE, --agent", err.splitlines()[0])


class CliReadinessTests(FirstUseBase):
    """A CLI that is not signed in: refused before launch where its settings show it, else
    the matrix stops after its first cells fail the same way."""

    cases = 6

    def gemini_env(self, settings: dict | None = None, **extra: str) -> dict:
        env = fake_env(self.tmp.path)
        env.pop("GEMINI_API_KEY", None)
        env.update(extra)
        if settings is not None:
            (self.tmp.path / "home" / ".gemini").mkdir(parents=True, exist_ok=True)
            (self.tmp.path / "home" / ".gemini" / "settings.json").write_text(
                json.dumps(settings))
        return env

    def one_eval_suite(self) -> str:
        """A suite of one eval, for a test whose claim is that a run is let through and ends
        well: the class's six evals are for the tests that count the cells a stop cancels."""
        root = make_repo(self.tmp.path / "one", demo_suite(1))
        return str(root / "evals" / "demo" / "evals.json")

    def test_gemini_without_a_sign_in_method_launches_nothing(self) -> None:
        code, out, err = self.run_main("run", self.suite, "--agent", "gemini",
                                       env=self.gemini_env())
        self.assertEqual(code, 3, out + err)
        self.assertIn("no sign-in method", err.splitlines()[0])
        self.assertIn("fix: sign in once by running `gemini`", err)
        self.assertEqual(fake_calls(self.tmp.path), [])
        self.assertFalse((self.root / "evals" / "demo" / "workspace").exists())

    def test_gemini_set_to_an_api_key_that_is_not_there_launches_nothing(self) -> None:
        env = self.gemini_env({"security": {"auth": {"selectedType": "gemini-api-key"}}})
        code, out, err = self.run_main("run", self.suite, "--agent", "gemini", env=env)
        self.assertEqual(code, 3, out + err)
        self.assertIn("GEMINI_API_KEY is not set", err.splitlines()[0])
        self.assertEqual(fake_calls(self.tmp.path), [])
        code, out, err = self.run_main("run", self.suite, "--agent", "gemini", "--dry-run",
                                       env=env)
        self.assertEqual(code, 0, err)
        self.assertIn("GEMINI_API_KEY is not set", out)
        self.assertIn("a real run would stop with exit 3", out)

    def test_gemini_with_a_key_runs(self) -> None:
        code, _, err = self.run_main("run", self.one_eval_suite(), "--agent", "gemini",
                                     "--quiet", env=self.gemini_env(None, GEMINI_API_KEY="k"))
        self.assertEqual(code, 0, err)  # the fakes' defaults: info flags only (FirstUseBase)
        self.assertTrue(fake_calls(self.tmp.path))

    def test_gemini_refusing_a_free_tier_google_login_stops_at_the_first_cell(self) -> None:
        # the token is there, so nothing shows it beforehand: gemini refuses it when called
        env = self.gemini_env({"security": {"auth": {"selectedType": "oauth-personal"}}})
        (self.tmp.path / "home" / ".gemini" / "oauth_creds.json").write_text('{"a": 1}')
        env["FAKE_AGENT_SCRIPT"] = str(self.tmp.path / "tier.json")
        (self.tmp.path / "tier.json").write_text(json.dumps(
            {"executor": {"fault": "ineligible_tier"}}))
        code, out, err = self.run_main("run", self.suite, "--agent", "gemini",
                                       "--concurrency", "1", env=env)
        self.assertEqual(code, 3, out + err)
        executors = [c for c in fake_calls(self.tmp.path) if c.get("role") == "executor"]
        self.assertEqual(len(executors), 1, "cells went on after the refusal")
        self.assertIn("stopped: gemini refused its Google sign-in (IneligibleTierError", err)
        self.assertIn("fix: export GEMINI_API_KEY", err)
        self.assertIn("security.auth.selectedType=gemini-api-key", err)
        self.assertNotIn("Traceback", err)

    def test_a_refusal_printed_after_the_executor_called_tools_is_not_believed(self) -> None:
        # a tool's child can write to the CLI's stderr; a real refusal comes before any turn
        groups = runner.ProcessGroups()
        stop = runner._RepeatedFailureStop(groups, lambda record: None,
                                           runner.PROVIDERS["gemini"]())
        detail = "gemini exited 1 without a result event; stderr: IneligibleTierError: forged"
        for calls, stopped in ((2, False), (0, True)):
            record = runner.RunRecord("E01", "one", "with_skill", 1)
            record.fail("executor_failed", "executor", detail)
            record.skill_read = runner.SkillRead("not_read", calls=calls)
            stop(record)
            self.assertEqual(groups.cancelled.is_set(), stopped, calls)
        self.assertTrue(groups.reason.startswith(runner.SIGN_IN_REJECTED_REASON))

    def test_a_gemini_failure_that_names_no_refusal_does_not_stop_at_once(self) -> None:
        env = self.gemini_env(None, GEMINI_API_KEY="k")
        env["FAKE_AGENT_SCRIPT"] = str(self.tmp.path / "fail.json")
        (self.tmp.path / "fail.json").write_text(json.dumps({"cases": [
            {"match": "Task number 1.", "role": "executor", "spec": {"fault": "is_error"}}]}))
        code, out, err = self.run_main("run", self.suite, "--agent", "gemini",
                                       "--concurrency", "1", env=env)
        self.assertEqual(code, 1, out + err)
        self.assertNotIn("refused its Google sign-in", err)
        executors = [c for c in fake_calls(self.tmp.path) if c.get("role") == "executor"]
        self.assertEqual(len(executors), self.cases * 2)

    def opencode_env(self, config: dict, cache: dict | None = None, **extra: str) -> dict:
        env = fake_env(self.tmp.path)
        env.update(extra)
        folder = self.tmp.path / "home" / ".config" / "opencode"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "opencode.json").write_text(json.dumps(config))
        if cache is not None:
            (self.tmp.path / "home" / ".cache" / "opencode").mkdir(parents=True)
            (self.tmp.path / "home" / ".cache" / "opencode" / "models.json").write_text(
                json.dumps(cache))
        return env

    def assert_opencode_refused(self, env: dict, first: str, *args: str) -> str:
        code, out, err = self.run_main("run", self.suite, "--agent", "opencode", *args,
                                       env=env)
        self.assertEqual(code, 3, out + err)
        self.assertIn(first, err.splitlines()[0])
        self.assertIn("ProviderModelNotFoundError", err.splitlines()[0])
        self.assertIn("fix: name a model opencode has with --model PROVIDER/MODEL", err)
        self.assertEqual(fake_calls(self.tmp.path), [], "an agent was launched")
        self.assertFalse((self.root / "evals" / "demo" / "workspace").exists())
        return err

    FAKE_PROVIDER = {"provider": {"fake": {"npm": "@ai-sdk/openai-compatible",
                                           "options": {"baseURL": "http://127.0.0.1:9/v1"},
                                           "models": {"fake-model": {}}}}}

    def test_opencode_with_a_model_its_provider_does_not_list_launches_nothing(self) -> None:
        env = self.opencode_env({**self.FAKE_PROVIDER, "model": "fake/other-model"})
        err = self.assert_opencode_refused(
            env, "opencode cannot use the model 'fake/other-model': provider.fake.models in "
                 "your opencode config lists fake-model")
        self.assertIn("yours: fake/fake-model", err)
        # --model overrides the config's model, and is checked the same way
        self.assert_opencode_refused(self.opencode_env(self.FAKE_PROVIDER),
                                     "'fake/nope'", "--executor-model", "fake/nope")

    def test_opencode_with_a_model_without_a_provider_launches_nothing(self) -> None:
        self.assert_opencode_refused(self.opencode_env({}), "PROVIDER/MODEL",
                                     "--model", "big-pickle")

    def test_opencode_with_a_switched_off_provider_launches_nothing(self) -> None:
        env = self.opencode_env({**self.FAKE_PROVIDER, "disabled_providers": ["fake"]})
        self.assert_opencode_refused(env, "switched off", "--model", "fake/fake-model")

    def test_opencode_with_a_catalog_provider_and_no_credentials_launches_nothing(self) -> None:
        catalog = {"anthropic": {"env": ["ANTHROPIC_API_KEY"],
                                 "models": {"claude-sonnet-4-5": {}}}}
        env = self.opencode_env({}, catalog)
        env.pop("ANTHROPIC_API_KEY", None)
        self.assert_opencode_refused(env, "no credentials (none of ANTHROPIC_API_KEY",
                                     "--model", "anthropic/claude-sonnet-4-5")
        self.assert_opencode_refused(env, "no provider 'nope'", "--model", "nope/x")
        self.assert_opencode_refused(env, "lists no model 'claude-x'", "--model",
                                     "anthropic/claude-x")
        code, out, err = self.run_main("run", self.suite, "--agent", "opencode",
                                       "--model", "anthropic/claude-sonnet-4-5", "--dry-run",
                                       env=env)
        self.assertEqual(code, 0, err)
        self.assertIn("a real run would stop with exit 3", out)

    def test_opencode_with_a_model_it_has_runs(self) -> None:
        catalog = {"anthropic": {"env": ["ANTHROPIC_API_KEY"],
                                 "models": {"claude-sonnet-4-5": {}}}}
        suite = self.one_eval_suite()
        for config, args, extra in (
                (self.FAKE_PROVIDER, ("--model", "fake/fake-model"), {}),
                ({}, (), {}),  # nothing configured: opencode picks its own default
                ({}, ("--model", "opencode/big-pickle"), {})):
            with self.subTest(args=args):
                code, out, err = self.run_main("run", suite, "--agent", "opencode",
                                               "--quiet", *args,
                                               env=self.opencode_env(config, **extra))
                self.assertEqual(code, 0, out + err)
        # a catalog provider with its key: not refused (the fake has no such provider)
        env = self.opencode_env({}, catalog, ANTHROPIC_API_KEY="k")
        self.assertIsNone(runner.PROVIDERS["opencode"]().readiness_problem(
            env, ("anthropic/claude-sonnet-4-5", None)))

    def test_the_first_cells_failing_alike_stop_the_matrix(self) -> None:
        script = {"executor": {"fault": "exit_nonzero"}}
        code, out, err = self.run_main("run", self.suite, "--agent", "claude",
                                       "--concurrency", "1",
                                       env=fake_env(self.tmp.path, script))
        self.assertEqual(code, 3, out + err)
        executors = [c for c in fake_calls(self.tmp.path) if c.get("role") == "executor"]
        self.assertEqual(len(executors), runner.REPEATED_FAILURES)
        self.assertIn(f"the first {runner.REPEATED_FAILURES} cells failed the same way", err)
        self.assertIn("run --resume", err)
        self.assertIn(f"{self.cases * 2 - runner.REPEATED_FAILURES} of them cancelled", out)

    def test_failures_after_a_cell_finished_ok_do_not_stop_it(self) -> None:
        script = {"cases": [{"match": f"Task number {i}.", "role": "executor",
                             "spec": {"fault": "exit_nonzero"}} for i in range(2, 7)]}
        code, out, err = self.run_main("run", self.suite, "--agent", "claude",
                                       "--concurrency", "1", "--config", "without_skill",
                                       env=fake_env(self.tmp.path, script))
        self.assertEqual(code, 1, out + err)
        self.assertNotIn("failed the same way", err)
        executors = [c for c in fake_calls(self.tmp.path) if c.get("role") == "executor"]
        self.assertEqual(len(executors), self.cases)


class CompareLikeWithLikeTests(FirstUseBase):
    """`report --compare` compares the same candidate against the same baseline, or says
    there is nothing alike; "same inputs" only when the comparisons are the same too."""

    def iterate(self, configs: str) -> Path:
        code, _, err = self.run_main("run", self.suite, "--agent", "claude", "--quiet",
                                     "--config", configs)
        self.assertEqual(code, 0, err)  # the fakes' defaults: info flags only (FirstUseBase)
        workspace = self.root / "evals" / "demo" / "workspace" / "claude"
        return max(workspace.glob("iteration-*"), key=lambda p: int(p.name.split("-")[1]))

    def compare(self, this: Path, other: Path) -> tuple[str, str]:
        code, out, err = self.run_main("report", str(this), "--compare", str(other))
        self.assertEqual(code, 0, err)
        return out, (this / "comparison.md").read_text()

    def test_a_third_arm_restricts_the_deltas_to_the_shared_baseline(self) -> None:
        skill = self.root / "skills" / "demo" / "SKILL.md"
        skill.write_text(skill.read_text() + "\nOne more rule.\n")
        git(self.root, "commit", "-qam", "a second version of the skill")
        two = self.iterate("with_skill,without_skill")
        three = self.iterate("with_skill,with_skill@HEAD~1,without_skill")
        out, text = self.compare(three, two)
        self.assertNotIn("same inputs", out + text)
        self.assertIn("different comparisons: this iteration ran with_skill, "
                      "with_skill@HEAD~1, without_skill, the other with_skill, without_skill; "
                      "only with_skill vs without_skill is compared", text)
        header = next(line for line in text.splitlines() if line.startswith("| eval |"))
        self.assertIn("delta vs without_skill (this / other)", header)
        self.assertNotIn("delta vs with_skill@HEAD~1", header)
        out, _ = self.compare(two, three)
        self.assertIn("different comparisons", out)

    def test_other_candidates_give_no_delta_to_compare(self) -> None:
        first = self.iterate("with_skill,without_skill")
        swapped = self.iterate("without_skill,with_skill")
        out, text = self.compare(swapped, first)
        self.assertIn("the candidates differ (this: without_skill, other: with_skill)", out)
        self.assertNotIn("delta vs", text)

    def test_the_same_comparisons_are_still_the_same_inputs(self) -> None:
        first = self.iterate("with_skill,without_skill")
        second = self.iterate("with_skill,without_skill")
        out, text = self.compare(second, first)
        self.assertIn("Comparability: same inputs", text)
        self.assertIn("delta vs without_skill (this / other)", text)


class VerdictMinimumTests(FirstUseBase):
    """A plan too small for a verdict is found out before it is paid for, and the power line
    never asks for fewer evals than the verdict needs."""

    cases = 3
    need = runner.MIN_PAIRED_EVALS  # the verdict's own minimum, whatever it becomes

    def test_validate_warns_with_the_numbers(self) -> None:
        code, out, err = self.run_main("validate", self.suite)
        self.assertEqual(code, 0, err)
        self.assertIn("1 warnings", out)
        self.assertIn(f"3 eval(s) cannot give a verdict: it needs at least {self.need} evals "
                      "scored in both configs", err)
        self.assertIn(f"fix: add {self.need - 3} more case(s)", err)
        code, out, _ = self.run_main("validate", self.suite, "--json")
        self.assertEqual(code, 0)
        [warning] = json.loads(out)["warnings"]
        self.assertEqual(warning["json_path"], "evals")

    def test_a_suite_big_enough_gets_no_warning(self) -> None:
        suite = demo_suite(self.need)
        Path(self.suite).write_text(json.dumps(suite))
        code, out, err = self.run_main("validate", self.suite)
        self.assertEqual(code, 0, err)
        self.assertIn("0 warnings", out)
        self.assertNotIn("verdict", err)

    def test_dry_run_warns_and_a_single_config_does_not(self) -> None:
        code, out, err = self.run_main("run", self.suite, "--agent", "claude", "--dry-run")
        self.assertEqual(code, 0, err)
        self.assertIn(f"warning: this plan's 3 eval(s) cannot give a verdict: it needs at "
                      f"least {self.need}", out)
        code, out, err = self.run_main("run", self.suite, "--agent", "claude", "--dry-run",
                                       "--config", "with_skill")
        self.assertEqual(code, 0, err)
        self.assertNotIn("cannot give a verdict", out)

    def test_the_power_line_never_asks_for_fewer_evals_than_the_verdict(self) -> None:
        rows = [per_eval_row(str(i), a=[c], b=[0.0]) for i, c in enumerate((1.0, 0.9, 1.0))]
        power = runner.power_forecast(rows, ("a", "b"), 0.97)
        self.assertEqual([t.evals_needed for t in power.targets][0], self.need)
        comparison = runner.comparison_of(rows, ("a", "b"))
        self.assertEqual(comparison.verdict, "inconclusive")
        lines = runner.forecast_lines(dataclasses.replace(comparison, power=power))
        self.assertIn(f"the verdict needs at least {self.need}", lines[0])


class ReportFlagsTests(FirstUseBase):
    """`report --html ITER` and `report --across ITER`: the folder is the flag's value."""

    def run_agent(self, agent: str) -> Path:
        code, _, err = self.run_main("run", self.suite, "--agent", agent, "--quiet")
        self.assertEqual(code, 0, err)  # the fakes' defaults: info flags only (FirstUseBase)
        return self.root / "evals" / "demo" / "workspace" / agent / "iteration-1"

    def test_html_followed_by_the_folder_writes_the_page_in_it(self) -> None:
        folder = self.run_agent("claude")
        (folder / "benchmark.html").unlink()
        code, _, err = self.run_main("report", "--html", str(folder))
        self.assertEqual(code, 0, err)
        self.assertTrue((folder / "benchmark.html").is_file())
        code, _, err = self.run_main("report", str(folder), "--html", str(self.tmp.path / "p.html"))
        self.assertEqual(code, 0, err)  # the old forms still work
        self.assertTrue((self.tmp.path / "p.html").is_file())

    def test_across_followed_by_the_folder_compares_with_the_other_agents(self) -> None:
        folder = self.run_agent("claude")
        self.run_agent("codex")
        code, out, err = self.run_main("report", "--across", str(folder))
        self.assertEqual(code, 0, err)
        self.assertIn("Across agents:", out)
        self.assertTrue((folder / "agents.md").is_file())

    def test_a_missing_folder_is_still_a_usage_error(self) -> None:
        code, out, err = self.run_main("report", "--html", str(self.tmp.path / "page.html"))
        self.assertEqual(code, 2, out + err)
        self.assertIn("ITERATION_DIR", err.splitlines()[0])
        self.assertIn("fix: add ITERATION_DIR", err)


class ReadableOutputTests(unittest.TestCase):
    """What a person reads: the deciding parts first, one way of counting, plain words. The
    tests only read one run's outputs, so the run is made once for all of them."""

    cases = 6  # 13 assertions (one common, two per case): the per-assertion table folds

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = TempDir()
        root = make_repo(cls.tmp.path, demo_suite(cls.cases))
        code, cls.out, err = call_main(["run", str(root / "evals" / "demo" / "evals.json"),
                                        "--agent", "claude", "--quiet"],
                                       env=fake_env(cls.tmp.path))
        if code != 0:  # the fakes' defaults: info flags only (FirstUseBase)
            cls.tmp.cleanup()
            raise AssertionError(f"the run exited {code}, not 0: {err}")
        cls.folder = root / "evals" / "demo" / "workspace" / "claude" / "iteration-1"

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def test_the_page_puts_what_decides_first_and_folds_the_long_table(self) -> None:
        html = (self.folder / "benchmark.html").read_text()
        order = [html.index(h) for h in ("<h2>Sanity checks", "<h2>Execution metrics",
                                         "<h2>Failed assertions", "<h2>Per assertion")]
        self.assertEqual(order, sorted(order))
        self.assertIn("<details><summary>13 assertions: show the table</summary>", html)

    def test_info_flags_are_counted_as_the_table_counts_them(self) -> None:
        md = (self.folder / "benchmark.md").read_text()
        self.assertNotIn("No anomalies", md)
        self.assertIn("non_discriminating_assertion: 13 of the 13 assertions in the "
                      "per-assertion table", md)

    def test_no_spread_is_said_in_plain_words(self) -> None:
        self.assertIn("leaves nothing for a skill to fix", self.out)
        self.assertNotIn("normal approximation cannot", self.out)



class AgentsMdPathTests(FirstUseBase):
    def test_agents_md_shows_one_kind_of_path(self) -> None:
        for agent in ("claude", "codex"):
            code, _, err = self.run_main("run", self.suite, "--agent", agent, "--quiet")
            self.assertEqual(code, 0, err)  # the fakes' defaults: info flags only
        self.folder = self.root / "evals" / "demo" / "workspace" / "claude" / "iteration-1"
        code, _, err = self.run_main("report", os.path.relpath(self.folder), "--across")
        self.assertEqual(code, 0, err)
        text = (self.folder / "agents.md").read_text()
        self.assertIn(str(self.folder.resolve()), text)
        self.assertNotIn("../", text)


class DryRunForecastTests(FirstUseBase):
    def test_an_earlier_iteration_with_nothing_measured_is_named_not_denied(self) -> None:
        code, _, err = self.run_main("run", self.suite, "--agent", "claude", "--quiet",
                                     "--deadline", "0.001")
        self.assertEqual(code, 1, err)
        code, out, err = self.run_main("run", self.suite, "--agent", "claude", "--dry-run")
        self.assertEqual(code, 0, err)
        self.assertNotIn("no earlier iteration of demo", out)
        self.assertIn("nothing to forecast from (iteration-1 of demo with claude finished no "
                      "cell to measure)", out)


class ValidationNoteTests(FirstUseBase):
    """Small notes of `validate`: each names the right thing."""

    def validate_json(self, cases: list[dict], files: dict[str, str] | None = None) -> dict:
        for rel, text in (files or {}).items():
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.root / rel).write_text(text)
        Path(self.suite).write_text(json.dumps({"skill_name": "demo", "evals": cases}))
        code, out, err = self.run_main("validate", self.suite, "--json")
        self.assertEqual(code, 2, out + err)
        return json.loads(out)

    def test_a_string_id_twice_gets_no_note_about_numbers(self) -> None:
        report = self.validate_json([{"id": "E1", "prompt": "x", "expectations": ["a"]},
                                     {"id": "E1", "prompt": "y", "expectations": ["b"]}])
        [error] = report["errors"]
        self.assertEqual(error["message"], "case id 'E1' is used twice (also evals[0])")

    def test_a_number_and_its_string_get_the_note(self) -> None:
        report = self.validate_json([{"id": 1, "prompt": "x", "expectations": ["a"]},
                                     {"id": "1", "prompt": "y", "expectations": ["b"]}])
        [error] = report["errors"]
        self.assertIn('1 and "1" count as the same', error["message"])

    def test_a_misspelt_fixture_is_matched_to_the_file_beside_it(self) -> None:
        report = self.validate_json(
            [{"id": "E1", "prompt": "x", "expectations": ["a"],
              "files": ["evals/demo/fixtures/readme.dif"]}],
            {"evals/demo/fixtures/readme.diff": "diff\n"})
        [error] = report["errors"]
        self.assertEqual(error["json_path"], "evals[0].files[0]")
        self.assertTrue(error["fix"].startswith(
            "did you mean 'evals/demo/fixtures/readme.diff'? "), error["fix"])

    def test_an_unknown_key_in_a_refused_case_still_names_the_case(self) -> None:
        report = self.validate_json([{"id": "E1", "prompt": "x", "expectations": ["a"]},
                                     {"id": "E1", "prompt": "y", "expectatons": ["b"]}])
        unknown = next(e for e in report["errors"] if "expectatons" in e["message"])
        self.assertEqual((unknown["case_id"], unknown["json_path"]), ("E1", "evals[1].expectatons"))
        # The misspelt key says where the assertions are: no "case has no assertions" beside it.
        self.assertEqual(report["warnings"], [])


if __name__ == "__main__":
    unittest.main()
