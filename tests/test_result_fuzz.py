"""A fuzz of the one way in (issue 23): every key of a written iteration's manifest,
benchmark.json and run files set to null, a number, a string, a list and an object, and each
of the six commands that read an iteration back run on it.

No case may end in an internal error (exit 4). A case refused as invalid input (exit 2)
must have launched nothing and written nothing. The agent CLI on PATH during the fuzz only
records that it was started and fails, so no case can run an agent: an input the runner
accepts ends at the CLI's version check (exit 3), after reading everything it reads.

BoundedReadFuzzTest (issue 33 item 11): every file each reading command opens, found by
watching the command's opens, replaced in turn by JSON nested 200,000 deep, a file over its
size cap, a FIFO and a link to /dev/zero. No case may end in exit 4, hang or exhaust memory;
the test guards itself with an alarm and an address-space limit, so a regression fails it
rather than the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import sys
import time
import unittest
from pathlib import Path

from tests.helpers import (
    TempDir,
    call_main,
    demo_suite,
    fake_env,
    make_repo,
    runner,
    volume_test,
)

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


# -- bounded reads -------------------------------------------------------------------------

CASE_SECONDS = 30  # a reading command that takes longer is hanging (a FIFO, a device)
MEMORY_HEADROOM = 1 << 30  # above what the test process holds: /dev/zero read whole fails
HOSTILE_FILES = ("deep", "over_cap", "fifo", "dev_zero")
OPENED: list[str] = []  # the files under WATCHED[0] a command opened for reading
WATCHED: list[str] = []


def _watch_opens(event: str, args: tuple) -> None:
    if event != "open" or not WATCHED or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    path, mode, flags = os.fsdecode(args[0]), args[1], args[2] or 0
    writing = (mode and any(c in mode for c in "wax+")) or flags & (
        os.O_WRONLY | os.O_RDWR | os.O_CREAT)
    if path.startswith(WATCHED[0]) and not writing and not os.path.isdir(path):
        OPENED.append(path)


if hasattr(sys, "addaudithook"):
    sys.addaudithook(_watch_opens)  # inert unless a test sets WATCHED


class CaseTimedOut(BaseException):
    """Not an Exception: the runner's own handler must not turn it into an exit code."""


@contextlib.contextmanager
def guarded_case(fifo: Path | None):
    """An alarm after CASE_SECONDS (which also opens the FIFO for writing, so a reader
    blocked in another thread gets an end of file) and an address-space limit."""
    def expire(_signum, _frame):
        if fifo is not None:
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        raise CaseTimedOut
    import resource
    limits = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm", encoding="ascii") as handle:
        used = int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    hard = limits[1]
    soft = used + MEMORY_HEADROOM if hard == resource.RLIM_INFINITY else min(
        hard, used + MEMORY_HEADROOM)
    previous = signal.signal(signal.SIGALRM, expire)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    signal.alarm(CASE_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        resource.setrlimit(resource.RLIMIT_AS, limits)
        signal.signal(signal.SIGALRM, previous)


def file_kind(rel: str) -> str:
    """The file as one of its kind: any cell's run.json, any shard's manifest, is the same
    reader's input; so is any of a cell's text files (answers, logs, prompts), which only
    the hash check and a copy read."""
    rel = re.sub(r"/eval-[^/]+/", "/eval-*/", rel)
    rel = re.sub(r"/(with|without)_skill/run-\d+/.*\.(md|txt)$", "/*/run-*/text", rel)
    rel = re.sub(r"/(with|without)_skill/run-\d+/", "/*/run-*/", rel)
    return re.sub(r"^shard-\d+/", "shard-*/", rel)


def hostile_kinds(path: Path) -> tuple[str, ...]:
    """Deep nesting matters only where JSON is parsed."""
    return HOSTILE_FILES if path.suffix in (".json", ".jsonl") else HOSTILE_FILES[1:]


@volume_test
@unittest.skipUnless(sys.platform.startswith("linux") and hasattr(sys, "addaudithook"),
                     "needs /proc, FIFOs, /dev/zero and audit hooks")
class BoundedReadFuzzTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = TempDir()
        base = cls.tmp.path
        cls.root = make_repo(base, demo_suite(2))
        cls.suite = str(cls.root / SUITE)
        cls.env = fake_env(base, {})
        runs = {"source": [], "other": [], "shard-1": ["--shard", "1/2"],
                "shard-2": ["--shard", "2/2"],
                "wave-1": ["--shard", "1/2", "--adaptive", "--runs", "2"],
                "wave-2": ["--shard", "2/2", "--adaptive", "--runs", "2"]}
        for name, extra in runs.items():
            code, out, err = call_main(["run", cls.suite, "--agent", "claude", "--quiet",
                                        "--workspace", str(base / name), *extra], cls.env)
            assert code == 0, out + err
        code, out, err = call_main(["report", str(base / "look"), "--merge",
                                    str(base / "wave-1" / "iteration-1"),
                                    str(base / "wave-2" / "iteration-1")], cls.env)
        assert code == 0, out + err
        cls.pristine = base / "pristine"
        cls.pristine.mkdir()
        for name in (*runs, "look"):
            shutil.copytree(base / name, cls.pristine / name, symlinks=True)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def commands(self) -> dict[str, tuple[list[str], list[str]]]:
        """Each reading command: its argv, and the folders it writes (put back after it)."""
        base = self.tmp.path
        source, other = str(base / "source/iteration-1"), str(base / "other/iteration-1")
        run = ["run", self.suite, "--agent", "claude", "--quiet", "--isolation", "none"]
        return {
            "report": (["report", source], []),
            "compare": (["report", other, "--compare", source], []),
            "across": (["report", other, "--across", source], []),
            "merge": (["report", str(base / "merged"), "--merge",
                       str(base / "shard-1/iteration-1"), str(base / "shard-2/iteration-1")],
                      ["merged"]),
            "resume": ([*run, "--resume", source], ["source"]),
            "regrade": ([*run, "--workspace", str(base / "regraded"), "--regrade", source],
                        ["regraded"]),
            "next-wave": (["run", "--resume", str(base / "wave-1/iteration-1"), "--next-wave",
                           str(base / "look"), "--quiet", "--isolation", "none"], ["wave-1"]),
        }

    def put_back(self, names: list[str]) -> None:
        for name in names:
            shutil.rmtree(self.tmp.path / name, ignore_errors=True)
            if (self.pristine / name).exists():
                shutil.copytree(self.pristine / name, self.tmp.path / name, symlinks=True)

    def files_read_by(self, argv: list[str], writes: list[str]) -> list[str]:
        """The files under the workspaces the command opens for reading, one of each kind."""
        OPENED.clear()
        WATCHED[:] = [str(self.tmp.path) + os.sep]
        try:
            code, out, err = call_main(argv, self.env)
        finally:
            WATCHED.clear()
            self.put_back(writes)
        self.assertIn(code, (0, 1), f"{argv}: {out}{err}")
        kinds: dict[str, str] = {}
        for path in OPENED:
            rel = os.path.relpath(path, self.tmp.path)
            if rel.split(os.sep)[0] in ("repo", "log", "home", "sandboxes", "pristine"):
                continue
            if os.path.isfile(path) and not rel.endswith(".tmp"):
                kinds.setdefault(file_kind(rel), path)
        return sorted(kinds.values())

    def plant(self, path: Path, kind: str) -> None:
        path.unlink()
        if kind == "deep":
            path.write_text("[" * 200_000 + "]" * 200_000)
        elif kind == "over_cap":
            with open(path, "wb") as handle:  # sparse: costs no disk
                handle.truncate(runner.read_cap(path) + 1)
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            path.symlink_to("/dev/zero")

    def test_no_file_a_command_reads_can_hang_it_or_exhaust_it(self) -> None:
        codes: dict[int, int] = {}
        cases, timing = 0, []
        only = os.environ.get("BOUNDED_READ_FUZZ_ONLY")  # one command, when debugging
        for name, (argv, writes) in self.commands().items():
            if only and name != only:
                continue
            started, before = time.monotonic(), cases
            files = self.files_read_by(argv, writes)
            self.assertTrue(files, f"{name} read no file")
            for path in map(Path, files):
                for kind in hostile_kinds(path):
                    where = f"{name} with {path.relative_to(self.tmp.path)} as {kind}"
                    self.plant(path, kind)
                    try:
                        with guarded_case(path if kind == "fifo" else None):
                            code, out, err = call_main(argv, self.env)
                    except CaseTimedOut:
                        self.fail(f"{where}: still running after {CASE_SECONDS} s")
                    finally:
                        path.unlink()
                        shutil.copy2(self.pristine / path.relative_to(self.tmp.path), path)
                        self.put_back(writes)
                    cases += 1
                    codes[code] = codes.get(code, 0) + 1
                    self.assertNotEqual(code, 4, f"{where}\n{err}")
                    self.assertNotIn("MemoryError", err, where)
            timing.append(f"{name} {cases - before} in {time.monotonic() - started:.0f} s")
        self.assertGreater(codes.get(2, 0), 0)
        print(f"\nbounded-read fuzz: {cases} cases ({', '.join(timing)}), exit codes "
              f"{dict(sorted(codes.items()))}")


if __name__ == "__main__":
    unittest.main()
