"""A watched process that ends on its own is never a timeout, however late its reaper ends."""

from __future__ import annotations

import tempfile
import threading
import time
import unittest
from pathlib import Path
from unittest import mock

from tests.helpers import runner


class WatchedExitTest(unittest.TestCase):
    def test_a_reaper_slow_to_end_after_its_wake_is_not_a_timeout(self) -> None:
        real = runner.start_reaper

        def slow_reaper(proc, ended=None):  # wakes the runner, then lingers before it ends
            lingering = threading.Event()
            thread = real(proc, lingering)

            def relay() -> None:
                lingering.wait()
                if ended is not None:
                    ended.set()
                time.sleep(0.5)
                thread.join()

            slow = threading.Thread(target=relay, daemon=True)
            slow.start()
            return slow

        watch = runner.StreamWatch(lambda chunk: "")
        invocation = runner.Invocation(["/bin/echo", "done"], Path("/"), watch=watch)
        groups = runner.ProcessGroups()
        with mock.patch.object(runner, "start_reaper", slow_reaper):
            result = runner.run_process(invocation, {"PATH": "/usr/bin:/bin"}, 30, groups)
        self.assertFalse(result.timed_out)
        self.assertEqual(result.returncode, 0)
        self.assertEqual(result.stopped, "")


class DecidedStopTest(unittest.TestCase):
    def test_a_decided_process_gets_no_moment_to_go_on(self) -> None:
        # A CLI given SIGTERM finishes its step: it sends the model one more request. Here
        # the step is a trap that leaves a file; a decided process must end before it runs.
        with tempfile.TemporaryDirectory() as folder:
            late = Path(folder) / "late"
            script = f"trap 'echo late > {late}; exit 0' TERM; echo decided; sleep 20 & wait"
            watch = runner.StreamWatch(lambda chunk: "decided" if b"decided" in chunk else "")
            invocation = runner.Invocation(["/bin/sh", "-c", script], Path("/"), watch=watch)
            result = runner.run_process(invocation, {"PATH": "/usr/bin:/bin"}, 30,
                                        runner.ProcessGroups())
            self.assertEqual(result.stopped, "decided")
            self.assertFalse(result.timed_out)
            self.assertFalse(late.exists(), "the process ran on after the decision")


if __name__ == "__main__":
    unittest.main()
