"""The runner reads top to bottom: each chapter uses only the chapters above it.

A chapter starts at a banner line ``# ==== <name> ====``. A top-level definition that names a
definition of a later chapter (anywhere in its body, default values and decorators included)
is an upward reference, and fails this test. Names are resolved scope by scope, as Python
does: a parameter or local of one function hides the global of that name in that function
only. A later chapter that writes into a module-level container of an earlier one (a
registry filled from below) fails too, when a chapter above the writer reads it. The script
may import only the standard library.

Run as a script (``python3 tests/test_layering.py``) to print the chapter map and any upward
references.
"""

from __future__ import annotations

import ast
import collections
import functools
import re
import sys
import unittest
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers import PROJECT, parsed, runner_source, walked  # noqa: E402

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


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_SCOPES = (*_FUNCTIONS, ast.ClassDef, *_COMPREHENSIONS)


def _parameters(node: ast.AST) -> set[str]:
    args = node.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    return {a.arg for a in every if a is not None}


def _scope_parts(node: ast.AST) -> tuple[list[ast.AST], list[ast.AST]]:
    """(what a scope runs in the scope around it, what it runs in its own scope)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = node.args
        outer = [*node.decorator_list, *args.defaults, *[d for d in args.kw_defaults if d],
                 *[a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs,
                                          args.vararg, args.kwarg) if a and a.annotation]]
        return outer + ([node.returns] if node.returns else []), list(node.body)
    if isinstance(node, ast.Lambda):
        return [*node.args.defaults, *[d for d in node.args.kw_defaults if d]], [node.body]
    if isinstance(node, ast.ClassDef):
        return [*node.decorator_list, *node.bases, *node.keywords], list(node.body)
    # a comprehension: its first iterable runs outside, the rest inside
    first, *more = node.generators
    inner = [first.target, *first.ifs, *more]
    inner += [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
    return [first.iter], inner


def _own_nodes(roots: list[ast.AST]) -> Iterator[ast.AST]:
    """Every node under `roots` that runs in their scope; a nested scope is yielded itself
    (it binds its name here), its inside is not."""
    stack = list(reversed(roots))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, _SCOPES):
            stack.extend(reversed(_scope_parts(node)[0]))
        else:
            stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _bound_here(node: ast.AST, own: list[ast.AST]) -> set[str]:
    """Names a scope binds (Python's rule: bound anywhere in it, unless declared global)."""
    bound = _parameters(node) if isinstance(node, _FUNCTIONS) else set()
    declared: set[str] = set()
    for inner in own:
        if isinstance(inner, ast.Name) and isinstance(inner.ctx, (ast.Store, ast.Del)):
            bound.add(inner.id)
        elif isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or (
                isinstance(inner, ast.ExceptHandler) and inner.name):
            bound.add(inner.name)
        elif isinstance(inner, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in inner.names)
        elif isinstance(inner, (ast.Global, ast.Nonlocal)):
            declared.update(inner.names)
    return bound - declared


def global_uses(node: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """(node, name) for each name a top-level definition reads or writes as a module global,
    scope by scope: a parameter or local of one function hides nothing in another."""
    def visit(scope: ast.AST, visible: frozenset[str]) -> Iterator[tuple[ast.AST, str]]:
        outside, inside = _scope_parts(scope)
        yield from names_in(outside, visible)
        own = list(_own_nodes(inside))
        bound = _bound_here(scope, own)
        # a class body's names are not seen by the functions inside it
        seen = visible if isinstance(scope, ast.ClassDef) else visible | bound
        for inner in own:
            if isinstance(inner, ast.Name) and inner.id not in bound | visible:
                yield inner, inner.id
            elif isinstance(inner, _SCOPES):
                yield from visit(inner, seen)

    def names_in(roots: list[ast.AST], visible: frozenset[str]) -> Iterator[tuple[ast.AST, str]]:
        for inner in _own_nodes(roots):
            if isinstance(inner, ast.Name) and inner.id not in visible:
                yield inner, inner.id
            elif isinstance(inner, _SCOPES):
                yield from visit(inner, visible)

    if isinstance(node, _SCOPES):
        yield from visit(node, frozenset())
    else:
        yield from names_in([node], frozenset())


@functools.lru_cache(maxsize=32)
def top_level_uses(source: str) -> tuple[tuple[ast.stmt, tuple[tuple[ast.AST, str], ...]], ...]:
    """(top-level statement, its global_uses) for the whole file, worked out once per text:
    both checks below need them, and for the runner they cost a third of a second."""
    return tuple((node, tuple(global_uses(node))) for node in parsed(source).body)


def upward_references(source: str) -> list[str]:
    marks = chapters(source)
    where = definitions(parsed(source), marks)
    problems = []
    for node, uses in top_level_uses(source):
        names = _defined_names(node)
        if not names:
            continue
        own = _chapter_of(node.lineno, marks)
        used = {name for _, name in uses}
        for name in sorted(used):
            target = where.get(name)
            if target is not None and target > own:
                problems.append(f"line {node.lineno}: {names[0]} ({marks[own][1]}) uses {name} "
                                f"({marks[target][1]})")
    return problems


def section_map(source: str) -> dict[str, list[str]]:
    """Chapter -> the entry points the module docstring's section map lists after it (a
    parenthesis, which explains, is left out; it must end on its line)."""
    names = [name for _, name in chapters(source)]
    docstring = ast.get_docstring(parsed(source)) or ""
    rows: dict[str, list[str]] = {}
    chapter = None
    for line in docstring.split("Sections", 1)[-1].splitlines():
        head = next((n for n in names if line.strip().startswith(n + " ")
                     or line.strip() == n), None)
        if head is not None and line.startswith("    ") and not line.startswith("     "):
            chapter, line = head, line.strip()[len(head):]
        if chapter is not None:
            rows.setdefault(chapter, []).extend(
                re.findall(r"[A-Za-z_]\w*", re.sub(r"\([^)]*\)", "", line)))
    return rows


# Calls that change a list, dict or set in place.
MUTATING_METHODS = frozenset({
    "append", "extend", "insert", "remove", "pop", "clear", "update", "add", "discard",
    "setdefault", "popitem", "sort", "reverse", "difference_update", "intersection_update",
    "symmetric_difference_update", "__setitem__", "__delitem__"})


def _written_global(node: ast.AST, parent: ast.AST | None, name: str) -> bool:
    """Whether this use of the global `name` writes into what it names."""
    if isinstance(node.ctx, (ast.Store, ast.Del)):  # rebound under `global`
        return True
    if isinstance(parent, ast.Attribute) and parent.value is node:
        return isinstance(parent.ctx, (ast.Store, ast.Del)) or parent.attr in MUTATING_METHODS
    if isinstance(parent, ast.Subscript) and parent.value is node:
        return isinstance(parent.ctx, (ast.Store, ast.Del))
    return False


def later_writes(source: str) -> list[str]:
    """A registry filled from below: a later chapter writes into a module-level container
    an earlier chapter defined, and a chapter above the writer reads it. What the earlier
    chapters do then depends on code they cannot see."""
    marks = chapters(source)
    where = definitions(parsed(source), marks)
    # the parent that _written_global looks at: an attribute or subscript of the name
    owners = {id(node.value): node for node in walked(parsed(source))
              if isinstance(node, (ast.Attribute, ast.Subscript))}
    readers: dict[str, list[tuple[int, str]]] = {}
    writes: list[tuple[int, str, int, str]] = []
    for node, uses in top_level_uses(source):
        chapter = _chapter_of(node.lineno, marks)
        label = (_defined_names(node) or ["module code"])[0]
        for use, name in uses:
            if name not in where:
                continue
            if _written_global(use, owners.get(id(use)), name):
                writes.append((chapter, label, use.lineno, name))
            elif not (isinstance(node, (ast.Assign, ast.AnnAssign)) and label == name):
                readers.setdefault(name, []).append((chapter, label))
    problems = []
    for chapter, label, line, name in writes:
        if where[name] >= chapter:
            continue
        above = sorted({(c, r) for c, r in readers.get(name, []) if c < chapter})
        if above:
            shown = ", ".join(f"{r} ({marks[c][1]})" for c, r in above[:3])
            problems.append(f"line {line}: {label} ({marks[chapter][1]}) writes into {name} "
                            f"({marks[where[name]][1]}), which {shown} read")
    return problems


def used_below(source: str) -> set[str]:
    """Module-level names some later chapter uses."""
    marks = chapters(source)
    where = definitions(parsed(source), marks)
    return {name for node, uses in top_level_uses(source) for _, name in uses
            if name in where and where[name] < _chapter_of(node.lineno, marks)}


def chapter_private_names(source: str) -> dict[str, str]:
    """Name -> chapter of every public module-level name (no leading underscore) that only
    the chapter defining it uses, the section map's entry points excepted: the names that
    should start with `_`."""
    marks = chapters(source)
    listed = {name for row in section_map(source).values() for name in row}
    below = used_below(source)
    return {name: marks[chapter][1]
            for name, chapter in definitions(parsed(source), marks).items()
            if not name.startswith("_") and name not in below | listed}


DOTTED_NAME = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
# A string literal of a test that is a name or a dotted name: a mock.patch or getattr target.
QUOTED_NAME = re.compile(rf"""(?<![\w'"])[rRuU]?(['"])({DOTTED_NAME})\1""")
DYNAMIC_LOOKUPS = ("globals", "locals", "eval", "exec", "__import__")


def _typing_strings(tree: ast.AST) -> Iterator[ast.AST]:
    """Where a string is a type: annotations, and cast()'s first argument."""
    for node in walked(tree):
        if isinstance(node, ast.arg) and node.annotation:
            yield node.annotation
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns:
            yield node.returns
        elif isinstance(node, ast.AnnAssign):
            yield node.annotation
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "cast" and node.args):
            yield node.args[0]


def runner_string_names(tree: ast.AST, wanted: set[str]) -> set[str]:
    """The names of `wanted` a string of the runner names: in a type (a string annotation,
    cast()); every string that is a name when the runner looks names up by their text."""
    dynamic = any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and (node.func.id in DYNAMIC_LOOKUPS or node.func.id == "vars" and not node.args)
                  for node in walked(tree))
    nodes = walked(tree) if dynamic else [node for root in _typing_strings(tree)
                                          for node in ast.walk(root)]
    found: set[str] = set()
    for node in nodes:
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and any(name in node.value for name in wanted)):
            continue  # most strings hold none of the names: no need to split them
        if not dynamic or re.fullmatch(DOTTED_NAME, node.value):
            found.update(re.findall(r"[A-Za-z_]\w*", node.value))
    return found & wanted


# What names the runner's functions for people and tools: a name these use keeps its name.
# In the documents, the words of code spans and blocks; in the fakes and tools, every word.
DOCUMENTS = ("README.md", "skills/skill-eval/SKILL.md", "skills/skill-eval/references/*.md",
             "tests/**/README.md")
TOOLS = ("tests/fakes/*", "tests/benchmarks/fakes/*", ".ci/*", "pyproject.toml")


def _words_outside(project: Path) -> dict[str, str]:
    """Word -> the first document, fake or tool that uses it."""
    found: dict[str, str] = {}
    for patterns, code_only in ((DOCUMENTS, True), (TOOLS, False)):
        for path in sorted(p for pattern in patterns for p in project.glob(pattern)):
            if not path.is_file():
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            if code_only:
                text = " ".join(re.findall(r"```.*?```|`[^`\n]+`", text, re.S))
            rel = path.relative_to(project).as_posix()
            for word in set(re.findall(r"[A-Za-z_]\w*", text)) - found.keys():
                found[word] = rel
    return found


def kept_public(source: str, names: set[str], project: Path = PROJECT) -> dict[str, str]:
    """Name -> why it keeps its public spelling, for each of `names` that a string names
    (the runner's, as runner_string_names reads them; a test's that is the name or ends in
    `.name`), that a test imports by name, or that documents, fakes or tools use: renaming
    it would break what refers to it by its spelling. Also one defined twice, and one whose
    underscored spelling the runner uses already (the rename would merge two names)."""
    tree = parsed(source)
    kept = {name: "a string of the runner names it"
            for name in runner_string_names(tree, names)}
    defined = collections.Counter(name for node in tree.body for name in _defined_names(node))
    spelled = {getattr(node, "id", None) or getattr(node, "arg", None) or node.name
               for node in walked(tree) if isinstance(node, (ast.Name, ast.arg, *_DEFINITIONS))}
    for name in sorted(names):
        if defined[name] > 1:
            kept[name] = "it is defined more than once at module level"
        elif "_" + name in spelled:
            kept.setdefault(name, f"_{name} is a name in the runner already")
    for path in sorted((project / "tests").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(project).as_posix()
        for line in re.findall(r"^\s*from\s+eval_runner\s+import\s+(.*)$", text, re.M):
            for name in sorted(set(re.findall(r"[A-Za-z_]\w*", line)) & names):
                kept.setdefault(name, f"{rel} imports it by name")
        for match in QUOTED_NAME.finditer(text):
            name = match.group(2).rsplit(".", 1)[-1]
            if name in names:
                kept.setdefault(name, f"a string of {rel} names it")
    words = _words_outside(project)
    for name in sorted(names & set(words)):
        kept.setdefault(name, f"{words[name]} uses it")
    return kept


def imported_modules(tree: ast.Module) -> set[str]:
    modules = set()
    for node in walked(tree):
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
            for node in walked(parsed(source))
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
    nodes = [node for node in parsed(source).body if node.lineno > start]
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
        self.source = runner_source()

    def test_no_chapter_uses_a_later_one(self) -> None:
        self.assertEqual(upward_references(self.source), [])

    def test_the_docstring_lists_the_chapters_in_order(self) -> None:
        names = [name for _, name in chapters(self.source)]
        self.assertGreaterEqual(len(names), 10)
        docstring = ast.get_docstring(parsed(self.source)) or ""
        listed = re.sub(r"\s+", " ", docstring.split("Sections", 1)[-1]) + " "
        positions = [listed.find(f" {name} ") for name in names]
        self.assertNotIn(-1, positions, f"chapters missing from the section map: {names}")
        self.assertEqual(positions, sorted(positions), "the section map is out of order")

    def test_each_entry_point_in_the_section_map_is_defined_in_its_chapter(self) -> None:
        marks = chapters(self.source)
        where = {defined: marks[_chapter_of(node.lineno, marks)][1]
                 for node in parsed(self.source).body for defined in _defined_names(node)}
        rows = section_map(self.source)
        self.assertGreaterEqual(len(rows), 10, "the section map lists no entry points")
        misplaced = {name: (chapter, where.get(name)) for chapter, listed in rows.items()
                     for name in listed if where.get(name) != chapter}
        self.assertEqual(misplaced, {}, "(listed under, defined in): fix the module docstring")

    def test_a_name_only_its_own_chapter_uses_starts_with_an_underscore(self) -> None:
        private = chapter_private_names(self.source)
        kept = kept_public(self.source, set(private))
        self.assertEqual({name: chapter for name, chapter in private.items() if name not in kept},
                         {}, "(name: its chapter) a name no later chapter uses starts with _, "
                         "unless the section map lists it as an entry point")

    def test_a_name_a_later_chapter_uses_does_not_start_with_an_underscore(self) -> None:
        marks = chapters(self.source)
        below = used_below(self.source)
        shared = {name: marks[chapter][1]
                  for name, chapter in definitions(parsed(self.source), marks).items()
                  if name.startswith("_") and not name.startswith("__") and name in below}
        self.assertEqual(shared, {}, "(name: its chapter) a later chapter uses it: drop the _")

    def test_every_top_level_definition_sits_in_a_chapter(self) -> None:
        marks = chapters(self.source)
        first = marks[0][0]
        early = [node for node in parsed(self.source).body
                 if _defined_names(node) and node.lineno < first]
        self.assertEqual(early, [])

    def test_only_the_standard_library_is_imported(self) -> None:
        modules = imported_modules(parsed(self.source))
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

    def test_the_private_name_check_sees_a_name_only_its_chapter_uses(self) -> None:
        sample = ('"""Doc.\n\nSections\n    first      entry\n    second\n"""\n\n'
                  "# ==== first ====\n\ndef entry():\n    return helper()\n\n"
                  "def helper():\n    return _own()\n\ndef _own():\n    return SHARED\n\n"
                  "SHARED = 2\n\n"
                  "# ==== second ====\n\ndef last(helper):\n    return SHARED + helper\n")
        # entry is listed, SHARED is used below, _own is private already; a parameter named
        # like the global is not a use of it
        self.assertEqual(chapter_private_names(sample), {"helper": "first", "last": "second"})
        self.assertEqual(runner_string_names(ast.parse("x: 'helper' = cast('last', y)\n"
                                                       "z = 'SHARED'\n"),
                                             {"helper", "last", "SHARED"}), {"helper", "last"})
        self.assertEqual(runner_string_names(ast.parse("z = globals()['SHARED']\n"),
                                             {"helper", "SHARED"}), {"SHARED"})

    def test_the_checker_sees_an_upward_reference(self) -> None:
        sample = ("# ==== first ====\n\ndef a():\n    return b()\n\n"
                  "# ==== second ====\n\ndef b():\n    return 1\n")
        self.assertEqual(upward_references(sample), ["line 3: a (first) uses b (second)"])
        self.assertEqual(upward_references(sample.replace("return b()", "return 2")), [])
        shadowed = sample.replace("def a():\n    return b()", "def a(b):\n    return b()")
        self.assertEqual(upward_references(shadowed), [])

    def test_a_parameter_of_one_method_hides_nothing_in_another(self) -> None:
        sample = ("# ==== first ====\n\nclass A:\n    def one(self, b):\n        return b\n\n"
                  "    def two(self):\n        return b()\n\n"
                  "# ==== second ====\n\ndef b():\n    return 1\n")
        self.assertEqual(upward_references(sample), ["line 3: A (first) uses b (second)"])
        # the same with a local, a loop target, an import and an `except ... as`
        for binding in ("b = 1", "for b in ():\n            pass", "import b",
                        "try:\n            pass\n        except ValueError as b:\n"
                        "            pass"):
            with self.subTest(binding=binding):
                hidden = sample.replace("def one(self, b):\n        return b",
                                        f"def one(self):\n        {binding}")
                self.assertEqual(upward_references(hidden), ["line 3: A (first) uses b (second)"])
        # bound in the method that uses it, it is that method's own name
        own = sample.replace("def two(self):\n        return b()",
                             "def two(self, b):\n        return b()")
        self.assertEqual(upward_references(own), [])

    def test_scopes_follow_python_rules(self) -> None:
        def check(body: str) -> list[str]:
            return upward_references(f"# ==== first ====\n\n{body}\n\n"
                                     "# ==== second ====\n\ndef b():\n    return 1\n")

        found = ["line 3: a (first) uses b (second)"]
        # an enclosing function's parameter is seen by its nested function and lambda
        self.assertEqual(check("def a(b):\n    def inner():\n        return b\n    return inner"),
                         [])
        self.assertEqual(check("def a(b):\n    return lambda: b"), [])
        # but not by a sibling nested function, nor through a class body
        self.assertEqual(check("def a():\n    def one(b):\n        return b\n"
                               "    def two():\n        return b()\n    return one, two"), found)
        self.assertEqual(check("class a:\n    b = 1\n\n    def m(self):\n        return b()"),
                         ["line 3: a (first) uses b (second)"])
        # a default value and a decorator run outside the function
        self.assertEqual(check("def a(b=b):\n    return b"), found)
        self.assertEqual(check("@b\ndef a(b):\n    return b"),
                         ["line 4: a (first) uses b (second)"])
        # a comprehension's target is its own; `global` makes a local name the global one
        self.assertEqual(check("def a():\n    return [b for b in range(3)], b()"), found)
        self.assertEqual(check("def a():\n    global b\n    b = 2"), found)

    def test_the_checker_sees_a_registry_filled_from_below(self) -> None:
        sample = ("# ==== constants ====\n\nNAMES = set()\nKINDS = {}\n\n"
                  "# ==== validation ====\n\ndef valid(name):\n    return name in NAMES\n\n"
                  "def kind_of(name):\n    return KINDS[name]\n\n"
                  "# ==== providers ====\n\ndef register(kind):\n    NAMES.add(kind.name)\n"
                  "    KINDS[kind.name] = kind\n    return kind\n")
        self.assertEqual(upward_references(sample), [])  # no name of a later chapter is used
        self.assertEqual(later_writes(sample), [
            "line 17: register (providers) writes into NAMES (constants), which valid "
            "(validation) read",
            "line 18: register (providers) writes into KINDS (constants), which kind_of "
            "(validation) read"])
        # every way of writing into it counts, from module code too
        for write in ("NAMES.update(['x'])", "NAMES |= {'x'}", "del KINDS['x']",
                      "KINDS.setdefault('x', 1)", "KINDS.attr = 1"):
            with self.subTest(write=write):
                planted = sample.replace("def register(kind):", f"{write}\n\n\n"
                                         "def register(kind):")
                self.assertEqual(len(later_writes(planted)), 3, later_writes(planted))

    def test_a_registry_written_where_it_is_defined_or_read_only_below_passes(self) -> None:
        sample = ("# ==== constants ====\n\nNAMES = set()\n\n"
                  "# ==== providers ====\n\ndef register(kind):\n    NAMES.add(kind)\n\n"
                  "# ==== cli ====\n\ndef main():\n    return sorted(NAMES)\n")
        self.assertEqual(later_writes(sample), [])  # the only reader is below the writer
        read_above = sample.replace("NAMES = set()\n", "NAMES = set()\n\n\ndef known(x):\n"
                                    "    return x in NAMES\n")
        self.assertEqual(len(later_writes(read_above)), 1)
        filled_here = read_above.replace("# ==== providers ====\n\n", "").replace(
            "\n\n\ndef known", "\n\n\ndef register_here(kind):\n    NAMES.add(kind)\n\n\n"
            "def known")
        self.assertEqual(later_writes(filled_here), [])
        # a parameter that shares the registry's name is no write into it
        shadowed = read_above.replace("def register(kind):\n    NAMES.add(kind)",
                                      "def register(NAMES):\n    NAMES.add(1)")
        self.assertEqual(later_writes(shadowed), [])

    def test_no_later_chapter_fills_an_earlier_chapters_registry(self) -> None:
        self.assertEqual(later_writes(self.source), [])

    def test_the_import_check_sees_a_third_party_module(self) -> None:
        modules = imported_modules(ast.parse("import requests\nfrom yaml import safe_load\n"))
        self.assertEqual(modules - STDLIB_SUBSET, {"requests", "yaml"})


if __name__ == "__main__":
    source = runner_source()
    for start, name in chapters(source):
        print(f"{start:6d}  {name}")
    problems = upward_references(source) + later_writes(source)
    print("\n".join(problems) or "no upward references, no registry filled from below")
