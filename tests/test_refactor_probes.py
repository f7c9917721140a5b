"""Hostile probes of the places issue 35's refactoring rewrote, as an executor would make them.

Each test pins one place round 9 rewrote: the protected-path comparison (permission bits read
by walk_unfollowed), the trigger watch's chunked line reader, the grader vote loop, the argv
tables per role and the `process` block benchmark.json now reads as a TraceSummary. Each would
fail if the behaviour it pins broke: a tampered run must be named, a partial line never read,
a missing verdict never a pass, a prompt never an option, a forged block never verified.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import sys
import threading
import types
import unittest
from pathlib import Path
from unittest import mock

from tests.helpers import TempDir, git, runner
from tests.test_check_forgery import ForgeryBase
from tests.test_checks_e2e import RUN_TESTS
from tests.test_confinement import bwrap_problem
from tests.test_report_verification import IterationTest

GROUPS = runner.ProcessGroups()


class ProtectedTreeAttacks(unittest.TestCase):
    """protected_changes against each way an executor can change a protected file without
    changing what git would call its content: every one is named."""

    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.repo = self.tmp.path / "repo"
        (self.repo / "p" / "sub").mkdir(parents=True)
        (self.repo / "p" / "t.py").write_text("x\n")
        (self.repo / "p" / "sub" / "u.py").write_text("u\n")
        (self.repo / "other.txt").write_text("x\n")
        git(self.repo, "init", "-q")
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-qm", "delivered")
        self.commit = git(self.repo, "rev-parse", "HEAD").strip()
        self.modes = runner.permission_bits(self.repo, ["p"])

    def changed(self) -> list[str]:
        return runner.protected_changes(self.repo, self.repo / ".git", self.commit, "p",
                                        self.modes, GROUPS)

    def test_every_permission_change_is_named(self) -> None:
        target = self.repo / "p" / "t.py"
        for mode in (0o755, 0o444, 0o4644, 0o2644, 0o1644, 0o000, 0o666):
            with self.subTest(mode=oct(mode)):
                target.chmod(mode)
                self.assertEqual(self.changed(), ["p/t.py"])
        target.chmod(0o644)
        self.assertEqual(self.changed(), [])

    def test_a_file_replaced_by_a_link_a_folder_or_a_fifo_is_named(self) -> None:
        target = self.repo / "p" / "t.py"
        for kind in ("outside link", "link to a same-content copy", "folder", "fifo",
                     "hard link to a same-content file"):
            with self.subTest(kind):
                target.unlink()
                if kind == "outside link":
                    target.symlink_to("/etc/passwd")
                elif kind == "link to a same-content copy":
                    (self.repo / "copy").write_text("x\n")
                    target.symlink_to(self.repo / "copy")
                elif kind == "folder":
                    target.mkdir()
                elif kind == "fifo":
                    os.mkfifo(target)
                if kind != "hard link to a same-content file":
                    self.assertEqual(self.changed(), ["p/t.py"])
                else:  # same bytes, same bits: nothing to name, and restore detaches it
                    os.link(self.repo / "other.txt", target)
                    self.assertEqual(self.changed(), [])
                runner.restore_delivered(self.repo, self.repo / ".git", self.commit, "p",
                                         GROUPS)
                self.assertTrue(stat.S_ISREG(os.lstat(target).st_mode))
                self.assertNotEqual(os.lstat(target).st_ino,
                                    os.lstat(self.repo / "other.txt").st_ino)
                self.assertEqual(self.changed(), [])

    def test_a_linked_subfolder_is_named_not_followed(self) -> None:
        shutil.rmtree(self.repo / "p" / "sub")
        (self.repo / "p" / "sub").symlink_to(self.repo)  # a loop, if it were followed
        self.assertEqual(self.changed(), ["p/sub", "p/sub/u.py"])

    def test_a_file_1500_folders_down_is_named(self) -> None:
        # without bubblewrap too: DeepTrees in test_red_team needs it
        self.assertEqual(self._plant_chain("d", 1500), [])

    @unittest.expectedFailure  # round 9 finding: walk_unfollowed skips ENAMETOOLONG folders
    def test_a_file_deeper_than_path_max_is_named(self) -> None:
        # 40 folders of 200 characters: past PATH_MAX (4096), where scandir by path fails
        self.assertEqual(self._plant_chain("d" * 200, 40), [])

    @(unittest.expectedFailure if sys.version_info < (3, 13) else lambda test: test)
    def test_a_chain_deeper_than_path_max_and_the_recursion_limit_is_removed(self) -> None:
        # round 9 finding: rmtree recurses out before 3.13 and remove_tree's fallback walks by
        # path, which ENAMETOOLONG stops: restore_delivered raises (the check is unrun, never
        # a pass) and the cell's sandbox stays on disk with `removed: false`, unflagged
        self._plant_chain("ddd", 1500)
        runner.remove_tree(self.repo / "p")
        self.assertFalse(os.path.lexists(self.repo / "p"))

    def _plant_chain(self, name: str, depth: int) -> list[str]:
        """A file `depth` folders named `name` below p/, made by relative steps as a shell
        would; returns what of it protected_changes missed."""
        folder = os.open(self.repo / "p", os.O_RDONLY)
        try:
            for _ in range(depth):
                os.mkdir(name, dir_fd=folder)
                below = os.open(name, os.O_RDONLY, dir_fd=folder)
                os.close(folder)
                folder = below
            os.close(os.open("x", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=folder))
        finally:
            os.close(folder)
        self.addCleanup(_remove_deep, self.repo / "p")
        changed = self.changed()
        expected = "p/" + "/".join([name] * depth) + "/x"
        return [] if changed == [expected] else [expected]


def _remove_deep(top: Path) -> None:
    """Remove a chain too deep for paths (rmtree walks by descriptors from 3.13 on only):
    each step lifts the chain's second folder into the first one's place."""
    if not top.is_dir():
        return
    for name in os.listdir(top):
        chain = top / name
        while chain.is_dir() and not chain.is_symlink():
            below = [n for n in os.listdir(chain) if (chain / n).is_dir()]
            if not below:
                break
            lifted = top / f"{name}.lifted"
            os.rename(chain / below[0], lifted)
            runner.remove_tree(chain)
            os.rename(lifted, chain)
        runner.remove_tree(chain)


# The executor's own python builds the chain by descriptors: sh's cd stops at PATH_MAX.
DEEP_CHAIN = ("python3 -c 'import os\nf = os.open(\".\", os.O_RDONLY)\nfor _ in range(1500):\n"
              " os.mkdir(\"ddd\", dir_fd=f); g = os.open(\"ddd\", os.O_RDONLY, dir_fd=f); "
              "os.close(f); f = g\nos.close(os.open(\"deep.txt\", os.O_WRONLY | os.O_CREAT, "
              "0o644, dir_fd=f))'")


@unittest.skipIf(bwrap_problem() is not None, f"needs working bubblewrap: {bwrap_problem()}")
class PathMaxChainInAProtectedFolder(ForgeryBase):
    """A 1,500-deep chain whose paths pass PATH_MAX, planted in a protected folder by a
    confined executor: never a pass, never an internal error, whatever the Python."""

    isolation = "bwrap"

    def test_the_cell_is_never_scored_as_a_pass(self) -> None:
        self.addCleanup(lambda: [_remove_deep(p) for p in (self.tmp.path / "sandboxes").glob("*")])
        fixed = "def add(a, b):\n    return a + b\n"
        run = self.attack([{**RUN_TESTS, "protect": ["calc"]}], {},
                          f"printf '{fixed}' > calc/calc.py && cd calc && {DEEP_CHAIN}")
        self.assertEqual(self.code, 1, self.err[-3000:])
        if sys.version_info < (3, 13):  # remove_tree cannot remove the chain: restore fails
            self.assertEqual(run["status"], "check_error", run.get("failure"))
            self.assertIn("protected paths could not be restored", run["checks"]["unrun"])
        else:  # put back as delivered; the planted fix's check ran on the delivered tree
            self.assertEqual(run["status"], "ok", run.get("failure"))
        self.assertFalse(any(r["passed"] for r in run["checks"]["results"]), run["checks"])


GEMINI_DECIDES = (json.dumps({"type": "tool_use", "tool_name": "activate_skill",
                              "parameters": {"name": "demo"}})).encode()
QUIET = b'{"type": "message", "content": "thinking"}'


def watch_feeding(chunks: list[bytes]) -> tuple[str, int | None]:
    """The watch's reason after `chunks`, and how many bytes had been fed when it decided."""
    watch = runner._trigger_watch(runner.PROVIDERS["gemini"](), "demo")
    fed, when = 0, None
    for chunk in chunks:
        watch.feed(chunk)
        fed += len(chunk)
        if watch.reason and when is None:
            when = fed
    return watch.reason, when


class TriggerWatchChunks(unittest.TestCase):
    """The watch decides exactly when the deciding line is complete, wherever the chunks
    split the stream, whatever long line, CRLF, NUL or bad UTF-8 surrounds it."""

    CAP = runner._TRIGGER_WATCH_LINE_CAP

    def huge(self, size: int) -> bytes:
        line = b'{"type": "message", "content": "' + b"x" * size
        return line[:size] + b'"}' if size > 40 else line

    def assert_decides_at(self, stream: bytes, splits: list[int], end: int) -> None:
        for cut in splits:
            for second in (cut, min(cut + 1, len(stream)), min(cut + 4096, len(stream))):
                chunks = [c for c in (stream[:cut], stream[cut:second], stream[second:]) if c]
                reason, when = watch_feeding(chunks)
                first_after = next(b for b in (cut, second, len(stream)) if b >= end)
                self.assertTrue(reason.startswith("activated: gemini's skill tool"),
                                (cut, second, reason))
                self.assertEqual(when, first_after, (cut, second))

    def test_splits_around_a_huge_line_before_and_after_the_event(self) -> None:
        huge = self.huge(5 << 20)
        for eol in (b"\n", b"\r\n"):
            for order in ("before", "after"):
                with self.subTest(eol=eol, order=order):
                    parts = ([huge, GEMINI_DECIDES, QUIET] if order == "before"
                             else [QUIET, GEMINI_DECIDES, huge])
                    # after the event, the huge line is still arriving when the watch decides
                    stream = eol.join(parts) + (eol if order == "before" else b"")
                    start = stream.index(GEMINI_DECIDES)
                    end = start + len(GEMINI_DECIDES) + len(eol)
                    near = {*range(start - 6, start + 6), *range(end - 6, end + 6),
                            self.CAP - 1, self.CAP, self.CAP + 1, self.CAP + 2}
                    self.assert_decides_at(stream, sorted(c for c in near
                                                          if 0 < c < len(stream)), end)

    def test_a_deciding_line_of_exactly_the_cap_is_read(self) -> None:
        pad = self.CAP - len(GEMINI_DECIDES) - len(b', "pad": ""')
        line = GEMINI_DECIDES[:-1] + b', "pad": "' + b"p" * pad + b'"}'
        self.assertEqual(len(line), self.CAP)
        stream = QUIET + b"\n" + line + b"\n"
        end = len(stream)
        for cut in (1, len(QUIET) + 1, end - 2, end - 1):
            reason, when = watch_feeding([stream[:cut], stream[cut:]])
            self.assertTrue(reason.startswith("activated"), cut)
            self.assertEqual(when, end)
        # one byte more, left waiting for its end, is a line the watch does not read
        longer = stream[:-1] + b" \n"
        self.assertEqual(watch_feeding([longer[:-1], longer[-1:]])[0], "")
        self.assertTrue(watch_feeding([longer[:-2], longer[-2:]])[0].startswith("activated"))

    def test_the_tail_of_a_dropped_line_never_decides(self) -> None:
        # the line's start went when it passed the cap; its end alone is a deciding event
        tail = GEMINI_DECIDES + b"\n"
        for head in (b"x" * (self.CAP + 1), b'{"type": "message", "content": "' + b"x" * self.CAP):
            reason, _ = watch_feeding([head, tail, QUIET + b"\n"])
            self.assertEqual(reason, "")
            # and the line after it is read again
            self.assertTrue(watch_feeding([head, tail, tail])[0].startswith("activated"))

    def test_a_line_never_decides_before_its_end(self) -> None:
        stream = QUIET + b"\n" + GEMINI_DECIDES + b"\n"
        for cut in range(1, len(stream)):
            reason, when = watch_feeding([stream[:cut], stream[cut:]])
            self.assertEqual(when, len(stream), cut)

    def test_nul_and_bad_utf8_lines_decide_nothing_and_do_not_swallow_the_next(self) -> None:
        garbage = [b"\x00" * 70, b'{"type": "tool_use", "tool_name": "x\x00"}',
                   b'{"type": "tool_use", "tool_name": "\xff\xfe\xc0"',
                   b"\xe2\x82", b'{"type": "message", "content": "\xe2\x82"}']
        stream = b"\n".join([*garbage, GEMINI_DECIDES]) + b"\n"
        for cut in range(1, len(stream), 7):
            reason, when = watch_feeding([stream[:cut], stream[cut:]])
            self.assertTrue(reason.startswith("activated"), (cut, reason))
            self.assertEqual(when, len(stream))
        # bad UTF-8 in a field the decision does not read: decided, as the final parse does
        odd = GEMINI_DECIDES[:-1] + b', "note": "\xff\xc0"}\n'
        self.assertTrue(watch_feeding([odd])[0].startswith("activated"))


def _call(returncode: int = 0) -> runner.ProcessCall:
    return runner.ProcessCall(("claude",), "/g", "prompt", (), returncode, 1.0, False, False,
                              None, 0, False, False)


class GraderVoteLoop(unittest.TestCase):
    """_run_grader_step with scripted grader replies: each vote's failure is recorded as the
    cell's, and no missing or malformed verdict turns into a pass."""

    ASSERTIONS = ["It names item one.", "It names item two."]

    def grade(self, replies: list[tuple[runner.ProcessCall, runner.AgentReply]],
              runs: int) -> runner.RunRecord:
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        suite = types.SimpleNamespace(assertions_for=lambda case: list(self.ASSERTIONS),
                                      checks_for=lambda case: [])
        ctx = types.SimpleNamespace(suite=suite, options=types.SimpleNamespace(grader_runs=runs),
                                    groups=types.SimpleNamespace(cancelled=threading.Event()))
        cell = types.SimpleNamespace(case=types.SimpleNamespace(prompt="Do it."),
                                     run_dir=tmp.path)
        record = runner.RunRecord("E01", "E01", "with_skill", 1)
        answer = types.SimpleNamespace(exchanges=[], text="done", artifact=None,
                                       artifact_truncated=False)
        given = iter(replies)
        with mock.patch.object(runner, "_call_grader", lambda *args, **kw: next(given)):
            runner._run_grader_step(ctx, cell, None, record, answer)
        self.assertIsNone(next(given, None), "every scripted grader was called")
        return record

    @staticmethod
    def verdicts(*items: object) -> tuple[runner.ProcessCall, runner.AgentReply]:
        return _call(), runner.AgentReply(True, structured={"verdicts": list(items)})

    def test_a_failed_second_vote_of_three_leaves_the_cell_ungraded(self) -> None:
        both = self.verdicts({"id": 1, "passed": True}, {"id": 2, "passed": True})
        failed = (_call(1), runner.AgentReply(False, failure="exited 1"))
        record = self.grade([both, failed], 3)  # the third grader is never started
        self.assertEqual(record.status, "grader_failed")
        self.assertEqual(record.failure.detail, "grader 2 of 3: exited 1")
        self.assertIsNone(record.grading)
        self.assertEqual([(c.vote, c.status) for c in record.grader_calls],
                         [(1, "ok"), (2, "grader_failed")])
        self.assertEqual(record.grader.returncode, 1)

    def test_a_third_vote_without_a_verdict_list_leaves_the_cell_ungraded(self) -> None:
        both = self.verdicts({"id": 1, "passed": True}, {"id": 2, "passed": True})
        prose = (_call(), runner.AgentReply(True, text="All good, both pass."))
        record = self.grade([both, both, prose], 3)
        self.assertEqual(record.status, "grader_unparseable")
        self.assertTrue(record.failure.detail.startswith("grader 3 of 3: "))
        self.assertIsNone(record.grading)
        self.assertEqual(record.grader_calls[-1].status, "grader_unparseable")

    def test_malformed_verdict_lists_never_pass_an_assertion_they_do_not_pass(self) -> None:
        forms = {
            "assertion 2 missing": ([{"id": 1, "passed": True}], [True, False]),
            "an extra id": ([{"id": 1, "passed": True}, {"id": 2, "passed": True},
                             {"id": 3, "passed": True}], [True, True]),
            "a duplicate that disagrees": ([{"id": 1, "passed": True}, {"id": 1, "passed": False},
                                            {"id": 2, "passed": True}], [False, True]),
            "non-boolean verdicts": ([{"id": 1, "passed": "true"}, {"id": 2, "passed": 1}],
                                     [False, False]),
            "ids that are no integers": ([{"id": True, "passed": True}, {"id": 2.0, "passed": True},
                                          {"id": 0, "passed": True}], [False, False]),
            "no verdicts": ([], [False, False]),
            "entries that are no objects": (["1", 1, None, [1, True]], [False, False]),
        }
        for name, (items, expected) in forms.items():
            with self.subTest(name):
                record = self.grade([self.verdicts(*items)], 1)
                self.assertEqual(record.status, "ok")
                self.assertEqual([v.passed for v in record.grading.expectations], expected)

    def test_a_vote_missing_a_verdict_counts_against_in_the_majority(self) -> None:
        one = self.verdicts({"id": 1, "passed": True})
        both = self.verdicts({"id": 1, "passed": True}, {"id": 2, "passed": True})
        record = self.grade([one, one, both], 3)
        self.assertEqual([(v.passed, v.majority.votes_passed) for v in record.grading.expectations],
                         [(True, 3), (False, 1)])


HOSTILE = "--HOSTILE-dangerously-skip-permissions\n-HOSTILE-c sandbox_mode=full\n--HOSTILE-yolo"
SESSIONS = {"claude": "12345678-1234-1234-1234-123456789abc",
            "codex": "12345678-1234-1234-1234-123456789abc",
            "gemini": "12345678-1234-1234-1234-123456789abc", "opencode": "ses_abc123"}


class ArgvPerRole(unittest.TestCase):
    """The argv tables of all four agents: the prompt, the executor's answer and the user's
    message only ever go on stdin, and no role's argv carries another role's options."""

    def invocations(self, name: str) -> dict[str, runner.Invocation]:
        provider = runner.PROVIDERS[name](["x.y=1"] if runner.PROVIDERS[name].accepts_settings
                                          else None)
        first = provider.conversation_invocation(
            provider.executor_invocation(HOSTILE, Path("/sb"), "m-exec"))
        return {
            "executor": provider.executor_invocation(HOSTILE, Path("/sb"), "m-exec"),
            "installed": provider.installed_invocation(
                provider.executor_invocation(HOSTILE, Path("/sb"), "m-exec")),
            "next turn": provider.next_turn_invocation(first, SESSIONS[name], HOSTILE),
            "grader": provider.grader_invocation(HOSTILE, Path("/gd"), "m-grade",
                                                 Path("/gd/schema.json"), Path("/gd/last.txt")),
            "user": provider.user_invocation(HOSTILE, Path("/ud"), "m-user"),
        }

    def test_untrusted_text_is_stdin_only(self) -> None:
        for name in runner.PROVIDERS:
            for role, invocation in self.invocations(name).items():
                with self.subTest(agent=name, role=role):
                    self.assertEqual(invocation.stdin_text, HOSTILE)
                    self.assertFalse([arg for arg in invocation.argv if "HOSTILE" in arg])

    def test_no_role_carries_another_roles_options(self) -> None:
        grader_only = {"--json-schema", "--output-schema", "--output-last-message",
                       "skill-eval-grader", "skill-eval-verdict", "m-grade"}
        user_only = {"skill-eval-user", "m-user"}
        executor_only = {"--allowedTools", "--permission-mode", "workspace-write", "yolo",
                         "m-exec"}
        for name in runner.PROVIDERS:
            calls = self.invocations(name)
            for role, invocation in calls.items():
                others = {"grader": executor_only | user_only, "user": executor_only | grader_only
                          }.get(role, grader_only | user_only)
                with self.subTest(agent=name, role=role):
                    self.assertFalse(set(invocation.argv) & others, invocation.argv)
                    self.assertTrue(
                        any(own in invocation.argv for own in
                            {"grader": grader_only, "user": user_only}.get(role, executor_only)),
                        invocation.argv)

    def test_the_executors_home_has_no_grader_or_user_prompt(self) -> None:
        for name in ("gemini", "opencode"):
            provider = runner.PROVIDERS[name]()
            for role in ("executor", "grader", "user"):
                with self.subTest(agent=name, role=role):
                    tmp = TempDir()
                    self.addCleanup(tmp.cleanup)
                    home = tmp.path / "home"
                    home.mkdir()
                    env = provider.prepare_home(home, {"HOME": str(home)}, role, "m", str(home),
                                                {"HOME": str(tmp.path / "user")})
                    written = "".join(p.read_text() for p in sorted(home.rglob("*"))
                                      if p.is_file())
                    for other, text in runner._SYSTEM_PROMPTS.items():
                        self.assertEqual(text.strip()[:40] in written
                                         or text.strip()[:40] in json.dumps(written),
                                         other == role, other)
                    self.assertEqual("GEMINI_SYSTEM_MD" in env, name == "gemini"
                                     and role != "executor")
                    self.assertEqual("skill-eval-verdict" in written, name == "gemini"
                                     and role == "grader")


class ForgedProcessBlock(IterationTest):
    """benchmark.json's runs[].process read as a TraceSummary: a wrong kind is refused where it
    is (exit 2), a right kind with another value is results_modified (exit 1)."""

    def test_forged_process_keys(self) -> None:
        code, iteration = self.iteration()
        self.assertEqual(code, 0)
        path = iteration / "benchmark.json"
        pristine = path.read_text(encoding="utf-8")
        start = pristine.index('"process": {') + len('"process": {')
        refused = {"cli": "5", "cut": '"yes"', "unreported": "[1]",
                   "skill_activations": '{"value": 1}', "actions": "1e999"}
        refused_nested = ('"unreported": {"a": {"b": 1}}', "runs[0].process.unreported.a")
        changed = {"cli": '"' + "c" * 3_000_000 + '"', "cut": "true",
                   "unreported": '{"files_read": "not reported"}', "skill_activations": "3",
                   "absent": '"no trace"'}
        cases = [(f'"{key}": {value}', f"runs[0].process.{key}", 2)
                 for key, value in refused.items()]
        cases += [(refused_nested[0], refused_nested[1], 2)]
        cases += [(f'"{key}": {value}', "", 1) for key, value in changed.items()]
        # more digits than int() converts (the message differs by Python version)
        cases += [('"skill_activations": ' + "7" * 5000, "benchmark.json", 2)]
        for member, named, expected in cases:
            with self.subTest(member[:40]):
                text = pristine
                key = member.split(":")[0]
                text = re.sub(r'("process": \{[^{}]*?)\s*' + re.escape(key) + r': [^,\n}]+,?',
                              r"\1", text, count=1)
                path.write_text(text[:start] + member + ", " + text[start:], encoding="utf-8")
                code, out, err = self.report(iteration)
                self.assertEqual(code, expected, out + err[-2000:])
                if expected == 2:
                    self.assertIn(named, err)
                    self.assertIn("benchmark.json", err)
                else:
                    page = (iteration / "benchmark.md").read_text(encoding="utf-8")
                    self.assertIn("results_modified", page)
        path.write_text(pristine, encoding="utf-8")
        self.assertEqual(self.report(iteration)[0], 0)


if __name__ == "__main__":
    unittest.main()
