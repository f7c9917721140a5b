"""Nothing the executor can read in its sandbox names the source checkout."""

from __future__ import annotations

import json
import unittest
from pathlib import Path

from tests.helpers import TempDir, call_main, demo_suite, fake_env, make_repo


class SandboxNamesNoCheckoutTests(unittest.TestCase):
    def test_sandbox_files_and_git_metadata_never_mention_the_checkout(self) -> None:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        suite = demo_suite(1)
        suite["evals"][0]["files"] = ["evals/demo/fixtures/input.txt"]
        root = make_repo(tmp.path, suite, files={"evals/demo/fixtures/input.txt": "data\n",
                                                 "src/app.py": "print('hi')\n"})
        code, _, err = call_main(["run", str(root / "evals/demo/evals.json"), "--agent",
                                  "claude", "--keep-sandboxes", "--quiet"], env=fake_env(tmp.path))
        self.assertEqual(code, 0, err)
        iteration = root / "evals/demo/workspace/claude/iteration-1"
        needle = str(root).encode()
        for config in ("with_skill", "without_skill"):
            run = json.loads((iteration / "eval-E01" / config / "run-1" / "run.json").read_text())
            sandbox = run["sandbox"]["path"]
            self.assertTrue(run["sandbox"]["git"]["ok"], run["sandbox"]["git"])
            leaks = [str(p) for p in Path(sandbox).rglob("*")
                     if p.is_file() and not p.is_symlink() and needle in p.read_bytes()]
            self.assertEqual(leaks, [], f"{config}: these sandbox files name the checkout")


if __name__ == "__main__":
    unittest.main()
