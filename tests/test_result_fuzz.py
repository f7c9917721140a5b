"""A fuzz of the one way in (issue 23): every key of a written iteration's manifest,
benchmark.json and run files set to null, a number, a string, a list and an object, and each
of the six commands that read an iteration back run on it.

No case may end in an internal error (exit 4). A case refused as invalid input (exit 2)
must have launched nothing and written nothing. The agent CLI on PATH during the fuzz only
records that it was started and fails, so no case can run an agent: an input the runner
accepts ends at the CLI's version check (exit 3), after reading everything it reads.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import unittest
from pathlib import Path

from tests.helpers import TempDir, call_main, demo_suite, fake_env, make_repo, volume_test

SUITE = "evals/demo/evals.json"
VALUES = (None, 7, "x", [1], {"k": 1})
CASES = 5200
SEED = 23
RUN_FILES = ("run.json", "grading.json", "metrics.json", "grader_metrics.json", "timing.json")
RECORDER = "#!/bin/sh\necho \"$0 $*\" >> \"$FUZZ_LAUNCH_LOG\"\nexit 1\n"


def key_paths(value, prefix=()):
    """Every key of an object and the first two items of every list, depth first."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield (*prefix, key)
            yield from key_paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value[:2]):
            yield (*prefix, index)
            yield from key_paths(inner, (*prefix, index))


def set_at(data, path, value):
    target = data
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value


def stratified(cases: list, count: int) -> list:
    """`count` cases drawn in turn from each (file, command) group, each group shuffled with
    the fixed seed: benchmark.json's many keys would otherwise crowd out the manifest's."""
    rng = random.Random(SEED)
    groups: dict[tuple, list] = {}
    for case in cases:
        groups.setdefault((case[0], case[3][0]), []).append(case)
    queues = [rng.sample(group, len(group)) for _, group in sorted(groups.items(),
                                                                    key=lambda kv: str(kv[0]))]
    chosen: list = []
    while len(chosen) < count and any(queues):
        for queue in queues:
            if queue and len(chosen) < count:
                chosen.append(queue.pop())
    return chosen


def tree_state(root: Path) -> dict[str, tuple]:
    state = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            state[path] = (info.st_size, info.st_mtime_ns)
    return state


@volume_test
class ResultFuzzTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = TempDir()
        base = cls.tmp.path
        cls.root = make_repo(base, demo_suite(2))
        cls.suite = str(cls.root / SUITE)
        build = fake_env(base, {})
        runs = {"source": [], "shard-1": ["--shard", "1/2"], "shard-2": ["--shard", "2/2"],
                "other": []}
        for name, extra in runs.items():
            code, out, err = call_main(["run", cls.suite, "--agent", "claude", "--quiet",
                                        "--workspace", str(base / name), *extra], build)
            assert code == 0, out + err
        cls.source = base / "source" / "iteration-1"
        cls.shard = base / "shard-1" / "iteration-1"
        cls.other = base / "other" / "iteration-1"
        (base / "bin").mkdir()
        (base / "bin" / "claude").write_text(RECORDER)
        (base / "bin" / "claude").chmod(0o755)
        cls.log = base / "launches.txt"
        cls.env = {**build, "PATH": f"{base / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin",
                   "FUZZ_LAUNCH_LOG": str(cls.log)}

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def commands(self, iteration: Path) -> list[tuple[str, list[str]]]:
        merged = str(self.tmp.path / "merged")
        run = ["run", self.suite, "--agent", "claude", "--quiet", "--isolation", "none"]
        if iteration == self.shard:
            return [("merge", ["report", merged, "--merge", str(self.shard),
                               str(self.tmp.path / "shard-2" / "iteration-1")])]
        return [("report", ["report", str(self.source)]),
                ("compare", ["report", str(self.other), "--compare", str(self.source)]),
                ("across", ["report", str(self.other), "--across", str(self.source)]),
                ("resume", [*run, "--resume", str(self.source)]),
                ("regrade", [*run, "--workspace", str(self.tmp.path / "regraded"),
                             "--regrade", str(self.source)])]

    def mutations(self) -> list[tuple[Path, tuple, object]]:
        files = []
        for iteration in (self.source, self.shard):
            files += [iteration / "iteration_manifest.json", iteration / "benchmark.json"]
            cell = sorted(iteration.glob("eval-*/with_skill/run-1"))[0]
            files += [cell / name for name in RUN_FILES if (cell / name).exists()]
        found = []
        for path in files:
            data = json.loads(path.read_text())
            found += [(path, key, value) for key in key_paths(data) for value in VALUES]
        return found

    def test_no_internal_error_and_nothing_done_on_malformed_input(self) -> None:
        cases = [(path, key, value, command) for path, key, value in self.mutations()
                 for command in self.commands(path.parents[3] if "eval-" in str(path)
                                              else path.parent)]
        cases = stratified(cases, CASES)
        self.assertGreaterEqual(len(cases), 5000)
        codes: dict[int, int] = {}
        for path, key, value, (name, argv) in cases:
            original = path.read_bytes()
            data = json.loads(original)
            set_at(data, key, value)
            path.write_text(json.dumps(data))
            if self.log.exists():
                self.log.unlink()
            before = tree_state(self.tmp.path)
            try:
                code, out, err = call_main(argv, self.env)
            finally:
                path.write_bytes(original)
            codes[code] = codes.get(code, 0) + 1
            where = f"{name} with {path.relative_to(self.tmp.path)}: {list(key)} = {value!r}"
            self.assertNotEqual(code, 4, f"{where}\n{err}")
            if code == 2:
                self.assertFalse(self.log.exists(), f"{where}: launched on invalid input")
                after = tree_state(self.tmp.path)
                after[str(path)] = before[str(path)]  # the case's own edit, put back
                self.assertEqual(after, before, f"{where}: wrote on invalid input")
            shutil.rmtree(self.tmp.path / "merged", ignore_errors=True)
        self.assertGreater(codes.get(2, 0), 0)  # the fuzz did reach the refusals
        print(f"\nresult fuzz: {len(cases)} cases, exit codes {dict(sorted(codes.items()))}")


if __name__ == "__main__":
    unittest.main()
