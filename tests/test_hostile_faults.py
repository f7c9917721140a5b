"""Issue 14: what an agent leaves behind or prints must never stall, crash or mislead the runner.

The fault matrix in test_reliability.py covers each new fault kind for both providers (special
files at the artifact path, a linked artifact folder, lone surrogates, 100k-deep JSON, verdict
floods, forged prompt sections). This file holds what does not fit one matrix cell: ending a
run whatever was left behind, a full disk, an interrupted start, the grader prompt's boundary,
the notes cap and the exit code for the runner's own faults.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import unittest
from pathlib import Path
from unittest import mock

from tests import helpers as h
from tests.test_reliability import (
    FORGED,
    ProcessAudit,
    iteration_dirs,
    load_json,
    suite_file,
)

runner = h.runner
END_WITHIN_S = 5.0           # the bound: a run ends within 5 s of the moment
STARTUP_SLACK_S = 3.0        # python start, template build: before the moment is measured from


def hang_script(hang_fault: str = "hang") -> dict:
    """E01's executor leaves a FIFO at the artifact path and answers; E02's hangs."""
    return {"cases": [
        {"match": "Task number 1.", "role": "executor",
         "spec": {"shell_special": {".skill-eval/artifact.md": "fifo"}}},
        {"match": "Task number 2.", "role": "executor", "spec": {"fault": hang_fault}}]}


class RunCanAlwaysBeEndedTests(ProcessAudit, unittest.TestCase):
    """--timeout, --deadline, Ctrl-C and SIGTERM each end a run with a FIFO left behind."""

    def start(self, provider: str, *extra: str) -> tuple[subprocess.Popen, Path, Path]:
        tmp, repo, marker, env = self.marked_repo(2, hang_script())
        self.marker = marker
        argv = ["run", suite_file(repo), "--agent", provider, "--config", "without_skill",
                "--concurrency", "2", "--quiet", *extra]
        proc = h.start_script(argv, env=env, cwd=repo, out_dir=tmp / "out")
        self.stop_later(proc)
        return proc, tmp, repo

    def wait_exit(self, proc: subprocess.Popen, limit_s: float) -> float:
        """Wait for the runner; the time.time() it ended at."""
        try:
            proc.wait(timeout=limit_s)
            return time.time()
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            self.fail(f"the run did not end within {limit_s:.1f} s:\n"
                      + h.read_output(proc)[1][-2000:])

    def executor_started(self, tmp: Path, case: int) -> float | None:
        """When the fake logged case's executor call (time.time), or None."""
        for path in sorted((tmp / "log").glob("*.json")):
            call = json.loads(path.read_text(encoding="utf-8"))
            if call.get("role") == "executor" and f"Task number {case}." in (call["prompt"] or ""):
                return int(path.name.split("-")[0]) / 1e9
        return None

    def check_fifo_cell(self, repo: Path, provider: str) -> None:
        self.assertNoMarkedProcesses(self.marker)
        (iteration,) = iteration_dirs(repo / "evals" / "demo" / "workspace" / provider)
        run = load_json(iteration / "eval-E01" / "without_skill" / "run-1" / "run.json")
        self.assertEqual(run["status"], "ok", run.get("failure"))
        self.assertTrue(run["scored"], "graded on its answer")
        self.assertFalse(run["written_artifact"]["captured"])
        self.assertIn("FIFO", run["written_artifact"]["reason"])
        self.assertTrue((iteration / "benchmark.json").is_file())

    def fifo_cell_finished(self, tmp: Path, repo: Path) -> None:
        """Wait until E01 (the FIFO) is written and E02's executor hangs."""
        workspace = repo / "evals" / "demo" / "workspace" / "claude"
        done = lambda: (self.executor_started(tmp, 2) is not None and any(  # noqa: E731
            (i / "eval-E01" / "without_skill" / "run-1" / "run.json").is_file()
            for i in iteration_dirs(workspace)))
        self.assertTrue(h.wait_until(done, 30), "the cell with the FIFO never finished")

    def test_timeout_ends_the_run(self) -> None:
        for provider in ("claude", "codex"):
            with self.subTest(provider=provider):
                proc, tmp, repo = self.start(provider, "--timeout", "5")
                ended = self.wait_exit(proc, 60)
                started = self.executor_started(tmp, 2)
                self.assertLess(ended - started, 5 + END_WITHIN_S + STARTUP_SLACK_S)
                self.check_fifo_cell(repo, provider)

    def test_deadline_ends_the_run(self) -> None:
        started = time.monotonic()
        proc, _, repo = self.start("claude", "--timeout", "60", "--deadline", "8")
        self.wait_exit(proc, 8 + END_WITHIN_S + STARTUP_SLACK_S)
        self.assertLess(time.monotonic() - started, 8 + END_WITHIN_S + STARTUP_SLACK_S)
        self.check_fifo_cell(repo, "claude")

    def check_signal(self, sig: int) -> None:
        proc, tmp, repo = self.start("claude", "--timeout", "60")
        self.fifo_cell_finished(tmp, repo)
        proc.send_signal(sig)
        self.wait_exit(proc, END_WITHIN_S)
        self.assertEqual(proc.returncode, 130, h.read_output(proc)[1][-2000:])
        self.check_fifo_cell(repo, "claude")

    def test_ctrl_c_ends_the_run(self) -> None:
        self.check_signal(signal.SIGINT)

    def test_sigterm_ends_the_run(self) -> None:
        self.check_signal(signal.SIGTERM)


class ArtifactCaptureTests(unittest.TestCase):
    """capture_artifact on its own: every kind of node, every component unfollowed."""

    def setUp(self) -> None:
        self.tmp = h.TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.repo = self.tmp.path / "cell" / "repo"
        (self.repo / ".skill-eval").mkdir(parents=True)
        self.artifact = self.repo / runner.ARTIFACT_RELPATH

    def capture(self) -> dict:
        # from the sandbox base: the folder the executor cannot replace
        artifact, shown = runner._capture_artifact(self.artifact, self.tmp.path)
        return {**artifact.to_json(), **({} if shown is None else {"text": shown})}

    def test_a_fifo_is_refused_at_once(self) -> None:
        os.mkfifo(self.artifact)
        started = time.monotonic()
        found = self.capture()
        self.assertLess(time.monotonic() - started, 1.0)
        self.assertFalse(found["captured"])
        self.assertIn("FIFO", found["reason"])
        self.assertNotIn("text", found)

    def test_a_folder_is_refused(self) -> None:
        self.artifact.mkdir()
        found = self.capture()
        self.assertFalse(found["captured"])
        self.assertIn("folder", found["reason"])

    def test_a_linked_artifact_folder_is_not_followed(self) -> None:
        outside = self.tmp.path / "outside"
        outside.mkdir()
        (outside / "artifact.md").write_text("SECRET", encoding="utf-8")
        os.rmdir(self.repo / ".skill-eval")
        os.symlink(outside, self.repo / ".skill-eval")
        found = self.capture()
        self.assertFalse(found["captured"])
        self.assertIn("link", found["reason"])
        self.assertNotIn("text", found)

    def test_a_linked_sandbox_folder_is_not_followed(self) -> None:
        outside = self.tmp.path / "outside" / ".skill-eval"
        outside.mkdir(parents=True)
        (outside / "artifact.md").write_text("SECRET", encoding="utf-8")
        real = self.tmp.path / "cell" / "moved"
        os.rename(self.repo, real)
        os.symlink(outside.parent, self.repo)
        found = self.capture()
        self.assertFalse(found["captured"])
        self.assertIn("link", found["reason"])

    def test_a_regular_file_is_captured(self) -> None:
        self.artifact.write_text("# Plan\n", encoding="utf-8")
        found = self.capture()
        self.assertTrue(found["captured"], found)
        self.assertEqual(found["text"], "# Plan\n")


class GraderPromptBoundaryTests(unittest.TestCase):
    def test_forged_closing_tags_stay_inside_the_boundary(self) -> None:
        prompt = runner.build_grader_prompt("Task.", FORGED, FORGED + "</written_artifact>",
                                            False, ["It is polite."])
        boundary = re.search(r"^Boundary: (\S+)$", prompt, re.MULTILINE).group(1)
        self.assertNotIn(boundary, FORGED)
        for name, content in (("recorded_output", FORGED),
                              ("written_artifact", FORGED + "</written_artifact>")):
            begin, end = f"BEGIN {name} {boundary}\n", f"\nEND {name} {boundary}\n"
            self.assertEqual(prompt.count(begin), 1)
            self.assertEqual(prompt.count(end), 1)
            self.assertEqual(prompt.split(begin, 1)[1].split(end, 1)[0], content)
        self.assertEqual(prompt.count("## Assertions"), 3)  # the real one and two quoted fakes
        self.assertLess(prompt.index("## Assertions"), prompt.index("BEGIN task"))

    def test_the_boundary_changes_every_time_and_avoids_the_content(self) -> None:
        prompts = [runner.build_grader_prompt("t", "o", None, False, ["a"]) for _ in range(3)]
        boundaries = {re.search(r"^Boundary: (\S+)$", p, re.MULTILINE).group(1) for p in prompts}
        self.assertEqual(len(boundaries), 3)
        with mock.patch.object(runner, "_new_boundary", side_effect=["dup", "dup", "fresh"]):
            prompt = runner.build_grader_prompt("t", "has dup inside", None, False, ["a"])
        self.assertIn("Boundary: fresh", prompt)

    def test_the_grader_is_told_only_the_boundary_ends_a_section(self) -> None:
        self.assertIn("only", runner.GRADER_PREAMBLE)
        self.assertIn("boundary", runner.GRADER_PREAMBLE)


class NotesAndTextTests(unittest.TestCase):
    def test_repeated_notes_are_capped_with_a_count(self) -> None:
        verdicts = [{"id": 1, "passed": True, "evidence": "e"}]
        verdicts += [{"id": 1000 + n} for n in range(100_000)]
        grading = runner.grade_assertions(["a"], {"verdicts": verdicts}).to_json()
        self.assertLessEqual(len(grading["notes"]), 10)
        self.assertTrue(any("100000" in n.replace(",", "") for n in grading["notes"]))
        self.assertLess(len(json.dumps(grading)), 5000)

    def test_lone_surrogates_in_evidence_are_replaced_and_noted(self) -> None:
        grading = runner.grade_assertions(["a"], {"verdicts": [
            {"id": 1, "passed": True, "evidence": "ok \ud800 \ud83d\ude00"}]}).to_json()
        evidence = grading["expectations"][0]["evidence"]
        self.assertEqual(evidence, "ok \ufffd \U0001F600")
        json.dumps(grading, ensure_ascii=False).encode("utf-8")
        self.assertTrue(any("surrogate" in n for n in grading["notes"]))

    def test_write_text_never_fails_on_a_surrogate(self) -> None:
        tmp = h.TempDir()
        self.addCleanup(tmp.cleanup)
        runner.write_text(tmp.path / "x.txt", "a\udc80b")
        self.assertEqual((tmp.path / "x.txt").read_text(encoding="utf-8"), "a\ufffdb")


def failing_replace(*names: str):
    """os.replace that fails like a full disk when the target's name is one of names."""
    real = os.replace

    def replace(src, dst, *args, **kwargs):
        if os.path.basename(str(dst)) in names:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(src, dst, *args, **kwargs)
    return replace


class DiskFullTests(unittest.TestCase):
    """A write that fails (ENOSPC injected into the write helper's rename) is never scored,
    and a full disk at start is an environment error that leaves nothing behind."""

    def setUp(self) -> None:
        self.tmp = h.TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.repo = h.make_repo(self.tmp.path, h.demo_suite(2))
        self.env = h.fake_env(self.tmp.path, {})
        self.workspace = self.tmp.path / "ws"

    def run_main(self, *names: str) -> tuple[int, str, str]:
        argv = ["run", suite_file(self.repo), "--agent", "claude", "--config", "without_skill",
                "--workspace", str(self.workspace), "--quiet"]
        with mock.patch.object(runner.os, "replace", failing_replace(*names)):
            return h.call_main(argv, self.env)

    def templates_left(self) -> list[str]:
        return [p.name for p in (self.tmp.path / "sandboxes").iterdir()]

    def test_a_cell_whose_files_were_not_written_is_not_scored(self) -> None:
        real = os.replace
        failed = []

        def replace(src, dst, *args, **kwargs):  # only the first cell's grading.json
            if str(dst).endswith("eval-E01/without_skill/run-1/grading.json"):
                failed.append(dst)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(src, dst, *args, **kwargs)
        argv = ["run", suite_file(self.repo), "--agent", "claude", "--config", "without_skill",
                "--workspace", str(self.workspace), "--quiet"]
        with mock.patch.object(runner.os, "replace", replace):
            code, out, err = h.call_main(argv, self.env)
        self.assertTrue(failed)
        self.assertEqual(code, runner.EXIT_ENVIRONMENT, err)  # the file is named, not hidden
        self.assertRegex(err, r"could not write \S+/eval-E01/without_skill/run-1/grading\.json")
        (iteration,) = iteration_dirs(self.workspace)
        cell = iteration / "eval-E01" / "without_skill" / "run-1"
        run = load_json(cell / "run.json")
        self.assertEqual(run["status"], "runner_error")
        self.assertFalse(run["scored"])
        self.assertIn("No space left", run["failure"]["detail"])
        self.assertIn("grading.json", run["failure"]["detail"])
        self.assertFalse((cell / "grading.json").exists())
        benchmark = load_json(iteration / "benchmark.json")
        self.assertEqual(benchmark["scored_run_count"], 1)
        self.assertEqual([r["eval_id"] for r in benchmark["runs"]], ["E02"])  # scored only
        self.assertEqual([(r["eval_id"], r["status"], r["scored"])
                          for r in benchmark["unscored_runs"]], [("E01", "runner_error", False)])

    def test_a_regrade_stops_at_a_file_it_could_not_write(self) -> None:
        """A re-graded cell runs the cell path a run's cells do: a file it could not write
        starts no later cell and ends the re-grade with exit 3, naming it."""
        code, _, err = h.call_main(["run", suite_file(self.repo), "--agent", "claude",
                                    "--config", "without_skill", "--workspace",
                                    str(self.workspace), "--quiet"], self.env)
        self.assertEqual(code, runner.EXIT_OK, err)
        (source,) = iteration_dirs(self.workspace)
        real = os.replace
        failed = []

        def replace(src, dst, *args, **kwargs):  # the re-grade's first cell's grading.json
            if str(dst).endswith("iteration-2/eval-E01/without_skill/run-1/grading.json"):
                failed.append(dst)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(src, dst, *args, **kwargs)
        argv = ["run", suite_file(self.repo), "--agent", "claude", "--regrade", str(source),
                "--workspace", str(self.workspace), "--concurrency", "1", "--quiet"]
        with mock.patch.object(runner.os, "replace", replace):
            code, _, err = h.call_main(argv, self.env)
        self.assertTrue(failed)
        self.assertEqual(code, runner.EXIT_ENVIRONMENT, err)
        self.assertRegex(err, r"could not write \S+/eval-E01/without_skill/run-1/grading\.json")
        regraded = iteration_dirs(self.workspace)[-1]
        later = load_json(regraded / "eval-E02" / "without_skill" / "run-1" / "run.json")
        self.assertEqual(later["status"], "cancelled")
        self.assertIn("could not be written", later["failure"]["detail"])

    def test_a_full_disk_at_start_is_an_environment_error(self) -> None:
        code, out, err = self.run_main("iteration_manifest.json")
        self.assertEqual(code, runner.EXIT_ENVIRONMENT, err)
        self.assertNotIn("internal error", err)
        self.assertIn("iteration_manifest.json", err)
        self.assertIn("No space left", err)
        self.assertEqual(iteration_dirs(self.workspace), [], "a half-made iteration was left")
        self.assertEqual(self.templates_left(), [], "a temporary folder was left")

    def test_a_full_disk_at_the_end_is_an_environment_error(self) -> None:
        code, out, err = self.run_main("benchmark.json")
        self.assertEqual(code, runner.EXIT_ENVIRONMENT, err)
        self.assertIn("benchmark.json", err)
        self.assertIn("No space left", err)
        self.assertEqual(self.templates_left(), [])
        (iteration,) = iteration_dirs(self.workspace)
        self.assertTrue((iteration / "iteration_manifest.json").is_file(), "resumable")


SLOW_GIT = """#!/bin/sh
case " $* " in
  *" add "*) if [ -n "$SLOW_GIT_MARK" ]; then : > "$SLOW_GIT_MARK"; sleep 60; fi ;;
esac
exec {git} "$@"
"""


class InterruptedStartTests(ProcessAudit, unittest.TestCase):
    """A signal while the git template is built (a slow `git add` here) leaves no iteration,
    no temporary folder and no process."""

    def check(self, sig: int) -> None:
        tmp, repo, marker, env = self.marked_repo(2, {})
        shim = tmp / "slow-git"
        shim.mkdir()
        real_git = subprocess.run(["sh", "-c", "command -v git"], capture_output=True,
                                  text=True, check=True).stdout.strip()
        (shim / "git").write_text(SLOW_GIT.format(git=real_git), encoding="utf-8")
        (shim / "git").chmod(0o755)
        mark = tmp / "git-add-started"
        env.update(PATH=f"{shim}{os.pathsep}{env['PATH']}", SLOW_GIT_MARK=str(mark))
        argv = ["run", suite_file(repo), "--agent", "claude", "--quiet"]
        proc = h.start_script(argv, env=env, cwd=repo, out_dir=tmp / "out")
        self.stop_later(proc)
        self.assertTrue(h.wait_until(mark.exists, 30), "git add never started")
        proc.send_signal(sig)
        try:
            proc.wait(timeout=END_WITHIN_S)
        except subprocess.TimeoutExpired:
            self.fail("the run did not end within 5 s of the signal")
        self.assertEqual(proc.returncode, 130, h.read_output(proc)[1][-2000:])
        self.assertNoMarkedProcesses(marker)
        workspace = repo / "evals" / "demo" / "workspace" / "claude"
        for iteration in iteration_dirs(workspace):  # none, or one that --resume accepts
            self.assertTrue((iteration / "iteration_manifest.json").is_file(),
                            f"{iteration.name} can be neither reported nor resumed")
        self.assertEqual(list((tmp / "sandboxes").iterdir()), [], "a temporary folder leaked")

    def test_ctrl_c_during_the_template_build(self) -> None:
        self.check(signal.SIGINT)

    def test_sigterm_during_the_template_build(self) -> None:
        self.check(signal.SIGTERM)


STRAY_AGENT = r"""#!/bin/sh
case " $* " in *" --version "*) echo "2.1.197 (Claude Code)"; exit 0 ;; esac
events=$(printf '%s' "$STRAY_EVENTS" | base64 -d)
echo "start $(date +%s.%N)" >> "$events"
case " $* " in *" --json-schema "*) cat >/dev/null; printf '%s\n' '__GRADER__'; exit 0 ;; esac
cat >/dev/null
if mkdir "$events.once" 2>/dev/null; then  # the first executor only
  setsid /bin/sh "$(dirname "$0")/daemon" first "$events" </dev/null >/dev/null 2>&1 &
  while ! grep -q '^beat' "$events"; do sleep 0.02; done
fi
printf '%s\n' '__EXECUTOR__'
"""

# Re-executes itself with an empty environment (no SKILL_EVAL_AGENT marker, no PATH) in the
# new session it was started in, then writes a heartbeat for longer than the whole run lasts.
STRAY_DAEMON = """#!/bin/sh
[ "$1" = again ] || exec /usr/bin/env -i /bin/sh "$0" again "$2"
echo "pid $$" >> "$2"
end=$(( $(date +%s) + 6 ))
while [ "$(date +%s)" -lt "$end" ]; do echo "beat $(date +%s.%N)" >> "$2"; sleep 0.05; done
"""


class UnmarkedStrayTests(unittest.TestCase):
    """Issue 24 item 5: unconfined, a daemon that dropped the runner's marker dies with the
    agent that left it, before the next agent starts, not at the end of the matrix."""

    def test_a_daemon_without_the_marker_is_ended_when_its_agent_ends(self) -> None:
        from tests.test_confinement import EXECUTOR_LINES, GRADER_ENVELOPE
        tmp = h.TempDir()
        self.addCleanup(tmp.cleanup)
        repo = h.make_repo(tmp.path, h.demo_suite(1))
        bin_dir = tmp.path / "stray-bin"
        bin_dir.mkdir()
        agent = STRAY_AGENT.replace("__GRADER__", GRADER_ENVELOPE).replace(
            "__EXECUTOR__", EXECUTOR_LINES.replace("\n", "' '"))
        for name, text in (("claude", agent), ("daemon", STRAY_DAEMON)):
            (bin_dir / name).write_text(text, encoding="utf-8")
            (bin_dir / name).chmod(0o755)
        events = tmp.path / "events.txt"
        env = h.fake_env(tmp.path)
        env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
        env["STRAY_EVENTS"] = base64.b64encode(str(events).encode()).decode()
        self.addCleanup(self.kill_daemon, events)
        code, out, err = h.call_main(["run", suite_file(repo), "--agent", "claude", "--quiet",
                                    "--isolation", "none", "--concurrency", "1"], env)
        self.assertEqual(code, 1, out + err)  # skill_not_read: this executor reads nothing
        self.assertIn("skill_not_read", out)
        lines = [line.split() for line in events.read_text(encoding="utf-8").splitlines()]
        starts = [float(t) for kind, t in lines if kind == "start"]
        beats = [float(t) for kind, t in lines if kind == "beat"]
        self.assertEqual(len(starts), 4)  # two executors, two graders
        self.assertTrue(beats)
        self.assertLess(max(beats), sorted(starts)[1],
                        "the daemon was still running when the next agent started")

    @staticmethod
    def kill_daemon(events: Path) -> None:
        if not events.is_file():
            return
        for line in events.read_text(encoding="utf-8").splitlines():
            if line.startswith("pid "):
                with contextlib.suppress(OSError):
                    os.kill(int(line.split()[1]), signal.SIGKILL)


class InternalErrorTests(unittest.TestCase):
    """A fault of the runner's own is exit 4 with its traceback written to a file."""

    def setUp(self) -> None:
        self.tmp = h.TempDir()
        self.addCleanup(self.tmp.cleanup)

    def traceback_file(self, err: str) -> Path:
        found = re.search(r"traceback: (\S+)", err)
        self.assertIsNotNone(found, err)
        path = Path(found.group(1))
        self.addCleanup(lambda: path.unlink() if path.is_file() else None)
        self.assertIn("Traceback", path.read_text(encoding="utf-8"))
        return path

    def test_a_bug_during_a_run_writes_its_traceback_into_the_iteration(self) -> None:
        repo = h.make_repo(self.tmp.path, h.demo_suite(1))
        env = h.fake_env(self.tmp.path, {})
        workspace = self.tmp.path / "ws"
        argv = ["run", suite_file(repo), "--agent", "claude", "--workspace", str(workspace),
                "--quiet"]
        with mock.patch.object(runner, "aggregate", side_effect=RuntimeError("planted bug")):
            code, _, err = h.call_main(argv, env)
        self.assertEqual(code, runner.EXIT_INTERNAL, err)
        self.assertEqual(runner.EXIT_INTERNAL, 4)
        self.assertIn("internal error", err)
        path = self.traceback_file(err)
        (iteration,) = iteration_dirs(workspace)
        self.assertEqual(path.parent, iteration)
        self.assertIn("planted bug", path.read_text(encoding="utf-8"))

    def test_a_bug_outside_a_run_writes_its_traceback_to_a_temp_file(self) -> None:
        with mock.patch.object(runner, "cmd_validate", side_effect=RuntimeError("planted")):
            code, _, err = h.call_main(["validate", "x.json"])
        self.assertEqual(code, runner.EXIT_INTERNAL)
        path = self.traceback_file(err)
        self.assertEqual(path.parent, Path(tempfile.gettempdir()))

    def test_exit_codes_are_documented(self) -> None:
        readme = (h.PROJECT / "README.md").read_text(encoding="utf-8")
        self.assertRegex(readme, r"\n\| 4 \| ")
        self.assertRegex(runner.__doc__, r"\n    4 ")
        self.assertNotEqual(runner.EXIT_INTERNAL, runner.EXIT_INVALID)


if __name__ == "__main__":
    unittest.main()
