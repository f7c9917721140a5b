"""The runner reads top to bottom: each chapter uses only the chapters above it.

A chapter starts at a banner line ``# ==== <name> ====``. A top-level definition that names a
definition of a later chapter (anywhere in its body, default values and decorators included)
is an upward reference, and fails this test. The script may import only the standard library.

Run as a script (``python3 tests/test_layering.py``) to print the chapter map and any upward
references.
"""

from __future__ import annotations

import ast
import re
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers import RUNNER_PATH  # noqa: E402

BANNER = re.compile(r"^# ==== (?P<name>[A-Za-z][A-Za-z ,]*[A-Za-z]) =+$")


def chapters(source: str) -> list[tuple[int, str]]:
    """(first line, name) of every chapter, in file order."""
    return [(number, m.group("name")) for number, line in enumerate(source.splitlines(), 1)
            if (m := BANNER.match(line))]


def _chapter_of(line: int, marks: list[tuple[int, str]]) -> int:
    index = -1
    for i, (start, _) in enumerate(marks):
        if start <= line:
            index = i
    return index


def _defined_names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign):
        targets = [node.target]
    return [t.id for t in targets if isinstance(t, ast.Name)]


def definitions(tree: ast.Module, marks: list[tuple[int, str]]) -> dict[str, int]:
    """Top-level name -> chapter index; a name defined twice keeps its first chapter."""
    found: dict[str, int] = {}
    for node in tree.body:
        for name in _defined_names(node):
            found.setdefault(name, _chapter_of(node.lineno, marks))
    return found


def _local_names(node: ast.stmt) -> set[str]:
    """Names a definition binds itself (parameters, assignments, loop and `as` targets): a
    parameter that shares a later function's name is no reference to it."""
    local: set[str] = set()
    for inner in ast.walk(node):
        if isinstance(inner, ast.arg):
            local.add(inner.arg)
        elif isinstance(inner, ast.Name) and isinstance(inner.ctx, (ast.Store, ast.Del)):
            local.add(inner.id)
        elif isinstance(inner, ast.ExceptHandler) and inner.name:
            local.add(inner.name)
    return local


def upward_references(source: str) -> list[str]:
    marks = chapters(source)
    tree = ast.parse(source)
    where = definitions(tree, marks)
    problems = []
    for node in tree.body:
        names = _defined_names(node)
        if not names:
            continue
        own = _chapter_of(node.lineno, marks)
        used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} - _local_names(node)
        for name in sorted(used):
            target = where.get(name)
            if target is not None and target > own:
                problems.append(f"line {node.lineno}: {names[0]} ({marks[own][1]}) uses {name} "
                                f"({marks[target][1]})")
    return problems


def imported_modules(tree: ast.Module) -> set[str]:
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.split(".")[0])
    return modules


# The standard library of Python 3.9 (sys.stdlib_module_names exists only from 3.10): the
# modules this runner may plausibly use. An import outside it fails the test below.
STDLIB_SUBSET = frozenset(["__future__", "argparse", "ast", "base64", "collections", "concurrent", "contextlib", "copy", "csv", "ctypes", "dataclasses", "datetime", "difflib", "email", "enum", "errno", "fcntl", "functools", "glob", "gzip", "hashlib", "heapq", "html", "http", "importlib", "io", "itertools", "json", "locale", "logging", "math", "mimetypes", "operator", "os", "pathlib", "platform", "pwd", "queue", "random", "re", "secrets", "select", "selectors", "shlex", "shutil", "signal", "socket", "stat", "statistics", "string", "struct", "subprocess", "sys", "tempfile", "textwrap", "threading", "time", "traceback", "types", "typing", "unicodedata", "urllib", "uuid", "warnings", "weakref", "xml", "zlib"])


MAX_PARAMETERS = 6


def parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> int:
    """Every parameter (positional-only, ordinary, keyword-only, *args and **kwargs) but a
    method's first one named self or cls."""
    args = node.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names) + (args.vararg is not None) + (args.kwarg is not None)


def too_many_parameters(source: str) -> list[str]:
    """`line N NAME (K parameters)` for every def (nested ones too) and lambda over
    MAX_PARAMETERS: a function that needs more is handed a record instead (the frozen
    IterationPlan of an iteration, a GraderJob, the Mounts of a confined process)."""
    return [f"line {node.lineno} {getattr(node, 'name', 'lambda')} "
            f"({parameter_count(node)} parameters)"
            for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            and parameter_count(node) > MAX_PARAMETERS]


CLI_MAX_LINES = 400
CLI_COMMANDS = ("build_parser", "_Parser", "main")


def _type_helpers(nodes: list[ast.stmt]) -> set[str]:
    """The chapter's argument-type helpers: the names a `type=` of an add_argument call in
    build_parser uses, and the chapter's names their own definitions use."""
    defined = {name: node for node in nodes for name in _defined_names(node)}
    parser = defined.get("build_parser")
    found = {n.id for call in ast.walk(parser) if isinstance(call, ast.Call)
             for kw in call.keywords if kw.arg == "type"
             for n in ast.walk(kw.value) if isinstance(n, ast.Name)} if parser else set()
    found &= set(defined)
    while True:
        more = {n.id for name in found for n in ast.walk(defined[name])
                if isinstance(n, ast.Name) and n.id in defined} - found
        if not more:
            return found
        found |= more


def cli_chapter_problems(source: str) -> list[str]:
    """Why the last chapter, CLI, is more than the command line: over CLI_MAX_LINES lines
    (its banner to the end of the file), or a top-level statement in it that is none of
    build_parser, _Parser, main, a cmd_* function, an argument-type helper (_type_helpers)
    or the closing `if __name__ == "__main__":`."""
    marks = chapters(source)
    start, name = marks[-1]
    if name != "CLI":
        return [f"the last chapter is {name}, not CLI"]
    problems = []
    length = len(source.splitlines()) - start + 1
    if length > CLI_MAX_LINES:
        problems.append(f"the CLI chapter is {length} lines (at most {CLI_MAX_LINES})")
    nodes = [node for node in ast.parse(source).body if node.lineno > start]
    allowed = _type_helpers(nodes)
    for node in nodes:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            continue
        names = _defined_names(node)
        if not names or not all(n in CLI_COMMANDS or n.startswith("cmd_") or n in allowed
                                for n in names):
            problems.append(f"line {node.lineno}: {', '.join(names) or type(node).__name__} "
                            "is not a command, the parser or an argument type")
    return problems


class LayeringTest(unittest.TestCase):
    def setUp(self) -> None:
        self.source = RUNNER_PATH.read_text(encoding="utf-8")

    def test_no_chapter_uses_a_later_one(self) -> None:
        self.assertEqual(upward_references(self.source), [])

    def test_the_docstring_lists_the_chapters_in_order(self) -> None:
        names = [name for _, name in chapters(self.source)]
        self.assertGreaterEqual(len(names), 10)
        docstring = ast.get_docstring(ast.parse(self.source)) or ""
        listed = re.sub(r"\s+", " ", docstring.split("Sections", 1)[-1]) + " "
        positions = [listed.find(f" {name} ") for name in names]
        self.assertNotIn(-1, positions, f"chapters missing from the section map: {names}")
        self.assertEqual(positions, sorted(positions), "the section map is out of order")

    def test_every_top_level_definition_sits_in_a_chapter(self) -> None:
        marks = chapters(self.source)
        first = marks[0][0]
        early = [node for node in ast.parse(self.source).body
                 if _defined_names(node) and node.lineno < first]
        self.assertEqual(early, [])

    def test_only_the_standard_library_is_imported(self) -> None:
        modules = imported_modules(ast.parse(self.source))
        if hasattr(sys, "stdlib_module_names"):
            outside = {m for m in modules if m not in sys.stdlib_module_names}
            self.assertEqual(outside, set())
        self.assertEqual(modules - STDLIB_SUBSET, set())

    def test_the_cli_chapter_holds_only_the_parser_and_the_commands(self) -> None:
        self.assertEqual(cli_chapter_problems(self.source), [])

    def test_the_cli_check_sees_a_helper_and_a_long_chapter(self) -> None:
        sample = ("# ==== CLI ====\n\ndef _count(text):\n    return int(text)\n\n"
                  "def build_parser():\n    p.add_argument('--n', type=_count)\n\n"
                  "def cmd_run(args):\n    return helper(args)\n\n"
                  "def helper(args):\n    return 0\n\n"
                  "if __name__ == '__main__':\n    main()\n")
        self.assertEqual(cli_chapter_problems(sample),
                         ["line 12: helper is not a command, the parser or an argument type"])
        long = sample.replace("def helper(args):\n    return 0\n\n", "") + "\n" * 400
        self.assertEqual(cli_chapter_problems(long),
                         ["the CLI chapter is 413 lines (at most 400)"])

    def test_no_function_takes_more_than_six_parameters(self) -> None:
        self.assertEqual(too_many_parameters(self.source), [])

    def test_the_parameter_check_counts_every_kind_of_parameter(self) -> None:
        sample = ("def f(a, /, b, *c, d, **e):\n    pass\n"
                  "class K:\n    def m(self, a, b, c, d, e, f):\n        pass\n"
                  "g = lambda a, b, c, d, e, f, h: a\n"
                  "def outer():\n    def inner(a, b, c, d, e, f, *, h=1):\n        pass\n")
        self.assertEqual(too_many_parameters(sample),
                         ["line 6 lambda (7 parameters)", "line 8 inner (7 parameters)"])

    def test_the_checker_sees_an_upward_reference(self) -> None:
        sample = ("# ==== first ====\n\ndef a():\n    return b()\n\n"
                  "# ==== second ====\n\ndef b():\n    return 1\n")
        self.assertEqual(upward_references(sample), ["line 3: a (first) uses b (second)"])
        self.assertEqual(upward_references(sample.replace("return b()", "return 2")), [])
        shadowed = sample.replace("def a():\n    return b()", "def a(b):\n    return b()")
        self.assertEqual(upward_references(shadowed), [])

    def test_the_import_check_sees_a_third_party_module(self) -> None:
        modules = imported_modules(ast.parse("import requests\nfrom yaml import safe_load\n"))
        self.assertEqual(modules - STDLIB_SUBSET, {"requests", "yaml"})


if __name__ == "__main__":
    source = RUNNER_PATH.read_text(encoding="utf-8")
    for start, name in chapters(source):
        print(f"{start:6d}  {name}")
    problems = upward_references(source)
    print("\n".join(problems) or "no upward references")
