"""One function starts every process the runner starts, and no function reads hidden state.

`spawn` alone may call a process-starting API (subprocess, os.fork/exec/spawn/system/popen,
pty, multiprocessing, asyncio's subprocesses): agents, checks, git, the bwrap probes and the
guardian all go through it, so registering a process (for the sweep and the interrupt) and
starting it in a group of its own cannot be forgotten in a new place. The annotation type is
`Process`, an import alias, so `grep -c "subprocess\\.\\(run\\|Popen\\)"` counts the start call
alone. And no function mutates a container bound at module level or in a class body: state a
command needs is passed (ProcessGroups), not read from a global. The runner is parsed once.
"""

from __future__ import annotations

import ast
import re
import threading
import unittest

from tests.helpers import RUNNER_PATH, parsed, runner, walked

SOURCE = RUNNER_PATH.read_text(encoding="utf-8")
TREE = parsed(SOURCE)  # the layering tests' tree: the runner is parsed and walked once
SPAWNER = "spawn"

STARTING = {
    "subprocess": {"Popen", "run", "call", "check_call", "check_output", "getoutput",
                   "getstatusoutput"},
    "os": {"system", "popen", "fork", "forkpty", "execv", "execve", "execvp", "execvpe", "execl",
           "execle", "execlp", "execlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "spawnl",
           "spawnle", "spawnlp", "spawnlpe", "posix_spawn", "posix_spawnp"},
    "pty": {"fork", "spawn"},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
}
STARTING_MODULES = {"multiprocessing", "concurrent.futures.process"}
MUTATORS = {"append", "extend", "insert", "add", "update", "clear", "pop", "popitem", "remove",
            "discard", "setdefault", "__setitem__"}
# Filled while the module is imported, read-only once any command runs: the adapters' folders
# and session variables (the core names no agent, so it cannot list them itself). Nothing may
# join this list.
KNOWN_MODULE_STATE = {"register_provider": {"PROVIDERS", "EXCLUDED_DIR_NAMES",
                                            "FIXTURE_FORBIDDEN_DIR_NAMES", "AGENT_SESSION_VARS"}}


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> "module.function" for every `from M import F [as N]` of a starting API."""
    found = {}
    for node in walked(tree):
        if isinstance(node, ast.ImportFrom) and node.module in STARTING:
            for alias in node.names:
                if alias.name in STARTING[node.module]:
                    found[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return found


def _functions(tree: ast.Module):
    """(name of the outermost def, node) for every node inside a top-level def or class."""
    for top in tree.body:
        if isinstance(top, (ast.FunctionDef, ast.ClassDef)):
            for node in ast.walk(top):
                yield top, node


def process_starts(tree: ast.Module) -> list[str]:
    """`line N: what` for every call that starts a process outside spawn, and every import of a
    module that starts processes."""
    aliases, found = _aliases(tree), []
    spawners = [top for top in tree.body if isinstance(top, ast.FunctionDef)
                and top.name == SPAWNER]
    inside = {id(node) for top in spawners for node in ast.walk(top)}
    for node in walked(tree):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names
                      if a.name in STARTING_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module in STARTING_MODULES:
            found.append(f"line {node.lineno}: from {node.module} import ...")
        if not isinstance(node, ast.Call) or id(node) in inside:
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and (
                func.attr in STARTING.get(func.value.id, ())):
            found.append(f"line {node.lineno}: {func.value.id}.{func.attr}")
        elif isinstance(func, ast.Name) and func.id in aliases:
            found.append(f"line {node.lineno}: {func.id} ({aliases[func.id]})")
    return found


def _module_containers(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, ast.AnnAssign) and node.value else [])
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _class_containers(tree: ast.Module) -> set[tuple[str, str]]:
    """(class, attribute) for each container a class body binds: shared by every instance."""
    found = set()
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for node in cls.body:
            target = (node.targets[0] if isinstance(node, ast.Assign) else
                      node.target if isinstance(node, ast.AnnAssign) and node.value else None)
            value = getattr(node, "value", None)
            if isinstance(target, ast.Name) and isinstance(value, (
                    ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)) or (
                    isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                    and value.func.id in ("list", "dict", "set", "defaultdict")):
                found.add((cls.name, target.id))
    return found


def hidden_state_writes(tree: ast.Module) -> list[str]:
    """`NAME written by FUNCTION` for each module-level name a function mutates in place
    (NAME.append(...), NAME[k] = v, del NAME[k]) or rebinds (`global`), and each class-body
    container a method mutates through the class (cls.NAME.add, Klass.NAME.add)."""
    module, classes = _module_containers(tree), _class_containers(tree)
    class_attrs = {attr for _, attr in classes}
    found = set()
    for top, node in _functions(tree):
        owner = top.name
        if isinstance(node, ast.Global):
            found.update((name, owner) for name in node.names)
        target = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                node.func.attr in MUTATORS):
            target = node.func.value
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            for item in (node.targets if not isinstance(node, ast.AugAssign) else [node.target]):
                if isinstance(item, ast.Subscript):
                    target = item.value
        if isinstance(target, ast.Name) and target.id in module:
            local = _binds_locally(top, target.id)
            if not local:
                found.add((target.id, owner))
        elif isinstance(target, ast.Attribute) and target.attr in class_attrs and isinstance(
                target.value, ast.Name) and target.value.id not in ("self",):
            found.add((target.attr, owner))
    return sorted(f"{name} written by {owner}" for name, owner in found
                  if name not in KNOWN_MODULE_STATE.get(owner, ()))


def _binds_locally(top: ast.AST, name: str) -> bool:
    """Whether some function inside `top` binds `name` itself (a parameter or a local)."""
    for node in ast.walk(top):
        if isinstance(node, (ast.FunctionDef, ast.Lambda)):
            args = node.args
            if name in {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}:
                return True
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            return True
    return False


class OneSpawnerTest(unittest.TestCase):
    def test_spawn_alone_starts_processes(self) -> None:
        self.assertEqual(process_starts(TREE), [])
        self.assertIn(SPAWNER, {n.name for n in TREE.body if isinstance(n, ast.FunctionDef)})

    def test_the_grep_of_the_issue_counts_the_start_call_alone(self) -> None:
        lines = [number for number, line in enumerate(SOURCE.splitlines(), 1)
                 if re.search(r"subprocess\.(run|Popen)", line)]
        spawn = next(n for n in TREE.body if isinstance(n, ast.FunctionDef) and n.name == SPAWNER)
        self.assertEqual(len(lines), 1, lines)
        self.assertTrue(spawn.lineno <= lines[0] <= spawn.end_lineno)

    def test_no_function_writes_module_or_class_state(self) -> None:
        self.assertEqual(hidden_state_writes(TREE), [])

    def test_the_checks_catch_planted_starts_and_state(self) -> None:
        planted = ast.parse(
            "import subprocess, os\nfrom subprocess import check_output as out\n"
            "import multiprocessing\nRUNNING = []\n"
            "class Kids:\n    pids = set()\n    @classmethod\n    def add(cls, pid):\n"
            "        cls.pids.add(pid)\n"
            "def spawn(argv):\n    return subprocess.Popen(argv)\n"
            "def git(argv):\n    RUNNING.append(argv)\n    subprocess.run(argv)\n"
            "    os.posix_spawn(argv[0], argv, {})\n    return out(argv)\n"
            "def fine(RUNNING):\n    RUNNING.append(1)\n")
        self.assertEqual([s.split(": ", 1)[1] for s in process_starts(planted)],
                         ["import multiprocessing", "subprocess.run", "os.posix_spawn",
                          "out (subprocess.check_output)"])
        self.assertEqual(hidden_state_writes(planted),
                         ["RUNNING written by git", "pids written by Kids"])


class ProcessGroupsTest(unittest.TestCase):
    def test_an_interrupt_while_the_main_thread_starts_a_process_does_not_hang(self) -> None:
        # spawn holds the registry's lock while git starts on the main thread; the interrupt
        # handler runs on that same thread and takes it again to signal the groups.
        groups, done = runner.ProcessGroups(), []

        def interrupted_while_starting() -> None:
            with groups.lock:
                groups.cancel()
                done.append(groups.reason)
        thread = threading.Thread(target=interrupted_while_starting, daemon=True)
        thread.start()
        thread.join(5)
        self.assertEqual(done, ["interrupted"])


if __name__ == "__main__":
    unittest.main()
