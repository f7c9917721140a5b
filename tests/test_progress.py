"""Progress on stderr: a live line on a terminal, plain lines otherwise, none with --quiet."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
import unittest

from tests.helpers import RUNNER_PATH, TempDir, demo_suite, fake_env, make_repo, run_script


class ProgressTests(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.root = make_repo(self.tmp.path, demo_suite(3))
        self.suite = str(self.root / "evals" / "demo" / "evals.json")
        self.env = fake_env(self.tmp.path)

    def run_under_pty(self, extra: list[str], env: dict | None = None) -> tuple[int, str, str]:
        master, slave = pty.openpty()
        proc = subprocess.Popen([sys.executable, str(RUNNER_PATH), "run", self.suite,
                                 "--agent", "claude", "--isolation", "none", *extra],
                                env=env or self.env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=slave)
        os.close(slave)
        chunks = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the other end closed
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        os.close(master)
        out = proc.stdout.read().decode()
        proc.stdout.close()
        code = proc.wait(timeout=30)
        return code, out, b"".join(chunks).decode("utf-8", "replace")

    def test_terminal_gets_an_updating_line(self) -> None:
        code, out, terminal = self.run_under_pty([])
        self.assertEqual(code, 0, terminal)
        self.assertIn("\r\x1b[K[1/6]", terminal)
        self.assertIn("[6/6] ok 6, failed 0", terminal)
        self.assertIn("eta", terminal)
        self.assertNotIn("[1/6]", out, "progress must stay off stdout")
        self.assertIn("Sanity checks:", out)

    def test_quiet_prints_no_progress(self) -> None:
        code, out, terminal = self.run_under_pty(["--quiet"])
        self.assertEqual(code, 0, terminal)
        self.assertNotIn("[6/6]", terminal)

    def test_pipe_gets_plain_lines(self) -> None:
        done = run_script(["run", self.suite, "--agent", "claude"], env=self.env)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertNotIn("\x1b[K", done.stderr)
        self.assertIn("[6/6] ok 6, failed 0", done.stderr)
        self.assertNotIn("[6/6]", done.stdout)


    def slow_env(self) -> dict:
        """Executors that take 3 s, so the line must move while nothing finishes."""
        return fake_env(self.tmp.path, {"executor": {"sleep_s": 3}})

    def test_terminal_line_moves_while_cells_run(self) -> None:
        code, _, terminal = self.run_under_pty(["--concurrency", "2"], self.slow_env())
        self.assertEqual(code, 0, terminal)
        before_first = terminal.split("[1/6]", 1)[0]
        redraws = re.findall(r"\r\x1b\[K\[0/6\] ok 0, failed 0, running (\d+); elapsed (\d+)s",
                             before_first)
        self.assertIn("2", {running for running, _ in redraws}, terminal)
        self.assertGreaterEqual(len({elapsed for _, elapsed in redraws}), 2,
                                "the line did not move before the first cell finished")
        self.assertIn("eta after the first cell", before_first)
        self.assertRegex(terminal, r"\[1/6\][^\r]*eta \d+s")

    def test_start_line_comes_at_once(self) -> None:
        # Measured against starting the interpreter and loading the runner, which a loaded
        # machine slows down as much.
        started = time.monotonic()
        run_script(["--version"], env=self.env)
        startup = time.monotonic() - started
        proc = subprocess.Popen([sys.executable, str(RUNNER_PATH), "run", self.suite, "--agent",
                                 "claude", "--isolation", "none"], env=self.slow_env(),
                                stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        started = time.monotonic()
        first = proc.stderr.readline().decode()
        waited = time.monotonic() - started
        proc.kill()
        proc.wait()
        proc.stderr.close()
        self.assertRegex(first, r"^skill-eval: 6 cells \(3 cases x 2 configs x 1 runs\) with "
                                r"claude, 4 at a time; workspace ")
        self.assertLess(waited, startup + 1.0, "the start line came late")


if __name__ == "__main__":
    unittest.main()
