"""Reads with a bound (issue 33 item 11): every file the runner reads back goes through one
reader that takes regular files only, caps each kind's size before reading and caps JSON
nesting before parsing. What a later edit controls here: any byte of any file in an
iteration, and what kind of file it is (a FIFO, a link to a device). None may hang a reading
command, exhaust its memory or end it in a traceback; a file over a cap is exit 2, named.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import unittest
from pathlib import Path

from tests.helpers import TempDir, call_main, demo_suite, fake_calls, fake_env, make_repo, runner

SUITE = "evals/demo/evals.json"
DEEP = "[" * 200_000 + "]" * 200_000
GUARD_SECONDS = 20


class Hung(BaseException):
    """Not an Exception, so the runner's own handler cannot turn it into an exit code."""


@contextlib.contextmanager
def alarm_guard(fifo: Path | None = None):
    """Fail rather than hang or fill the machine's memory: an alarm, which also gives a
    blocked FIFO reader an end, and an address-space limit 1 GiB above what is used now."""
    import resource

    def expire(_signum, _frame):
        if fifo is not None:
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        raise Hung
    limits = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm", encoding="ascii") as handle:
        soft = int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE") + (1 << 30)
    if limits[1] != resource.RLIM_INFINITY:
        soft = min(soft, limits[1])
    previous = signal.signal(signal.SIGALRM, expire)
    resource.setrlimit(resource.RLIMIT_AS, (soft, limits[1]))
    signal.alarm(GUARD_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        resource.setrlimit(resource.RLIMIT_AS, limits)
        signal.signal(signal.SIGALRM, previous)


@unittest.skipUnless(sys.platform.startswith("linux"), "FIFOs, /dev/zero and /proc")
class BoundedReaderTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)

    def test_a_fifo_is_refused_without_waiting_for_a_writer(self) -> None:
        fifo = self.tmp.path / "benchmark.json"
        os.mkfifo(fifo)
        with alarm_guard(fifo), self.assertRaises(OSError):
            runner.read_unfollowed(fifo)

    @unittest.skipUnless(os.path.exists("/dev/zero"), "needs /dev/zero")
    def test_a_device_is_refused_even_reached_without_a_link(self) -> None:
        with alarm_guard(), self.assertRaises(OSError):
            runner.read_unfollowed("/dev/zero")
        link = self.tmp.path / "run.json"
        link.symlink_to("/dev/zero")
        with alarm_guard(), self.assertRaises(OSError):
            runner.read_json_unfollowed(link)

    def test_each_kind_has_its_cap_checked_before_reading(self) -> None:
        for name in ("benchmark.json", "iteration_manifest.json", "cell_hashes.jsonl",
                     "run.json", "output.txt"):
            with self.subTest(name=name):
                path = self.tmp.path / name
                with open(path, "wb") as handle:  # sparse
                    handle.truncate(runner.read_cap(path) + 1)
                with self.assertRaises(runner.FileOverCap) as caught:
                    runner.read_unfollowed(path)
                self.assertIn(str(path), caught.exception.message)
                self.assertEqual(caught.exception.exit_code, 2)
        self.assertLess(runner.read_cap("run.json"), runner.read_cap("benchmark.json"))

    def test_nesting_is_capped_before_the_parser_recurses(self) -> None:
        with self.assertRaises(runner.FileOverCap):
            runner.loads_bounded(DEEP.encode(), "x.json")
        with self.assertRaises(runner.FileOverCap):  # unclosed: json.loads recurses too
            runner.loads_bounded(b'{"a":' * 5000, "x.json")
        inside_strings = json.dumps({"a": "[" * 5000, "b": ["\\\"[" * 300, "]" * 700]})
        self.assertEqual(runner.loads_bounded(inside_strings.encode(), "x.json")["a"],
                         "[" * 5000)
        deep_ok = "[" * runner.MAX_READ_JSON_DEPTH + "]" * runner.MAX_READ_JSON_DEPTH
        self.assertIsInstance(runner.loads_bounded(deep_ok.encode(), "x.json"), list)

    def test_the_nesting_count_never_undercounts(self) -> None:
        for text, depth in (('[1,{"a":[2]}]', 3), ('"\\\\"', 0), ('["\\\\", [[]]]', 3),
                            ('["\\"]", [[]]]', 3), ("[[[[", 4), ('{"a": "}}}}", "b": [{}]}', 3)):
            with self.subTest(text=text):
                self.assertGreaterEqual(runner._json_nesting(text.encode(), 0), depth)


    @unittest.skipUnless(os.path.exists("/dev/zero"), "needs /dev/zero")
    def test_a_graders_last_message_file_is_read_without_link_fifo_or_device(self) -> None:
        # codex's grader writes its last message to a file; with no text on stdout the
        # runner reads that file, which the grader controls.
        events = [{"type": "thread.started", "thread_id": "t"}, {"type": "turn.started"},
                  {"type": "turn.completed", "usage": {"input_tokens": 1, "output_tokens": 1}}]
        result = runner.ProcessResult(["codex"], 0, "\n".join(map(json.dumps, events)), "", 0.1)
        provider = runner.PROVIDERS["codex"]()
        message = self.tmp.path / "last.txt"
        for plant in ("link", "fifo"):
            with self.subTest(plant=plant):
                if plant == "link":
                    message.symlink_to("/dev/zero")
                else:
                    os.mkfifo(message)
                try:
                    with alarm_guard(message):
                        reply = provider.read_grader(result, message)
                finally:
                    message.unlink()
                self.assertEqual(reply.text, "")
        message.write_text("x" * (runner.STREAM_HEAD_BYTES + 10))
        self.assertEqual(len(provider.read_grader(result, message).text),
                         runner.STREAM_HEAD_BYTES)


class ReadBackCase(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.root = make_repo(self.tmp.path, demo_suite(1))
        self.env = fake_env(self.tmp.path, {})
        self.suite = str(self.root / SUITE)
        code, out, err = call_main(["run", self.suite, "--agent", "claude", "--quiet",
                                    "--workspace", str(self.tmp.path / "ws")], self.env)
        self.assertEqual(code, 0, out + err)
        self.iteration = self.tmp.path / "ws" / "iteration-1"

    def resume(self) -> tuple[int, str, str]:
        return call_main(["run", self.suite, "--agent", "claude", "--quiet",
                          "--resume", str(self.iteration)], self.env)

    def regrade(self) -> tuple[int, str, str]:
        return call_main(["run", self.suite, "--agent", "claude", "--quiet", "--workspace",
                          str(self.tmp.path / "regraded"), "--regrade", str(self.iteration)],
                         self.env)

    def report(self) -> tuple[int, str, str]:
        return call_main(["report", str(self.iteration)], self.env)


@unittest.skipUnless(hasattr(os, "mkfifo") and sys.platform.startswith("linux"),
                     "FIFOs and /dev/zero")
class ResumeManifestTest(ReadBackCase):
    def test_a_fifo_manifest_is_refused_at_once(self) -> None:
        manifest = self.iteration / "iteration_manifest.json"
        manifest.unlink()
        os.mkfifo(manifest)
        calls = len(fake_calls(self.tmp.path))
        try:
            with alarm_guard(manifest):
                code, _, err = self.resume()
        except Hung:
            self.fail("run --resume waited on a FIFO manifest")
        self.assertEqual(code, 2, err)
        self.assertIn("iteration_manifest.json", err)
        self.assertIn("not a regular file", err)
        self.assertEqual(len(fake_calls(self.tmp.path)), calls)

    def test_a_manifest_linked_to_dev_zero_is_refused_unread(self) -> None:
        manifest = self.iteration / "iteration_manifest.json"
        manifest.unlink()
        manifest.symlink_to("/dev/zero")
        with alarm_guard():
            code, _, err = self.resume()
        self.assertEqual(code, 2, err)
        self.assertIn("it is a link", err)


    def test_a_recorded_suite_path_naming_a_fifo_is_refused_at_once(self) -> None:
        # `run --resume DIR` alone takes the suite from the manifest: an edit can point it
        # anywhere, a FIFO included.
        fifo = self.tmp.path / "suite.json"
        os.mkfifo(fifo)
        manifest = self.iteration / "iteration_manifest.json"
        data = json.loads(manifest.read_text(encoding="utf-8"))
        data["suite"]["path"] = str(fifo)
        manifest.write_text(json.dumps(data), encoding="utf-8")
        try:
            with alarm_guard(fifo):
                code, _, err = call_main(["run", "--resume", str(self.iteration)], self.env)
        except Hung:
            self.fail("run --resume waited on a FIFO named as the suite")
        self.assertEqual(code, 2, err)
        self.assertIn("cannot read the suite file: not a regular file", err)


class DeepAndLargeFilesTest(ReadBackCase):
    def test_deep_json_in_any_iteration_file_is_never_an_internal_error(self) -> None:
        cell = "eval-E01/with_skill/run-1"
        # Where a command must refuse (exit 2, naming the file); elsewhere it may also treat
        # the file as changed (exit 1) or, resuming, run the cell again.
        refused = {"benchmark.json": ("report", "regrade"),
                   "iteration_manifest.json": ("resume", "regrade"),
                   "cell_hashes.jsonl": ("resume", "regrade")}
        for rel in ("benchmark.json", "iteration_manifest.json", "cell_hashes.jsonl",
                    f"{cell}/run.json", f"{cell}/grading.json"):
            path = self.iteration / rel
            original = path.read_bytes()
            try:
                for name, command in (("report", self.report), ("regrade", self.regrade),
                                      ("resume", self.resume)):  # resume rewrites: last
                    path.write_text(DEEP)
                    with self.subTest(file=rel, command=name):
                        code, out, err = command()
                        self.assertNotEqual(code, 4, err)
                        self.assertNotIn("RecursionError", err)
                        if name in refused.get(rel, ()):
                            self.assertEqual(code, 2, out + err)
                            self.assertIn(f"{rel}", err)
                            self.assertIn("is JSON nested deeper than", err)
                    shutil.rmtree(self.tmp.path / "regraded", ignore_errors=True)
            finally:
                path.write_bytes(original)

    def test_a_benchmark_over_its_cap_is_exit_2_naming_it(self) -> None:
        benchmark = self.iteration / "benchmark.json"
        with open(benchmark, "r+b") as handle:  # sparse: no disk, and never read
            handle.truncate(runner.read_cap(benchmark) + 1)
        code, _, err = self.report()
        self.assertEqual(code, 2, err)
        self.assertIn(f"{benchmark} is {runner.read_cap(benchmark) + 1:,} bytes, over the", err)


class MisshapenManifestTest(ReadBackCase):
    def test_a_recorded_command_of_numbers_is_refused_naming_it(self) -> None:
        # Found by the result fuzz: argv [1] failed to parse, and printing it raised.
        manifest = self.iteration / "iteration_manifest.json"
        data = json.loads(manifest.read_text(encoding="utf-8"))
        data["argv"] = [1]
        manifest.write_text(json.dumps(data), encoding="utf-8")
        code, _, err = self.resume()
        self.assertEqual(code, 2, err)
        self.assertIn("iteration_manifest.json holds the wrong kind of value at argv[0]", err)


class RegradeFixtureStatusTest(ReadBackCase):
    def test_a_misshapen_fixture_status_is_refused_before_anything_starts(self) -> None:
        # Found by the re-grade fuzz: the source's fixture_status.before is carried over and
        # its `dirty` list sliced by the sanity checks ('int' object is not subscriptable).
        manifest = self.iteration / "iteration_manifest.json"
        data = json.loads(manifest.read_text(encoding="utf-8"))
        for value in (7, [1], "x"):
            with self.subTest(dirty=value):
                data["fixture_status"]["before"]["dirty"] = value
                manifest.write_text(json.dumps(data), encoding="utf-8")
                calls = len(fake_calls(self.tmp.path))
                code, _, err = self.regrade()
                self.assertEqual(code, 2, err)
                self.assertIn("fixture_status.before.dirty", err)
                self.assertEqual(len(fake_calls(self.tmp.path)), calls)
                self.assertFalse((self.tmp.path / "regraded").exists())


if __name__ == "__main__":
    unittest.main()
