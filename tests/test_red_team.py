"""A red team against round 4's checks and delivery (issue 33, beyond its own list).

What a hostile executor controls when its checks run: every byte, link, folder, FIFO and mode
bit of the sandbox it leaves (the tree, the sandbox's own .git, files named like the tools a
check starts), the exit status and output of anything of its own that a check runs, and the
paths a link it planted names, which the runner on the host would resolve if it followed
one. The caller controls the runner's environment (BASH_ENV, ENV, CDPATH). Each attack here
ends as a failed check or as `check_error`, never a pass, and never a host file read, written
or removed; the attacks that no runner can stop are written down in references/checks.md.

Unconfined, the Python fake scripts the attack; under bubblewrap the POSIX sh fake of
test_check_forgery runs the same attack as shell commands.
"""

from __future__ import annotations

import json
import os
import time
import unittest
from pathlib import Path

from tests.helpers import TempDir, call_main, demo_suite, fake_env, make_repo, runner
from tests.test_check_forgery import ForgeryBase
from tests.test_checks_e2e import BUGGY, RUN_TESTS
from tests.test_confinement import bwrap_problem
from tests.test_delivery import HIDDEN_OUTPUT, REFERENCE, SECRET, SKILL_MD, DeliveryCase, nosy_suite

PASSING_TEST = ("import unittest\n\n\nclass AddTests(unittest.TestCase):\n"
                "    def test_add(self):\n        pass\n")
EXITS_0 = "import os; os._exit(0)\n"


class LinkedProtectedPaths(ForgeryBase):
    """A protected path, or the folder above it, replaced by a link to a host folder: the
    runner removes the link and writes the delivered file, never through it."""

    def host(self) -> Path:
        folder = self.tmp.path / "host"
        folder.mkdir(exist_ok=True)
        (folder / "test_calc.py").write_text(PASSING_TEST, encoding="utf-8")
        (folder / "calc.py").write_text(BUGGY, encoding="utf-8")
        return folder

    def assert_host_untouched(self, host: Path) -> None:
        self.assertEqual((host / "test_calc.py").read_text(encoding="utf-8"), PASSING_TEST)
        self.assertEqual(sorted(p.name for p in host.iterdir()), ["calc.py", "test_calc.py"])

    def test_the_protected_files_folder_linked_to_a_host_folder(self) -> None:
        host = self.host()
        run = self.attack([RUN_TESTS], {"shell_symlinks": {"calc": str(host)}},
                          f"rm -rf calc && ln -s {host} calc")
        self.assertEqual(run["checks"]["protected"]["calc/test_calc.py"],
                         {"changed_by_executor": ["calc"]})
        self.assert_failed(run)  # calc/ is a real folder again, with only the delivered test
        self.assert_host_untouched(host)

    def test_the_protected_file_linked_to_a_host_file(self) -> None:
        host = self.host()
        target = host / "test_calc.py"
        run = self.attack([RUN_TESTS], {"shell_symlinks": {"calc/test_calc.py": str(target)}},
                          f"rm calc/test_calc.py && ln -s {target} calc/test_calc.py")
        self.assertEqual(run["checks"]["protected"]["calc/test_calc.py"],
                         {"changed_by_executor": ["calc/test_calc.py"]})
        self.assertIn("exited 1 (expected 0)", self.assert_failed(run)["evidence"])
        self.assert_host_untouched(host)

    def test_the_protected_file_replaced_by_a_folder(self) -> None:
        spec = {"shell_special": {"calc/test_calc.py": "directory"}}
        run = self.attack([RUN_TESTS], spec,
                          "rm calc/test_calc.py && mkdir -p calc/test_calc.py/inner")
        self.assertIn("exited 1 (expected 0)", self.assert_failed(run)["evidence"])
        self.assertTrue(run["checks"]["protected"]["calc/test_calc.py"]["changed_by_executor"])


@unittest.skipIf(bwrap_problem() is not None, f"needs working bubblewrap: {bwrap_problem()}")
class LinkedProtectedPathsConfined(LinkedProtectedPaths):
    isolation = "bwrap"


class FileCheckTargets(ForgeryBase):
    """A file check's target the executor turned into a link to a host file (or its folder
    into a link), a FIFO or a link to a device: nothing outside the sandbox is read, nothing
    blocks, and no host byte reaches run.json or grading.json."""

    SECRET = "host-secret-7f3a"

    def secret_file(self) -> Path:
        folder = self.tmp.path / "host"
        folder.mkdir(exist_ok=True)
        (folder / "notes.txt").write_text(self.SECRET, encoding="utf-8")
        return folder / "notes.txt"

    def check_notes(self, spec: dict, shell: str, target: str = "notes.txt") -> dict:
        checks = [{"name": "said", "file": target, "contains": "host-secret"},
                  {"name": "shaped", "file": target, "matches": "secret-[0-9a-f]+"},
                  {"name": "parses", "file": target, "json": True}]
        run = self.attack(checks, spec, shell)
        self.assertEqual(run["status"], "ok", run["checks"])
        self.assertEqual([r["passed"] for r in run["checks"]["results"]], [False] * 3)
        self.assertNotIn(self.SECRET, json.dumps(run))
        return run

    def test_a_link_to_a_host_file(self) -> None:
        secret = self.secret_file()
        run = self.check_notes({"shell_symlinks": {"notes.txt": str(secret)}},
                               f"ln -s {secret} notes.txt")
        self.assertIn("symbolic link", run["checks"]["results"][0]["evidence"])

    def test_a_folder_linked_to_a_host_folder(self) -> None:
        secret = self.secret_file()
        self.check_notes({"shell_symlinks": {"docs": str(secret.parent)}},
                         f"ln -s {secret.parent} docs", target="docs/notes.txt")

    def test_a_fifo(self) -> None:
        started = time.monotonic()
        run = self.check_notes({"shell_special": {"notes.txt": "fifo"}}, "mkfifo notes.txt")
        self.assertLess(time.monotonic() - started, 120)
        self.assertIn("FIFO", run["checks"]["results"][0]["evidence"])

    def test_a_link_to_a_device(self) -> None:
        self.check_notes({"shell_symlinks": {"notes.txt": "/dev/zero"}},
                         "ln -s /dev/zero notes.txt")


    def test_a_file_behind_a_link_or_a_fifo_is_not_absent(self) -> None:
        # "no debug log left": a file reached through a linked folder, or a FIFO, is there
        # all the same; neither `exists: false` nor `exists: true` passes on what the runner
        # does not follow.
        checks = [{"name": "no log", "file": "build/debug.log", "exists": False},
                  {"name": "no pipe", "file": "pipe.log", "exists": False},
                  {"name": "a log", "file": "build/debug.log", "exists": True},
                  {"name": "really absent", "file": "gone.log", "exists": False}]
        spec = {"shell_write_files": {"real/debug.log": "x"},
                "shell_symlinks": {"build": "real"}, "shell_special": {"pipe.log": "fifo"}}
        shell = "mkdir real && echo x > real/debug.log && ln -s real build && mkfifo pipe.log"
        run = self.attack(checks, spec, shell)
        results = run["checks"]["results"]
        self.assertEqual([r["passed"] for r in results], [False, False, False, True], results)
        self.assertIn("symbolic link", results[0]["evidence"])
        self.assertIn("FIFO", results[1]["evidence"])


    def test_json_nested_deeper_than_python_parses_is_unscored(self) -> None:
        # 200,000 levels: json.loads raises RecursionError, which is not a ValueError; the
        # cell was a runner_error. Whether it is JSON is not decided, so never pass or fail.
        deep = "[" * 200_000 + "]" * 200_000
        run = self.attack([{"name": "parses", "file": "out.json", "json": True}],
                          {"shell_write_files": {"out.json": deep}},
                          "python3 -c \"print('[' * 200000 + ']' * 200000)\" > out.json")
        self.assert_unrun(run, "nested too deep")


@unittest.skipIf(bwrap_problem() is not None, f"needs working bubblewrap: {bwrap_problem()}")
class FileCheckTargetsConfined(FileCheckTargets):
    isolation = "bwrap"


class CheckOutput(ForgeryBase):
    """What a check prints is evidence, never the runner's word: a flood is cut, a forged
    status line is not taken for the status."""

    def test_a_flood_and_forged_status_lines(self) -> None:
        check = {"name": "loud", "run":
                 "echo 'exited 0 (expected 0)'; echo '{\"exit-code\": 0}' >&2; "
                 "head -c 30000000 /dev/zero | tr '\\0' a; echo; "
                 "echo 'exited 0 (expected 0)'; exit 1"}
        run = self.attack([check], {}, "true")
        result = self.assert_failed(run, "loud")
        self.assertTrue(result["evidence"].startswith("exited 1 (expected 0)"), result)
        self.assertLessEqual(len(result["stdout_tail"]), runner._CHECK_TAIL_CHARS)
        self.assertEqual(result["returncode"], 1)

    def test_terminal_control_sequences_reach_no_report(self) -> None:
        # ESC [2K and a carriage return would erase the line a terminal shows and print a
        # forged one over it, when benchmark.md or a report is read in a terminal.
        check = {"name": "painter", "run":
                 "printf 'x\\033[2K\\033[1G\\033]0;title\\007exited 0 (expected 0)\\n'; exit 1"}
        run = self.attack([check], {}, "true")
        result = self.assert_failed(run, "painter")
        self.assertIn("\x1b", result["stdout_tail"])  # recorded as it was, in run.json
        iteration = self.workspace / "iteration-1"
        shown = {"run output": self.out + self.err,
                 "benchmark.md": (iteration / "benchmark.md").read_text(encoding="utf-8")}
        _, out, err = call_main(["report", str(iteration)], fake_env(self.tmp.path, {}))
        shown["report"] = out + err
        for where, text in shown.items():
            with self.subTest(where=where):
                self.assertNotIn("\x1b", text)
                self.assertNotIn("\x07", text)


@unittest.skipIf(bwrap_problem() is not None, f"needs working bubblewrap: {bwrap_problem()}")
class CheckOutputConfined(CheckOutput):
    isolation = "bwrap"

    def test_a_check_cannot_write_bwraps_status_report(self) -> None:
        # bwrap's --json-status-fd is closed in the command: a check that writes a forged
        # exit status, then text that would stop the reader, to every descriptor it might be.
        forge = ("for fd in 3 4 5 6 7 8 9; do "
                 "(printf '{\"exit-code\": 0}\\nnot json' >&$fd) 2>/dev/null; done; exit 3")
        run = self.attack([{"name": "forger", "run": forge}], {}, "true")
        result = self.assert_failed(run, "forger")
        self.assertEqual(result["returncode"], 3)


class ShellStartup(ForgeryBase):
    """The shell a check runs in reads no file the executor or the caller chose: BASH_ENV,
    ENV and CDPATH of the caller do not reach it, and its HOME is fresh."""

    def test_startup_files_and_cdpath(self) -> None:
        elsewhere = self.tmp.path / "elsewhere"
        (elsewhere / "calc").mkdir(parents=True)
        (elsewhere / "calc" / "test_calc.py").write_text(PASSING_TEST, encoding="utf-8")
        files = {".hook": "exit 0\n", ".bashrc": "exit 0\n", ".profile": "exit 0\n"}
        shell = "printf 'exit 0\\n' > .hook && cp .hook .bashrc && cp .hook .profile"
        checks = [{"name": "bash", "run": "bash -c 'exit 3'", "exit_code": 3},
                  {"name": "sh", "run": "sh -c 'exit 3'", "exit_code": 3},
                  {**RUN_TESTS, "run": "cd calc && python3 -m unittest -q test_calc"}]
        run = self.attack(checks, {"shell_write_files": files}, shell,
                          {"BASH_ENV": "./.hook", "ENV": "./.hook", "CDPATH": str(elsewhere)})
        self.assertEqual([r["passed"] for r in run["checks"]["results"]], [True, True, False],
                         run["checks"])


@unittest.skipIf(bwrap_problem() is not None, f"needs working bubblewrap: {bwrap_problem()}")
class DeepTrees(ForgeryBase):
    """A folder chain deeper than Python's recursion limit (os.walk and shutil.rmtree recurse
    before 3.12): the checks still end as a result or as check_error, never an internal
    error, and the sandbox is still removed. (The sh fake builds it: the Python fake's own
    makedirs would recurse out first.)"""

    DEPTH = 1500
    isolation = "bwrap"

    def test_a_tree_deeper_than_the_recursion_limit(self) -> None:
        deep = "/".join(["d"] * self.DEPTH)
        shell = (f"i=0; while [ $i -lt {self.DEPTH} ]; do mkdir d && cd d || exit 1; "
                 "i=$((i+1)); done; printf x > unittest.py")
        run = self.attack([RUN_TESTS], {"shell_write_files": {f"{deep}/unittest.py": "x"}},
                          shell)
        self.assertIn(self.code, (0, 1), self.err[-3000:])
        # found 1,500 folders down, where os.walk would have recursed out
        self.assertEqual(run["status"], "check_error", run.get("failure"))
        self.assertTrue(run["checks"]["planted_interpreter_files"][0].endswith("d/unittest.py"))
        self.assertTrue(run["sandbox"]["removed"], run["sandbox"])
        self.assertEqual(list((self.tmp.path / "sandboxes").glob("*/repo")), [])

    def test_a_deep_tree_in_a_protected_folder_is_put_back(self) -> None:
        checks = [{**RUN_TESTS, "protect": ["calc"]}]
        shell = (f"cd calc && i=0; while [ $i -lt {self.DEPTH} ]; do mkdir d && cd d || "
                 "exit 1; i=$((i+1)); done; printf x > deep.txt")
        run = self.attack(checks, {}, shell)
        self.assertEqual(run["status"], "ok", run.get("failure"))
        self.assertEqual(run["checks"]["protected"]["calc"]["changed_by_executor"][0][:7],
                         "calc/d/")
        self.assertIn("exited 1 (expected 0)", run["checks"]["results"][0]["evidence"])
        self.assertTrue(run["sandbox"]["removed"], run["sandbox"])


class PytestConfiguration(ForgeryBase):
    """pytest loads every conftest.py from its root folder down to the tests it is given, and
    reads pytest.ini: an executor that adds one runs code of its own in the test process, even
    when the command names the protected test. The cell's run checks are unrun."""

    def test_an_added_conftest_makes_the_check_unrun(self) -> None:
        run = self.attack([RUN_TESTS], {"shell_write_files": {"calc/conftest.py": EXITS_0}},
                          "printf 'import os; os._exit(0)\\n' > calc/conftest.py")
        self.assert_unrun(run, "calc/conftest.py", "pytest")
        self.assertEqual(run["checks"]["planted_interpreter_files"], ["calc/conftest.py"])

    def test_an_added_pytest_module_makes_the_check_unrun(self) -> None:
        named = {**RUN_TESTS, "run": "cd calc && python3 -m pytest -q test_calc.py"}
        run = self.attack([named], {"shell_write_files": {"calc/pytest.py": EXITS_0}},
                          "printf 'import os; os._exit(0)\\n' > calc/pytest.py")
        self.assert_unrun(run, "calc/pytest.py", "pytest")

    def test_an_added_pytest_ini_makes_the_check_unrun(self) -> None:
        ini = "[pytest]\naddopts = -p calc.plugin\n"
        run = self.attack([RUN_TESTS], {"shell_write_files": {"pytest.ini": ini}},
                          "printf '[pytest]\\naddopts = -p x\\n' > pytest.ini")
        self.assert_unrun(run, "pytest.ini")

    def test_an_added_setup_cfg_with_pytest_options_makes_the_check_unrun(self) -> None:
        # `--collect-only` exits 0 without running a test
        cfg = "[tool:pytest]\naddopts = --collect-only\n"
        run = self.attack([RUN_TESTS], {"shell_write_files": {"calc/setup.cfg": cfg}},
                          "printf '[tool:pytest]\\naddopts = --collect-only\\n' "
                          "> calc/setup.cfg")
        self.assert_unrun(run, "calc/setup.cfg")


@unittest.skipIf(bwrap_problem() is not None, f"needs working bubblewrap: {bwrap_problem()}")
class PytestConfigurationConfined(PytestConfiguration):
    isolation = "bwrap"


class PlantedTestRunnerFiles(unittest.TestCase):
    """Which added files pytest would read as its own code or configuration."""

    def test_names(self) -> None:
        cases = {"conftest.py": True, "calc/conftest.py": True, "tests/deep/conftest.py": True,
                 "pytest.ini": True, "calc/.pytest.ini": True, "conftest.txt": False,
                 "calc/my_conftest.py": False, "pytest.ini.bak": False, "tox.ini": False}
        for rel, read in cases.items():
            with self.subTest(rel=rel):
                self.assertEqual(runner._read_by_pytest(rel), read)

    def test_pytests_own_modules(self) -> None:
        # `python3 -m pytest` in calc/ imports an added calc/pytest.py, not the installed one
        cases = {"calc/pytest.py": "pytest", "calc/_pytest/__init__.py": "_pytest",
                 "pluggy.py": "pluggy", "calc/pytest_helpers.py": None}
        for rel, module in cases.items():
            with self.subTest(rel=rel):
                self.assertEqual(runner._imported_as(rel, set()), module)

    def test_configuration_files_count_when_they_hold_pytests_section(self) -> None:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        files = {"pyproject.toml": ("[tool.pytest.ini_options]\naddopts = '-q'\n", True),
                 "tox.ini": ("[tox]\n[pytest]\naddopts = --co\n", True),
                 "setup.cfg": ("[tool:pytest]\n", True),
                 "a/pyproject.toml": ("[project]\nname = 'calc'\n", False),
                 "b/setup.cfg": ("[metadata]\nname = calc\n", False),
                 "c/tox.ini": ("[tox]\nenvlist = py311\n", False)}
        for rel, (text, read) in files.items():
            path = tmp.path / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            with self.subTest(rel=rel):
                self.assertEqual(runner._read_by_pytest(rel, path), read)
        (tmp.path / "e").mkdir()
        os.mkfifo(tmp.path / "e/setup.cfg")  # unreadable without blocking: counted
        self.assertTrue(runner._read_by_pytest("e/setup.cfg", tmp.path / "e/setup.cfg"))
        (tmp.path / "f").mkdir()
        (tmp.path / "f/tox.ini").symlink_to("../c/tox.ini")  # pytest follows a link
        self.assertTrue(runner._read_by_pytest("f/tox.ini", tmp.path / "f/tox.ini"))


class LinkedFolders(DeliveryCase):
    """A tracked link to a folder that holds the suite (the suite outside evals/), or to the
    skill package's folder under another name: the nosy executor reads every file of its
    sandbox and none of the suite or the skill reaches it."""

    def test_a_link_to_the_suites_folder(self) -> None:
        self.root = make_repo(self.tmp.path, demo_suite(1), {"src/app.py": "print(1)\n"})
        (self.root / "qa").mkdir()
        (self.root / "qa/suite.json").write_text(json.dumps(nosy_suite(), indent=2),
                                                 encoding="utf-8")
        (self.root / "notes").symlink_to("qa")
        (self.root / "docs").mkdir()
        (self.root / "docs/qa").symlink_to(self.root / "qa")
        self.commit()
        code, output = self.run_nosy("qa/suite.json")
        self.assertIn(code, (0, 1), output)
        for config in ("with_skill", "without_skill"):
            answer = self.answer("E01", config)
            self.assertIn("print(1)", answer)
            for secret in (SECRET, HIDDEN_OUTPUT):
                self.assertNotIn(secret, answer, f"the suite reached a {config} sandbox")


    def test_the_suite_and_the_skill_named_as_fixtures(self) -> None:
        # a case that lists the suite itself, the skill's SKILL.md (found in the skill's
        # folder) and a reference of the package as its fixture files
        suite = nosy_suite()
        suite["evals"][0]["files"] = ["evals/demo/evals.json", "SKILL.md", "reference.md"]
        self.root = make_repo(self.tmp.path, suite, {
            "src/app.py": "print(1)\n", "skills/demo/reference.md": REFERENCE},
            skill_md=SKILL_MD)
        code, output = self.run_nosy("evals/demo/evals.json")
        self.assertEqual(code, 2, output)  # refused before any sandbox exists
        self.assertIn("is the suite file itself", output)
        self.assertIn("fixture 'SKILL.md' holds the target skill's package", output)
        self.assertIn("fixture 'reference.md' holds the target skill's package", output)
        self.assertFalse(self.workspace.exists() and any(self.workspace.rglob("run.json")))

if __name__ == "__main__":
    unittest.main()
