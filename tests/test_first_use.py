"""What a new user and a skill author hit on first use (issue 28): a workspace that ignores
itself, resuming after Ctrl-C, like-with-like comparisons, plans that cannot give a verdict,
a CLI that is not signed in, `report` flags typed the natural way, and small validation notes.
"""

from __future__ import annotations

import json
import unittest
from pathlib import Path

from tests.helpers import (
    TempDir,
    call_main,
    demo_suite,
    fake_env,
    git,
    make_repo,
)


class FirstUseBase(unittest.TestCase):
    cases = 2

    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.root = make_repo(self.tmp.path, demo_suite(self.cases))
        self.suite = str(self.root / "evals" / "demo" / "evals.json")
        self.env = fake_env(self.tmp.path)

    def run_main(self, *args: str, env: dict | None = None) -> tuple[int, str, str]:
        return call_main(list(args), env=env or self.env)


class WorkspaceIgnoresItselfTests(FirstUseBase):
    """A repository with no .gitignore: the workspace still stays out of `git status`."""

    def test_a_new_workspace_holds_a_gitignore_of_everything(self) -> None:
        self.assertFalse((self.root / ".gitignore").exists())
        code, _, err = self.run_main("run", self.suite, "--agent", "claude", "--quiet")
        self.assertIn(code, (0, 1), err)
        workspace = self.root / "evals" / "demo" / "workspace" / "claude"
        self.assertEqual((workspace / ".gitignore").read_text(), "*\n")
        self.assertTrue((workspace / "iteration-1" / "benchmark.json").is_file())
        self.assertEqual(git(self.root, "status", "--porcelain", "--untracked-files=all"), "")

    def test_an_existing_folder_given_as_workspace_is_left_as_it_is(self) -> None:
        mine = self.tmp.path / "mine"
        mine.mkdir()
        code, _, err = self.run_main("run", self.suite, "--agent", "claude", "--quiet",
                                     "--workspace", str(mine))
        self.assertIn(code, (0, 1), err)
        self.assertFalse((mine / ".gitignore").exists())
        self.assertTrue((mine / "iteration-1" / "benchmark.json").is_file())


class ReportFlagsTests(FirstUseBase):
    """`report --html ITER` and `report --across ITER`: the folder is the flag's value."""

    def run_agent(self, agent: str) -> Path:
        code, _, err = self.run_main("run", self.suite, "--agent", agent, "--quiet")
        self.assertIn(code, (0, 1), err)
        return self.root / "evals" / "demo" / "workspace" / agent / "iteration-1"

    def test_html_followed_by_the_folder_writes_the_page_in_it(self) -> None:
        folder = self.run_agent("claude")
        (folder / "benchmark.html").unlink()
        code, _, err = self.run_main("report", "--html", str(folder))
        self.assertEqual(code, 0, err)
        self.assertTrue((folder / "benchmark.html").is_file())
        code, _, err = self.run_main("report", str(folder), "--html", str(self.tmp.path / "p.html"))
        self.assertEqual(code, 0, err)  # the old forms still work
        self.assertTrue((self.tmp.path / "p.html").is_file())

    def test_across_followed_by_the_folder_compares_with_the_other_agents(self) -> None:
        folder = self.run_agent("claude")
        self.run_agent("codex")
        code, out, err = self.run_main("report", "--across", str(folder))
        self.assertEqual(code, 0, err)
        self.assertIn("Across agents:", out)
        self.assertTrue((folder / "agents.md").is_file())

    def test_a_missing_folder_is_still_a_usage_error(self) -> None:
        code, out, err = self.run_main("report", "--html", str(self.tmp.path / "page.html"))
        self.assertEqual(code, 2, out + err)
        self.assertIn("ITERATION_DIR", err.splitlines()[0])
        self.assertIn("fix: add ITERATION_DIR", err)


class ValidationNoteTests(FirstUseBase):
    """Small notes of `validate`: each names the right thing."""

    def validate_json(self, cases: list[dict], files: dict[str, str] | None = None) -> dict:
        for rel, text in (files or {}).items():
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.root / rel).write_text(text)
        Path(self.suite).write_text(json.dumps({"skill_name": "demo", "evals": cases}))
        code, out, err = self.run_main("validate", self.suite, "--json")
        self.assertEqual(code, 2, out + err)
        return json.loads(out)

    def test_a_string_id_twice_gets_no_note_about_numbers(self) -> None:
        report = self.validate_json([{"id": "E1", "prompt": "x", "expectations": ["a"]},
                                     {"id": "E1", "prompt": "y", "expectations": ["b"]}])
        [error] = report["errors"]
        self.assertEqual(error["message"], "case id 'E1' is used twice (also evals[0])")

    def test_a_number_and_its_string_get_the_note(self) -> None:
        report = self.validate_json([{"id": 1, "prompt": "x", "expectations": ["a"]},
                                     {"id": "1", "prompt": "y", "expectations": ["b"]}])
        [error] = report["errors"]
        self.assertIn('1 and "1" count as the same', error["message"])

    def test_a_misspelt_fixture_is_matched_to_the_file_beside_it(self) -> None:
        report = self.validate_json(
            [{"id": "E1", "prompt": "x", "expectations": ["a"],
              "files": ["evals/demo/fixtures/readme.dif"]}],
            {"evals/demo/fixtures/readme.diff": "diff\n"})
        [error] = report["errors"]
        self.assertEqual(error["json_path"], "evals[0].files[0]")
        self.assertTrue(error["fix"].startswith(
            "did you mean 'evals/demo/fixtures/readme.diff'? "), error["fix"])

    def test_an_unknown_key_in_a_refused_case_still_names_the_case(self) -> None:
        report = self.validate_json([{"id": "E1", "prompt": "x", "expectations": ["a"]},
                                     {"id": "E1", "prompt": "y", "expectatons": ["b"]}])
        unknown = next(e for e in report["errors"] if "expectatons" in e["message"])
        self.assertEqual((unknown["case_id"], unknown["json_path"]), ("E1", "evals[1].expectatons"))
        self.assertEqual({w["case_id"] for w in report["warnings"]}, {"E1"})


if __name__ == "__main__":
    unittest.main()
