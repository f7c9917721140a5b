"""The HTML report and the JUnit XML: built from a real iteration run with the fake CLIs."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import unittest
import xml.etree.ElementTree as ET
import zlib
from html.parser import HTMLParser
from pathlib import Path
from unittest import mock

from tests.helpers import TempDir, call_main, demo_suite, fake_env, make_repo, runner, volume_test


def model(benchmark: dict) -> runner.Benchmark:
    """A benchmark.json object as the reports take it."""
    return runner.Benchmark.from_json(benchmark, "benchmark.json")

PLANTED_OUTPUT = "Done. <script>alert(1)</script> <img src=http://example.invalid/x.png>"
PLANTED_ARTIFACT = "# Plan\n</pre><script>alert(2)</script>\n"
SCRIPT = {
    "executor": {"text": PLANTED_OUTPUT, "write_artifact": PLANTED_ARTIFACT},
    "grader": {"verdicts": {"fail_ids": [2]}},
    "cases": [{"role": "executor", "match": "Task number 3.", "spec": {"fault": "exit_nonzero"}}],
}
FETCHING_TAGS = {"script", "link", "img", "iframe", "object", "embed", "image", "use", "base",
                 "form", "audio", "video", "source"}
FETCHING_ATTRIBUTES = {"src", "href", "xlink:href", "action", "srcset", "poster", "data"}
CHROMIUM = shutil.which("chromium")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage")


def build_iteration(base: Path, script: dict, extra_args: list[str]) -> tuple[Path, int, str]:
    """Run the demo suite with the fake claude; return the iteration folder, exit code, stderr."""
    root = make_repo(base, demo_suite(3))
    code, _, err = call_main(["run", str(root / "evals" / "demo" / "evals.json"),
                              "--agent", "claude", "--quiet", *extra_args],
                             env=fake_env(base, script))
    return root / "evals" / "demo" / "workspace" / "claude" / "iteration-1", code, err


def junit_counts(element: ET.Element) -> dict[str, int]:
    return {key: int(element.get(key, "0")) for key in ("tests", "failures", "errors", "skipped")}


def _json_paths(value: object, prefix: tuple = ()) -> list[tuple]:
    """Every key path into value; of each list only its first item."""
    if isinstance(value, dict):
        children = list(value.items())
    elif isinstance(value, list):
        children = list(enumerate(value[:1]))
    else:
        return []
    found = []
    for key, child in children:
        found.append((*prefix, key))
        found += _json_paths(child, (*prefix, key))
    return found


def _with_value(data: object, path: tuple, value: object) -> object:
    """A deep copy of data with the place at path set to value."""
    changed = copy.deepcopy(data)
    node = changed
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return changed


class OutputsFromRunTests(unittest.TestCase):
    """One real iteration (3 cases x 2 configs, one case's executor failing) shared by all."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = TempDir()
        cls.junit_path = cls.tmp.path / "ci" / "junit.xml"
        cls.iteration, cls.code, err = build_iteration(
            cls.tmp.path, SCRIPT, ["--junit", str(cls.junit_path)])
        if not (cls.iteration / "benchmark.json").is_file():
            cls.tmp.cleanup()
            raise AssertionError(f"the run wrote no benchmark (exit {cls.code}): {err}")
        cls.html = (cls.iteration / "benchmark.html").read_text(encoding="utf-8")
        cls.benchmark = json.loads((cls.iteration / "benchmark.json").read_text(encoding="utf-8"))

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def setUp(self) -> None:
        self.work = TempDir()
        self.addCleanup(self.work.cleanup)

    # -- HTML ---------------------------------------------------------------------------------

    def test_run_writes_the_page_beside_benchmark_json(self) -> None:
        self.assertEqual(self.code, 1)  # the failing executor makes it REVIEW REQUIRED
        self.assertTrue(self.html.startswith("<!DOCTYPE html>"))
        self.assertIn("<svg", self.html)

    def test_verdict_and_sanity_come_first(self) -> None:
        verdict = self.benchmark["paired"]["verdict"]
        first_verdict = self.html.index(f"<strong>{verdict}</strong>")
        first_sanity = self.html.index("<strong>REVIEW REQUIRED</strong>")
        self.assertLess(max(first_verdict, first_sanity), self.html.index("<svg"))
        self.assertLess(max(first_verdict, first_sanity), self.html.index("<h2>"))

    def test_text_from_runs_is_inert(self) -> None:
        self.assertNotIn("<script", self.html.lower())
        self.assertIn("&lt;script&gt;alert(1)&lt;/script&gt;", self.html)
        self.assertIn("&lt;/pre&gt;&lt;script&gt;alert(2)&lt;/script&gt;", self.html)
        self.assertNotIn("<img", self.html.lower())

    def test_page_references_nothing_outside_itself(self) -> None:
        seen = TagCollector.of(self.html)
        self.assertEqual(seen.tags & FETCHING_TAGS, set())
        self.assertEqual(seen.attributes & FETCHING_ATTRIBUTES, set())
        self.assertNotRegex(seen.style, r"(?i)url\(|@import")
        self.assertIn("default-src 'none'", self.html)

    def test_chart_has_a_bar_per_scored_config_and_a_delta_per_eval(self) -> None:
        svg = self.html[self.html.index("<svg"):self.html.index("</svg>")]
        self.assertEqual(len(re.findall(r"<rect class=\"c[01]\"[^>]*><title>", svg)), 4)
        self.assertEqual(svg.count("not scored (executor_failed)"), 2)
        self.assertEqual(svg.count("+0.0 pp"), 2)

    def test_failed_assertions_show_the_graders_evidence(self) -> None:
        section = self.html[self.html.index("<h2>Failed assertions</h2>"):]
        section = section[:section.index("<h2>", 1)]
        # Grouped by assertion: one row per failing assertion text, not one per run.
        rows = re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td>", section)
        texts = [text for text, _ in rows]
        self.assertEqual(len(texts), len(set(texts)), "an assertion is repeated")
        self.assertIn("It mentions item 1.", texts)
        self.assertIn("fake grader: assertion 2 does not hold", section)
        failing = sum(1 for run in self.benchmark["runs"] for e in run["expectations"]
                      if not e["passed"])
        counted = sum(int(re.match(r"failed in (\d+) run", where).group(1)) for _, where in rows)
        self.assertEqual(counted, failing)

    def test_each_run_has_collapsible_output_artifact_and_verdicts(self) -> None:
        self.assertEqual(self.html.count('<details class="run'), 6)
        self.assertEqual(self.html.count("<summary>output (outputs/output.txt"), 6)
        self.assertEqual(self.html.count("<summary>artifact (outputs/plan.md"), 4)
        self.assertEqual(self.html.count("artifact: no file at "), 2)
        self.assertEqual(self.html.count('<td class="fail">FAIL</td>'), 4)

    def test_absent_metrics_are_not_captured_never_zero(self) -> None:
        benchmark = copy.deepcopy(self.benchmark)
        for run in benchmark["runs"]:
            run["metric_sources"]["tokens"] = {"value": None, "absent_reason": "no usage <here>"}
        benchmark["run_summary"]["with_skill"]["tokens"] = runner.describe([])
        html = runner.html_page(model(benchmark), self.iteration)
        self.assertIn("not captured (no usage &lt;here&gt;)", html)

    def test_big_files_are_cut_with_a_note(self) -> None:
        iteration = self.work.path / "iteration-1"
        shutil.copytree(self.iteration, iteration)
        big = iteration / "eval-E01" / "with_skill" / "run-1" / "outputs" / "output.txt"
        big.write_text("é" * 300_000, encoding="utf-8")
        html = runner.html_page(model(self.benchmark), iteration)
        self.assertIn("cut at 100,000 of 600,000 bytes; see eval-E01/with_skill/run-1/", html)
        self.assertLess(len(html.encode("utf-8")), 200_000)

    def test_the_size_budget_leaves_later_files_out(self) -> None:
        budget = runner._FileBudget(10)
        path = self.iteration / "eval-E01" / "with_skill" / "run-1" / "outputs" / "output.txt"
        first = runner._read_run_file(path, self.iteration, budget)
        second = runner._read_run_file(path, self.iteration, budget)
        self.assertEqual(len(first["text"].encode("utf-8")), 10)
        self.assertIsNone(second["text"])
        self.assertIn("budget is spent", second["note"])

    def test_a_large_suite_stays_small(self) -> None:
        benchmark = copy.deepcopy(self.benchmark)
        template_rows, template_runs = (benchmark["per_eval"],
                                        benchmark["runs"] + benchmark["unscored_runs"])
        benchmark["per_eval"], benchmark["runs"], benchmark["unscored_runs"] = [], [], []
        for number in range(71):
            for row in template_rows:
                benchmark["per_eval"].append({**row, "eval_id": f"{row['eval_id']}-{number}"})
            for run in template_runs:
                kept = benchmark["runs"] if run["scored"] else benchmark["unscored_runs"]
                kept.append({**run, "eval_id": f"{run['eval_id']}-{number}"})
        html = runner.html_page(model(benchmark), self.iteration)
        self.assertEqual(html.count('<details class="run'), 71 * 6)
        self.assertLess(len(html.encode("utf-8")), 2_000_000)

    def test_one_config_and_no_runs_still_render(self) -> None:
        single = copy.deepcopy(self.benchmark)
        single["paired"] = None
        single["metadata"]["configs"] = ["with_skill"]
        html = runner.html_page(model(single), self.iteration)
        self.assertIn("<strong>no comparison</strong>", html)
        self.assertIn("<svg", html)
        single["per_eval"], single["runs"] = [], []
        self.assertIn("No eval ran.", runner.html_page(model(single), self.iteration))

    # -- JUnit --------------------------------------------------------------------------------

    def test_run_junit_parses_and_counts_match(self) -> None:
        root = ET.parse(self.junit_path).getroot()
        self.assertEqual(root.tag, "testsuites")
        self.assertEqual(junit_counts(root),
                         {"tests": 6, "failures": 4, "errors": 2, "skipped": 0})
        suites = root.findall("testsuite")
        self.assertEqual([s.get("name") for s in suites], ["with_skill", "without_skill"])
        for suite in suites:
            cases = suite.findall("testcase")
            self.assertEqual(junit_counts(suite)["tests"], len(cases))
            self.assertEqual(junit_counts(suite)["failures"],
                             sum(bool(c.findall("failure")) for c in cases))
            self.assertEqual(junit_counts(suite)["errors"],
                             sum(bool(c.findall("error")) for c in cases))
            self.assertEqual({c.get("classname") for c in cases}, {suite.get("name")})

    def test_junit_cases_failures_errors_and_properties(self) -> None:
        suite = ET.parse(self.junit_path).getroot().find("testsuite")
        cases = {c.get("name"): c for c in suite.findall("testcase")}
        self.assertEqual(sorted(cases), ["E01 run-1", "E02 run-1", "E03 run-1"])
        failure = cases["E01 run-1"].find("failure")
        self.assertEqual(failure.get("message"), "It mentions item 1.")
        self.assertEqual(failure.text, "fake grader: assertion 2 does not hold")
        error = cases["E03 run-1"].find("error")
        self.assertEqual(error.get("type"), "executor_failed")
        self.assertTrue(error.get("message"))
        self.assertIsNone(cases["E03 run-1"].get("time"))  # not captured: left out, not 0
        props = {p.get("name"): p.get("value") for p in suite.find("properties")}
        self.assertEqual(props["verdict"], self.benchmark["paired"]["verdict"])
        self.assertEqual(props["delta"], "+0.0 pp")

    def test_junit_survives_characters_xml_cannot_hold(self) -> None:
        benchmark = model(copy.deepcopy(self.benchmark))
        run = benchmark.runs[0]
        bad = dataclasses.replace(run.expectations[1], text="bad \x1b[31m <&> \"text\" \ud800",
                                  evidence="evidence \x07 with ]]> inside")
        odd = dataclasses.replace(run, eval_id="E01\x00",  # no folder name: only in memory
                                  expectations=(run.expectations[0], bad,
                                                *run.expectations[2:]))
        benchmark = dataclasses.replace(benchmark, runs=(odd, *benchmark.runs[1:]))
        root = ET.fromstring(runner.render_junit(benchmark).encode("utf-8"))
        failure = next(f for f in root.iter("failure") if f.get("message").startswith("bad"))
        self.assertEqual(failure.get("message"), "bad \ufffd[31m <&> \"text\" \ufffd")
        self.assertEqual(failure.text, "evidence \ufffd with ]]> inside")

    def test_single_config_junit_has_one_suite(self) -> None:
        single = copy.deepcopy(self.benchmark)
        single["paired"] = None
        single["metadata"]["configs"] = ["with_skill"]
        single["runs"] = [r for r in single["runs"] if r["configuration"] == "with_skill"]
        root = ET.fromstring(runner.render_junit(model(single)).encode("utf-8"))
        self.assertEqual(len(root.findall("testsuite")), 1)
        props = {p.get("name"): p.get("value") for p in root.iter("property")}
        self.assertEqual(props["verdict"], "none (one config only)")

    # -- report -------------------------------------------------------------------------------

    def copy_iteration(self) -> Path:
        iteration = self.work.path / "iteration-1"
        shutil.copytree(self.iteration, iteration)
        (iteration / "benchmark.html").unlink()
        return iteration

    def test_report_html_default_path(self) -> None:
        iteration = self.copy_iteration()
        code, out, err = call_main(["report", str(iteration), "--html"])
        self.assertEqual(code, self.code, err)  # as the run
        self.assertTrue(out.startswith("skill-eval: demo with claude"), out)
        self.assertIn("<svg", (iteration / "benchmark.html").read_text(encoding="utf-8"))

    def test_report_html_explicit_path_and_junit(self) -> None:
        iteration = self.copy_iteration()
        page, junit = self.work.path / "out" / "page.html", self.work.path / "out" / "r.xml"
        code, _, err = call_main(["report", str(iteration), "--html", str(page),
                                  "--junit", str(junit)])
        self.assertEqual(code, self.code, err)  # as the run
        self.assertFalse((iteration / "benchmark.html").exists())
        self.assertIn("&lt;script&gt;alert(1)", page.read_text(encoding="utf-8"))
        self.assertEqual(junit_counts(ET.parse(junit).getroot())["tests"], 6)

    def test_report_without_flags_writes_no_extra_files(self) -> None:
        iteration = self.copy_iteration()
        code, _, err = call_main(["report", str(iteration)])
        self.assertEqual(code, self.code, err)  # as the run
        self.assertFalse((iteration / "benchmark.html").exists())

    def test_report_refuses_a_folder_or_the_benchmark_as_output(self) -> None:
        iteration = self.copy_iteration()
        before = (iteration / "benchmark.json").read_bytes()
        for argv in (["--junit", str(self.work.path)],
                     ["--html", str(iteration / "benchmark.json")]):
            code, _, err = call_main(["report", str(iteration), *argv])
            self.assertEqual(code, 2, argv)
            self.assertIn("not a file path this report may write", err)
        self.assertEqual((iteration / "benchmark.json").read_bytes(), before)

    def tree_state(self, folder: Path) -> dict:
        return {str(p): (p.stat().st_mode, p.read_bytes() if p.is_file() else b"")
                for p in sorted(folder.rglob("*"))}

    def test_report_refuses_a_fifo_or_a_socket_as_output_and_changes_nothing(self) -> None:
        iteration = self.copy_iteration()
        fifo = self.work.path / "out.fifo"
        os.mkfifo(fifo)
        sock = self.work.path / "s.sock"
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(server.close)
        server.bind(str(sock))
        before = self.tree_state(self.work.path)
        for argv, kind in ((["--html", str(fifo)], "a FIFO"), (["--junit", str(fifo)], "a FIFO"),
                           (["--junit", str(sock)], "a socket")):
            with self.subTest(argv=argv):
                code, _, err = call_main(["report", str(iteration), *argv])
                self.assertEqual(code, 2, err)
                self.assertIn(f"is {kind}, not a regular file", err)
                self.assertEqual(self.tree_state(self.work.path), before)

    def test_report_refuses_a_link_to_a_device_before_any_write(self) -> None:
        """A link to /dev/null: refused before anything is written. The write helper is
        guarded, so even a runner without the check can never replace /dev/null here."""
        iteration = self.copy_iteration()
        link = self.work.path / "results.xml"
        os.symlink(os.devnull, link)
        attempts = []
        real = runner.write_bytes

        def guarded(path, data):
            attempts.append(str(path))
            if not Path(path).resolve().is_relative_to(self.work.path.resolve()):
                raise AssertionError(f"the runner was about to write {path}")
            return real(path, data)
        before = self.tree_state(iteration)
        for flag in ("--junit", "--html"):
            with self.subTest(flag=flag), mock.patch.object(runner, "write_bytes", guarded):
                code, _, err = call_main(["report", str(iteration), flag, str(link)])
                self.assertEqual(code, 2, err)
                self.assertIn("is a character device, not a regular file", err)
        self.assertEqual(attempts, [], "something was written")
        self.assertEqual(self.tree_state(iteration), before)
        self.assertEqual(os.readlink(link), os.devnull)
        self.assertTrue(stat.S_ISCHR(os.stat(os.devnull).st_mode))

    def test_run_refuses_a_workspace_that_is_no_folder_and_launches_nothing(self) -> None:
        repo = make_repo(self.work.path, demo_suite(1))
        fifo = self.work.path / "ws.fifo"
        os.mkfifo(fifo)
        code, _, err = call_main(["run", str(repo / "evals/demo/evals.json"), "--agent",
                                  "claude", "--workspace", str(fifo)],
                                 fake_env(self.work.path, {}))
        self.assertEqual(code, 2, err)
        self.assertIn("it exists and is not a folder", err)
        self.assertTrue(stat.S_ISFIFO(os.lstat(fifo).st_mode))
        self.assertEqual(list((self.work.path / "log").iterdir()), [], "an agent was launched")

    def test_run_refuses_a_fifo_as_junit_output_and_launches_nothing(self) -> None:
        repo = make_repo(self.work.path, demo_suite(1))
        fifo = self.work.path / "junit.fifo"
        os.mkfifo(fifo)
        workspace = self.work.path / "ws"
        code, _, err = call_main(["run", str(repo / "evals/demo/evals.json"), "--agent",
                                  "claude", "--workspace", str(workspace), "--junit", str(fifo)],
                                 fake_env(self.work.path, {}))
        self.assertEqual(code, 2, err)
        self.assertIn("is a FIFO, not a regular file", err)
        self.assertTrue(stat.S_ISFIFO(os.lstat(fifo).st_mode))
        self.assertFalse(workspace.exists())
        self.assertEqual(list((self.work.path / "log").iterdir()), [], "an agent was launched")

    def test_report_of_a_malformed_benchmark_writes_nothing_and_is_invalid_input(self) -> None:
        iteration = self.copy_iteration()
        (iteration / "benchmark.md").unlink()
        good = json.loads((iteration / "benchmark.json").read_text(encoding="utf-8"))
        page, junit = self.work.path / "page.html", self.work.path / "r.xml"
        # Each of these the markdown renders, but the page or JUnit once could not (exit 4).
        for path, value in ((("runs", 0, "failure"), 7), (("runs", 0, "result"), None),
                            (("paired", "ci95"), [1]), (("runs", 1, "run_number"), [])):
            with self.subTest(path=path, value=value):
                bad = _with_value(good, path, value)
                (iteration / "benchmark.json").write_text(json.dumps(bad), encoding="utf-8")
                code, _, err = call_main(["report", str(iteration), "--html", str(page),
                                          "--junit", str(junit)])
                self.assertEqual(code, 2, err)
                # the loader names the JSON path where it can; the renderers name the file
                self.assertRegex(err, r"benchmark\.json (is malformed|holds the wrong kind of "
                                      r"value at )")
                self.assertEqual(sorted(p.name for p in self.work.path.glob("*.*")), [])
                self.assertFalse((iteration / "benchmark.md").exists())

    @volume_test
    def test_no_malformed_benchmark_is_an_internal_error(self) -> None:
        """Every place in benchmark.json (of a list, its first item), set to each kind of JSON
        value: report with every output is exit 0, 1 or 2, never a traceback."""
        iteration = self.copy_iteration()
        good = json.loads((iteration / "benchmark.json").read_text(encoding="utf-8"))
        argv = ["report", str(iteration), "--html", str(self.work.path / "page.html"),
                "--junit", str(self.work.path / "r.xml")]
        crashes = []
        for path in _json_paths(good):
            for value in (None, 7, "x", [1], {}):
                bad = _with_value(good, path, value)
                (iteration / "benchmark.json").write_text(json.dumps(bad), encoding="utf-8")
                code, _, err = call_main(argv)
                if code not in (0, 1, 2):
                    crashes.append(f"{path} = {value!r}: exit {code}: {err[:200]}")
        self.assertEqual(crashes[:5], [], f"{len(crashes)} internal errors")

    # -- a real browser -----------------------------------------------------------------------

    @unittest.skipUnless(CHROMIUM, "chromium is not on PATH (.ci/run installs Debian's)")
    def test_headless_chromium_renders_the_page(self) -> None:
        url = (self.iteration / "benchmark.html").resolve().as_uri()
        shot = self.work.path / "shot.png"
        self.chromium("shot", f"--screenshot={shot}", "--window-size=1200,1600", url)
        self.assertTrue(shot.is_file(), "chromium wrote no screenshot")
        self.assertGreater(png_rows_unlike_uniform(shot.read_bytes()), 50,
                           "the screenshot is blank (one colour)")
        dom = self.chromium("dom", "--dump-dom", url).stdout
        self.assertIn("<svg", dom)
        self.assertIn(f"<strong>{self.benchmark['paired']['verdict']}</strong>", dom)
        self.assertNotIn("<script", dom.lower())

    def chromium(self, name: str, *args: str) -> subprocess.CompletedProcess:
        """Run chromium in its own process group and kill whatever it leaves behind."""
        argv = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={self.work.path / name}", *args]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            kill_group(proc.pid)
            proc.communicate()
            self.fail(f"chromium {name} did not finish within 120 s")
        finally:
            kill_group(proc.pid)
        self.assertEqual(proc.returncode, 0, err[-2000:])
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)


class TagCollector(HTMLParser):
    """The tags and attribute names a browser would see, and the text of <style>."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attributes: set[str] = set()
        self.style = ""
        self.in_style = False

    @classmethod
    def of(cls, html: str) -> TagCollector:
        collector = cls()
        collector.feed(html)
        collector.close()
        return collector

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.add(tag)
        self.attributes.update(name for name, _ in attrs)
        self.in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self.in_style = False

    def handle_data(self, data: str) -> None:
        if self.in_style:
            self.style += data


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def png_rows_unlike_uniform(data: bytes) -> int:
    """How many rows of an 8-bit PNG a single-colour image could not have produced.

    A PNG row is stored filtered. For an image of one colour, every filter type yields a
    fixed row (the colour, zeros, or half the colour), so comparing each stored row with that
    row finds any other pixel without decoding the whole image; 0 means blank.
    """
    width, height, depth, colour_type, interlace, raw = read_png(data)
    if depth != 8 or interlace:
        raise AssertionError(f"unexpected PNG format: depth {depth}, interlace {interlace}")
    bpp = {0: 1, 2: 3, 4: 2, 6: 4}[colour_type]
    stride = width * bpp
    colour = raw[1:1 + bpp]  # row 0's first pixel is stored unfiltered by every filter type
    half = bytes((c - c // 2) % 256 for c in colour)
    zeros = bytes(stride - bpp)
    expected = {  # (filter type, first row?) -> the stored row of a one-colour image
        (0, True): colour * width, (0, False): colour * width,
        (1, True): colour + zeros, (1, False): colour + zeros,
        (2, True): colour * width, (2, False): bytes(stride),
        (3, True): colour + half * (width - 1), (3, False): half + zeros,
        (4, True): colour + zeros, (4, False): bytes(stride)}
    unlike = 0
    for row in range(height):
        start = row * (stride + 1)
        stored = raw[start + 1:start + 1 + stride]
        unlike += stored != expected[(raw[start], row == 0)]
    return unlike


def read_png(data: bytes) -> tuple[int, int, int, int, int, bytes]:
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise AssertionError("not a PNG file")
    pos, chunks, header = 8, [], b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            chunks.append(body)
    width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", header)
    return width, height, depth, colour_type, interlace, zlib.decompress(b"".join(chunks))


if __name__ == "__main__":
    unittest.main()
