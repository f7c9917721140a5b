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
import subprocess
import time
import unittest
from pathlib import Path
from unittest import mock

from tests.helpers import (
    FAKES,
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
  if [ -n "$HOSTILE_LIST" ]; then
    ls -a "$(printf '%s' "$HOSTILE_LIST" | base64 -d)" 2>&1 | sed 's/^/listed: /'
  fi
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
    # The CLI in a folder holding the sandbox root: binding the CLI's folder binds them all.
    sandboxes_beside_the_cli = False

    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.root = make_repo(self.tmp.path, demo_suite(2))
        self.workspace = self.tmp.path / "workspace"
        self.checkout_before = tree_digest(self.root)
        bin_dir = write_hostile_claude(self.tmp.path / "hostile-bin")
        self.token = f"hostile-{os.getpid()}-{time.monotonic_ns()}"
        env = fake_env(self.tmp.path)
        if self.sandboxes_beside_the_cli:
            bin_dir = write_hostile_claude(self.tmp.path / "cli")
            self.sandbox_root = bin_dir / "sb"
            self.sandbox_root.mkdir()
            env.update(SKILL_EVAL_SANDBOX_ROOT=str(self.sandbox_root),
                       HOSTILE_LIST=b64(self.sandbox_root))
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


@unittest.skipIf(bwrap_problem() is not None, f"needs working bubblewrap: {bwrap_problem()}")
class SandboxRootInsideTheCliFolderTest(HostileExecutorCase):
    """Issue 24 item 2: the CLI in X/cli/claude, the sandboxes in X/cli/sb. The CLI's folder
    is bound read-only, and with it, unless hidden, every cell's sandbox, home and template."""

    isolation = "bwrap"
    find = True
    sandboxes_beside_the_cli = True

    def test_an_executor_sees_no_other_cell_nor_any_home_or_grader_folder(self) -> None:
        self.assertEqual(self.code, 1, self.err)  # its left-behind daemons are flagged
        reports = self.reports()
        self.assertEqual(len(reports), 4, self.err)
        for name, text in reports.items():
            record = self.run_json(str(Path(name).parent.parent))
            own = Path(record["sandbox"]["path"]).parent.name
            template = Path(json.loads((self.iteration / "iteration_manifest.json").read_text())
                            ["git_template"]["path"]).name
            listed = {line[len("listed: "):] for line in text.splitlines()
                      if line.startswith("listed: ")}
            with self.subTest(run=name):
                self.assertIn(own, listed)
                # Its own sandbox, and the template folder only as the way to the objects it
                # borrows; no other cell's sandbox, no home, no grader folder.
                self.assertLessEqual(listed, {".", "..", own, template})

    def test_a_baseline_run_finds_no_copy_of_the_skill(self) -> None:
        ConfinedHostileExecutorTest.test_a_baseline_run_finds_no_copy_of_the_skill(self)


HOISTED_LAUNCHER = """#!/usr/bin/env python3
# Like an npm launcher: the real program is in a sibling package of the same node_modules.
import os
import sys

native = os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..",
                      "claude-code-linux-x64", "claude")
if not os.path.exists(native):
    sys.exit("Missing optional dependency @anthropic-ai/claude-code-linux-x64")
os.execv(native, [native, *sys.argv[1:]])
"""


def write_hoisted_install(prefix: Path) -> Path:
    """A fake claude laid out as `npm install --prefix PREFIX` leaves it; its bin folder."""
    modules = prefix / "node_modules"
    launcher = modules / "@anthropic-ai" / "claude-code" / "bin" / "claude"
    native = modules / "@anthropic-ai" / "claude-code-linux-x64"
    launcher.parent.mkdir(parents=True)
    native.mkdir(parents=True)
    launcher.write_text(HOISTED_LAUNCHER, encoding="utf-8")
    launcher.chmod(0o755)
    for name in ("claude", "_fakecore.py"):
        shutil.copy2(FAKES / name, native / name)
    (modules / ".bin").mkdir()
    (modules / ".bin" / "claude").symlink_to("../@anthropic-ai/claude-code/bin/claude")
    return modules / ".bin"


@unittest.skipIf(bwrap_problem() is not None, f"needs working bubblewrap: {bwrap_problem()}")
class HoistedInstallTest(unittest.TestCase):
    """Issue 24 item 1: a CLI whose launcher needs a sibling package starts under bwrap."""

    def test_every_cell_runs_confined_from_a_hoisted_install(self) -> None:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        root = make_repo(tmp.path, demo_suite(1))
        env = fake_env(tmp.path)
        env["PATH"] = f"{write_hoisted_install(tmp.path / 'prefix')}{os.pathsep}{env['PATH']}"
        code, _, err = call_main(["run", str(root / "evals/demo/evals.json"), "--agent",
                                  "claude", "--quiet", "--isolation", "auto"], env)
        self.assertEqual(code, 0, err)
        iteration = root / "evals/demo/workspace/claude/iteration-1"
        for config in ("with_skill", "without_skill"):
            record = json.loads((iteration / f"eval-E01/{config}/run-1/run.json").read_text())
            self.assertEqual(record["status"], "ok", record.get("failure"))
            self.assertEqual(record["executor"]["isolation"]["mode"], "bwrap")

    def test_a_cli_installed_inside_the_checkout_is_refused_under_bwrap(self) -> None:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        root = make_repo(tmp.path, demo_suite(1))
        bin_dir = write_hoisted_install(root / "vendor")
        outside = tmp.path / "bin"
        outside.mkdir()
        (outside / "claude").symlink_to(bin_dir / "claude")  # reached from outside the checkout
        env = fake_env(tmp.path)
        env["PATH"] = f"{outside}{os.pathsep}{env['PATH']}"
        code, _, err = call_main(["run", str(root / "evals/demo/evals.json"), "--agent",
                                  "claude", "--quiet", "--isolation", "bwrap"], env)
        self.assertEqual(code, 3, err)
        self.assertIn("installed inside the checkout", err)
        self.assertIn(str(root / "vendor" / "node_modules"), err)
        self.assertFalse((root / "evals/demo/workspace").exists())


TMP_FILLER = r"""#!/bin/sh
case " $* " in *" --version "*) echo "2.1.197 (Claude Code)"; exit 0 ;; esac
case " $* " in *" --json-schema "*) cat >/dev/null; printf '%s\n' '__GRADER__'; exit 0 ;; esac
cat >/dev/null
# Writes 16 MiB into /tmp; like a CLI whose own write fails, it gives up when the disk is full.
head -c 16777216 /dev/zero > /tmp/filler || exit 1
printf '%s\n' '__EXECUTOR__'
"""


@unittest.skipIf(bwrap_problem() is not None, f"needs working bubblewrap: {bwrap_problem()}")
class TmpSizeTest(unittest.TestCase):
    """Issue 24 item 9: the private /tmp has --tmp-size (default 512 MiB); a cell that fills it
    fails, and its failure says the /tmp was full."""

    def run_filler(self, *extra: str) -> tuple[int, str, Path]:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        root = make_repo(tmp.path, demo_suite(1))
        bin_dir = tmp.path / "filler-bin"
        bin_dir.mkdir()
        (bin_dir / "claude").write_text(TMP_FILLER.replace("__GRADER__", GRADER_ENVELOPE).replace(
            "__EXECUTOR__", EXECUTOR_LINES.replace("\n", "' '")), encoding="utf-8")
        (bin_dir / "claude").chmod(0o755)
        env = fake_env(tmp.path)
        env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
        code, out, err = call_main(["run", str(root / "evals/demo/evals.json"), "--agent",
                                    "claude", "--quiet", "--isolation", "bwrap",
                                    "--config", "without_skill", *extra], env)
        return code, out + err, root / "evals/demo/workspace/claude/iteration-1"

    def test_a_cell_that_fills_its_tmp_fails_and_says_so(self) -> None:
        code, said, iteration = self.run_filler("--tmp-size", "8")
        self.assertEqual(code, 1, said)
        record = json.loads((iteration / "eval-E01/without_skill/run-1/run.json").read_text())
        self.assertEqual(record["status"], "executor_failed")
        self.assertIn("private /tmp (8 MiB, --tmp-size) was most likely full",
                      record["failure"]["detail"])
        self.assertEqual(record["executor"]["isolation"]["tmp_size_bytes"], 8 << 20)
        manifest = json.loads((iteration / "iteration_manifest.json").read_text())
        self.assertEqual(manifest["isolation"]["tmp_size_bytes"], 8 << 20)
        self.assertIn("/tmp 8 MiB", manifest["isolation"]["summary"])

    def test_the_default_size_holds_what_a_cell_usually_writes(self) -> None:
        code, said, iteration = self.run_filler()
        self.assertEqual(code, 0, said)
        record = json.loads((iteration / "eval-E01/without_skill/run-1/run.json").read_text())
        self.assertEqual(record["status"], "ok")
        self.assertEqual(record["executor"]["isolation"]["tmp_size_bytes"], 512 << 20)


@unittest.skipIf(bwrap_problem() is not None, f"needs working bubblewrap: {bwrap_problem()}")
class CliInsideTheSandboxRootTest(unittest.TestCase):
    """The sandbox root is hidden from agents; a CLI inside it could not start: refused."""

    def test_a_cli_in_the_sandbox_root_is_refused_before_anything_starts(self) -> None:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        root = make_repo(tmp.path, demo_suite(1))
        bin_dir = write_hostile_claude(tmp.path / "cli")
        env = fake_env(tmp.path)
        env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", SKILL_EVAL_SANDBOX_ROOT=str(bin_dir))
        code, _, err = call_main(["run", str(root / "evals/demo/evals.json"), "--agent",
                                  "claude", "--quiet", "--isolation", "bwrap"], env)
        self.assertEqual(code, 3, err)
        self.assertIn(f"lies in {os.path.realpath(bin_dir)}, a folder of the runner's", err)
        self.assertFalse((root / "evals/demo/workspace").exists())


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
            chosen = runner._choose_confinement("none")
        probe.assert_not_called()
        self.assertEqual((chosen.mode, chosen.reason), ("none", "--isolation none"))

    def test_auto_without_bwrap_runs_unconfined_and_says_why(self) -> None:
        with mock.patch.object(runner.shutil, "which", return_value=None):
            chosen = runner._choose_confinement("auto")
        self.assertEqual(chosen.mode, "none")
        self.assertIn("bwrap", chosen.reason)
        self.assertIn("executors could reach the checkout", chosen.describe())

    def test_auto_when_the_probe_fails_runs_unconfined_with_the_probe_reason(self) -> None:
        with mock.patch.object(runner.shutil, "which", return_value="/usr/bin/bwrap"), \
                mock.patch.object(runner, "probe_bwrap", return_value="no user namespaces"):
            chosen = runner._choose_confinement("auto")
        self.assertEqual((chosen.mode, chosen.reason), ("none", "no user namespaces"))

    def test_a_bwrap_that_cannot_size_a_tmpfs_runs_with_an_unbounded_tmp_and_says_so(
            self) -> None:
        with mock.patch.object(runner.shutil, "which", return_value="/usr/bin/bwrap"), \
                mock.patch.object(runner, "bwrap_sizes_tmpfs", return_value=False), \
                mock.patch.object(runner, "probe_bwrap", return_value=None) as probe, \
                mock.patch.object(runner, "bwrap_version", return_value="0.4.0"):
            chosen = runner._choose_confinement("auto", 64)
        probe.assert_called_once_with("/usr/bin/bwrap", None,  # probed without --size
                                      runner.DEFAULT_MAX_PROCESSES)
        record = chosen.to_json()
        self.assertEqual((record["mode"], record["tmp_size_bytes"]), ("bwrap", None))
        self.assertIn("bwrap 0.4.0 has no --size option", record["tmp_size_reason"])
        self.assertIn("/tmp unbounded", chosen.describe())

    def test_the_installed_bwrap_is_asked_whether_it_can_size_a_tmpfs(self) -> None:
        found = shutil.which("bwrap")
        if found is None:
            self.skipTest("bubblewrap (bwrap) is not installed")
        with mock.patch.object(runner, "probe_bwrap", return_value=None):
            chosen = runner._choose_confinement("bwrap", 64)
        sizes = "--size" in subprocess.run([found, "--help"], capture_output=True,
                                           text=True).stdout
        self.assertEqual(chosen.tmp_size_bytes, 64 << 20 if sizes else None)

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

    def test_the_private_tmp_gets_the_size_asked_for(self) -> None:
        argv = self.argv(limits=runner.Limits(tmp_size=8 << 20))
        at = argv.index("/tmp")
        self.assertEqual(argv[at - 3:at + 1], ["--size", str(8 << 20), "--tmpfs", "/tmp"])
        self.assertNotIn("--size", self.argv())  # unsized only when no size is given

    def test_options_go_through_a_descriptor_not_the_command_line(self) -> None:
        argv = self.argv(mounts=runner.Mounts(hide=[self.tmp.path / "checkout"]))
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
