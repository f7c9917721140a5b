"""Issue 24 item 8: faults that must end in the right status and message.

- a workspace on a full filesystem (a real tmpfs when this test may mount one) is exit 3 naming
  the file, at the start and when it fills during the cells, never exit 4 or 1;
- Ctrl-C while the interpreter imports the runner or during the agent CLI's `--version` probe
  is exit 130, without a traceback, leaving nothing behind;
- an answer cut at the output cap is reported as cut, not as a missing result envelope.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import unittest
from pathlib import Path
from unittest import mock

from tests import helpers as h
from tests.test_reliability import ProcessAudit, iteration_dirs, load_json, suite_file

runner = h.runner
END_WITHIN_S = 5.0


def mount_tmpfs(folder: Path, size: str) -> str:
    """Mount a tmpfs of `size` at folder; the reason it could not be, or ''."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    return "" if done.returncode == 0 else f"mount failed: {done.stderr.strip()}"


class TracebackPlacementTests(unittest.TestCase):
    """Issue 33: an internal error's traceback goes beside the results it concerns (the
    iteration, else the workspace), not into the system temp folder, once they are known."""

    def setUp(self) -> None:
        self.tmp = h.TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.repo = h.make_repo(self.tmp.path, h.demo_suite(1))
        self.env = h.fake_env(self.tmp.path, {})
        self.ws = self.tmp.path / "ws"
        self.run = ["run", suite_file(self.repo), "--agent", "claude", "--quiet"]
        code, out, err = h.call_main([*self.run, "--workspace", str(self.ws)], self.env)
        self.assertEqual(code, 0, out + err)
        self.iteration = self.ws / "iteration-1"

    def traceback_of(self, argv: list[str], planted: str) -> Path:
        with mock.patch.object(runner, planted, side_effect=RuntimeError("a planted bug")):
            code, _, err = h.call_main(argv, self.env)
        self.assertEqual(code, 4, err)
        found = re.search(r"traceback: (\S+)", err)
        self.assertIsNotNone(found, err)
        path = Path(found.group(1))
        self.assertIn("a planted bug", path.read_text(encoding="utf-8"))
        return path

    def test_the_traceback_lands_in_the_iteration_or_the_workspace(self) -> None:
        for argv, planted, folder in (
                (["report", str(self.iteration)], "render_summary", self.iteration),
                ([*self.run, "--resume", str(self.iteration)], "check_resume", self.iteration),
                ([*self.run, "--workspace", str(self.ws)], "provider_version", self.ws)):
            with self.subTest(command=argv[0], planted=planted):
                self.assertEqual(self.traceback_of(argv, planted).parent, folder)


class FullWorkspaceTests(unittest.TestCase):
    """A real small filesystem under the workspace: no seam, the kernel says ENOSPC."""

    def setUp(self) -> None:
        self.tmp = h.TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.repo = h.make_repo(self.tmp.path, h.demo_suite(3))
        self.mount = self.tmp.path / "small"

    def mount_small(self, size: str) -> None:
        why = mount_tmpfs(self.mount, size)
        if why:
            self.skipTest(why)
        self.addCleanup(subprocess.run, ["umount", str(self.mount)], check=False)

    def run_on_mount(self, script: dict) -> subprocess.CompletedProcess:
        argv = ["run", suite_file(self.repo), "--agent", "claude", "--config", "without_skill",
                "--concurrency", "1", "--workspace", str(self.mount / "ws"), "--quiet"]
        return h.run_script(argv, env=h.fake_env(self.tmp.path, script))

    def test_a_full_workspace_at_start_is_exit_3_naming_the_file(self) -> None:
        self.mount_small("64k")
        fd = os.open(self.mount / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:  # fill it to the last block
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        done = self.run_on_mount({})
        self.assertEqual(done.returncode, 3, done.stderr[-2000:])
        self.assertNotIn("internal error", done.stderr)
        self.assertRegex(done.stderr, rf"could not write {self.mount}/ws/\S+: No space left")
        self.assertEqual(iteration_dirs(self.mount / "ws"), [], "a half-made iteration was left")
        self.assertEqual(list((self.tmp.path / "sandboxes").iterdir()), [])
        self.assertEqual(h.fake_calls(self.tmp.path)[1:], [], "an agent was launched")

    def test_a_workspace_that_fills_during_the_cells_is_exit_3_naming_the_file(self) -> None:
        self.mount_small("1m")   # a run of three cells needs about 0.2 MB
        script = {"cases": [{"match": "Task number 1.", "role": "executor",
                             "spec": {"write_artifact": "x" * 1_500_000}}]}
        done = self.run_on_mount(script)
        self.assertEqual(done.returncode, 3, done.stderr[-2000:])
        (iteration,) = iteration_dirs(self.mount / "ws")
        cell = iteration / "eval-E01" / "without_skill" / "run-1"
        named = f"could not write {cell}/"
        self.assertIn(named, done.stderr)
        self.assertIn("No space left on device", done.stderr)
        run = load_json(cell / "run.json")
        self.assertEqual(run["status"], "runner_error")
        self.assertIn(named, run["failure"]["detail"])
        benchmark = load_json(iteration / "benchmark.json")
        # no agent starts once a file could not be written
        later = [(r["eval_id"], r["status"]) for r in benchmark["unscored_runs"]
                 if r["eval_id"] != "E01"]
        self.assertEqual(later, [("E02", "cancelled"), ("E03", "cancelled")])
        self.assertTrue(benchmark["metadata"]["incomplete"])


class DiskRefusedElsewhereTests(unittest.TestCase):
    """A write the disk refuses outside the write helpers (here: the git template in the
    sandbox root) is still an environment problem, never an internal error."""

    def test_enospc_while_building_the_template_is_exit_3(self) -> None:
        tmp = h.TempDir()
        self.addCleanup(tmp.cleanup)
        repo = h.make_repo(tmp.path, h.demo_suite(1))

        def full(*args, **kwargs):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        argv = ["run", suite_file(repo), "--agent", "claude", "--quiet", "--workspace",
                str(tmp.path / "ws")]
        with mock.patch.object(runner, "_fill_git_template", full):
            code, _, err = h.call_main(argv, h.fake_env(tmp.path, {}))
        self.assertEqual(code, runner.EXIT_ENVIRONMENT, err)
        self.assertNotIn("internal error", err)
        self.assertIn("No space left on device", err)
        self.assertEqual(iteration_dirs(tmp.path / "ws"), [])
        self.assertEqual(list((tmp.path / "sandboxes").iterdir()), [])


SHADOW_DIFFLIB = """import os, time
open({mark!r}, "w").close()
time.sleep(60)
"""

PROBE_SHIM = """#!/bin/sh
case "$1" in
  --version|-v) : > {mark}; exec sleep 60 ;;
esac
exec {fake} "$@"
"""


class EarlyInterruptTests(ProcessAudit, unittest.TestCase):
    """Ctrl-C from the first instruction on: exit 130, no traceback, nothing left."""

    def interrupt_when(self, mark: Path, proc: subprocess.Popen) -> tuple[str, str]:
        self.assertTrue(h.wait_until(mark.exists, 30), "the moment never came")
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=END_WITHIN_S)
        except subprocess.TimeoutExpired:
            self.fail("the runner did not end within 5 s of Ctrl-C")
        return h.read_output(proc)

    def test_ctrl_c_while_the_runner_is_imported(self) -> None:
        tmp, repo, marker, env = self.marked_repo(1, {})
        shadow = tmp / "shadow"
        shadow.mkdir()
        mark = tmp / "importing"
        # a module the runner imports, found first on PYTHONPATH: the import waits there
        (shadow / "difflib.py").write_text(SHADOW_DIFFLIB.format(mark=str(mark)),
                                           encoding="utf-8")
        env["PYTHONPATH"] = str(shadow)
        proc = h.start_script(["run", suite_file(repo), "--agent", "claude", "--quiet"],
                              env=env, cwd=repo, out_dir=tmp / "out")
        self.stop_later(proc)
        _, err = self.interrupt_when(mark, proc)
        self.assertEqual(proc.returncode, 130, err[-2000:])
        self.assertNotIn("Traceback", err)
        self.assertIn("interrupted", err)
        self.assertEqual(h.fake_calls(tmp), [])
        self.assertFalse((repo / "evals" / "demo" / "workspace").exists())

    def test_ctrl_c_during_the_version_probe(self) -> None:
        tmp, repo, marker, env = self.marked_repo(1, {})
        shim = tmp / "shim"
        shim.mkdir()
        mark = tmp / "probing"
        (shim / "claude").write_text(PROBE_SHIM.format(mark=mark, fake=h.FAKES / "claude"),
                                     encoding="utf-8")
        (shim / "claude").chmod(0o755)
        env["PATH"] = f"{shim}{os.pathsep}{env['PATH']}"
        proc = h.start_script(["run", suite_file(repo), "--agent", "claude", "--quiet"],
                              env=env, cwd=repo, out_dir=tmp / "out")
        self.stop_later(proc)
        _, err = self.interrupt_when(mark, proc)
        self.assertEqual(proc.returncode, 130, err[-2000:])
        self.assertNotIn("Traceback", err)
        self.assertNotIn("failed", err)
        self.assertIn("interrupted", err)
        self.assertNoMarkedProcesses(marker)
        for iteration in iteration_dirs(repo / "evals" / "demo" / "workspace" / "claude"):
            self.fail(f"{iteration} was left behind")
        self.assertEqual(list((tmp / "sandboxes").iterdir()), [], "a temporary folder leaked")


class AnswerCutAtTheCapTests(unittest.TestCase):
    def test_a_grader_answer_beyond_the_cap_is_reported_as_cut(self) -> None:
        tmp = h.TempDir()
        self.addCleanup(tmp.cleanup)
        repo = h.make_repo(tmp.path, h.demo_suite(1))
        cap = runner.STREAM_HEAD_BYTES + runner.STREAM_TAIL_BYTES
        script = {"grader": {"verdict_form": "prose", "text": "y" * (cap + 1_000_000)}}
        workspace = tmp.path / "ws"
        code, out, err = h.call_main(["run", suite_file(repo), "--agent", "claude", "--quiet",
                                      "--config", "without_skill", "--workspace",
                                      str(workspace)], h.fake_env(tmp.path, script))
        self.assertEqual(code, 1, err)
        (iteration,) = iteration_dirs(workspace)
        run = json.loads((iteration / "eval-E01" / "without_skill" / "run-1" / "run.json")
                         .read_text(encoding="utf-8"))
        detail = run["failure"]["detail"]
        self.assertIn(f"the output exceeded {cap:,} bytes", detail)
        self.assertIn("was cut; the result envelope was lost", detail)
        self.assertNotIn("without a result envelope", detail)


if __name__ == "__main__":
    unittest.main()
