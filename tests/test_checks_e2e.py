"""Deterministic checks end to end (issue 26), with the fake agents.

A small Python project with a failing test: the case asks the executor to fix the bug, a `run`
check runs the project's tests (the test file protected) and a `file` check looks at the fix.
The scripted with_skill executor fixes it; the without_skill one only says it did. A lenient
fake judge passes the paired assertion in both, and the run reports the disagreement.
"""

from __future__ import annotations

import json
import re
import subprocess
import unittest
from pathlib import Path

from tests.helpers import TempDir, call_main, fake_calls, fake_env, make_repo
from tests.test_revision_arms import python_for_skill_creator
from tests.test_skill_creator_tools import AGGREGATOR, VIEWER

SUITE_REL = "evals/demo/evals.json"
BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TEST = ("import unittest\n\nfrom calc import add\n\n\nclass AddTests(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n")
PROJECT = {"calc/calc.py": BUGGY, "calc/test_calc.py": TEST}
RUN_TESTS = {"name": "tests pass", "run": "cd calc && python3 -m unittest -q",
             "protect": ["calc/test_calc.py"]}
FILE_FIXED = {"name": "add fixed", "file": "calc/calc.py", "contains": "return a + b"}
PAIRED = {"text": "The project's tests pass after the change.", "check": "tests pass"}
WITH_SKILL = "Skill path:"  # only a with_skill executor's prompt has this line


def fix_suite(**case) -> dict:
    base = {"id": "fix", "prompt": "Fix the bug in calc/calc.py so that its tests pass.",
            "expectations": [PAIRED], "checks": [RUN_TESTS, FILE_FIXED]}
    base.update(case)
    return {"skill_name": "demo", "evals": [base]}


def executors(with_skill: dict, without_skill: dict) -> dict:
    """A script: the with_skill executor does one thing, the without_skill one another;
    the grader passes every assertion it is shown (a lenient judge)."""
    return {"grader": {"verdicts": "all_pass"},
            "cases": [{"role": "executor", "match": WITH_SKILL, "spec": with_skill},
                      {"role": "executor", "match": "", "spec": without_skill}]}


FIXES = {"text": "Fixed the subtraction; all tests pass.",
         "shell_write_files": {"calc/calc.py": FIXED}}
CLAIMS = {"text": "Fixed, all tests pass."}


def load(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


class ChecksBase(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)

    def run_suite(self, suite: dict, script: dict, *extra: str) -> tuple[int, str, str]:
        self.root = make_repo(self.tmp.path, suite, PROJECT)
        self.workspace = self.tmp.path / "ws"
        env = fake_env(self.tmp.path, script)
        return call_main(["run", str(self.root / SUITE_REL), "--agent", "claude",
                          "--workspace", str(self.workspace), "--timeout", "60", *extra], env)

    def cell(self, config: str) -> Path:
        return self.workspace / "iteration-1" / "eval-fix" / config / "run-1"

    def checks_of(self, config: str) -> dict[str, dict]:
        grading = load(self.cell(config) / "grading.json")
        return {e["text"]: e for e in grading["expectations"]}

    def graders(self) -> list[dict]:
        return [c for c in fake_calls(self.tmp.path) if c.get("role") == "grader"]


class ChecksRun(ChecksBase):
    def test_a_fix_passes_both_checks_a_claim_fails_both_and_the_judge_is_caught(self) -> None:
        code, out, err = self.run_suite(fix_suite(), executors(FIXES, CLAIMS))
        self.assertEqual(code, 1, err)  # the judge disagrees with a check: review
        fixed, claimed = self.checks_of("with_skill"), self.checks_of("without_skill")
        for name in ("tests pass", "add fixed"):
            self.assertEqual(fixed[name]["kind"], "check")
            self.assertTrue(fixed[name]["passed"], fixed[name])
            self.assertFalse(claimed[name]["passed"], claimed[name])
        self.assertIn("exited 1 (expected 0)", claimed["tests pass"]["evidence"])
        self.assertIn("does not contain", claimed["add fixed"]["evidence"])
        self.assertTrue(claimed[PAIRED["text"]]["passed"])  # the lenient judge believed it
        self.assertEqual(claimed[PAIRED["text"]]["check"], "tests pass")
        grading = load(self.cell("without_skill") / "grading.json")
        self.assertEqual(grading["summary"], {"passed": 1, "failed": 2, "total": 3,
                                              "pass_rate": 1 / 3})
        run = load(self.cell("without_skill") / "run.json")
        self.assertEqual(run["checks"]["protected"],
                         {"calc/test_calc.py": {"changed_by_executor": []}})
        self.assertIn("stderr_tail", run["checks"]["results"][0])
        self.assertGreater(run["checks"]["duration_s"], 0)
        self.assertNotIn("checks", load(self.cell("without_skill") / "metrics.json")["metrics"])
        prompts = [c.get("prompt") or "" for c in fake_calls(self.tmp.path)
                   if c.get("role") == "executor"]
        self.assertTrue(prompts and not any("unittest" in p or "add fixed" in p
                                            for p in prompts))  # the executor never sees them
        for call in self.graders():  # and the grader never sees the checks
            self.assertNotIn("python3 -m unittest", call.get("prompt") or "")
        iteration = self.workspace / "iteration-1"
        versus = load(iteration / "benchmark.json")["judge_vs_checks"]
        self.assertEqual(versus["overall"], {"count": 2, "agreed": 1, "agreement": 0.5,
                                             "kappa": {"value": 0.0}})
        [pair] = versus["per_pair"]
        self.assertEqual((pair["assertion"], pair["check"]), (PAIRED["text"], "tests pass"))
        self.assertEqual(pair["disagreements"], [
            {"eval_id": "fix", "configuration": "without_skill", "run_number": 1,
             "judge_passed": True, "check_passed": False}])
        flags = [f for f in load(iteration / "benchmark.json")["sanity_checks"]["flags"]
                 if f["kind"] == "judge_disagrees_with_check"]
        self.assertEqual([(f["severity"], f["eval_id"]) for f in flags], [("warning", "fix")])
        self.assertIn("1 of 2 cells (kappa +0.00)", flags[0]["message"])
        markdown = (iteration / "benchmark.md").read_text(encoding="utf-8")
        self.assertIn("## Judge vs checks", markdown)
        self.assertIn("the judge agreed in 1 of 2 cells (50.0%); Cohen's kappa +0.00", markdown)
        self.assertIn("without_skill run 1 (judge pass, check fail)", markdown)
        self.assertIn("The checks' own time per run", markdown)
        self.assertIn("| add fixed [check] |", markdown)  # per assertion, marked
        page, junit = self.tmp.path / "page.html", self.tmp.path / "junit.xml"
        code, _, err = call_main(["report", str(iteration), "--html", str(page),
                                  "--junit", str(junit)])
        self.assertEqual(code, 1, err)  # review, as the run said
        html = page.read_text(encoding="utf-8")
        self.assertIn("<h2>Judge vs checks</h2>", html)
        self.assertIn("tests pass [check]", html)
        xml = junit.read_text(encoding="utf-8")
        self.assertIn('type="check" message="tests pass"', xml)
        self.assertNotIn('type="assertion"', xml)  # the lenient judge failed nothing

    def test_a_judge_that_agrees_with_the_checks_raises_no_flag(self) -> None:
        code, out, err = self.run_suite(fix_suite(), executors(FIXES, FIXES))
        self.assertEqual(code, 0, err)
        versus = load(self.workspace / "iteration-1" / "benchmark.json")["judge_vs_checks"]
        self.assertEqual(versus["overall"]["agreement"], 1.0)
        self.assertIsNone(versus["overall"]["kappa"]["value"])
        self.assertIn("same verdict in every cell", versus["overall"]["kappa"]["absent_reason"])

    def test_an_executor_that_weakens_the_protected_test_fails_and_is_flagged(self) -> None:
        cheat = {"text": "Fixed, all tests pass.", "shell_write_files": {
            "calc/test_calc.py": "def test_add():\n    assert True\n",
            "calc/__pycache__/planted.pyc": "not a real pyc"}}
        code, out, err = self.run_suite(fix_suite(), executors(cheat, CLAIMS))
        self.assertEqual(code, 1, err)
        checks = self.checks_of("with_skill")
        self.assertFalse(checks["tests pass"]["passed"], checks["tests pass"])
        run = load(self.cell("with_skill") / "run.json")
        self.assertEqual(run["checks"]["protected"]["calc/test_calc.py"],
                         {"changed_by_executor": ["calc/test_calc.py"]})
        bench = load(self.workspace / "iteration-1" / "benchmark.json")
        flags = [f for f in bench["sanity_checks"]["flags"]
                 if f["kind"] == "protected_path_changed"]
        self.assertEqual(len(flags), 1, bench["sanity_checks"]["flags"])
        self.assertEqual((flags[0]["severity"], flags[0]["configuration"]),
                         ("warning", "with_skill"))
        self.assertIn("calc/test_calc.py", flags[0]["message"])
        runs = {r["configuration"]: r for r in bench["runs"]}
        self.assertEqual(runs["with_skill"]["checks"]["protected_changed"],
                         ["calc/test_calc.py"])
        self.assertEqual(runs["without_skill"]["checks"]["protected_changed"], [])

    def test_a_protect_path_that_names_nothing_stops_the_run_before_any_agent(self) -> None:
        # Issue 33, item 3: with a misspelt or a pattern protect path, an executor that
        # rewrote the real test passed at 100% with "Sanity checks: OK".
        cheat = {"text": "Fixed, all tests pass.", "shell_write_files": {
            "calc/test_calc.py": "import unittest\n\nclass T(unittest.TestCase):\n"
                                 "    def test_ok(self):\n        pass\n"}}
        for protect in ("calc/tests_calc.py", "calc/test_*.py"):
            with self.subTest(protect=protect):
                self.tmp.cleanup()
                self.tmp = TempDir()
                checks = [dict(RUN_TESTS, protect=[protect])]
                code, out, err = self.run_suite(fix_suite(checks=checks),
                                                executors(cheat, cheat))
                self.assertEqual(code, 2, out + err)
                self.assertIn(f"protect path {protect!r}", err)
                self.assertEqual(fake_calls(self.tmp.path), [])
                self.assertFalse(self.workspace.exists())

    def test_several_graders_vote_on_assertions_and_checks_are_counted_once(self) -> None:
        code, out, err = self.run_suite(fix_suite(), executors(FIXES, CLAIMS),
                                        "--grader-runs", "3")
        self.assertEqual(code, 1, err)
        self.assertEqual(len(self.graders()), 6)
        grading = load(self.cell("without_skill") / "grading.json")
        judged, checked = grading["expectations"][0], grading["expectations"][1:]
        self.assertEqual((judged["votes"], judged["passed"], judged["check"]),
                         (3, True, "tests pass"))
        self.assertEqual([("ballots" in e, e["kind"]) for e in checked],
                         [(False, "check"), (False, "check")])
        bench = load(self.workspace / "iteration-1" / "benchmark.json")
        self.assertEqual(bench["judge"]["agreement"]["overall"]["items"], 2)  # judged only
        self.assertEqual(bench["judge_vs_checks"]["overall"]["count"], 2)

    def test_a_checks_only_suite_launches_no_grader(self) -> None:
        suite = fix_suite(expectations=[])
        del suite["evals"][0]["expectations"]
        code, out, err = self.run_suite(suite, executors(FIXES, FIXES))
        self.assertEqual(code, 0, err)
        self.assertEqual(self.graders(), [])
        for config in ("with_skill", "without_skill"):
            grading = load(self.cell(config) / "grading.json")
            self.assertEqual(grading["summary"]["pass_rate"], 1.0)
            self.assertEqual([e["kind"] for e in grading["expectations"]], ["check", "check"])
            self.assertTrue(load(self.cell(config) / "run.json")["scored"])

    def test_dry_run_says_a_checks_only_case_needs_no_grader(self) -> None:
        suite = fix_suite()
        suite["evals"].append({"id": "only", "prompt": "Fix it.", "checks": [FILE_FIXED]})
        code, out, err = self.run_suite(suite, executors(FIXES, FIXES), "--dry-run")
        self.assertEqual(code, 0, err)
        self.assertIn("provider calls: up to 6 (4 executors + 2 x 1 graders)", out)
        self.assertIn("checks: 6 in 4 cells", out)
        self.assertIn("scored by checks alone, without a grader call: 2 cells (cases only)", out)
        self.assertEqual(fake_calls(self.tmp.path), [])

    def test_regrade_dry_run_keeps_the_recorded_checks_and_counts_only_judged_cells(self) -> None:
        # A re-grade cannot run checks again (the sandboxes are gone): the dry run says their
        # recorded results are kept, and a checks-only case costs no grader call.
        suite = fix_suite()
        suite["evals"].append({"id": "only", "prompt": "Fix it.", "checks": [FILE_FIXED]})
        code, _, err = self.run_suite(suite, executors(FIXES, FIXES))
        self.assertEqual(code, 0, err)
        before = len(fake_calls(self.tmp.path))
        code, out, err = call_main(
            ["run", str(self.root / SUITE_REL), "--agent", "claude", "--workspace",
             str(self.workspace), "--regrade", str(self.workspace / "iteration-1"), "--dry-run"],
            fake_env(self.tmp.path, executors(FIXES, FIXES)))
        self.assertEqual(code, 0, err)
        self.assertIn("grader calls: up to 2 (2 x 1)", out)
        self.assertIn("checks: not run again (the executors' sandboxes are gone); the results "
                      "the source recorded are kept for 4 cells, 2 of them scored by checks "
                      "alone, without a grader call", out)
        self.assertEqual(len(fake_calls(self.tmp.path)), before)

    def test_a_hanging_check_ends_at_its_timeout_and_the_run_is_unscored(self) -> None:
        hang = {"name": "hangs", "run": "sleep 60", "timeout": 1}
        code, out, err = self.run_suite(fix_suite(checks=[hang, FILE_FIXED],
                                                  expectations=["It is polite."]),
                                        executors(FIXES, FIXES), "--config", "with_skill")
        self.assertEqual(code, 1, err)
        run = load(self.cell("with_skill") / "run.json")
        self.assertEqual(run["status"], "check_error")
        self.assertFalse(run["scored"])
        self.assertIn("check 'hangs' could not run: timed out after 1 s",
                      run["failure"]["detail"])
        self.assertLess(run["checks"]["duration_s"], 30)
        self.assertEqual(len(run["checks"]["results"]), 1)  # the rest were not run
        self.assertFalse((self.cell("with_skill") / "grading.json").exists())

    def test_answer_and_json_checks_read_what_was_recorded(self) -> None:
        checks = [{"answer": "reply", "matches": r"all tests pass"},
                  {"answer": "artifact", "contains": "summary"},
                  {"file": "out/report.json", "json": True},
                  {"file": "calc/missing.py", "exists": False},
                  {"file": "calc/link.py", "exists": True}]
        spec = {"text": "Done: all tests pass.", "write_artifact": "no summary here",
                "shell_write_files": {"out/report.json": "{\"ok\": tru"},
                "shell_symlinks": {"calc/link.py": "/etc/hostname"}}
        code, out, err = self.run_suite(fix_suite(checks=checks, expectations=[]),
                                        executors(spec, spec), "--config", "with_skill")
        results = [(e["passed"], e["evidence"]) for e in
                   load(self.cell("with_skill") / "grading.json")["expectations"]]
        self.assertEqual([passed for passed, _ in results], [True, True, False, True, False])
        self.assertIn("does not parse as JSON", results[2][1])
        self.assertIn("symbolic link (not followed)", results[4][1])
        self.assertEqual(code, 0, err)  # a failed check is a result, not a fault

    def test_a_sandbox_the_executor_removed_leaves_the_run_unscored(self) -> None:
        gone = {"text": "Fixed.", "fault": "delete_cwd"}
        code, out, err = self.run_suite(fix_suite(checks=[FILE_FIXED], expectations=[]),
                                        executors(gone, gone), "--config", "with_skill")
        run = load(self.cell("with_skill") / "run.json")
        if run["status"] == "executor_failed":
            self.skipTest("the fake's delete_cwd executor fails before any check")
        self.assertEqual(code, 1, err)
        self.assertEqual(run["status"], "check_error")
        self.assertIn("the sandbox was gone", run["failure"]["detail"])


    def test_no_malformed_checks_entry_in_benchmark_json_is_an_internal_error(self) -> None:
        """Each place of judge_vs_checks, a run's checks and its check entries, set to each kind
        of JSON value: report with every output is exit 0, 1 or 2, never a traceback."""
        from tests.test_outputs import _json_paths, _with_value
        code, _, err = self.run_suite(fix_suite(), executors(FIXES, CLAIMS))
        self.assertEqual(code, 1, err)
        iteration = self.workspace / "iteration-1"
        good = load(iteration / "benchmark.json")
        index = next(i for i, r in enumerate(good["runs"]) if "checks" in r)
        places = [("judge_vs_checks",), *(("judge_vs_checks", *p)
                                          for p in _json_paths(good["judge_vs_checks"]))]
        places += [("runs", index, "checks"), *(("runs", index, "checks", *p)
                                                for p in _json_paths(good["runs"][index]["checks"]))]
        places += [("runs", index, "expectations", 0, "check"),
                   ("runs", index, "expectations", 1, "kind")]
        argv = ["report", str(iteration), "--html", str(self.tmp.path / "page.html"),
                "--junit", str(self.tmp.path / "r.xml")]
        crashes = []
        for path in places:
            for value in (None, 7, "x", [1], {}):
                bad = _with_value(good, path, value)
                (iteration / "benchmark.json").write_text(json.dumps(bad), encoding="utf-8")
                code, _, err = call_main(argv)
                if code not in (0, 1, 2):
                    crashes.append(f"{path} = {value!r}: exit {code}: {err[:200]}")
        self.assertEqual(crashes[:5], [], f"{len(crashes)} internal errors")


# A POSIX sh `claude` (nothing to mount) for the confined run: as executor it fixes the bug
# with a shell command and answers in stream-json; no grader is called (checks only).
SH_CLAUDE = r"""#!/bin/sh
case " $* " in *" --version "*) echo "2.1.197 (Claude Code)"; exit 0 ;; esac
cat >/dev/null
printf 'def add(a, b):\n    return a + b\n' > calc/calc.py
printf '%s\n' '__EXECUTOR__'
"""
EXECUTOR_LINES = "\n".join(json.dumps(event) for event in (
    {"type": "system", "subtype": "init", "cwd": ".", "session_id": "s", "tools": ["Bash"]},
    {"type": "result", "subtype": "success", "is_error": False, "duration_ms": 5,
     "num_turns": 1, "result": "done", "total_cost_usd": 0.001,
     "usage": {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 0,
               "cache_creation_input_tokens": 0}}))


class ConfinedChecks(ChecksBase):
    """Under bwrap a check runs as the executor did: a fresh, empty HOME, the system
    read-only, and no view of the checkout or the iteration folder."""

    def test_checks_run_under_bwrap_without_the_checkout(self) -> None:
        from tests.test_confinement import bwrap_problem
        problem = bwrap_problem()
        if problem:
            self.skipTest(problem)
        root = self.tmp.path / "repo"
        # The sandbox sits under the test's temp folder, so that folder's name shows in the
        # private /tmp; the checkout and the workspace beside it do not.
        probe = ('test "$HOME" = /home/skill-eval && test -z "$(ls -A "$HOME")" && '
                 f'test ! -e {root} && test ! -e {self.tmp.path}/ws && test -d calc')
        checks = [{"name": "tests pass", "run": "cd calc && /usr/bin/python3 -m unittest -q",
                   "protect": ["calc/test_calc.py"]},
                  {"name": "confined", "run": probe}, FILE_FIXED]
        bin_dir = self.tmp.path / "sh-bin"
        bin_dir.mkdir()
        (bin_dir / "claude").write_text(
            SH_CLAUDE.replace("__EXECUTOR__", EXECUTOR_LINES.replace("\n", "' '")),
            encoding="utf-8")
        (bin_dir / "claude").chmod(0o755)
        self.root = make_repo(self.tmp.path, fix_suite(checks=checks, expectations=[]), PROJECT)
        self.workspace = self.tmp.path / "ws"
        env = fake_env(self.tmp.path)
        env["PATH"] = f"{bin_dir}:{env['PATH']}"
        code, out, err = call_main(["run", str(self.root / SUITE_REL), "--agent", "claude",
                                    "--workspace", str(self.workspace), "--config",
                                    "without_skill", "--isolation", "bwrap"], env)
        run = load(self.cell("without_skill") / "run.json")
        self.assertEqual(code, 0, (err, run.get("failure"), run.get("checks")))
        results = {r["name"]: r for r in run["checks"]["results"]}
        for name in ("tests pass", "confined", "add fixed"):
            self.assertTrue(results[name]["passed"], results[name])
        self.assertEqual(results["confined"]["isolation"]["mode"], "bwrap")
        self.assertEqual(run["executor"]["isolation"]["mode"], "bwrap")


class KappaTests(unittest.TestCase):
    def test_cohen_kappa_of_known_tables(self) -> None:
        from tests.helpers import runner
        t, f = True, False
        kappa = runner._agreement_of([(t, t), (t, t), (f, f), (t, f)]).kappa
        self.assertAlmostEqual(kappa.value, 0.5)
        self.assertAlmostEqual(runner._agreement_of([(t, f), (f, t)]).kappa.value, -1.0)
        self.assertEqual(runner._agreement_of([(t, t), (f, f)]).kappa.value, 1.0)
        self.assertIsNone(runner._agreement_of([]).kappa.value)


@unittest.skipUnless(VIEWER.is_file() and AGGREGATOR.is_file(),
                     f"skill-creator's scripts are not at {VIEWER.parent.parent}")
class SkillCreatorReadsChecks(ChecksBase):
    """skill-creator's aggregator and static viewer (the pinned copy) read an iteration with
    checks: they show each check as an expectation and count it in the pass rate."""

    def tool(self, *argv: str) -> None:
        python = python_for_skill_creator()
        if python is None:
            self.skipTest("skill-creator's scripts need Python 3.10 or newer; none found")
        done = subprocess.run([python, *argv], capture_output=True, text=True, timeout=120,
                              cwd=self.tmp.path, stdin=subprocess.DEVNULL)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)

    def test_aggregator_and_viewer_show_the_checks(self) -> None:
        code, _, err = self.run_suite(fix_suite(), executors(FIXES, CLAIMS))
        # the lenient judge passes the without_skill claim its check fails: the warning
        # judge_disagrees_with_check makes it REVIEW REQUIRED (as in ChecksRun's first test)
        self.assertEqual(code, 1, err)
        iteration = self.workspace / "iteration-1"
        out = self.tmp.path / "theirs.json"
        self.tool(str(AGGREGATOR), str(iteration), "-o", str(out))
        runs = {r["configuration"]: r for r in load(out)["runs"]}
        self.assertAlmostEqual(runs["without_skill"]["result"]["pass_rate"], 1 / 3)
        self.assertEqual(runs["with_skill"]["result"]["pass_rate"], 1.0)
        kinds = [e.get("kind") for e in runs["without_skill"]["expectations"]]
        self.assertEqual(kinds, [None, "check", "check"])
        page = self.tmp.path / "review.html"
        self.tool(str(VIEWER), str(iteration), "--static", str(page), "--benchmark",
                  str(iteration / "benchmark.json"))
        data = json.loads(re.search(r"const EMBEDDED_DATA = (\{.*?\});\n",
                                    page.read_text(encoding="utf-8"), re.DOTALL).group(1))
        shown = {e["text"] for run in data["runs"]
                 for e in (run.get("grading") or {}).get("expectations", [])}
        self.assertLessEqual({"tests pass", "add fixed", PAIRED["text"]}, shown)


if __name__ == "__main__":
    unittest.main()
