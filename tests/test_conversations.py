"""Conversations (issue 36): `turns` and `user` in a suite, and the fakes' session contract.

Validation is quick and runs in the unit tier; the fakes' sessions are in
tests/test_conversation_fakes.py and the runs through the runner in
tests/test_conversations_e2e.py.
"""

from __future__ import annotations

import json
import unittest
from pathlib import Path

from tests.helpers import TempDir, call_main, demo_suite, make_repo, runner


def suite_with(**case_keys) -> dict:
    suite = demo_suite(1)
    suite["evals"][0].update(case_keys)
    return suite


class ConversationValidationTests(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)

    def repo(self, suite: dict) -> Path:
        base = self.tmp.path / str(len(list(self.tmp.path.iterdir())))
        base.mkdir()
        return make_repo(base, suite)

    def validate(self, suite: dict) -> tuple[int, dict]:
        root = self.repo(suite)
        code, out, _ = call_main(["validate", str(root / "evals/demo/evals.json"), "--json"])
        return code, json.loads(out)

    def errors_at(self, suite: dict) -> dict[str, dict]:
        code, report = self.validate(suite)
        self.assertEqual(code, 2, report)
        for error in report["errors"]:
            self.assertTrue(error["fix"], error)
            self.assertEqual(error["case_id"], "E01", error)
        return {e["json_path"]: e for e in report["errors"]}

    def test_turns_and_user_are_read_into_the_case(self) -> None:
        root = self.repo(suite_with(turns=["Use Python.", "Yes, go ahead."]))
        loaded = runner.load_suite(root / "evals/demo/evals.json", root)
        case = loaded.suite.cases[0]
        self.assertEqual(case.turns, ["Use Python.", "Yes, go ahead."])
        self.assertIsNone(case.user)
        self.assertEqual(case.most_turns, 3)

    def test_a_user_gets_the_default_max_turns(self) -> None:
        persona = {"persona": "A shop owner.", "goal": "A weekly total."}
        root = self.repo(suite_with(user=persona))
        case = runner.load_suite(root / "evals/demo/evals.json", root).suite.cases[0]
        self.assertEqual(case.user, runner.SimulatedUser("A shop owner.", "A weekly total.",
                                                         runner.DEFAULT_USER_MAX_TURNS))
        self.assertEqual(case.most_turns, runner.DEFAULT_USER_MAX_TURNS)
        self.assertEqual(case.turns, [])

    def test_a_valid_conversation_validates(self) -> None:
        code, report = self.validate(suite_with(
            user={"persona": "p", "goal": "g", "max_turns": runner.MAX_CONVERSATION_TURNS}))
        self.assertEqual(code, 0, report)

    def test_both_keys_are_refused(self) -> None:
        errors = self.errors_at(suite_with(turns=["a"], user={"persona": "p", "goal": "g"}))
        self.assertIn("both 'turns' and 'user'", errors["evals[0].user"]["message"])

    def test_turns_must_be_a_list_of_non_empty_strings(self) -> None:
        for value, path, said in (
                ("Use Python.", "evals[0].turns", "not a string"),
                ([], "evals[0].turns", "not an empty list"),
                (["ok", 3], "evals[0].turns[1]", "not a number"),
                (["ok", "  "], "evals[0].turns[1]", "not an empty string")):
            with self.subTest(value=value):
                errors = self.errors_at(suite_with(turns=value))
                self.assertEqual(list(errors), [path])
                self.assertIn(said, errors[path]["message"])

    def test_turns_have_a_bound(self) -> None:
        most = runner.MAX_CONVERSATION_TURNS - 1
        self.assertEqual(self.validate(suite_with(turns=["m"] * most))[0], 0)
        errors = self.errors_at(suite_with(turns=["m"] * (most + 1)))
        self.assertIn(f"at most {most} follow the prompt", errors["evals[0].turns"]["message"])

    def test_user_fields_are_checked(self) -> None:
        errors = self.errors_at(suite_with(user={"persona": "", "max_turns": 11}))
        self.assertEqual(sorted(errors), ["evals[0].user.goal", "evals[0].user.max_turns",
                                          "evals[0].user.persona"])
        self.assertIn("is missing", errors["evals[0].user.goal"]["message"])
        self.assertIn("from 2 to 10, not 11", errors["evals[0].user.max_turns"]["message"])
        for bad in (1, 2.5, True, "3"):
            with self.subTest(max_turns=bad):
                errors = self.errors_at(suite_with(
                    user={"persona": "p", "goal": "g", "max_turns": bad}))
                self.assertEqual(list(errors), ["evals[0].user.max_turns"])
        self.assertEqual(list(self.errors_at(suite_with(user="a shop owner"))),
                         ["evals[0].user"])

    def test_a_slip_in_a_user_key_is_an_error(self) -> None:
        errors = self.errors_at(suite_with(user={"persona": "p", "goal": "g", "max_turn": 3}))
        self.assertIn("did you mean 'max_turns'", errors["evals[0].user.max_turn"]["fix"])

    def test_a_slip_in_the_case_key_is_an_error(self) -> None:
        errors = self.errors_at(suite_with(turn=["a"]))
        self.assertIn("did you mean 'turns'", errors["evals[0].turn"]["fix"])




if __name__ == "__main__":
    unittest.main()
