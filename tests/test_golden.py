"""Golden iterations: what the runner writes stays the same, byte for byte and in shape.

tests/data/golden/ holds three iterations made with the fake CLIs (tests/golden_iterations.py):
two arms; three arms with a revision arm; a re-grade with two grader runs per cell. `report`
must re-render each one's benchmark.md byte for byte from its benchmark.json, find every run
file unchanged, and exit 0 or 1 as the stored page says. A fresh run of each must write
benchmark.json, grading.json, metrics.json and run.json with the same keys in the same order
and the same kinds of value (the values themselves hold times and paths).
"""

from __future__ import annotations

import json
import shutil
import unittest
from pathlib import Path

from tests.golden_iterations import GOLDEN, MAKERS
from tests.helpers import TempDir, call_main

SHAPED = ("benchmark.json", "grading.json", "metrics.json", "run.json", "grader_metrics.json",
          "timing.json")
# Keys whose values are maps keyed by what a run happened to produce (file names, commands,
# dirty paths): their keys are data, not shape.
DATA_KEYED = {"files_sha256", "fixtures", "cases", "changed", "dirty", "written_files"}
# Lists whose length is the test machine's, not the runner's: the environment's names.
DATA_LISTED = {"env_names"}


def shape(value, key: str = ""):
    """The keys, in order, and the kinds of value; numbers are one kind (0 and 0.5)."""
    if isinstance(value, dict):
        if key in DATA_KEYED:
            return "object"
        return {k: shape(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return "list" if key in DATA_LISTED else [shape(v, key) for v in value]
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    if isinstance(value, (int, float)):
        return "number"
    return "string"


def shaped_files(iteration: Path) -> dict[str, object]:
    return {path.relative_to(iteration).as_posix(): shape(json.loads(path.read_text("utf-8")))
            for path in sorted(iteration.rglob("*.json")) if path.name in SHAPED}


def differences(fresh, stored, path: str = "") -> list[str]:
    """Where two shapes differ, by JSON path: a missing key, a key out of order, a kind."""
    if isinstance(fresh, dict) and isinstance(stored, dict):
        if list(fresh) != list(stored):
            return [f"{path}: keys {list(fresh)} != {list(stored)}"]
        return [d for key in fresh for d in differences(fresh[key], stored[key], f"{path}/{key}")]
    if isinstance(fresh, list) and isinstance(stored, list):
        if len(fresh) != len(stored):
            return [f"{path}: {len(fresh)} items != {len(stored)}"]
        return [d for i, pair in enumerate(zip(fresh, stored))
                for d in differences(*pair, f"{path}[{i}]")]
    return [] if fresh == stored else [f"{path}: {fresh} != {stored}"]


class GoldenReportTest(unittest.TestCase):
    def copy(self, name: str) -> Path:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        target = tmp.path / "iteration-1"
        shutil.copytree(GOLDEN / name, target, symlinks=True)
        return target

    def check_report(self, name: str) -> None:
        iteration = self.copy(name)
        stored = (GOLDEN / name / "benchmark.md").read_bytes()
        status = json.loads((GOLDEN / name / "benchmark.json").read_text())["sanity_checks"]
        code, out, err = call_main(["report", str(iteration)])
        self.assertEqual(code, 0 if status["status"] == "OK" else 1, out + err)
        self.assertNotIn("results_modified", (iteration / "benchmark.md").read_text())
        self.assertEqual((iteration / "benchmark.md").read_bytes(), stored)
        for rel in ("benchmark.json", "iteration_manifest.json"):
            self.assertEqual((iteration / rel).read_bytes(), (GOLDEN / name / rel).read_bytes())

    def test_two_arms_rerendered_byte_for_byte(self) -> None:
        self.check_report("two_arms")

    def test_three_arms_with_a_revision_rerendered_byte_for_byte(self) -> None:
        self.check_report("three_arms")

    def test_regrade_with_repeated_grading_rerendered_byte_for_byte(self) -> None:
        self.check_report("regrade")

    def test_the_stored_pages_say_what_was_measured(self) -> None:
        # The golden set is worth only what it covers: two verdicts, a revision arm, votes.
        three = json.loads((GOLDEN / "three_arms" / "benchmark.json").read_text())
        self.assertIn("with_skill@HEAD~1", three["metadata"]["configs"])
        regrade = json.loads((GOLDEN / "regrade" / "benchmark.json").read_text())
        self.assertEqual(regrade["metadata"]["grader_runs"], 2)
        self.assertIsNotNone(regrade["metadata"]["regrade"])


class GoldenShapeTest(unittest.TestCase):
    def check_shape(self, name: str) -> None:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        fresh = MAKERS[name](tmp.path)
        self.assertEqual(differences(shaped_files(fresh), shaped_files(GOLDEN / name)), [])

    def test_two_arms_files_keep_their_shape(self) -> None:
        self.check_shape("two_arms")

    def test_three_arms_files_keep_their_shape(self) -> None:
        self.check_shape("three_arms")

    def test_regrade_files_keep_their_shape(self) -> None:
        self.check_shape("regrade")


if __name__ == "__main__":
    unittest.main()
