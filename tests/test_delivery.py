"""What reaches a sandbox (issue 33, items 5 and 6), attacked by a nosy executor.

The fake executor with `read_tree` reads every file of its sandbox, every object its git can
reach and the whole history, and puts it all in its answer. Whatever the repository's layout
(a suite outside evals/, a link to the suite, a link or a copy of the skill under another
name, with other line endings, a hard link), no assertion reaches any sandbox and no part of
the skill package reaches a without_skill one; what was kept back is recorded and flagged.
"""

from __future__ import annotations

import json
import os
import unittest
from pathlib import Path

from tests.helpers import TempDir, call_main, demo_suite, fake_env, git, make_repo, runner

SKILL_MARKER = "The quokka procedure: always count the marsupials twice before answering."
SKILL_MD = f"---\nname: demo\ndescription: Use when testing skill-eval.\n---\n\n{SKILL_MARKER}\n"
REFERENCE = "Reference of the skill: wombat burrows face south-east in every season.\n"
SECRET = "The reply names the platypus hidden in the suite file only."
HIDDEN_OUTPUT = "An expected output that only the suite file holds: echidna."
NOSY = {"executor": {"read_tree": True, "text": "I read everything."}}


def nosy_suite() -> dict:
    suite = demo_suite(2)
    suite["evals"][0]["expectations"].append(SECRET)
    suite["evals"][0]["expected_output"] = HIDDEN_OUTPUT
    return suite


class DeliveryCase(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.workspace = self.tmp.path / "ws"

    def commit(self) -> None:
        git(self.root, "add", "-A")
        git(self.root, "commit", "-qm", "layout")

    def run_nosy(self, suite_rel: str, *extra: str) -> tuple[int, str]:
        env = fake_env(self.tmp.path, NOSY)
        code, out, err = call_main(["run", str(self.root / suite_rel), "--agent", "claude",
                                    "--workspace", str(self.workspace), "--quiet", *extra], env)
        return code, out + err

    def cell(self, case: str, config: str) -> Path:
        return self.workspace / "iteration-1" / f"eval-{case}" / config / "run-1"

    def answer(self, case: str, config: str) -> str:
        return (self.cell(case, config) / "outputs/output.txt").read_text(encoding="utf-8")

    def withheld(self, case: str, config: str) -> dict[str, str]:
        record = json.loads((self.cell(case, config) / "run.json").read_text(encoding="utf-8"))
        return {entry["path"]: entry["kind"] for entry in record["sandbox"]["withheld"]}

    def flags(self, kind: str) -> list[dict]:
        bench = json.loads((self.workspace / "iteration-1/benchmark.json").read_text("utf-8"))
        return [f for f in bench["sanity_checks"]["flags"] if f["kind"] == kind]


class SuiteNeverDeliveredTest(DeliveryCase):
    """Item 5: the suite file, wherever it lives, and anything that is it under another name."""

    def test_a_suite_outside_evals_reaches_no_sandbox_in_any_form(self) -> None:
        self.root = make_repo(self.tmp.path, demo_suite(1), {"src/app.py": "print(1)\n"})
        text = json.dumps(nosy_suite(), indent=2)
        (self.root / "qa").mkdir()
        (self.root / "qa/suite.json").write_text(text, encoding="utf-8")
        (self.root / "notes").mkdir()
        (self.root / "notes/suite-link.json").symlink_to("../qa/suite.json")
        (self.root / "notes/suite-crlf.json").write_bytes(text.replace("\n", "\r\n").encode())
        os.link(self.root / "qa/suite.json", self.root / "notes/suite-hard.json")
        (self.root / "notes/suite-abs.json").symlink_to(self.root / "qa/suite.json")
        (self.root / "notes/git-head").symlink_to("../.git/HEAD")  # never delivered either
        self.commit()
        code, output = self.run_nosy("qa/suite.json")
        self.assertIn(code, (0, 1), output)
        kept = {"qa/suite.json", "notes/suite-link.json", "notes/suite-crlf.json",
                "notes/suite-hard.json", "notes/suite-abs.json"}
        for case in ("E01", "E02"):
            for config in ("with_skill", "without_skill"):
                with self.subTest(case=case, config=config):
                    answer = self.answer(case, config)
                    self.assertIn("print(1)", answer)  # the nosy executor did read the tree
                    for secret in (SECRET, HIDDEN_OUTPUT, "It mentions item 2."):
                        self.assertFalse(secret in answer, f"{secret!r} reached the sandbox")
                    self.assertEqual(self.withheld(case, config),
                                     {**dict.fromkeys(kept, "suite"),
                                      "notes/git-head": "undelivered"})
        self.assertEqual(self.flags("baseline_contamination"), [])


class SkillNeverInBaselineTest(DeliveryCase):
    """Item 6: links into the package, and copies of its files, never reach a sandbox."""

    def layout(self) -> None:
        suite = demo_suite(1)
        suite["evals"][0]["files"] = ["evals/demo/fixtures/skill-copy.md",
                                      "evals/demo/fixtures/data.txt"]
        self.root = make_repo(self.tmp.path, suite, {
            "evals/demo/fixtures/skill-copy.md": SKILL_MD,
            "evals/demo/fixtures/data.txt": "fixture data, nothing of the skill\n",
            "src/app.py": "print(1)\n", "src/__init__.py": "",
            "skills/demo/reference.md": REFERENCE, "skills/demo/scripts/__init__.py": "",
            "docs/guide.md": "A guide of the project, nothing of the skill.\n"},
            skill_md=SKILL_MD)
        skill = self.root / "skills/demo/SKILL.md"
        (self.root / "AGENTS.md").symlink_to("skills/demo/SKILL.md")
        (self.root / "docs/skill.md").symlink_to("../skills/demo/SKILL.md")
        (self.root / "docs/pkg").symlink_to("../skills/demo")
        (self.root / "docs/skill-crlf.md").write_bytes(skill.read_bytes().replace(b"\n", b"\r\n"))
        os.link(skill, self.root / "docs/skill-hard.md")
        (self.root / "docs/ref-copy.md").write_text(REFERENCE, encoding="utf-8")
        self.commit()

    def test_no_link_or_copy_of_the_package_reaches_any_sandbox_and_each_is_flagged(self) -> None:
        self.layout()
        code, output = self.run_nosy("evals/demo/evals.json")
        self.assertEqual(code, 1, output)  # the warnings ask for review
        kept = ["AGENTS.md", "docs/pkg", "docs/ref-copy.md", "docs/skill-crlf.md",
                "docs/skill-hard.md", "docs/skill.md", "evals/demo/fixtures/skill-copy.md"]
        baseline = self.answer("E01", "without_skill")
        self.assertIn("print(1)", baseline)
        self.assertIn("A guide of the project", baseline)
        self.assertFalse("quokka" in baseline, "the skill reached the baseline")
        self.assertFalse("wombat" in baseline, "a package file reached the baseline")
        self.assertIn("file src/__init__.py", baseline)  # an empty file is nobody's copy
        self.assertIn("fixture data, nothing of the skill", baseline)
        skilled = self.answer("E01", "with_skill")
        self.assertIn(SKILL_MARKER, skilled)  # from skills/demo/, where the arm gets it
        for config in ("with_skill", "without_skill"):
            answer = self.answer("E01", config)
            for rel in kept:
                self.assertNotIn(f"file {rel}:", answer)
            self.assertEqual(self.withheld("E01", config), dict.fromkeys(kept, "skill"))
        flags = self.flags("baseline_contamination")
        self.assertEqual(sorted(f["message"].split(" ")[0] for f in flags), kept)
        self.assertEqual({f["severity"] for f in flags}, {"warning"})
        self.assertIn("skills/demo/SKILL.md", next(f["message"] for f in flags
                                                   if f["message"].startswith("AGENTS.md")))
        _, out, err = call_main(["report", str(self.workspace / "iteration-1")])
        self.assertIn("baseline_contamination", out + err)  # read back from run.json

    def test_the_snapshot_keeps_them_out_of_the_template_git_objects_too(self) -> None:
        self.layout()
        suite = runner.load_suite(self.root / "evals/demo/evals.json").suite
        snapshot = runner.RepoSnapshot.take(self.root, "demo", suite_path=suite.path,
                                            groups=runner.ProcessGroups())
        self.assertNotIn("AGENTS.md", snapshot.base_files)
        self.assertIn("src/__init__.py", snapshot.base_files)
        self.assertIn("docs/guide.md", snapshot.base_files)
        self.assertEqual(snapshot.kept_back["docs/skill-crlf.md"]["kind"], "skill")
        self.assertIn("skills/demo/SKILL.md", snapshot.kept_back["docs/skill-crlf.md"]["reason"])
        code, out, _ = call_main(["validate", str(suite.path), "--json"])
        warned = [w["message"] for w in json.loads(out)["warnings"]]
        self.assertEqual(code, 0)
        for rel in ("AGENTS.md", "docs/skill-hard.md", "evals/demo/fixtures/skill-copy.md"):
            self.assertTrue(any(m.startswith(f"{rel} is a ") for m in warned), (rel, warned))


    def test_a_copy_of_a_revisions_package_file_is_kept_back_when_that_revision_runs(self):
        self.root = make_repo(self.tmp.path, demo_suite(1), {"docs/old-skill.md": SKILL_MD},
                              skill_md=SKILL_MD)
        (self.root / "skills/demo/SKILL.md").write_text(SKILL_MD + "\nVersion two.\n")
        self.commit()
        revision = runner.read_revision_package(self.root, "demo", "with_skill@HEAD~1",
                                                runner.ProcessGroups())
        snapshot = runner.RepoSnapshot.take(self.root, "demo", groups=runner.ProcessGroups())
        self.assertIn("docs/old-skill.md", snapshot.base_files)
        snapshot = runner.RepoSnapshot.take(self.root, "demo",
                                            revisions={"with_skill@HEAD~1": revision},
                                            groups=runner.ProcessGroups())
        self.assertEqual(snapshot.kept_back["docs/old-skill.md"],
                         {"kind": "skill", "reason": "a copy of skills/demo/SKILL.md at HEAD~1"})


if __name__ == "__main__":
    unittest.main()
