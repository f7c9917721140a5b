"""The core knows no agent by name: only the adapters (Provider subclasses) may.

An agent's name (a registered provider name) may appear in a string literal only inside an
adapter class or a module-level helper of the providers chapter; nowhere may code compare
`.agent`/`.name` with a string literal. Adding an agent is one adapter class and its tests.
"""

from __future__ import annotations

import ast
import functools
import re
import unittest

from tests.helpers import parsed, runner, runner_source, walked

SOURCE = runner_source()
TREE = parsed(SOURCE)
BANNER = re.compile(r"^# ==== (.+?) =+$")


@functools.cache
def chapter_by_line() -> tuple[str, ...]:
    """The chapter of each line of the runner (index 0 is line 1; "" before the first
    banner), worked out in one pass."""
    chapters, name = [], ""
    for line in SOURCE.splitlines():
        name = match.group(1) if (match := BANNER.match(line)) else name
        chapters.append(name)
    return tuple(chapters)


def chapter_of(line: int) -> str:
    return chapter_by_line()[line - 1]


@functools.cache
def adapter_lines() -> frozenset[int]:
    """Lines of Provider subclasses (the adapters) and the providers chapter's helpers."""
    lines: set[int] = set()
    for node in TREE.body:
        if chapter_of(node.lineno) != "providers":
            continue
        is_base = isinstance(node, ast.ClassDef) and node.name == "Provider"
        if not is_base:
            lines.update(range(node.lineno, node.end_lineno + 1))
    return frozenset(lines)


@functools.cache
def docstring_nodes() -> frozenset[int]:
    found = set()
    for node in walked(TREE):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return frozenset(found)


class AgentNeutralCoreTest(unittest.TestCase):
    names = sorted(runner.PROVIDERS)

    def test_the_registry_holds_every_adapter(self) -> None:
        self.assertEqual(self.names, ["claude", "codex", "gemini", "opencode"])

    def literal_offenders(self, source_tree: ast.AST, allowed: set[int]) -> list[str]:
        pattern = re.compile(r"\b(" + "|".join(map(re.escape, self.names)) + r")\b", re.I)
        docs = docstring_nodes() if source_tree is TREE else set()
        offenders = []
        for node in walked(source_tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docs and node.lineno not in allowed
                    and pattern.search(node.value)):
                offenders.append(f"line {node.lineno}: {node.value[:60]!r}")
        return offenders

    def test_no_agent_name_outside_the_adapters(self) -> None:
        self.assertEqual(self.literal_offenders(TREE, adapter_lines()), [])

    def test_no_comparison_of_an_agent_name_with_a_literal(self) -> None:
        self.assertEqual(comparisons_with_literal_agent(TREE, adapter_lines()), [])

    def test_the_checks_catch_a_planted_name_test(self) -> None:
        planted = ast.parse('def f(options):\n    if options.agent == "gemini":\n        '
                            'return 1\n    return "codex" in options.agent\n')
        self.assertEqual(len(comparisons_with_literal_agent(planted, set())), 2)
        self.assertEqual(len(self.literal_offenders(planted, set())), 2)

    def test_adapters_declare_their_folders_and_session_variables(self) -> None:
        for name, kind in runner.PROVIDERS.items():
            with self.subTest(agent=name):
                self.assertTrue(kind.state_dirs)
                self.assertTrue(kind.session_vars)
                self.assertLessEqual(set(kind.state_dirs), runner.EXCLUDED_DIR_NAMES)
                self.assertLessEqual(set(kind.state_dirs), runner.FIXTURE_FORBIDDEN_DIR_NAMES)
                self.assertLessEqual(set(kind.session_vars), runner.AGENT_SESSION_VARS)


def comparisons_with_literal_agent(tree: ast.AST, allowed: set[int]) -> list[str]:
    """A comparison with an agent's name as a literal (`x == "gemini"`, `"codex" in argv`),
    or of an agent field (`options.agent`, `provider.name`, `kind.binary`) with any literal."""
    names = {name.lower() for name in runner.PROVIDERS}

    def agent_literal(node: ast.AST) -> bool:
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(agent_literal(element) for element in node.elts)
        return (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and node.value.strip().lower() in names)

    def agent_field(node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in ("agent", "agent_name")
        if not isinstance(node, ast.Attribute):
            return False
        owner = ast.dump(node.value).lower()
        return node.attr == "agent" or (node.attr in ("name", "binary") and (
            "provider" in owner or "kind" in owner))

    found = []
    for node in walked(tree):
        if not isinstance(node, ast.Compare) or node.lineno in allowed:
            continue
        operands = [node.left, *node.comparators]
        literal = any(isinstance(o, ast.Constant) and isinstance(o.value, str) for o in operands)
        if any(agent_literal(o) for o in operands) or (
                literal and any(agent_field(o) for o in operands)):
            found.append(f"line {node.lineno}")
    return found


if __name__ == "__main__":
    unittest.main()
