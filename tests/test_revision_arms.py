"""Issue 16: `--config with_skill@REV` compares skill versions in one paired matrix.

A test repository holds two commits of a skill whose SKILL.md carries a version marker. The
fake executor quotes every file it read in its answer (`quote_reads`), so its answer depends on
the SKILL.md it was given; the fake grader passes every assertion only when the newer marker
is in the answer it grades.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import unittest
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.helpers import (
    PROJECT,
    SKILL_MD,
    TempDir,
    call_main,
    demo_suite,
    fake_calls,
    fake_env,
    git,
    make_repo,
    tree_digest,
)

SKILL_CREATOR = PROJECT.parent / "shared" / "skill-creator"


def skill_version(marker: str) -> str:
    return SKILL_MD.replace("Say hello.", f"Say hello. {marker}")


def script_passing_on(marker: str) -> dict:
    """Every assertion passes with the marker in the answer; without it only the common one."""
    return {"executor": {"quote_reads": True}, "grader": {"verdicts": {"fail_ids": [2, 3]}},
            "cases": [{"match": marker, "role": "grader", "spec": {"verdicts": "all_pass"}}]}


class RevisionArmCase(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.root = make_repo(self.tmp.path, demo_suite(6), skill_md=skill_version("MARKER-V1"))
        (self.root / "skills/demo/SKILL.md").write_text(skill_version("MARKER-V2"))
        git(self.root, "commit", "-qam", "skill v2")
        self.suite = str(self.root / "evals/demo/evals.json")
        self.workspace = self.tmp.path / "ws"

    def run_main(self, configs: str, marker: str = "MARKER-V2", *extra: str):
        env = fake_env(self.tmp.path, script_passing_on(marker))
        return call_main(["run", self.suite, "--agent", "claude", "--config", configs, "--quiet",
                          "--workspace", str(self.workspace), *extra], env)

    def iteration(self, number: int = 1) -> Path:
        return self.workspace / f"iteration-{number}"

    def benchmark(self, number: int = 1) -> dict:
        return json.loads((self.iteration(number) / "benchmark.json").read_text())


class RevisionArmTest(RevisionArmCase):
    def test_working_tree_against_the_previous_commit_is_improved(self) -> None:
        head = git(self.root, "rev-parse", "HEAD").strip()
        previous = git(self.root, "rev-parse", "HEAD~1").strip()
        before = tree_digest(self.root)
        index_before = (self.root / ".git/index").stat().st_mtime_ns
        code, out, err = self.run_main("with_skill,with_skill@HEAD~1", "MARKER-V2",
                                       "--junit", str(self.tmp.path / "junit.xml"))
        self.assertEqual(code, 0, out + err)
        b = self.benchmark()
        self.assertEqual(b["paired"]["verdict"], "improved")
        self.assertEqual(b["paired"]["paired_evals"], 6)
        self.assertIn("Verdict: improved", out)
        # Both arms recorded: the revision as given, the commit it resolved to, the hashes.
        arms = json.loads((self.iteration() / "iteration_manifest.json").read_text())["arms"]
        self.assertEqual(arms, b["metadata"]["arms"])
        self.assertEqual(arms["with_skill"]["source"], "working tree")
        self.assertEqual((arms["with_skill@HEAD~1"]["revision"],
                          arms["with_skill@HEAD~1"]["commit"]), ("HEAD~1", previous))
        self.assertNotEqual(previous, head)
        self.assertNotEqual(arms["with_skill"]["package_sha256"],
                            arms["with_skill@HEAD~1"]["package_sha256"])
        self.assertIn(previous, (self.iteration() / "benchmark.md").read_text())
        run = json.loads((self.iteration() / "eval-E01/with_skill@HEAD~1/run-1/run.json")
                         .read_text())
        self.assertEqual(run["sandbox"]["skill_revision"]["commit"], previous)
        # The executor prompts of the two arms differ only in the sandbox folder.
        for case in ("E01", "E04"):
            prompts = [(self.iteration() / f"eval-{case}/{config}/run-1/prompt.md").read_text()
                       for config in ("with_skill", "with_skill@HEAD~1")]
            folders = [re.search(r"copy of the repository at (\S+)\. ", p).group(1)
                       for p in prompts]
            self.assertNotEqual(folders[0], folders[1])
            self.assertEqual(prompts[0].replace(folders[0], "<SANDBOX>"),
                             prompts[1].replace(folders[1], "<SANDBOX>"))
            self.assertIn("<SANDBOX>/skills/demo/SKILL.md",
                          prompts[0].replace(folders[0], "<SANDBOX>"))
        # Each arm's executor really read its own version.
        answers = {config: (self.iteration() / f"eval-E01/{config}/run-1/outputs/output.txt")
                   .read_text() for config in ("with_skill", "with_skill@HEAD~1")}
        self.assertIn("MARKER-V2", answers["with_skill"])
        self.assertIn("MARKER-V1", answers["with_skill@HEAD~1"])
        self.assertNotIn("MARKER-V2", answers["with_skill@HEAD~1"])
        # The checkout was only read: files, HEAD, and the index untouched.
        self.assertEqual(tree_digest(self.root), before)
        self.assertEqual(git(self.root, "rev-parse", "HEAD").strip(), head)
        self.assertEqual((self.root / ".git/index").stat().st_mtime_ns, index_before)
        junit = ET.parse(self.tmp.path / "junit.xml").getroot()
        props = {p.get("name"): p.get("value") for p in junit.iter("property")}
        self.assertEqual(props["verdict vs with_skill@HEAD~1"], "improved")

    def test_an_uncommitted_edit_against_head(self) -> None:
        (self.root / "skills/demo/SKILL.md").write_text(skill_version("MARKER-V3"))
        code, out, err = self.run_main("with_skill,with_skill@HEAD", "MARKER-V3")
        self.assertEqual(code, 0, out + err)
        b = self.benchmark()
        self.assertEqual(b["paired"]["verdict"], "improved")
        self.assertEqual(b["metadata"]["arms"]["with_skill@HEAD"]["commit"],
                         git(self.root, "rev-parse", "HEAD").strip())
        self.assertIn("M skills/demo/SKILL.md", git(self.root, "status", "--short"))

    def test_two_revisions_and_a_branch_name_with_a_slash(self) -> None:
        git(self.root, "branch", "feature/old", "HEAD~1")
        code, out, err = self.run_main("with_skill@HEAD,with_skill@feature/old")
        self.assertEqual(code, 0, out + err)
        self.assertTrue((self.iteration() / "eval-E01/with_skill@feature%2Fold/run-1").is_dir())
        self.assertEqual(self.benchmark()["paired"]["verdict"], "improved")
        code, out, err = call_main(["report", str(self.iteration()), "--html"])
        self.assertEqual(code, 0, err)
        html = (self.iteration() / "benchmark.html").read_text()
        self.assertIn("MARKER-V1", html)  # the renamed folder's output was found and embedded

    def test_three_arms_give_two_verdicts(self) -> None:
        code, out, err = self.run_main("with_skill,with_skill@HEAD~1,without_skill",
                                       "MARKER-V2", "--junit", str(self.tmp.path / "j.xml"))
        self.assertEqual(code, 0, out + err)
        b = self.benchmark()
        # Six evals won against both baselines: p = 2/64 = 0.031 each, a claim for one
        # comparison alone, but two share the 5% by Holm's step-down (issue 38): the first
        # step needs p <= 0.025, which six evals cannot give, so neither claims.
        self.assertEqual([(c["baseline"], c["verdict"]) for c in b["comparisons"]],
                         [("with_skill@HEAD~1", "inconclusive"),
                          ("without_skill", "inconclusive")])
        self.assertEqual([c["interval_level"] for c in b["comparisons"]], [0.975, 0.975])
        self.assertEqual(b["comparisons"][0]["test"]["multiplicity"]["alpha"], 0.025)
        self.assertEqual(b["paired"]["verdict"], "inconclusive")
        markdown = (self.iteration() / "benchmark.md").read_text()
        for text in (out, markdown):
            self.assertIn("Verdict vs with_skill@HEAD~1: inconclusive", text)
            self.assertIn("Verdict vs without_skill: inconclusive", text)
            self.assertIn("97.50% CI", text)
        self.assertIn("2 comparisons share the false-claim rate 0.05 by Holm's step-down",
                      markdown)
        html = (self.iteration() / "benchmark.html").read_text()
        self.assertIn("Verdict vs without_skill", html)
        self.assertIn("Paired comparisons", html)
        self.assertIn("Holm&#x27;s step-down", html)
        props = {p.get("name"): p.get("value")
                 for p in ET.parse(self.tmp.path / "j.xml").getroot().iter("property")}
        self.assertEqual(props["verdict vs without_skill"], "inconclusive")
        self.assertEqual(props["wins_ties_losses vs with_skill@HEAD~1"], "6/0/0")
        self.assertAlmostEqual(b["per_eval"][0]["deltas"]["without_skill"], 2 / 3)
        self.assertAlmostEqual(b["per_eval"][0]["deltas"]["with_skill@HEAD~1"], 2 / 3)


class RevisionValidationTest(RevisionArmCase):
    def assert_refused(self, configs: str, *needles: str) -> str:
        code, out, err = self.run_main(configs)
        self.assertEqual(code, 2, out + err)
        self.assertEqual(fake_calls(self.tmp.path), [], "nothing may be launched")
        self.assertFalse(self.iteration().exists())
        for needle in needles:
            self.assertIn(needle, err)
        self.assertIn("fix:", err)
        return err

    def test_an_unknown_revision_exits_2_with_zero_launches(self) -> None:
        self.assert_refused("with_skill,with_skill@no-such-branch", "cannot resolve",
                            "'no-such-branch'")

    def test_a_revision_without_the_package(self) -> None:
        (self.root / "skills/other").mkdir()
        git(self.root, "mv", "skills/demo/SKILL.md", "skills/other/SKILL.md")
        git(self.root, "commit", "-qm", "move it away")
        git(self.root, "mv", "skills/other/SKILL.md", "skills/demo/SKILL.md")
        git(self.root, "commit", "-qm", "move it back")
        self.assert_refused("with_skill,with_skill@HEAD~1", "skills/demo/SKILL.md at HEAD~1",
                            "does not exist")

    def test_a_skill_md_link_out_of_its_package_at_the_revision(self) -> None:
        (self.root / "notes.md").write_text(skill_version("MARKER-LINK"))
        os.remove(self.root / "skills/demo/SKILL.md")
        os.symlink("../../notes.md", self.root / "skills/demo/SKILL.md")
        git(self.root, "add", "-A")
        git(self.root, "commit", "-qm", "link")
        (self.root / "skills/demo/SKILL.md").unlink()
        (self.root / "skills/demo/SKILL.md").write_text(skill_version("MARKER-V2"))
        self.assert_refused("with_skill,with_skill@HEAD", "link out of its package")

    def test_option_like_and_malformed_revisions_are_usage_errors(self) -> None:
        for bad in ("with_skill@", "with_skill@--output=x", "with_skill@a b",
                    "with_skill,with_skill@HEAD,with_skill@HEAD~1,without_skill"):
            code, out, err = self.run_main(bad)
            self.assertEqual(code, 2, bad)
            self.assertIn("with_skill@REV", err)
        self.assertEqual(fake_calls(self.tmp.path), [])

    def test_outside_git_is_a_clear_error(self) -> None:
        shutil.rmtree(self.root / ".git")
        self.assert_refused("with_skill,with_skill@HEAD", "not a git checkout")

    def test_resume_rechecks_the_revision(self) -> None:
        git(self.root, "branch", "old", "HEAD~1")
        code, out, err = self.run_main("with_skill,with_skill@old")
        self.assertEqual(code, 0, out + err)
        git(self.root, "branch", "-f", "old", "HEAD")
        code, out, err = self.run_main("with_skill,with_skill@old", "MARKER-V2",
                                       "--resume", str(self.iteration()))
        self.assertEqual(code, 2, out + err)
        self.assertIn("with_skill@old package", err)
        git(self.root, "branch", "-f", "old", "HEAD~1")
        code, out, err = self.run_main("with_skill,with_skill@old", "MARKER-V2",
                                       "--resume", str(self.iteration()))
        self.assertEqual(code, 0, out + err)


class RevisionSandboxTest(RevisionArmCase):
    def test_each_arm_reaches_only_its_own_version(self) -> None:
        """The sandbox holds its version at skills/demo/, committed as delivered, and git in
        it cannot reach the other version's objects (nor a without_skill one any version)."""
        from tests.helpers import runner
        suite = runner.load_valid_suite(self.suite, str(self.root))
        base = self.tmp.path / "sandboxes"
        base.mkdir(exist_ok=True)
        snapshot = runner.RepoSnapshot.take(self.root, "demo", groups=runner.ProcessGroups())
        snapshot.revisions = runner.read_revision_packages(suite, ["with_skill@HEAD~1"])
        snapshot.template = runner.build_git_template(snapshot, base, runner.ProcessGroups())
        self.addCleanup(snapshot.template.remove)
        blobs = {}
        for marker in ("MARKER-V1", "MARKER-V2"):
            data = skill_version(marker).encode()
            blobs[marker] = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        seen = {}
        for number, delivery in enumerate((True, "with_skill@HEAD~1", False)):
            sandbox = runner.build_sandbox(snapshot, suite.cases[0], delivery, runner.Sandbox.new(
                                           base, self.tmp.path / f"baseline-{number}.git"),
                                           groups=runner.ProcessGroups())
            self.addCleanup(sandbox.remove)
            self.assertTrue(sandbox.git.ok, sandbox.git)
            self.assertEqual(git(sandbox.repo, "status", "--porcelain"), "")
            listed = git(sandbox.repo, "cat-file", "--batch-all-objects", "--batch-check")
            seen[delivery] = {m for m, blob in blobs.items() if blob in listed}
            skill = sandbox.repo / "skills/demo/SKILL.md"
            seen[delivery, "file"] = skill.read_text() if skill.exists() else None
        self.assertEqual(seen[True], {"MARKER-V2"})
        self.assertEqual(seen["with_skill@HEAD~1"], {"MARKER-V1"})
        self.assertEqual(seen[False], set())
        self.assertIn("MARKER-V1", seen["with_skill@HEAD~1", "file"])
        self.assertIsNone(seen[False, "file"])


class DryRunForecastTest(RevisionArmCase):
    def test_dry_run_prints_the_forecast_from_an_earlier_iteration(self) -> None:
        code, out, err = self.run_main("with_skill,with_skill@HEAD~1", "MARKER-V2", "--dry-run")
        self.assertEqual(code, 0, err)
        self.assertIn("no earlier iteration", out)
        self.assertIn("with_skill@HEAD~1: skills/demo/ as committed at", out)
        # An earlier run whose deltas vary, none of them 0 (a tie leaves the sign-flip test
        # too few patterns for an MDE at 6 evals): after the MARKER-V2 rule, so only the
        # HEAD~1 arm's graders see them, E02 and E03 fail one assertion of three there
        # (deltas 1/3) and the other evals two (deltas 2/3).
        script = script_passing_on("MARKER-V2")
        for task in ("Task number 2", "Task number 3"):
            script["cases"].append({"match": task, "role": "grader",
                                    "spec": {"verdicts": {"fail_ids": [2]}}})
        env = fake_env(self.tmp.path, script)
        code, out, err = call_main(["run", self.suite, "--agent", "claude", "--quiet",
                                    "--config", "with_skill,with_skill@HEAD~1",
                                    "--workspace", str(self.workspace)], env)
        self.assertEqual(code, 0, out + err)
        # Six evals of one run: fewer than 80% of resampled suites reach a verdict for any
        # effect (issue 38's simulated forecast), so the MDE is unknown, with the reason.
        power = self.benchmark()["comparisons"][0]["power"]
        self.assertIsNone(power["mde"])
        self.assertIn("fewer than 80%", power["reason"])
        before = len(fake_calls(self.tmp.path))
        code, out, err = self.run_main("with_skill,with_skill@HEAD~1", "MARKER-V2", "--dry-run")
        self.assertEqual(code, 0, err)
        self.assertEqual(len(fake_calls(self.tmp.path)), before, "a dry run launches nothing")
        self.assertIn("forecast from iteration-1", out)
        self.assertIn("with_skill vs with_skill@HEAD~1: minimum detectable effect unknown: "
                      "in 6-eval suites resampled from this one", out)
        self.assertIn("to detect 10.0 pp (10 pp): about", out)


def python_for_skill_creator() -> str | None:
    """skill-creator's scripts use 3.10 syntax: this Python if it is new enough, else a
    python3 on PATH that is."""
    if sys.version_info >= (3, 10):
        return sys.executable
    other = shutil.which("python3")
    if other is None:
        return None
    done = subprocess.run([other, "-c", "import sys; print(sys.version_info >= (3, 10))"],
                          capture_output=True, text=True, timeout=60, check=False)
    return other if done.stdout.strip() == "True" else None


@unittest.skipUnless(SKILL_CREATOR.is_dir(), f"skill-creator is not at {SKILL_CREATOR}")
class SkillCreatorReadsArmsTest(RevisionArmCase):
    """skill-creator's own scripts still read an iteration with a revision arm and 3 configs."""

    def test_aggregate_and_static_viewer(self) -> None:
        python = python_for_skill_creator()
        if python is None:
            self.skipTest("skill-creator's scripts need Python 3.10 or newer; none found")
        code, out, err = self.run_main("with_skill,with_skill@HEAD~1,without_skill")
        self.assertEqual(code, 0, out + err)
        aggregated = self.tmp.path / "aggregated"
        aggregated.mkdir()
        copy = aggregated / "iteration-1"
        shutil.copytree(self.iteration(), copy)
        done = subprocess.run([python, str(SKILL_CREATOR / "scripts/aggregate_benchmark.py"),
                               str(copy), "--skill-name", "demo"], capture_output=True,
                              text=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        theirs = json.loads((copy / "benchmark.json").read_text())
        self.assertEqual(set(theirs["run_summary"]) - {"delta"},
                         {"with_skill", "with_skill@HEAD~1", "without_skill"})
        self.assertAlmostEqual(theirs["run_summary"]["with_skill"]["pass_rate"]["mean"], 1.0)
        self.assertAlmostEqual(theirs["run_summary"]["with_skill@HEAD~1"]["pass_rate"]["mean"],
                               1 / 3, places=3)
        page = self.tmp.path / "review.html"
        done = subprocess.run([python, str(SKILL_CREATOR / "eval-viewer/generate_review.py"),
                               str(self.iteration()), "--skill-name", "demo",
                               "--benchmark", str(self.iteration() / "benchmark.json"),
                               "--static", str(page)], capture_output=True, text=True,
                              timeout=120)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("with_skill@HEAD~1", page.read_text())


if __name__ == "__main__":
    unittest.main()
