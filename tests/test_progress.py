"""Progress on stderr: a live line on a terminal, plain lines otherwise, none with --quiet."""

from __future__ import annotations

import os
import pty
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

    def run_under_pty(self, extra: list[str]) -> tuple[int, str, str]:
        master, slave = pty.openpty()
        proc = subprocess.Popen([sys.executable, str(RUNNER_PATH), "run", self.suite,
                                 "--agent", "claude", "--isolation", "none", *extra],
                                env=self.env, stdin=subprocess.DEVNULL,
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
        self.assertIn(code, (0, 1), terminal)
        self.assertIn("\r\x1b[K[1/6]", terminal)
        self.assertIn("[6/6] ok 6, failed 0", terminal)
        self.assertIn("eta", terminal)
        self.assertNotIn("[1/6]", out, "progress must stay off stdout")
        self.assertIn("Sanity checks:", out)

    def test_quiet_prints_no_progress(self) -> None:
        code, out, terminal = self.run_under_pty(["--quiet"])
        self.assertIn(code, (0, 1), terminal)
        self.assertNotIn("[6/6]", terminal)

    def test_pipe_gets_plain_lines(self) -> None:
        done = run_script(["run", self.suite, "--agent", "claude"], env=self.env)
        self.assertIn(done.returncode, (0, 1), done.stderr)
        self.assertNotIn("\x1b[K", done.stderr)
        self.assertIn("[6/6] ok 6, failed 0", done.stderr)
        self.assertNotIn("[6/6]", done.stdout)


if __name__ == "__main__":
    unittest.main()
