"""Grading: finding the verdict object, scoring the assertions, and the grader prompt."""

from __future__ import annotations

import json
import unittest

from tests.helpers import runner

ASSERTIONS = ["The reply is in English.", "It mentions item 1.", "It is polite."]


class ParseVerdictPayloadTest(unittest.TestCase):
    def test_structured_output_comes_first(self):
        structured = {"verdicts": [{"id": 1, "passed": True}]}
        text = '{"verdicts": [{"id": 1, "passed": false}]}'
        self.assertEqual(runner.parse_verdict_payload(structured, text), structured)

    def test_whole_text_as_json(self):
        text = '\n  {"verdicts": [{"id": 2, "passed": true, "evidence": "ok"}]}  \n'
        self.assertEqual(runner.parse_verdict_payload(None, text),
                         {"verdicts": [{"id": 2, "passed": True, "evidence": "ok"}]})

    def test_fenced_block_inside_prose(self):
        text = ('Here is my grading.\n```json\n{"verdicts": [{"id": 1, "passed": true}]}\n```\n'
                "Thanks.")
        self.assertEqual(runner.parse_verdict_payload(None, text),
                         {"verdicts": [{"id": 1, "passed": True}]})

    def test_object_embedded_in_prose_the_last_one_wins(self):
        text = ('Draft: {"verdicts": [{"id": 1, "passed": false}]} -- on reflection: '
                '{"verdicts": [{"id": 1, "passed": true, "evidence": "see {braces}"}]} end')
        self.assertEqual(runner.parse_verdict_payload(None, text),
                         {"verdicts": [{"id": 1, "passed": True, "evidence": "see {braces}"}]})

    def test_structured_output_without_verdicts_falls_back_to_the_text(self):
        text = '{"verdicts": [{"id": 1, "passed": true}]}'
        self.assertEqual(runner.parse_verdict_payload({"passed": True}, text),
                         {"verdicts": [{"id": 1, "passed": True}]})

    def test_legacy_expectations_shape_is_accepted(self):
        legacy = {"expectations": [{"text": "It is polite.", "passed": True, "evidence": "yes"}]}
        self.assertEqual(runner.parse_verdict_payload(None, json.dumps(legacy)), legacy)

    def test_no_verdict_list_gives_none(self):
        for structured, text in [(None, ""), (None, "All assertions pass."),
                                 ({"verdicts": "all"}, '{"verdicts": {"1": true}}'),
                                 (["verdicts"], "[1, 2]"), (None, None),
                                 (None, '{"verdicts": [unterminated')]:
            with self.subTest(structured=structured, text=text):
                self.assertIsNone(runner.parse_verdict_payload(structured, text))


class GradeAssertionsTest(unittest.TestCase):
    def grade(self, verdicts: list) -> dict:
        """The grading as grading.json holds it."""
        return runner.grade_assertions(ASSERTIONS, {"verdicts": verdicts}).to_json()

    def test_one_verdict_each_in_assertion_order(self):
        graded = self.grade([{"id": 3, "passed": True, "evidence": "polite"},
                             {"id": 1, "passed": True, "evidence": "english"},
                             {"id": 2, "passed": False, "evidence": "no item"}])
        self.assertEqual(graded["expectations"], [
            {"id": 1, "text": ASSERTIONS[0], "passed": True, "evidence": "english"},
            {"id": 2, "text": ASSERTIONS[1], "passed": False, "evidence": "no item"},
            {"id": 3, "text": ASSERTIONS[2], "passed": True, "evidence": "polite"},
        ])
        self.assertEqual(graded["summary"],
                         {"passed": 2, "failed": 1, "total": 3, "pass_rate": 2 / 3})
        self.assertEqual(graded["notes"], [])

    def test_a_missing_verdict_is_a_recorded_failure(self):
        graded = self.grade([{"id": 1, "passed": True}])
        self.assertEqual([e["passed"] for e in graded["expectations"]], [True, False, False])
        self.assertIn("no verdict", graded["expectations"][1]["evidence"])
        self.assertEqual(graded["summary"]["failed"], 2)
        self.assertEqual(graded["summary"]["total"], 3)

    def test_no_verdicts_at_all_fails_everything(self):
        graded = self.grade([])
        self.assertEqual(graded["summary"], {"passed": 0, "failed": 3, "total": 3,
                                             "pass_rate": 0.0})

    def test_ids_as_strings_are_read_and_noted(self):
        graded = self.grade([{"id": "1", "passed": True}, {"id": " 2 ", "passed": True},
                             {"id": 3, "passed": True}])
        self.assertEqual(graded["summary"]["passed"], 3)
        self.assertEqual(len(graded["notes"]), 2)
        self.assertIn('"1" was read as 1', graded["notes"][0])
        self.assertIn('" 2 " was read as 2', graded["notes"][1])

    def test_out_of_range_and_unusable_ids_are_ignored_and_noted(self):
        graded = self.grade([{"id": 0, "passed": True}, {"id": 4, "passed": True},
                             {"id": -1, "passed": True}, {"id": True, "passed": True},
                             {"id": "two", "passed": True}, {"id": 1.0, "passed": True},
                             {"passed": True}, "not an object",
                             {"id": 2, "passed": True}])
        self.assertEqual([e["passed"] for e in graded["expectations"]], [False, True, False])
        unknown = [n for n in graded["notes"] if n.startswith("ignored a verdict with unknown id")]
        # Repeated notes are capped: the first NOTES_PER_KIND, then one line with the count.
        self.assertEqual(len(unknown), runner._NOTES_PER_KIND)
        self.assertIn("... 3 more notes like the above not shown: 8 verdicts with an unknown id "
                      "were ignored in all", graded["notes"])

    def test_duplicates_are_noted_and_conflicts_fail(self):
        graded = self.grade([{"id": 1, "passed": True, "evidence": "a"},
                             {"id": 1, "passed": True, "evidence": "b"},
                             {"id": 2, "passed": True}, {"id": 2, "passed": False},
                             {"id": 3, "passed": True}])
        self.assertEqual([e["passed"] for e in graded["expectations"]], [True, False, True])
        self.assertIn("conflicting", graded["expectations"][1]["evidence"])
        self.assertIn("more than one verdict for assertion(s) [1, 2]", graded["notes"])

    def test_only_boolean_true_passes(self):
        graded = self.grade([{"id": 1, "passed": "true", "evidence": "said yes"},
                             {"id": 2, "passed": 1}, {"id": 3}])
        self.assertEqual([e["passed"] for e in graded["expectations"]], [False, False, False])
        self.assertIn("not a boolean", graded["expectations"][0]["evidence"])
        self.assertIn("said yes", graded["expectations"][0]["evidence"])

    def test_legacy_verdicts_match_by_text_ignoring_whitespace(self):
        payload = {"expectations": [
            {"text": "It  is\npolite.", "passed": True, "evidence": "kind words"},
            {"text": "The reply is in English.", "passed": True},
            {"text": "An assertion nobody asked for.", "passed": True}]}
        graded = runner.grade_assertions(ASSERTIONS, payload).to_json()
        self.assertEqual([e["passed"] for e in graded["expectations"]], [True, False, True])
        self.assertEqual(graded["expectations"][2]["evidence"], "kind words")
        self.assertEqual(len(graded["notes"]), 1)
        self.assertIn("matches no assertion", graded["notes"][0])

    def test_no_assertions_has_no_pass_rate(self):
        graded = runner.grade_assertions([], {"verdicts": [{"id": 1, "passed": True}]}).to_json()
        self.assertEqual(graded["summary"], {"passed": 0, "failed": 0, "total": 0,
                                             "pass_rate": None})


class GraderPromptTest(unittest.TestCase):
    def test_assertions_numbered_from_1_in_order_before_the_material(self):
        prompt = runner.build_grader_prompt("Plan it.", "My plan: step one.", None, False,
                                            ["First  claim.", "Second\nclaim.", "Third claim."])
        numbered = ["1. First claim.", "2. Second claim.", "3. Third claim."]
        positions = [prompt.index(line) for line in numbered]
        self.assertEqual(positions, sorted(positions))
        self.assertLess(positions[-1], prompt.index("My plan: step one."))
        self.assertNotIn("4. ", prompt)
        self.assertIn("Plan it.", prompt)
        self.assertNotIn("Written artifact", prompt)
        self.assertNotIn("was cut", prompt)

    def test_recorded_output_and_artifact_are_included(self):
        prompt = runner.build_grader_prompt("Plan it.", "Answer text.", "# Plan\n- step\n",
                                            False, ["It has a plan."])
        self.assertIn("Answer text.", prompt)
        self.assertIn("# Plan\n- step\n", prompt)
        self.assertLess(prompt.index("Answer text."), prompt.index("# Plan\n- step"))
        self.assertNotIn("was cut", prompt)

    def test_an_empty_artifact_is_still_shown(self):
        prompt = runner.build_grader_prompt("t", "o", "", False, ["a"])
        self.assertIn("Written artifact", prompt)

    def test_truncation_is_noted(self):
        long_output = "x" * (runner.OUTPUT_CAP_CHARS + 10)
        prompt = runner.build_grader_prompt("t", long_output, "plan", True, ["a"])
        self.assertIn("x" * runner.OUTPUT_CAP_CHARS, prompt)
        self.assertNotIn("x" * (runner.OUTPUT_CAP_CHARS + 1), prompt)
        self.assertIn(f"recorded output was cut at {runner.OUTPUT_CAP_CHARS}", prompt)
        self.assertIn(f"artifact was cut at {runner.ARTIFACT_CAP_CHARS}", prompt)
