"""The suites people already have (issue 34): skill-creator's field names, descriptive keys,
anti-expectations, files of other tools, a folder instead of a file.

Every suite here is written for this test in the shapes real suites take; none is copied.
"""

from __future__ import annotations

import json
import tempfile
import unittest
from pathlib import Path

from tests.helpers import SKILL_MD, TempDir, call_main, git, make_repo, runner

SUITE_REL = "evals/demo/evals.json"


def case(i: int, **fields) -> dict:
    return {"id": f"E{i:02d}", "prompt": f"Task number {i}.", **fields}


class ValidateRealSuiteTests(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)

    def validate(self, suite, files: dict[str, str] | None = None,
                 rel: str = SUITE_REL) -> tuple[int, dict]:
        base = Path(tempfile.mkdtemp(dir=self.tmp.path))
        root = make_repo(base, {"skill_name": "demo", "evals": []}, files)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        text = suite if isinstance(suite, str) else json.dumps(suite, indent=1)
        (root / rel).write_text(text, encoding="utf-8")
        self.root = root
        code, out, err = call_main(["validate", str(root / rel), "--json"])
        report = json.loads(out)
        # Small suites get a note that they are too few for a verdict: not what these test.
        report["warnings"] = [w for w in report["warnings"]
                              if "cannot give a verdict" not in w["message"]]
        return code, report

    def loaded(self) -> runner.Suite:
        return runner.load_suite(self.root / SUITE_REL).suite

    # -- assertions, as skill-creator's SKILL.md and eval_metadata.json call them ---------

    def test_assertions_is_read_as_expectations_in_each_written_form(self) -> None:
        code, report = self.validate({"skill_name": "demo", "evals": [
            case(1, assertions=["It says hello."]),
            case(2, assertions=[{"text": "It is short."}]),
            case(3, assertions=[{"id": "a1", "text": "It is polite."}, {"id": 2, "text": "Ok."}]),
        ]})
        self.assertEqual(code, 0, report)
        self.assertEqual(report["warnings"], [])
        self.assertEqual([c.expectations for c in self.loaded().cases],
                         [["It says hello."], ["It is short."], ["It is polite.", "Ok."]])

    def test_both_names_are_one_list_graded_once_and_a_difference_is_said_once(self) -> None:
        code, report = self.validate({"skill_name": "demo", "evals": [
            case(1, expectations=["A holds."], assertions=["A holds."]),
            case(2, expectations=["A holds."], assertions=["A holds.", "B holds."]),
            case(3, expectations=["C holds."], assertions=["D holds."]),
        ]})
        self.assertEqual(code, 0, report)
        [both] = report["warnings"]
        self.assertIn("both 'expectations' and 'assertions'", both["message"])
        self.assertIn("(in cases E02, E03)", both["message"])
        self.assertEqual([c.expectations for c in self.loaded().cases],
                         [["A holds."], ["A holds.", "B holds."], ["C holds.", "D holds."]])

    def test_a_text_object_without_check_is_no_longer_a_check_error(self) -> None:
        code, report = self.validate({"skill_name": "demo", "evals": [
            case(1, expectations=[{"text": "It says hello."}])]})
        self.assertEqual(code, 0, report)
        self.assertFalse(any("check" in p["message"] for p in report["warnings"]))

    # -- keys skill-eval does not read ---------------------------------------------------

    def test_descriptive_keys_warn_once_each_naming_their_cases(self) -> None:
        cases = [case(i, expectations=["It works."], description="d", category="c", kind="k",
                      route="r", context="x", eval_name=f"n{i}", note="n")
                 for i in range(1, 25)]
        code, report = self.validate({"skill_name": "demo", "version": "2.1",
                                      "description": "about", "evals": cases})
        self.assertEqual(code, 0, report)
        messages = [w["message"] for w in report["warnings"]]
        self.assertEqual(len(messages), 9, messages)  # 7 case keys + 2 top-level, once each
        category = next(w for w in report["warnings"] if "'category'" in w["message"])
        self.assertIn("(in cases E01, E02", category["message"])
        self.assertIn("(24 in all)", category["message"])
        self.assertEqual(category["json_path"], "evals[*].category")
        self.assertEqual(category["case_ids"], [f"E{i:02d}" for i in range(1, 25)])
        for warning in report["warnings"]:
            self.assertNotIn("did you mean", warning["fix"], warning)

    def test_only_a_likely_typo_is_an_error_with_its_did_you_mean(self) -> None:
        code, report = self.validate({"skill_name": "demo", "evals": [
            case(1, expectation=["It works."]), case(2, Prompt="again"),
            {"id": "E03", "promt": "typo", "expectations": ["x"]},
            case(4, assertion=["y"]), case(5, expectations=["z"], fils=["a.txt"])]})
        self.assertEqual(code, 2)
        fixes = {e["json_path"]: e["fix"] for e in report["errors"] if "unknown" in e["message"]}
        self.assertEqual(fixes, {
            "evals[0].expectation": "did you mean 'expectations'? rename the key",
            "evals[1].Prompt": "did you mean 'prompt'? rename the key",
            "evals[2].promt": "did you mean 'prompt'? rename the key",
            "evals[3].assertion": "did you mean 'assertions'? rename the key",
            "evals[4].fils": "did you mean 'files'? rename the key"})
        # A typo of the assertions' key says where they went: no "nothing to grade" beside it.
        self.assertFalse(any("no assertions" in w["message"] and w["case_id"] in ("E01", "E04")
                             for w in report["warnings"]), report["warnings"])

    def test_a_typo_repeated_in_every_case_is_one_error(self) -> None:
        code, report = self.validate({"skill_name": "demo", "evals": [
            case(i, expectation=["x"]) for i in range(1, 6)]})
        self.assertEqual(code, 2)
        [error] = report["errors"]
        self.assertIn("(in cases E01, E02, E03, E04, E05)", error["message"])

    def test_nonsense_is_never_suggested(self) -> None:
        known = runner.CASE_KEYS | runner.TOP_LEVEL_KEYS
        for word in ("kind", "version", "description", "category", "note", "route", "context",
                     "eval_name", "title", "input", "type", "tags"):
            with self.subTest(word):
                self.assertIsNone(runner._close_name(word, known))
        self.assertIsNone(runner._close_name("auth.diff", ["readme.diff"]))
        self.assertEqual(runner._close_name("expectatons", known), "expectations")
        self.assertEqual(runner._close_name("skill-name", known), "skill_name")
        self.assertEqual(runner._close_name("vibe-planing", ["vibe-planning"]), "vibe-planning")

    def test_a_missing_fixture_is_not_matched_to_an_unrelated_name(self) -> None:
        code, report = self.validate(
            {"skill_name": "demo", "evals": [case(1, expectations=["x"],
                                                  files=["evals/demo/fixtures/auth.diff"])]},
            {"evals/demo/fixtures/readme.diff": "diff\n"})
        self.assertEqual(code, 2)
        [error] = report["errors"]
        self.assertNotIn("did you mean", error["fix"])
        self.assertIn("does not exist", error["message"])

    def test_a_required_key_written_under_another_tool_s_name_is_named(self) -> None:
        code, report = self.validate({"name": "demo", "evals": [
            {"id": 1, "query": "q", "expectations": ["x"]}]})
        self.assertEqual(code, 2)
        fixes = {e["message"]: e["fix"] for e in report["errors"]}
        self.assertEqual(fixes["required key 'prompt' is missing"],
                         "rename 'query' to 'prompt' if it holds the prompt")
        self.assertEqual(fixes["required key 'skill_name' is missing"],
                         "rename 'name' to 'skill_name' if it holds the skill name")

    # -- anti_expectations ------------------------------------------------------------------

    def test_an_anti_expectation_is_graded_as_its_negation(self) -> None:
        code, report = self.validate({"skill_name": "demo", "evals": [
            case(1, expectations=["It answers."],
                 anti_expectations=["It deletes the user's files.", {"text": "It uses sudo."}])]})
        self.assertEqual(code, 0, report)
        [loaded] = self.loaded().cases
        self.assertEqual(loaded.expectations, [
            "It answers.", runner.ANTI_EXPECTATION_PREFIX + "It deletes the user's files.",
            runner.ANTI_EXPECTATION_PREFIX + "It uses sudo."])
        self.assertIn("It uses sudo.", self.loaded().secret_texts())

    def test_an_anti_expectation_cannot_be_paired_with_a_check(self) -> None:
        code, report = self.validate({"skill_name": "demo", "evals": [
            case(1, checks=[{"name": "gone", "file": "a.txt", "exists": False}],
                 anti_expectations=[{"text": "It leaves a.txt.", "check": "gone"}])]})
        self.assertEqual(code, 2)
        [error] = report["errors"]
        self.assertEqual(error["json_path"], "evals[0].anti_expectations[0].check")
        self.assertIn("exists", error["fix"])

    # -- files of other tools ----------------------------------------------------------------

    def assert_refused_as(self, text: str, words: list[str], rel: str = SUITE_REL) -> dict:
        code, report = self.validate(text, rel=rel)
        self.assertEqual(code, 2)
        [error] = report["errors"]
        for word in words:
            self.assertIn(word, error["message"] + " " + error["fix"])
        self.assertNotIn("invalid JSON", error["message"])
        return error

    def test_other_formats_are_named_with_what_to_do(self) -> None:
        formats = {
            "skillgrade": ("version: \"1\"\ndefaults:\n  agent: gemini\ntasks:\n  - name: t\n"
                           "    instruction: do it\n", ["skillgrade", "instruction"]),
            "promptfoo yaml": ("prompts:\n  - 'Say {{x}}'\nproviders:\n  - openai:gpt\ntests:\n"
                               "  - vars: {x: 1}\n", ["promptfoo", "promptfoo eval"]),
            "promptfoo json": (json.dumps({"prompts": ["p"], "providers": ["x"], "tests": []}),
                               ["promptfoo", "assert"]),
            "other yaml": ("skill_name: demo\nevals:\n  - id: 1\n", ["YAML", "convert"]),
            "json lines": ('{"id": 1, "prompt": "a"}\n{"id": 2, "prompt": "b"}\n',
                           ["JSON Lines", "evals"]),
        }
        for name, (text, words) in formats.items():
            with self.subTest(name):
                self.assert_refused_as(text, words)

    def test_a_list_of_cases_is_refused_with_the_rewrite_and_its_cases_checked(self) -> None:
        code, report = self.validate([case(1, expectations=["x"], files=["nope.txt"]),
                                      case(2, expectatons=["y"])])
        self.assertEqual(code, 2)
        messages = [e["message"] for e in report["errors"]]
        self.assertIn("the file is a list of cases; an eval suite is an object that names its "
                      "skill", messages)
        wrap = next(e for e in report["errors"] if "list of cases" in e["message"])
        self.assertIn('{"skill_name":', wrap["fix"])
        self.assertIn("fixture 'nope.txt' does not exist", messages)
        self.assertTrue(any("expectatons" in m for m in messages), messages)

    # -- where the suite is ------------------------------------------------------------------

    def test_without_a_root_the_fixtures_are_still_checked(self) -> None:
        root = self.tmp.path / "loose"
        (root / "evals" / "demo").mkdir(parents=True)
        (root / SUITE_REL).write_text(json.dumps({"skill_name": "demo", "evals": [
            case(1, expectations=["x"], files=["evals/demo/fixtures/missing.txt"])]}))
        code, out, _ = call_main(["validate", str(root / SUITE_REL), "--json"])
        self.assertEqual(code, 2)
        messages = [e["message"] for e in json.loads(out)["errors"]]
        self.assertTrue(any("repository root" in m for m in messages), messages)
        self.assertIn("fixture 'evals/demo/fixtures/missing.txt' does not exist", messages)

    def test_a_skill_folder_finds_its_suite_and_the_trigger_set_beside_it(self) -> None:
        root = self.tmp.path / "repo"
        skill = root / "skills" / "demo"
        (skill / "evals").mkdir(parents=True)
        (skill / "SKILL.md").write_text(SKILL_MD)
        (skill / "evals" / "evals.json").write_text(json.dumps(
            {"skill_name": "demo", "evals": [case(1, assertions=["It works."])]}))
        (skill / "evals" / "trigger-evals.json").write_text(json.dumps(
            [{"query": "q", "should_trigger": True}]))
        git(root, "init", "-q")
        for folder in (skill, root):
            with self.subTest(folder=folder):
                code, out, err = call_main(["validate", str(folder)])
                self.assertEqual(code, 0, err)
                # the trigger query is a case of the suite (run in the installed arm only)
                self.assertIn(f"OK: {skill / 'evals' / 'evals.json'}: 2 cases", out)
                self.assertNotIn("not validated", err)

    def test_a_skill_name_unlike_the_folder_holding_the_suite_names_that_folder(self) -> None:
        root = self.tmp.path / "repo"
        (root / "skills" / "pdf-tools" / "evals").mkdir(parents=True)
        (root / "skills" / "pdf-tools" / "SKILL.md").write_text(SKILL_MD)
        suite = root / "skills" / "pdf-tools" / "evals" / "evals.json"
        suite.write_text(json.dumps({"skill_name": "PDF", "evals": [
            case(1, assertions=["x"])]}))
        git(root, "init", "-q")
        code, out, _ = call_main(["validate", str(suite), "--json"])
        self.assertEqual(code, 2)
        [error] = json.loads(out)["errors"]
        self.assertEqual(error["message"], "the target skill has no skills/PDF/SKILL.md")
        self.assertTrue(error["fix"].startswith("the suite sits in the skill skills/pdf-tools/: "
                                                "set skill_name to 'pdf-tools'"), error["fix"])

    def test_a_folder_of_several_suites_validates_each_in_one_json_document(self) -> None:
        root = make_repo(self.tmp.path, {"skill_name": "demo", "evals": [
            case(1, expectations=["x"])]}, {"skills/other/SKILL.md": SKILL_MD,
                                            "evals/other/evals.json": "[]"})
        code, out, _ = call_main(["validate", str(root), "--json"])
        self.assertEqual(code, 2)
        report = json.loads(out)
        self.assertEqual([Path(s["suite"]).parent.name for s in report["suites"]],
                         ["demo", "other"])
        self.assertEqual([s["ok"] for s in report["suites"]], [True, False])
        code, _, err = call_main(["run", str(root), "--agent", "claude", "--dry-run"])
        self.assertEqual(code, 2)
        self.assertIn("holds 2 eval suites", err)

    # -- fixtures under an agent's state folder name ------------------------------------------

    def test_an_agents_folder_inside_evals_is_task_material(self) -> None:
        code, report = self.validate(
            {"skill_name": "demo", "evals": [case(1, expectations=["x"], files=[
                "evals/demo/files/.agents/skills/lint/SKILL.md", "evals/demo/files/.claude"])]},
            {"evals/demo/files/.agents/skills/lint/SKILL.md": "---\nname: lint\n---\n",
             "evals/demo/files/.claude/settings.json": "{}"})
        self.assertEqual(code, 0, report)
        code, report = self.validate(
            {"skill_name": "demo", "evals": [case(1, expectations=["x"],
                                                  files=[".agents/skills/lint/SKILL.md"])]},
            {".agents/skills/lint/SKILL.md": "x"})
        self.assertEqual(code, 2)
        self.assertIn("lies under .agents/", report["errors"][0]["message"])


if __name__ == "__main__":
    unittest.main()
