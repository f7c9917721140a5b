"""Containment: a hostile executor under --isolation bwrap and --isolation none.

The hostile agent is a POSIX sh `claude` (no interpreter to mount) written into a folder
outside the checkout. It is told where the checkout and the workspace are through base64
variables (the runner drops variables that name the checkout, so a plain path would never
reach it), and tries what a misbehaving agent would: read the runner's /proc entries, write
into the checkout and into other cells' results, search the disk for SKILL.md, and leave
double-forked daemons behind that write late. It reports what it saw into the artifact file,
which the runner captures as outputs/plan.md.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import time
import unittest
from pathlib import Path
from unittest import mock

from tests.helpers import (
    TempDir,
    call_main,
    demo_suite,
    fake_env,
    make_repo,
    marked_processes,
    runner,
    tree_digest,
)

GRADER_ENVELOPE = json.dumps({
    "type": "result", "subtype": "success", "is_error": False, "duration_ms": 5,
    "num_turns": 1, "result": "graded", "total_cost_usd": 0.001,
    "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 0,
              "cache_creation_input_tokens": 0},
    "structured_output": {"verdicts": [{"id": i, "passed": True, "evidence": "ok"}
                                       for i in range(1, 4)]}})
EXECUTOR_LINES = "\n".join(json.dumps(event) for event in (
    {"type": "system", "subtype": "init", "cwd": ".", "session_id": "s", "tools": ["Bash"]},
    {"type": "result", "subtype": "success", "is_error": False, "duration_ms": 5,
     "num_turns": 1, "result": "done", "total_cost_usd": 0.001,
     "usage": {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 0,
               "cache_creation_input_tokens": 0}}))

HOSTILE_CLAUDE = r"""#!/bin/sh
case " $* " in *" --version "*) echo "2.1.197 (Claude Code)"; exit 0 ;; esac
case " $* " in *" --json-schema "*) cat >/dev/null; printf '%s\n' '__GRADER__'; exit 0 ;; esac
cat >/dev/null
checkout=$(printf '%s' "$HOSTILE_CHECKOUT" | base64 -d)
workspace=$(printf '%s' "$HOSTILE_WORKSPACE" | base64 -d)
mkdir -p .skill-eval
{
  echo "ppid-cwd: $(readlink /proc/$PPID/cwd 2>&1)"
  echo "ppid-cmdline: $(tr '\0' ' ' < /proc/$PPID/cmdline 2>&1)"
  echo "ppid-environ: $(tr '\0' ' ' < /proc/$PPID/environ 2>&1)"
  echo "pid1-cmdline: $(tr '\0' ' ' < /proc/1/cmdline 2>&1)"
  echo "pid1-environ: $(tr '\0' ' ' < /proc/1/environ 2>&1)"
  echo "home: $HOME"
  { echo pwned >> "$checkout/README.md"; } 2>/dev/null && echo "wrote-checkout-readme"
  { echo pwned >> "$checkout/skills/demo/SKILL.md"; } 2>/dev/null && echo "wrote-checkout-skill"
  { touch "$checkout/planted.txt"; } 2>/dev/null && echo "planted-in-checkout"
  for f in "$workspace"/iteration-*/eval-*/*/run-*/outputs/output.txt; do
    { echo forged > "$f"; } 2>/dev/null && echo "forged-output"
  done
  if [ -n "$HOSTILE_FIND" ]; then
    find / -name SKILL.md 2>/dev/null | sed 's/^/found: /'
  fi
} > .skill-eval/artifact.md 2>&1
ready="$PWD/.skill-eval"
setsid sh -c "touch '$ready/ready-1'; sleep 3; echo forged > '$workspace/late-write.txt'; \
  touch '$checkout/late.txt'" </dev/null >/dev/null 2>&1 &
(setsid sh -c "touch '$ready/ready-2'; exec sleep 300" </dev/null >/dev/null 2>&1 &)
# Leave only once both have their own session: before that, ending our process group would
# end them too, and the runner's own stray hunt would go untested.
while [ ! -e "$ready/ready-1" ] || [ ! -e "$ready/ready-2" ]; do sleep 0.05; done
printf '%s\n' '__EXECUTOR__'
"""


def write_hostile_claude(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "claude"
    text = HOSTILE_CLAUDE.replace("__GRADER__", GRADER_ENVELOPE)
    script.write_text(text.replace("__EXECUTOR__", EXECUTOR_LINES.replace("\n", "' '")),
                      encoding="utf-8")
    script.chmod(0o755)
    return folder


def b64(path: Path) -> str:
    return base64.b64encode(str(path).encode()).decode()


def bwrap_problem() -> str | None:
    """Why these tests cannot confine here, or None."""
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed; .ci/run installs it in CI"
    return runner.probe_bwrap(shutil.which("bwrap"))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class HostileExecutorCase(unittest.TestCase):
    isolation = "none"
    find = False

    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.root = make_repo(self.tmp.path, demo_suite(2))
        self.workspace = self.tmp.path / "workspace"
        self.checkout_before = tree_digest(self.root)
        bin_dir = write_hostile_claude(self.tmp.path / "hostile-bin")
        self.token = f"hostile-{os.getpid()}-{time.monotonic_ns()}"
        env = fake_env(self.tmp.path)
        env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
        env.update(HOSTILE_CHECKOUT=b64(self.root), HOSTILE_WORKSPACE=b64(self.workspace),
                   FAKE_AGENT_MARKER=self.token, CLAUDECODE="runner-only-secret")
        if self.find:
            env["HOSTILE_FIND"] = "1"
        self.addCleanup(self.kill_leftovers)
        self.code, self.out, self.err = call_main(
            ["run", str(self.root / "evals/demo/evals.json"), "--agent", "claude",
             "--workspace", str(self.workspace), "--concurrency", "2", "--timeout", "60",
             "--isolation", self.isolation], env)
        self.ended_at = time.monotonic()
        self.iteration = self.workspace / "iteration-1"

    def kill_leftovers(self) -> None:
        for pid in marked_processes(self.token):
            try:
                os.kill(pid, 9)
            except OSError:
                pass

    def reports(self) -> dict[str, str]:
        found = {}
        for plan in sorted(self.iteration.glob("eval-*/*/run-*/outputs/plan.md")):
            found[plan.relative_to(self.iteration).as_posix()] = plan.read_text(encoding="utf-8")
        return found

    def run_json(self, rel: str) -> dict:
        return json.loads((self.iteration / rel / "run.json").read_text(encoding="utf-8"))

    def assert_no_process_outlives_the_run(self) -> None:
        remaining = 1.0 - (time.monotonic() - self.ended_at)
        if remaining > 0:
            time.sleep(remaining)
        self.assertEqual(marked_processes(self.token), [],
                         "an agent's process was alive 1 s after run returned")

    def assert_the_late_write_never_happens(self) -> None:
        benchmark = self.iteration / "benchmark.json"
        before = digest(benchmark)
        time.sleep(max(0.0, 3.5 - (time.monotonic() - self.ended_at)))
        self.assertFalse((self.workspace / "late-write.txt").exists())
        self.assertFalse((self.root / "late.txt").exists())
        self.assertEqual(digest(benchmark), before)


@unittest.skipIf(bwrap_problem() is not None, f"needs working bubblewrap: {bwrap_problem()}")
class ConfinedHostileExecutorTest(HostileExecutorCase):
    isolation = "bwrap"
    find = True

    def test_the_checkout_and_other_cells_are_out_of_reach(self) -> None:
        self.assertEqual(self.code, 1, self.err)
        reports = self.reports()
        self.assertEqual(len(reports), 4, self.err)
        for name, text in reports.items():
            with self.subTest(run=name):
                for attempt in ("wrote-checkout", "planted-in-checkout", "forged-output"):
                    self.assertNotIn(attempt, text)
                self.assertNotIn(str(self.root), text)
                self.assertNotIn(str(self.workspace), text)
                self.assertNotIn("runner-only-secret", text)
                self.assertIn(f"home: {runner.HOME_INSIDE}", text)
        self.assertEqual(tree_digest(self.root), self.checkout_before)
        for output in self.iteration.glob("eval-*/*/run-*/outputs/output.txt"):
            self.assertEqual(output.read_text(encoding="utf-8"), "done")

    def test_a_baseline_run_finds_no_copy_of_the_skill(self) -> None:
        for name, text in self.reports().items():
            found = [line for line in text.splitlines() if line.startswith("found: ")]
            with self.subTest(run=name):
                if "/without_skill/" in name:
                    self.assertEqual(found, [])
                else:  # its own delivered copy, in its own sandbox, and nothing else
                    self.assertEqual(len(found), 1, found)
                    self.assertTrue(found[0].endswith("/repo/skills/demo/SKILL.md"), found)
                    self.assertNotIn(str(self.root), found[0])

    def test_nothing_outlives_the_run_and_the_late_write_never_happens(self) -> None:
        self.assert_no_process_outlives_the_run()
        self.assert_the_late_write_never_happens()

    def test_the_isolation_is_recorded_per_role_and_in_the_report(self) -> None:
        record = self.run_json("eval-E01/without_skill/run-1")
        for role in ("executor", "grader"):
            self.assertEqual(record[role]["isolation"]["mode"], "bwrap")
        self.assertEqual(record["executor"]["argv"][0], "claude")  # the agent's own argv
        manifest = json.loads((self.iteration / "iteration_manifest.json").read_text())
        self.assertEqual(manifest["isolation"]["mode"], "bwrap")
        markdown = (self.iteration / "benchmark.md").read_text(encoding="utf-8")
        self.assertIn("- Isolation: bwrap ", markdown)
        flags = json.loads((self.iteration / "benchmark.json").read_text())["sanity_checks"]
        self.assertNotIn("unconfined", [f["kind"] for f in flags["flags"]])


class UnconfinedHostileExecutorTest(HostileExecutorCase):
    isolation = "none"

    def test_nothing_outlives_the_run_and_the_late_write_never_happens(self) -> None:
        self.assert_no_process_outlives_the_run()
        self.assert_the_late_write_never_happens()

    def test_running_unconfined_is_recorded_and_flagged(self) -> None:
        record = self.run_json("eval-E01/with_skill/run-1")
        self.assertEqual(record["executor"]["isolation"]["mode"], "none")
        self.assertGreaterEqual(record["executor"]["isolation"]["strays_ended"], 1)
        benchmark = json.loads((self.iteration / "benchmark.json").read_text())
        flags = [f for f in benchmark["sanity_checks"]["flags"] if f["kind"] == "unconfined"]
        self.assertEqual([f["severity"] for f in flags], ["info"])
        self.assertIn("- Isolation: none (--isolation none)",
                      (self.iteration / "benchmark.md").read_text(encoding="utf-8"))


@unittest.skipIf(bwrap_problem() is not None, f"needs working bubblewrap: {bwrap_problem()}")
class ResumedIsolationTest(unittest.TestCase):
    """An iteration whose cells ran under different isolation claims the weakest."""

    def test_a_resume_run_unconfined_makes_the_iteration_unconfined(self) -> None:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        root = make_repo(tmp.path, demo_suite(2))
        env = fake_env(tmp.path)
        common = ["run", str(root / "evals/demo/evals.json"), "--agent", "claude", "--quiet"]
        code, _, err = call_main([*common, "--isolation", "bwrap"], env)
        self.assertEqual(code, 0, err)
        iteration = next((root / "evals/demo/workspace/claude").glob("iteration-*"))
        (iteration / "eval-E01/with_skill/run-1/run.json").unlink()  # left unfinished
        code, _, err = call_main([*common, "--isolation", "none", "--resume", str(iteration)],
                                 env)
        self.assertEqual(code, 0, err)
        rerun = json.loads((iteration / "eval-E01/with_skill/run-1/run.json").read_text())
        self.assertEqual(rerun["executor"]["isolation"]["mode"], "none")
        manifest = json.loads((iteration / "iteration_manifest.json").read_text())
        self.assertEqual(manifest["isolation"]["mode"], "none")
        self.assertEqual(manifest["resumes"][-1]["isolation"]["mode"], "none")
        markdown = (iteration / "benchmark.md").read_text(encoding="utf-8")
        self.assertIn("- Isolation: none (--isolation none)", markdown)
        self.assertNotIn("- Isolation: bwrap", markdown)
        flags = json.loads((iteration / "benchmark.json").read_text())["sanity_checks"]["flags"]
        self.assertIn("unconfined", [f["kind"] for f in flags])


class ChooseConfinementTest(unittest.TestCase):
    def test_none_is_never_probed(self) -> None:
        with mock.patch.object(runner, "probe_bwrap") as probe:
            chosen = runner.choose_confinement("none")
        probe.assert_not_called()
        self.assertEqual((chosen.mode, chosen.reason), ("none", "--isolation none"))

    def test_auto_without_bwrap_runs_unconfined_and_says_why(self) -> None:
        with mock.patch.object(runner.shutil, "which", return_value=None):
            chosen = runner.choose_confinement("auto")
        self.assertEqual(chosen.mode, "none")
        self.assertIn("bwrap", chosen.reason)
        self.assertIn("executors could reach the checkout", chosen.describe())

    def test_auto_when_the_probe_fails_runs_unconfined_with_the_probe_reason(self) -> None:
        with mock.patch.object(runner.shutil, "which", return_value="/usr/bin/bwrap"), \
                mock.patch.object(runner, "probe_bwrap", return_value="no user namespaces"):
            chosen = runner.choose_confinement("auto")
        self.assertEqual((chosen.mode, chosen.reason), ("none", "no user namespaces"))

    def test_bwrap_required_but_missing_is_exit_3_and_nothing_launches(self) -> None:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        root = make_repo(tmp.path, demo_suite(1))
        env = fake_env(tmp.path)
        with mock.patch.object(runner, "probe_bwrap", return_value="no user namespaces"):
            code, _, err = call_main(["run", str(root / "evals/demo/evals.json"), "--agent",
                                      "claude", "--isolation", "bwrap"], env)
        self.assertEqual(code, runner.EXIT_ENVIRONMENT, err)
        self.assertIn("--isolation bwrap: ", err)
        self.assertIn("fix:", err)
        calls = [json.loads(p.read_text()) for p in (tmp.path / "log").glob("*.json")]
        self.assertEqual([c["argv"] for c in calls], [["--version"]] * len(calls),
                         "only the --version check may have run")
        self.assertFalse((root / "evals/demo/workspace").exists())


class BwrapArgvTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.work = self.tmp.path / "work"
        self.home = self.tmp.path / "home"
        self.work.mkdir()
        self.home.mkdir()

    def argv(self, **extra) -> list[str]:
        return runner.bwrap_argv(["agent", "-p"], bwrap="bwrap", workdir=self.work,
                                 home=self.home, **extra)

    def test_the_shape_of_a_confined_launch(self) -> None:
        argv = self.argv()
        for flag in ("--unshare-pid", "--die-with-parent", "--unshare-user"):
            self.assertIn(flag, argv)
        self.assertNotIn("--new-session", argv)  # it would leave the runner's process group
        self.assertEqual(argv[argv.index("--cap-drop") + 1], "ALL")
        self.assertEqual(argv[-3:], ["--", "agent", "-p"])
        tmpfs = argv.index("/tmp") if "--tmpfs" in argv else -1
        work_bind = max(i for i, a in enumerate(argv) if a == str(self.work))
        self.assertLess(tmpfs, work_bind, "the sandbox must be bound after the private /tmp")
        self.assertIn(["--bind", str(self.home), runner.HOME_INSIDE],
                      [argv[i:i + 3] for i in range(len(argv))])
        self.assertEqual(argv[argv.index("--chdir") + 1], str(self.work))
        if os.geteuid() == 0:
            self.assertEqual(argv[argv.index("--uid") + 1], str(runner.CONFINED_UID))

    def test_options_go_through_a_descriptor_not_the_command_line(self) -> None:
        argv = self.argv(hide=[self.tmp.path / "checkout"])
        short, fd = runner.options_through_fd(argv)
        self.addCleanup(os.close, fd)
        self.assertEqual(short[:2], ["bwrap", "--args"])
        self.assertEqual(short[3:], ["--", "agent", "-p"])
        self.assertNotIn(str(self.work), short)
        passed = os.read(fd, 1 << 20).split(b"\0")[:-1]
        self.assertEqual([p.decode() for p in passed], argv[1:argv.index("--")])

    def test_the_agents_environment_points_into_its_fresh_home(self) -> None:
        env = {"HOME": "/root", "XDG_CONFIG_HOME": "/root/.config", "TMPDIR": "/var/tmp/x",
               "CODEX_HOME": "/root/.codex", "PATH": "/usr/bin", "OPENAI_API_KEY": "k"}
        inside = runner.confined_env(env, self.work,
                                     runner.CodexProvider().home_vars(runner.HOME_INSIDE))
        self.assertEqual(inside["HOME"], runner.HOME_INSIDE)
        self.assertEqual(inside["CODEX_HOME"], f"{runner.HOME_INSIDE}/.codex")
        self.assertEqual(inside["TMPDIR"], "/tmp")
        self.assertNotIn("XDG_CONFIG_HOME", inside)
        self.assertEqual((inside["PATH"], inside["OPENAI_API_KEY"]), ("/usr/bin", "k"))

    def test_the_folders_the_agent_is_pointed_to_exist_even_with_nothing_to_carry(self) -> None:
        home = self.tmp.path / "empty-home"
        home.mkdir()
        provider = runner.CodexProvider()
        carried = runner.fill_home(home, provider.home_files({"HOME": str(self.tmp.path / "x")}),
                                   provider.home_vars(runner.HOME_INSIDE))
        self.assertEqual(carried, [])
        self.assertTrue((home / ".codex").is_dir())

    def test_only_login_files_are_carried_into_the_home_never_skills(self) -> None:
        real = self.tmp.path / "real-home"
        codex_home = real / "custom-codex"
        (codex_home / "skills" / "demo").mkdir(parents=True)
        (codex_home / "skills" / "demo" / "SKILL.md").write_text("installed copy")
        (codex_home / "config.toml").write_text("model = 'x'\n")
        (codex_home / "auth.json").write_text("{}")
        (real / ".claude" / "skills" / "demo").mkdir(parents=True)
        (real / ".claude" / ".credentials.json").write_text("{}")
        env = {"HOME": str(real), "CODEX_HOME": str(codex_home)}
        for provider, expected in ((runner.CodexProvider(), [".codex/auth.json",
                                                              ".codex/config.toml"]),
                                   (runner.ClaudeProvider(), [".claude/.credentials.json"])):
            home = self.tmp.path / f"home-{provider.name}"
            home.mkdir()
            carried = runner.fill_home(home, provider.home_files(env),
                                       provider.home_vars(runner.HOME_INSIDE))
            self.assertEqual(carried, expected)
            self.assertEqual(sorted(p.relative_to(home).as_posix() for p in home.rglob("*")
                                    if p.is_file()), expected)


if __name__ == "__main__":
    unittest.main()
