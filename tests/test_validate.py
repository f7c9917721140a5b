"""`validate`: every problem at once, located, with a fix; never a traceback."""

from __future__ import annotations

import json
import shutil
import tempfile
import unittest
from pathlib import Path

from tests.helpers import (
    PEER_CORPUS,
    TempDir,
    call_main,
    demo_suite,
    make_repo,
    run_script,
    runner,
)


class ValidateTests(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)

    def suite_path(self, root: Path) -> str:
        return str(root / "evals" / "demo" / "evals.json")

    def validate_json(self, root: Path) -> tuple[int, dict]:
        code, out, _ = call_main(["validate", self.suite_path(root), "--json"])
        return code, json.loads(out)

    def test_valid_suite_prints_counts(self) -> None:
        cases = runner.MIN_PAIRED_EVALS  # enough for a verdict: no warning about that
        root = make_repo(self.tmp.path, demo_suite(cases))
        code, out, err = call_main(["validate", self.suite_path(root)])
        self.assertEqual(code, 0, err)
        self.assertIn(f"{cases} cases, {3 * cases} assertions, 0 fixture files, 0 warnings", out)

    def test_ten_mistakes_give_ten_located_errors(self) -> None:
        suite = {
            "skill_name": "demo",
            "common_assertions": ["ok", ""],                                   # 1 empty entry
            "evals": [
                {"id": "E01", "prompt": "", "expectations": ["a"]},           # 2 empty prompt
                {"id": "E01", "prompt": "p", "expectations": ["b"]},          # 3 duplicate id
                {"id": "E03", "prompt": "p", "expectation": ["c"]},           # 4 typo key
                {"id": True, "prompt": "p"},                                  # 5 bad id type
                {"id": "E05", "prompt": "p", "expectations": "x"},            # 6 not a list
                {"id": "E06", "prompt": "p", "files": ["missing.txt"]},       # 7 missing fixture
                {"id": "E07", "prompt": "p", "files": ["/etc/passwd"]},       # 8 absolute path
                {"prompt": "p"},                                              # 9 missing id
                {"id": "E09", "prompt": 5},                                   # 10 prompt type
            ],
        }
        root = make_repo(self.tmp.path, suite)
        code, report = self.validate_json(root)
        self.assertEqual(code, 2)
        paths = sorted(e["json_path"] for e in report["errors"])
        self.assertEqual(len(report["errors"]), 10, json.dumps(report["errors"], indent=1))
        for expected in ("common_assertions[1]", "evals[0].prompt", "evals[1].id",
                         "evals[2].expectation", "evals[3].id", "evals[4].expectations",
                         "evals[5].files[0]", "evals[6].files[0]", "evals[7]", "evals[8].prompt"):
            self.assertIn(expected, paths)
        self.assertTrue(all(e["fix"] for e in report["errors"]))
        typo = next(e for e in report["errors"] if e["json_path"] == "evals[2].expectation")
        self.assertIn("did you mean 'expectations'", typo["fix"])

    def test_integer_and_string_ids_collide(self) -> None:
        suite = demo_suite(1)
        suite["evals"].append({"id": 1, "prompt": "a", "expectations": ["x"]})
        suite["evals"].append({"id": "1", "prompt": "b", "expectations": ["y"]})
        root = make_repo(self.tmp.path, suite)
        code, report = self.validate_json(root)
        self.assertEqual(code, 2)
        self.assertEqual([e["json_path"] for e in report["errors"]], ["evals[2].id"])

    def test_warnings_do_not_fail(self) -> None:
        suite = {"skill_name": "demo", "common_assertions": ["same"],
                 "evals": [{"id": 1, "prompt": "p"}, {"id": 2, "prompt": "q",
                                                      "expectations": ["same"]}]}
        root = make_repo(self.tmp.path, suite)
        code, report = self.validate_json(root)
        self.assertEqual(code, 0)
        self.assertEqual(report["counts"]["warnings"], 2)  # the overlap; too few for a verdict
        suite["common_assertions"] = []
        shutil.rmtree(self.tmp.path / "repo")
        root = make_repo(self.tmp.path, suite)
        code, report = self.validate_json(root)
        self.assertEqual(code, 0)
        self.assertIn("nothing to grade", report["warnings"][0]["message"])

    def test_empty_suite_is_valid(self) -> None:
        root = make_repo(self.tmp.path, {"skill_name": "demo", "evals": []})
        code, out, _ = call_main(["validate", self.suite_path(root)])
        self.assertEqual(code, 0)
        self.assertIn("0 cases: nothing to run", out)

    def test_missing_skill_is_an_error(self) -> None:
        root = make_repo(self.tmp.path, demo_suite(1))
        shutil.rmtree(root / "skills" / "demo")
        code, report = self.validate_json(root)
        self.assertEqual(code, 2)
        self.assertIn("SKILL.md", report["errors"][0]["message"])

    def test_bad_documents_exit_2_without_traceback(self) -> None:
        documents = {
            "invalid": '{"skill_name": "demo",\n "evals": [}',
            "duplicate": '{"skill_name": "demo", "evals": [], "evals": []}',
            "nan": '{"skill_name": "demo", "evals": [{"id": 1, "prompt": "p", "x": NaN}]}',
            "deep": "[" * 100000 + "]" * 100000,
            "array": "[1, 2]",
            "latin1": b'{"skill_name": "d\xe9mo"}',
        }
        for label, text in documents.items():
            with self.subTest(label):
                root = make_repo(self.tmp.path / label, demo_suite(1))
                path = Path(self.suite_path(root))
                if isinstance(text, bytes):
                    path.write_bytes(text)
                else:
                    path.write_text(text, encoding="utf-8")
                done = run_script(["validate", str(path)])
                self.assertEqual(done.returncode, 2, done.stderr)
                self.assertNotIn("Traceback", done.stderr)
                self.assertIn("fix:", done.stderr)

    def test_a_document_of_null_alone_is_invalid(self) -> None:
        root = make_repo(self.tmp.path, demo_suite(1))
        suite = Path(self.suite_path(root))
        suite.write_text("null", encoding="utf-8")
        code, out, err = call_main(["validate", str(suite)])
        self.assertEqual(code, 2, out)
        self.assertIn("the suite must be a JSON object, not null", err)
        suite.write_text(json.dumps(demo_suite(1)), encoding="utf-8")
        (suite.parent / "trigger-evals.json").write_text("null", encoding="utf-8")
        code, out, err = call_main(["validate", str(suite)])
        self.assertEqual(code, 2, out)
        self.assertIn("a trigger file must be a list of trigger queries", err)

    def test_a_non_finite_case_id_is_quoted_as_written(self) -> None:
        root = make_repo(self.tmp.path, demo_suite(1))
        suite = Path(self.suite_path(root))
        suite.write_text(suite.read_text().replace('"id": "E01"', '"id": NaN', 1), encoding="utf-8")
        code, _, err = call_main(["validate", str(suite)])
        self.assertEqual(code, 2, err)
        self.assertIn("case id NaN must be", err)
        self.assertNotIn(" object at 0x", err)

    def test_an_unusable_skill_name_beside_a_trigger_file_is_not_followed(self) -> None:
        root = make_repo(self.tmp.path, demo_suite(1))
        suite = Path(self.suite_path(root))
        suite.write_text(json.dumps({"skill_name": "x" * 5000, "evals": []}), encoding="utf-8")
        triggers = suite.parent / "trigger-evals.json"
        triggers.write_text(json.dumps([{"query": "tidy my notes", "should_trigger": True}]),
                            encoding="utf-8")
        done = run_script(["validate", str(triggers)])
        self.assertEqual(done.returncode, 0, done.stderr)  # the skill is named by the folder
        self.assertIn("OK:", done.stdout)

    def test_bom_is_accepted(self) -> None:
        root = make_repo(self.tmp.path, demo_suite(1))
        path = Path(self.suite_path(root))
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
        code, _, err = call_main(["validate", str(path)])
        self.assertEqual(code, 0, err)

    def test_invalid_json_reports_line_and_column(self) -> None:
        root = make_repo(self.tmp.path, '{"skill_name": "demo",\n  "evals": [,]}')
        code, report = self.validate_json(root)
        self.assertEqual(code, 2)
        self.assertEqual(report["errors"][0]["json_path"], "line 2, column 13")

    def test_peer_corpus_suites_validate(self) -> None:
        if not PEER_CORPUS.is_dir():
            self.skipTest("shared/peer-corpus is not beside the checkout")
        suites = sorted(PEER_CORPUS.glob("evals/*/evals.json"))
        self.assertEqual(len(suites), 7)
        for suite in suites:
            with self.subTest(suite.parent.name):
                code, out, err = call_main(["validate", str(suite)])
                self.assertEqual(code, 0, err)

    def test_bundled_suite_validates(self) -> None:
        from tests.helpers import PROJECT
        code, out, err = call_main(["validate", str(PROJECT / "evals/skill-eval/evals.json")])
        self.assertEqual(code, 0, err)
        self.assertNotIn("warning", err)



class RepoRootTests(unittest.TestCase):
    def test_an_empty_git_folder_above_is_no_repository(self) -> None:
        # The real codex's sandbox once left an empty /tmp/.git behind: git reads no
        # repository there, and neither may the runner.
        base = Path(tempfile.mkdtemp(prefix="skill-eval-test-"))
        self.addCleanup(shutil.rmtree, base, True)
        root = base / "project"
        (root / "evals" / "demo").mkdir(parents=True)
        (root / "skills").mkdir()
        (base / ".git").mkdir()
        suite = root / "evals" / "demo" / "evals.json"
        self.assertEqual(runner._find_repo_root(suite), root)
        (base / ".git" / "HEAD").write_text("ref: refs/heads/main\n", encoding="utf-8")
        self.assertEqual(runner._find_repo_root(suite), base)  # a repository: its top level
        (root / ".git").write_text("gitdir: elsewhere\n", encoding="utf-8")  # a worktree
        self.assertEqual(runner._find_repo_root(suite), root)

if __name__ == "__main__":
    unittest.main()
