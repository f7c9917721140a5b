"""Ground truth an executor cannot forge (issue 33, items 1, 2 and 4).

The README's own check, `cd calc && python3 -m unittest -q` with calc/test_calc.py protected,
attacked by an executor that leaves the bug in calc/calc.py and plants something instead: a
bytecode cache that passes, a module that shadows the standard library, a `python3` or a
`sitecustomize.py` that the caller's PATH or PYTHONPATH would reach, a sandbox it locks so
that bubblewrap cannot enter it, a line that makes the suite's regular expression backtrack
for hours. Each attack must end as a failed check or as `check_error` (unscored), never a pass.

Unconfined, the Python fake scripts the attack (`shell_write_files`, `shell_write_hex`,
`shell_chmod`); under bubblewrap, where the fake's script and log are out of reach, a POSIX sh
`claude` runs the same attack as shell commands.
"""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import time
import unittest
from pathlib import Path

from tests.helpers import call_main, fake_env, make_repo, runner
from tests.test_checks_e2e import (
    BUGGY,
    EXECUTOR_LINES,
    PROJECT,
    RUN_TESTS,
    SUITE_REL,
    TEST,
    ChecksBase,
    load,
)
from tests.test_confinement import bwrap_problem

SH_CLAUDE = """#!/bin/sh
case " $* " in *" --version "*) echo "2.1.197 (Claude Code)"; exit 0 ;; esac
cat >/dev/null
__ATTACK__
printf '%s\\n' '__EVENTS__'
"""
PASSING_TEST = ("import unittest\n\n\nclass AddTests(unittest.TestCase):\n"
                "    def test_add(self):\n        pass\n")
# The pyc of a passing test under the header of the protected one, for the python3 the check
# runs (the system's): a checked-hash pyc is valid while its source hashes the same.
MAKE_PYC = """import importlib.util, marshal, sys
source = sys.stdin.buffer.read()
body = marshal.dumps(compile(sys.argv[1], "test_calc.py", "exec"))
header = importlib.util.MAGIC_NUMBER + (3).to_bytes(4, "little")
sys.stdout.write(sys.implementation.cache_tag + " "
                 + (header + importlib.util.source_hash(source) + body).hex())
"""
SHOUT = "a" * 44 + "!"  # against ^(\w+\s?)+$ : about 2**44 ways to fail


def planted_pyc() -> tuple[str, bytes]:
    """(the pyc's path in the sandbox, its bytes), for the python3 on the check's PATH."""
    done = subprocess.run(["python3", "-c", MAKE_PYC, PASSING_TEST], input=TEST.encode(),
                          capture_output=True, timeout=60,
                          env={"PATH": os.pathsep.join(runner._CHECK_SYSTEM_PATH)})
    assert done.returncode == 0, done.stderr
    tag, data = done.stdout.decode().split()
    return f"calc/__pycache__/test_calc.{tag}.pyc", bytes.fromhex(data)


def suite_of(*checks: dict) -> dict:
    return {"skill_name": "demo", "evals": [
        {"id": "fix", "prompt": "Fix the bug in calc/calc.py so that its tests pass.",
         "checks": list(checks)}]}


def unlock(folder: Path) -> None:
    """Undo an executor's `chmod 000` so the test's folder can be removed (as non-root too)."""
    for path in [folder, *folder.rglob("*")] if folder.exists() else []:
        if path.is_dir() and not path.is_symlink():
            os.chmod(path, stat.S_IRWXU)


class ForgeryBase(ChecksBase):
    isolation = "none"

    def setUp(self) -> None:
        super().setUp()
        if self.isolation == "bwrap" and bwrap_problem():
            self.skipTest(f"needs working bubblewrap: {bwrap_problem()}")
        self.addCleanup(unlock, self.tmp.path / "sandboxes")

    def attack(self, checks: list[dict], spec: dict, shell: str,
               env_extra: dict[str, str] | None = None, path_prefix: str = "",
               extra_args: tuple[str, ...] = ()) -> dict:
        """Run the one without_skill cell whose executor does `spec` (unconfined: the Python
        fake) or `shell` (under bwrap: the sh fake); return its run.json."""
        self.root = make_repo(self.tmp.path, suite_of(*checks), PROJECT)
        self.workspace = self.tmp.path / "ws"
        script = {"executor": {"text": "Fixed, all tests pass.", **spec}}
        env = fake_env(self.tmp.path, script)
        if self.isolation == "bwrap":
            bin_dir = self.tmp.path / "sh-bin"
            bin_dir.mkdir()
            text = SH_CLAUDE.replace("__ATTACK__", shell).replace(
                "__EVENTS__", EXECUTOR_LINES.replace("\n", "' '"))
            (bin_dir / "claude").write_text(text, encoding="utf-8")
            (bin_dir / "claude").chmod(0o755)
            env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
        env.update(env_extra or {})
        env["PATH"] = path_prefix + env["PATH"]
        self.code, self.out, self.err = call_main(
            ["run", str(self.root / SUITE_REL), "--agent", "claude", "--workspace",
             str(self.workspace), "--config", "without_skill", "--timeout", "60",
             "--isolation", self.isolation, *extra_args], env)
        return load(self.cell("without_skill") / "run.json")

    def assert_failed(self, run: dict, name: str = "tests pass") -> dict:
        """The check ran and failed: the planted file changed nothing."""
        self.assertEqual(run["status"], "ok", (self.err, run.get("failure"), run["checks"]))
        [result] = [r for r in run["checks"]["results"] if r["name"] == name]
        self.assertFalse(result["passed"], result)
        return result

    def assert_unrun(self, run: dict, *said: str) -> None:
        """check_error, unscored, never a pass or a fail, with the reason."""
        self.assertEqual(self.code, 1, self.err)
        self.assertEqual(run["status"], "check_error", run["checks"])
        self.assertFalse(run["scored"])
        for text in said:
            self.assertIn(text, run["failure"]["detail"])
        self.assertFalse((self.cell("without_skill") / "grading.json").exists())


class ForgedRunChecks(ForgeryBase):
    """Item 1: the README's check is not passed with calc.py unchanged."""

    def test_a_planted_checked_hash_pyc_is_never_read(self) -> None:
        rel, data = planted_pyc()
        shell = (f"mkdir -p calc/__pycache__ && echo {base64.b64encode(data).decode()} "
                 f"| base64 -d > {rel}")
        run = self.attack([RUN_TESTS], {"shell_write_hex": {rel: data.hex()}}, shell)
        result = self.assert_failed(run)
        self.assertIn("exited 1 (expected 0)", result["evidence"])
        self.assertEqual(run["checks"]["planted_interpreter_files"], [])

    def test_a_module_that_shadows_the_standard_library_makes_the_check_unrun(self) -> None:
        shadow = "import sys; sys.exit(0)\n"
        run = self.attack([RUN_TESTS], {"shell_write_files": {"calc/unittest.py": shadow}},
                          "printf 'import sys; sys.exit(0)\\n' > calc/unittest.py")
        self.assert_unrun(run, "check 'tests pass' could not run", "calc/unittest.py",
                          "standard library")
        self.assertEqual(run["checks"]["planted_interpreter_files"], ["calc/unittest.py"])

    def test_a_package_that_takes_the_place_of_the_code_under_test_makes_it_unrun(self) -> None:
        # calc/calc/__init__.py is imported as `calc` before calc/calc.py: a fix that leaves
        # the file the suite checks unchanged.
        fixed = BUGGY.replace("a - b", "a + b")
        run = self.attack([RUN_TESTS], {"shell_write_files": {"calc/calc/__init__.py": fixed}},
                          "mkdir calc/calc && printf 'def add(a, b):\\n    return a + b\\n' "
                          "> calc/calc/__init__.py")
        self.assert_unrun(run, "calc/calc/__init__.py", "code under test")

    def test_a_python3_on_an_empty_path_entry_is_not_the_one_that_runs(self) -> None:
        fake_python = "#!/bin/sh\nexit 0\n"
        spec = {"shell_write_files": {"calc/python3": fake_python},
                "shell_chmod": {"calc/python3": "755"}}
        shell = "printf '#!/bin/sh\\nexit 0\\n' > calc/python3 && chmod 755 calc/python3"
        # the caller's PATH, with an empty entry first: `python3` is looked up in calc/ first
        run = self.attack([RUN_TESTS], spec, shell, path_prefix=os.pathsep)
        self.assertIn("exited 1 (expected 0)", self.assert_failed(run)["evidence"])

    def test_a_sitecustomize_on_the_callers_pythonpath_makes_the_check_unrun(self) -> None:
        hook = "import os; os._exit(0)\n"
        run = self.attack([RUN_TESTS], {"shell_write_files": {"calc/sitecustomize.py": hook}},
                          "printf 'import os; os._exit(0)\\n' > calc/sitecustomize.py",
                          {"PYTHONPATH": "."})
        self.assert_unrun(run, "calc/sitecustomize.py")

    def test_the_environment_is_the_runners_not_the_callers(self) -> None:
        probe = {"name": "environment", "run":
                 'test -z "${PYTHONPATH+set}${NODE_OPTIONS+set}${CALLER_SECRET+set}" && '
                 'test "$PYTHONNOUSERSITE" = 1 && test "$PYTHONDONTWRITEBYTECODE" = 1 && '
                 'test -n "$PYTHONPYCACHEPREFIX" && test ! -e "$PYTHONPYCACHEPREFIX" && '
                 'case ":$PATH:" in *::*|*:.:*) exit 1 ;; esac && '
                 'case "$PATH" in /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/*)'
                 ' exit 0 ;; esac; exit 1'}
        run = self.attack([probe], {}, "true", {
            "PYTHONPATH": ".", "NODE_OPTIONS": "--require ./x.js", "CALLER_SECRET": "s"},
            path_prefix=f"{os.pathsep}.{os.pathsep}")
        self.assertEqual(run["status"], "ok", run["checks"])
        self.assertTrue(run["checks"]["results"][0]["passed"], run["checks"]["results"][0])

    def test_the_readmes_named_test_module_ignores_a_test_file_the_executor_added(self) -> None:
        # Discovery (`python3 -m unittest` with no name) would import calc/test_a.py first,
        # and it ends the process with status 0: the README names the protected module.
        named = {**RUN_TESTS, "run": "cd calc && python3 -m unittest -q test_calc"}
        exits = "import os; os._exit(0)\n"
        run = self.attack([named], {"shell_write_files": {"calc/test_a.py": exits}},
                          "printf 'import os; os._exit(0)\\n' > calc/test_a.py")
        self.assertIn("exited 1 (expected 0)", self.assert_failed(run)["evidence"])

    def test_an_honest_fix_still_passes_with_test_files_of_its_own(self) -> None:
        # A test module the executor added (not a standard library name) is no reason to
        # refuse: the check runs and the fix passes.
        fixed = BUGGY.replace("a - b", "a + b")
        spec = {"shell_write_files": {"calc/calc.py": fixed,
                                      "calc/test_more.py": "import unittest\n"}}
        shell = ("printf 'def add(a, b):\\n    return a + b\\n' > calc/calc.py && "
                 "printf 'import unittest\\n' > calc/test_more.py")
        named = {**RUN_TESTS, "name": "named", "run": "cd calc && python3 -m unittest test_calc"}
        run = self.attack([RUN_TESTS, named], spec, shell)
        self.assertEqual(run["status"], "ok", run["checks"])
        self.assertEqual([r["passed"] for r in run["checks"]["results"]], [True, True])


@unittest.skipIf(bwrap_problem() is not None, f"needs working bubblewrap: {bwrap_problem()}")
class ForgedRunChecksConfined(ForgedRunChecks):
    isolation = "bwrap"


class UnstartedChecks(ForgeryBase):
    """Item 2: a check bubblewrap could not start is check_error, never bwrap's exit 1."""

    isolation = "bwrap"

    def test_a_sandbox_locked_with_chmod_000_leaves_the_check_unrun(self) -> None:
        expects_one = {"name": "fails as expected", "run": "false", "exit_code": 1}
        run = self.attack([expects_one], {"shell_chmod": {".": "000"}}, "chmod 000 .")
        if os.geteuid() != 0 and run["status"] == "check_error":
            return  # unprivileged, the runner itself cannot read it: unrun all the same
        self.assert_unrun(run, "check 'fails as expected' could not run",
                          "bubblewrap did not start it", "chdir")
        [result] = run["checks"]["results"]
        self.assertNotIn("passed", result)
        self.assertIsNone(result["returncode"])

    def test_a_command_that_ran_keeps_its_own_status(self) -> None:
        checks = [{"name": "one", "run": "exit 1", "exit_code": 1},
                  {"name": "killed", "run": "kill -9 $$", "exit_code": 137}]
        run = self.attack(checks, {}, "true")
        self.assertEqual(run["status"], "ok", run["checks"])
        self.assertEqual([(r["passed"], r["returncode"]) for r in run["checks"]["results"]],
                         [(True, 1), (True, 137)])


class RunawayPatterns(ForgeryBase):
    """Item 4: a suite's regular expression that backtracks for hours ends at its timeout."""

    def test_a_catastrophic_pattern_ends_at_the_checks_timeout(self) -> None:
        check = {"name": "one word per line", "file": "notes.txt",
                 "matches": r"^(\w+\s?)+$", "timeout": 2}
        started = time.monotonic()
        run = self.attack([check], {"shell_write_files": {"notes.txt": SHOUT}},
                          f"printf '{SHOUT}' > notes.txt")
        self.assertLess(time.monotonic() - started, 60)
        self.assert_unrun(run, "check 'one word per line' could not run",
                          "the pattern search did not end within 2 s")

    def test_the_deadline_ends_a_search_with_a_long_timeout(self) -> None:
        check = {"name": "one word per line", "file": "notes.txt",
                 "matches": r"^(\w+\s?)+$", "timeout": 3600}
        started = time.monotonic()
        run = self.attack([check], {"shell_write_files": {"notes.txt": SHOUT}}, "",
                          extra_args=("--deadline", "4"))
        self.assertLess(time.monotonic() - started, 60)
        self.assertEqual(run["status"], "cancelled", run["checks"])
        self.assertFalse(run["scored"])

    def test_a_pattern_on_the_answer_is_bounded_too(self) -> None:
        check = {"name": "shouted", "answer": "reply", "matches": r"^(\w+\s?)+$",
                 "timeout": 1}
        run = self.attack([check], {"text": SHOUT}, "true")
        self.assert_unrun(run, "the pattern search did not end within 1 s")

    def test_ordinary_patterns_still_match(self) -> None:
        checks = [{"name": "word", "file": "notes.txt", "matches": r"\bsecond\b"},
                  {"name": "absent", "file": "notes.txt", "matches": "^third"},
                  {"name": "reply", "answer": "reply", "matches": "(?i)fixed"}]
        run = self.attack(checks, {"shell_write_files": {"notes.txt": "first\nsecond\n"}},
                          "printf 'first\\nsecond\\n' > notes.txt")
        self.assertEqual(run["status"], "ok", run["checks"])
        self.assertEqual([r["passed"] for r in run["checks"]["results"]], [True, False, True])
        self.assertIn("'second'", run["checks"]["results"][0]["evidence"])


class ProtectedPermissions(ForgeryBase):
    """Item 12: a protected file's permission change is put back and listed, not only the
    execute bit git keeps."""

    def test_a_chmod_of_the_protected_test_is_listed(self) -> None:
        fixed = BUGGY.replace("a - b", "a + b")
        spec = {"shell_write_files": {"calc/calc.py": fixed},
                "shell_chmod": {"calc/test_calc.py": "666"}}
        run = self.attack([RUN_TESTS], spec, "")
        self.assertEqual(run["checks"]["protected"]["calc/test_calc.py"],
                         {"changed_by_executor": ["calc/test_calc.py"]})
        self.assertTrue(run["checks"]["results"][0]["passed"], run["checks"])  # put back


@unittest.skipIf(bwrap_problem() is not None, f"needs working bubblewrap: {bwrap_problem()}")
class ProcessLimit(ForgeryBase):
    """Item 12: each sandbox gets --max-processes, recorded, and where the kernel cannot hold
    it (a root runner) the record says why instead of claiming a limit."""

    isolation = "bwrap"
    # 40 sleepers at once; with --max-processes 16 the shell cannot fork them all
    SWARM = {"name": "swarm", "run": "i=0; while [ $i -lt 40 ]; do sleep 2 & i=$((i+1)); done; "
             "wait"}

    def run_swarm(self, *extra: str) -> dict:
        return self.attack([self.SWARM], {}, "true", extra_args=extra)

    def test_the_limit_is_set_and_recorded(self) -> None:
        run = self.run_swarm("--max-processes", "16")
        isolation = run["executor"]["isolation"]
        self.assertEqual(isolation["max_processes"], 16)
        manifest = load(self.workspace / "iteration-1" / "iteration_manifest.json")
        self.assertEqual(manifest["isolation"]["max_processes"], 16)
        [result] = run["checks"]["results"]
        if os.geteuid() == 0:  # the kernel exempts root: said, never claimed
            self.assertIn("runs as root", isolation["max_processes_reason"])
            self.assertIn("no process limit: the runner runs as root",
                          manifest["isolation"]["summary"])
            self.assertTrue(result["passed"], result)
        else:
            self.assertNotIn("max_processes_reason", isolation)
            self.assertFalse(result["passed"], result)
            self.assertIn("fork", result["stderr_tail"].lower())

    def test_no_limit_when_asked(self) -> None:
        run = self.run_swarm("--max-processes", "0")
        self.assertEqual(run["executor"]["isolation"]["max_processes"], 0)
        self.assertTrue(run["checks"]["results"][0]["passed"], run["checks"])


class PlantedModuleNames(unittest.TestCase):
    """Which added files a Python a check starts could load in place of what it expects."""

    def test_names(self) -> None:
        delivered = {"calc/calc.py", "calc/test_calc.py"}
        cases = {"calc/unittest.py": "unittest", "unittest.pyc": "unittest",
                 "calc/json/__init__.py": "json", "lib/os.cpython-311-x86_64-linux-gnu.so": "os",
                 "calc/sitecustomize.py": "sitecustomize", "usercustomize.pyc": "usercustomize",
                 "calc/calc.cpython-311-x86_64-linux-gnu.so": "calc", "calc/unittest": None,
                 "calc/helpers.py": None, "calc/test_more.py": None, "calc/test.py": None,
                 "calc/calc.pyc": None, "calc/os.txt": None, "notes/json.md": None,
                 "calc/__main__.py": None, "other/calc.so": None,
                 "calc/calc/__init__.py": "calc", "calc/other/__init__.py": None}
        for rel, module in cases.items():
            with self.subTest(rel=rel):
                self.assertEqual(runner._imported_as(rel, delivered), module)


if __name__ == "__main__":
    unittest.main()
