"""`validate` of deterministic checks (issue 26): `checks` in a case, `common_checks` at the top.

Each check names exactly one subject (`run`, `file` or `answer`) and one test of it; every field
is checked with a located message and a fix, every regular expression compiled, every timeout
bounded, every path kept inside the sandbox, and a case's check names kept apart.
"""

from __future__ import annotations

import json
import unittest

from tests.helpers import TempDir, call_main, make_repo


def suite_with(checks: list, expectations: list | None = None, **top) -> dict:
    case = {"id": "E01", "prompt": "Fix the bug.", "checks": checks}
    if expectations is not None:
        case["expectations"] = expectations
    return {"skill_name": "demo", "evals": [case], **top}


class ValidateChecksTests(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)

    def validate(self, suite: dict, files: dict[str, str] | None = None
                 ) -> tuple[int, dict, str]:
        root = make_repo(self.tmp.path, suite, files, use_git=False)
        code, out, _ = call_main(["validate", str(root / "evals/demo/evals.json"), "--json"])
        _, text, err = call_main(["validate", str(root / "evals/demo/evals.json")])
        return code, json.loads(out), text + err

    def errors_at(self, report: dict) -> dict[str, dict]:
        return {e["json_path"]: e for e in report["errors"]}

    def test_a_valid_checks_only_case_is_ok_and_counted(self) -> None:
        code, report, text = self.validate(suite_with([
            {"name": "tests pass", "run": "python3 -m unittest -q", "timeout": 60,
             "protect": ["tests/"]},
            {"file": "src/calc.py", "contains": "def add"},
            {"file": "build/out.json", "json": True},
            {"file": "notes.txt", "exists": False},
            {"answer": "reply", "matches": r"fixed\s+it"},
        ], common_checks=[{"name": "readme kept", "file": "README.md", "exists": True}]),
            {"tests/test_calc.py": "import unittest\n"})
        self.assertEqual(code, 0, report)
        self.assertEqual(report["counts"]["checks"], 6)
        # A case with checks has something to score: the one warning is that a single case
        # is too few for a verdict (issue 28), never that nothing can be scored.
        self.assertEqual([w["message"].split(":")[0] for w in report["warnings"]],
                         ["1 eval(s) cannot give a verdict"])
        self.assertIn("6 checks", text)

    def test_a_non_finite_number_is_a_located_error_not_a_crash(self) -> None:
        # The suite chapter's _shown names NaN by its token; a second _shown of the same name
        # further down once replaced it, and json.dumps of the stand-in ended in exit 4.
        code, report, text = self.validate(suite_with([
            {"run": "true", "exit_code": float("nan")}]))
        self.assertEqual(code, 2, text)
        self.assertIn("exit_code must be an integer from 0 to 255, not NaN", text)
        self.assertIn("evals[0].checks[0].exit_code", self.errors_at(report))
        self.assertNotIn("internal error", text)

    def test_every_bad_field_is_located_with_a_fix(self) -> None:
        code, report, _ = self.validate(suite_with([
            {"run": "true", "timeot": 5},                                   # 0 typo
            {"run": "true", "file": "a.txt"},                               # 1 two subjects
            {"name": "x"},                                                  # 2 no subject
            {"run": "true", "timeout": 0},                                  # 3 too short
            {"run": "true", "timeout": 99999},                              # 4 too long
            {"run": "true", "exit_code": "0"},                              # 5 not an int
            {"file": "../outside.txt", "exists": True},                     # 6 climbs out
            {"file": "/etc/passwd", "exists": True},                        # 7 absolute
            {"file": "a.txt", "matches": "(unclosed"},                      # 8 bad regex
            {"file": "a.txt"},                                              # 9 no test
            {"file": "a.txt", "exists": True, "contains": "x"},             # 10 two tests
            {"file": "a.txt", "json": False},                               # 11 json false
            {"answer": "replies", "contains": "x"},                         # 12 bad source
            {"file": "a.txt", "exists": True, "timeout": 5},                # 13 not for file
            {"run": "true", "protect": ["../x"]},                           # 14 protect out
            {"file": ".git/config", "exists": True},                        # 15 .git
            {"run": "true", "protect": "tests/"},                           # 16 not a list
            "python3 -m unittest",                                          # 17 not an object
        ]))
        self.assertEqual(code, 2)
        at = self.errors_at(report)
        base = "evals[0].checks"
        self.assertIn("did you mean 'timeout'", at[f"{base}[0].timeot"]["fix"])
        self.assertIn("exactly one of run, file or answer, or one of the trace subjects",
                      at[f"{base}[1]"]["message"])
        self.assertIn("(found run, file)", at[f"{base}[1]"]["message"])
        self.assertIn("found none", at[f"{base}[2]"]["message"])
        for i in (3, 4):
            self.assertIn("from 1 to 3600", at[f"{base}[{i}].timeout"]["message"])
        self.assertIn("exit_code must be an integer", at[f"{base}[5].exit_code"]["message"])
        self.assertIn("climbs out of the sandbox", at[f"{base}[6].file"]["message"])
        self.assertIn("relative to the sandbox", at[f"{base}[7].file"]["message"])
        self.assertIn("not a valid regular expression", at[f"{base}[8].matches"]["message"])
        self.assertIn("escape", at[f"{base}[8].matches"]["fix"])
        self.assertIn("found none", at[f"{base}[9]"]["message"])
        self.assertIn("found exists, contains", at[f"{base}[10]"]["message"])
        self.assertIn("'json' can only be true", at[f"{base}[11].json"]["message"])
        self.assertIn("did you mean 'reply'", at[f"{base}[12].answer"]["fix"])
        self.assertIn("does not apply to a file check", at[f"{base}[13].timeout"]["message"])
        self.assertIn("climbs out", at[f"{base}[14].protect[0]"]["message"])
        self.assertIn("lies under .git/", at[f"{base}[15].file"]["message"])
        self.assertIn("must be a list of paths", at[f"{base}[16].protect"]["message"])
        self.assertIn("must be an object", at[f"{base}[17]"]["message"])
        self.assertTrue(all(e["case_id"] == "E01" and e["fix"] for e in report["errors"]))

    def test_check_names_are_unique_in_a_case_with_the_common_ones(self) -> None:
        code, report, _ = self.validate(suite_with(
            [{"name": "tests pass", "run": "true"}, {"name": "tests pass", "run": "false"},
             {"name": "readme kept", "file": "README.md", "exists": True}],
            common_checks=[{"name": "readme kept", "file": "README.md", "exists": True}]))
        self.assertEqual(code, 2)
        at = self.errors_at(report)
        self.assertIn("used twice", at["evals[0].checks[1].name"]["message"])
        self.assertIn("also common_checks", at["evals[0].checks[2].name"]["message"])

    def test_a_check_may_not_be_named_like_an_assertion(self) -> None:
        code, report, _ = self.validate(suite_with(
            [{"name": "It is polite.", "run": "true"}], ["It is polite."]))
        self.assertEqual(code, 2)
        self.assertIn("also the text of an assertion",
                      self.errors_at(report)["evals[0].checks"]["message"])

    def test_an_assertion_may_name_the_check_that_decides_it(self) -> None:
        checks = [{"name": "tests pass", "run": "python3 -m unittest"}]
        code, report, _ = self.validate(suite_with(
            checks, [{"text": "The tests pass.", "check": "tests pass"}, "It is polite."]))
        self.assertEqual(code, 0, report)
        self.assertEqual(report["counts"]["assertions"], 2)
        code, report, _ = self.validate_again(suite_with(
            checks, [{"text": "The tests pass.", "check": "test pass"},
                     {"txt": "x", "check": "tests pass"}]))
        self.assertEqual(code, 2)
        at = self.errors_at(report)
        self.assertIn("does not have", at["evals[0].expectations[0].check"]["message"])
        self.assertIn("did you mean 'tests pass'", at["evals[0].expectations[0].check"]["fix"])
        self.assertIn("did you mean 'text'", at["evals[0].expectations[1].txt"]["fix"])

    def validate_again(self, suite: dict) -> tuple[int, dict, str]:
        self.tmp.cleanup()
        self.tmp = TempDir()
        return self.validate(suite)

    def test_the_loaded_suite_carries_checks_with_generated_names(self) -> None:
        from tests.helpers import runner
        root = make_repo(self.tmp.path, suite_with(
            [{"run": "make test"}, {"file": "a/../b.txt", "contains": "ok"}],
            [{"text": "It works.", "check": "check: `make test` exits 0"}]), use_git=False)
        loaded = runner.load_suite(root / "evals/demo/evals.json")
        self.assertEqual(loaded.errors, [])
        case = loaded.suite.cases[0]
        self.assertEqual([c.name for c in loaded.suite.checks_for(case)],
                         ["check: `make test` exits 0", "check: b.txt contains 'ok'"])
        self.assertEqual(case.checks[0].timeout_s, 120)
        self.assertEqual(loaded.suite.paired_checks_for(case),
                         {"It works.": "check: `make test` exits 0"})
        self.assertEqual(case.expectations, ["It works."])

    def test_the_documented_example_is_valid(self) -> None:
        from tests.helpers import PROJECT
        text = (PROJECT / "skills/skill-eval/references/checks.md").read_text(encoding="utf-8")
        example = json.loads(text.split("```json\n", 1)[1].split("```", 1)[0])
        root = make_repo(self.tmp.path, example, {"README.md": "x\n", "calc/test_calc.py": "",
                                                  "calc/calc.py": ""}, use_git=False,
                         skill_md="---\nname: bugfix\ndescription: Use to fix bugs.\n---\n")
        code, out, err = call_main(["validate", str(root / "evals/bugfix/evals.json"), "--json"])
        report = json.loads(out)
        self.assertEqual((code, report["errors"]), (0, []))
        # One case is a schema example, not a suite that can give a verdict.
        self.assertEqual([w["message"].split(":")[0] for w in report["warnings"]],
                         ["1 eval(s) cannot give a verdict"])
        self.assertEqual(report["counts"]["checks"], 4)


class ProtectPathTests(unittest.TestCase):
    """Issue 33, item 3: a protect path is a literal file or folder of the tree every sandbox
    gets (the case's fixtures included), never a pattern; one that names nothing is refused
    by validate, and so by run, which launches nothing."""

    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)

    def validate(self, checks: list, **top) -> dict:
        suite = suite_with(checks, **top)
        suite["evals"][0]["files"] = ["evals/demo/fixtures/data.txt"]
        root = make_repo(self.tmp.path, suite, {
            "calc/calc.py": "def add(a, b):\n    return a - b\n",
            "calc/test_calc.py": "import unittest\n", "docs/guide.md": "guide\n",
            "evals/demo/fixtures/data.txt": "1 2\n"})
        (root / "calc/untracked.py").write_text("x = 1\n", encoding="utf-8")
        code, out, _ = call_main(["validate", str(root / "evals/demo/evals.json"), "--json"])
        report = json.loads(out)
        self.assertEqual(code, 0 if report["ok"] else 2)
        return report

    def test_a_path_that_names_nothing_is_refused_with_a_did_you_mean_only_when_close(self):
        checks = [
            {"run": "true", "protect": ["calc/tests_calc.py"]},           # 0 typo
            {"run": "true", "protect": ["calc/test_*.py"]},               # 1 a glob
            {"run": "true", "protect": ["zzz/nothing-like-it.txt"]},      # 2 far from all
            {"run": "true", "protect": ["calc/untracked.py"]},            # 3 not tracked
            {"run": "true", "protect": ["skills/demo/SKILL.md"]},         # 4 the package
            {"run": "true", "protect": ["evals/demo/evals.json"]},        # 5 the suite
            {"run": "true", "protect": ["calc/", "calc/test_calc.py",    # 6 all fine
                                        "evals/demo/fixtures/data.txt", "evals/demo/fixtures"]},
        ]
        report = self.validate([dict(check, name=f"check {i}") for i, check in enumerate(checks)],
                               common_checks=[{"name": "kept", "run": "true",
                                               "protect": ["doc/guide.md"]}])
        at = {e["json_path"]: e for e in report["errors"]}
        base = "evals[0].checks"
        self.assertEqual(sorted(at), sorted(["common_checks[0].protect[0]"] + [
            f"{base}[{i}].protect[0]" for i in range(6)]))
        typo = at[f"{base}[0].protect[0]"]
        self.assertIn("names no file or folder of the delivered tree", typo["message"])
        self.assertIn("protects nothing", typo["message"])
        self.assertIn("did you mean 'calc/test_calc.py'?", typo["fix"])
        self.assertEqual(typo["case_id"], "E01")
        self.assertIn("did you mean 'docs/guide.md'?", at["common_checks[0].protect[0]"]["fix"])
        glob = at[f"{base}[1].protect[0]"]
        self.assertIn("is a pattern: protect paths are literal", glob["message"])
        self.assertIn("'calc/test_calc.py'", glob["fix"])
        self.assertIn("(calc/)", glob["fix"])
        self.assertNotIn("did you mean", at[f"{base}[2].protect[0]"]["fix"])
        self.assertIn("git does not track it", at[f"{base}[3].protect[0]"]["message"])
        for i in (4, 5):
            self.assertIn("never delivered", at[f"{base}[{i}].protect[0]"]["message"])

    def test_a_common_check_must_protect_something_in_every_case(self) -> None:
        suite = suite_with([], common_checks=[{"run": "true",
                                               "protect": ["evals/demo/fixtures/data.txt"]}])
        suite["evals"][0]["files"] = ["evals/demo/fixtures/data.txt"]
        suite["evals"].append({"id": "E02", "prompt": "Another task.", "expectations": ["x"]})
        root = make_repo(self.tmp.path, suite, {"evals/demo/fixtures/data.txt": "1 2\n"})
        code, out, _ = call_main(["validate", str(root / "evals/demo/evals.json"), "--json"])
        [error] = json.loads(out)["errors"]
        self.assertEqual((code, error["json_path"]), (2, "common_checks[0].protect[0]"))
        self.assertIn("(in case E02, whose fixtures lack it)", error["message"])

    def test_a_literal_file_named_like_a_pattern_is_a_file(self) -> None:
        suite = suite_with([{"run": "true", "protect": ["calc/test_[x].py"]}])
        root = make_repo(self.tmp.path, suite, {"calc/test_[x].py": "import unittest\n"})
        code, out, _ = call_main(["validate", str(root / "evals/demo/evals.json"), "--json"])
        self.assertEqual((code, json.loads(out)["errors"]), (0, []))


if __name__ == "__main__":
    unittest.main()
