"""A watched process that ends on its own is never a timeout, however late its reaper ends."""

from __future__ import annotations

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


if __name__ == "__main__":
    unittest.main()
