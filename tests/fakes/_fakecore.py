"""Shared machinery for the fake `claude` and `codex` command-line tools.

The fakes stand in for the real agent CLIs in tests. They speak the real
argv/stdin/stdout/exit-code contracts (see README.md next to this file) and
do what a test script tells them through environment variables:

    FAKE_AGENT_SCRIPT   path to a JSON file choosing answers and faults
    FAKE_AGENT_LOG      directory receiving one JSON record per invocation

Sections:
    1. constants
    2. errors
    3. argument parsing (commander style for claude, clap style for codex)
    4. invocation log
    5. test script: loading, validation, spec selection
    6. prompt conventions (artifact path, skill path, assertions)
    7. grader verdicts
    8. executor actions (reads and writes on disk)
    9. process behaviour (stdin, output, hangs, floods)

Standard library only; must run on Python 3.9+.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

# ============================================================================
# 1. constants
# ============================================================================

FAULTS = (
    "exit_nonzero", "is_error", "is_error_exit0", "hang", "hang_with_child",
    "silent", "invalid_json", "truncated", "flood", "delete_cwd",
    "unreachable", "max_structured_retries", "lone_surrogate", "deep_nesting",
    "verdict_flood", "ineligible_tier",
)
GEMINI_ONLY_FAULTS = ("ineligible_tier",)
SPEC_KEYS = frozenset((
    "fault", "sleep_s", "text", "usage", "duration_ms", "total_cost_usd",
    "num_turns", "write_artifact", "write_artifact_hex", "artifact_bytes",
    "write_files", "read_skill", "read_paths", "permission_denials",
    "verdicts", "raw_verdicts", "verdict_form", "flood_bytes",
    "shell_write_files", "shell_symlinks", "shell_special", "quote_reads", "noisy",
    "shell_keep_times", "list_paths", "activate_skills", "read_tree", "shell_write_hex",
    "shell_chmod", "pause_after", "pause_s", "then_write", "messages", "never_end",
    "report_session_id", "tool_calls",
))
TOOL_CALL_KEYS = {"command": {"command", "exit_code", "output"}, "edit": {"edit", "old", "new"},
                  "read": {"read"}}
SPECIAL_KINDS = ("fifo", "socket", "directory")
VERDICT_FORMS = ("structured", "text", "fenced", "legacy", "prose")
ROLES = ("executor", "grader", "user")
# The runner's user-agent prompt opens with this line; its conversation quotes each agent reply
# between `BEGIN agent_turn_N <boundary>` and `END agent_turn_N <boundary>`.
USER_HEADING = "# Playing the user"
BOUNDARY_PREFIX = "Boundary:"
END_SIGNAL = "END_CONVERSATION"  # what a user agent answers when the conversation is over
NEVER_ENDING_MESSAGE = "Please go on."
DEFAULT_EXECUTOR_TEXT = "fake executor answer"
DEFAULT_PROSE_VERDICT = "Looks fine to me."
DEFAULT_FLOOD_BYTES = 200_000_000
LOGGED_ENV = ("HOME", "PWD", "CODEX_HOME", "CLAUDECODE", "IS_SANDBOX",
              "GIT_DIR", "GIT_WORK_TREE", "TMPDIR", "GEMINI_CLI_HOME", "GEMINI_CLI_NO_RELAUNCH",
              "GEMINI_SYSTEM_MD", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "OPENCODE_CONFIG",
              "OPENCODE_DISABLE_PROJECT_CONFIG", "npm_config_offline")
ARTIFACT_PREFIX = "Artifact path:"
SKILL_PREFIX = "Skill path:"
ASSERTIONS_HEADING = "## Assertions"
SCRIPT_ERROR_EXIT = 3   # a broken test script, never a contract behaviour
LONE_SURROGATE = "\ud800"  # sent as the JSON escape; no UTF-8 encoder accepts it raw
DEEP_OBJECT = "@@fake-deep-object@@"   # stands for the deep_nesting answer until printed
DEEP_TEXT = "@@fake-deep-text@@"
DEEP_LEVELS = 100_000
FLOOD_VERDICTS = 100_000

# ============================================================================
# 2. errors
# ============================================================================


class FakeExit(Exception):
    """Stop now: print `stderr`/`stdout` and exit with `code`."""

    def __init__(self, code: int, stderr: str = "", stdout: str = ""):
        super().__init__(stderr or stdout)
        self.code = code
        self.stderr = stderr
        self.stdout = stdout


def script_error(cli: str, message: str) -> FakeExit:
    """A mistake in the test's FAKE_AGENT_SCRIPT: fail loudly, distinct code."""
    return FakeExit(SCRIPT_ERROR_EXIT,
                    f"fake {cli}: bad FAKE_AGENT_SCRIPT: {message}\n")

# ============================================================================
# 3. argument parsing
# ============================================================================


@dataclass(frozen=True)
class Opt:
    """One command-line option.

    kind: "flag" (no value), "value" (exactly one), "optional" ([value]),
    "variadic" (one or more).  `label` is how error messages name it.
    """
    names: tuple[str, ...]
    kind: str
    label: str
    choices: tuple[str, ...] = ()
    repeatable: bool = False
    early: str = ""          # "version" or "help": stop parsing and act

    @property
    def key(self) -> str:
        longs = [n for n in self.names if n.startswith("--")]
        return (longs or list(self.names))[0].lstrip("-")


@dataclass
class Parsed:
    opts: dict[str, Any] = field(default_factory=dict)
    positionals: list[str] = field(default_factory=list)
    early: str = ""


def _index(table) -> dict[str, Opt]:
    return {name: opt for opt in table for name in opt.names}


def _looks_like_option(arg: str) -> bool:
    return len(arg) > 1 and arg.startswith("-")


def _commander_store(parsed: Parsed, opt: Opt, value: Any) -> None:
    if opt.kind == "variadic" or opt.repeatable:
        parsed.opts.setdefault(opt.key, []).append(value)
    else:
        parsed.opts[opt.key] = value   # commander: the last one wins


def _commander_check_choice(opt: Opt, value: str) -> None:
    if opt.choices and value not in opt.choices:
        allowed = ", ".join(opt.choices)
        raise FakeExit(1, f"error: option '{opt.label}' argument '{value}' is invalid. "
                          f"Allowed choices are {allowed}.\n")


def parse_commander(argv: list[str], table) -> Parsed:
    """Parse like commander.js (used by claude): unknown option -> exit 1.

    Rules mirrored: `--opt=value` only for options taking a value; `-xVALUE`
    and grouped short flags; a required value is the next argument whatever
    it looks like; an optional value is taken only if the next argument does
    not look like an option; a variadic option keeps taking arguments until
    one looks like an option; `--` ends options.
    """
    by_name = _index(table)
    parsed = Parsed()
    args = list(argv)
    variadic: Opt | None = None
    while args:
        arg = args.pop(0)
        if arg == "--":
            parsed.positionals.extend(args)
            break
        if variadic is not None and not _looks_like_option(arg):
            parsed.opts[variadic.key].append(arg)
            continue
        variadic = None
        if not _looks_like_option(arg):
            parsed.positionals.append(arg)
            continue
        opt, attached = _commander_lookup(by_name, arg, args)
        if opt is None:
            raise FakeExit(1, f"error: unknown option '{arg}'\n")
        if opt.early:
            parsed.early = opt.early
            return parsed
        value = _commander_value(opt, attached, args)
        _commander_store(parsed, opt, value)
        if opt.kind == "variadic":
            variadic = opt
    return parsed


def _commander_lookup(by_name, arg, args):
    """Return (option, attached value) or (None, None) for an unknown one."""
    if arg.startswith("--"):
        name, eq, value = arg.partition("=")
        opt = by_name.get(name)
        if opt is None or (eq and opt.kind == "flag"):
            return None, None
        return opt, (value if eq else None)
    opt = by_name.get(arg[:2])
    rest = arg[2:]
    if opt is None:
        return None, None
    if rest and opt.kind == "flag":
        args.insert(0, "-" + rest)       # grouped short flags: -pv
        return opt, None
    return opt, (rest or None)


def _commander_value(opt: Opt, attached: str | None, args: list[str]):
    if opt.kind == "flag":
        return True
    if attached is not None:
        value = attached
    elif opt.kind == "optional":
        if not args or _looks_like_option(args[0]):
            return True
        value = args.pop(0)
    elif args:
        value = args.pop(0)
    else:
        raise FakeExit(1, f"error: option '{opt.label}' argument missing\n")
    _commander_check_choice(opt, value)
    return value


CLAP_USAGE = ("Usage: codex exec [OPTIONS] [PROMPT]\n"
              "       codex exec [OPTIONS] <COMMAND> [ARGS]\n\n"
              "For more information, try '--help'.\n")


def clap_unexpected(arg: str) -> FakeExit:
    tip = ""
    if arg.startswith("-"):
        tip = f"  tip: to pass '{arg}' as a value, use '-- {arg}'\n\n"
    return FakeExit(2, f"error: unexpected argument '{arg}' found\n\n{tip}{CLAP_USAGE}")


def parse_clap(argv: list[str], table, max_positionals: int = 1) -> Parsed:
    """Parse like clap (used by codex): any usage error -> exit 2.

    Rules mirrored: `--opt=value`, `-oVALUE`, `-o=VALUE`; a value never looks
    like an option (except `-`); single-use options may not repeat; a
    `<FILE>...` option takes values until the next option-like argument.
    """
    by_name = _index(table)
    parsed = Parsed()
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--":
            parsed.positionals.extend(args)
            break
        if not _looks_like_option(arg):
            parsed.positionals.append(arg)
            continue
        opt, attached = _clap_lookup(by_name, arg, args)
        if opt.early:
            parsed.early = opt.early
            return parsed
        if opt.key in parsed.opts and not opt.repeatable:
            raise FakeExit(2, f"error: the argument '{opt.label}' cannot be used multiple "
                              f"times\n\n{CLAP_USAGE}")
        _clap_store(parsed, opt, _clap_values(opt, attached, args))
    if len(parsed.positionals) > max_positionals:
        raise clap_unexpected(parsed.positionals[max_positionals])
    return parsed


def _clap_lookup(by_name, arg, args):
    if arg.startswith("--"):
        name, eq, value = arg.partition("=")
        opt = by_name.get(name)
        if opt is None:
            raise clap_unexpected(name)
        if eq and opt.kind == "flag":
            raise FakeExit(2, f"error: unexpected value '{value}' for '{name}' found; no "
                              f"more were expected\n\n{CLAP_USAGE}")
        return opt, (value if eq else None)
    opt = by_name.get(arg[:2])
    if opt is None:
        raise clap_unexpected(arg[:2])
    rest = arg[2:]
    if rest and opt.kind == "flag":
        args.insert(0, "-" + rest)
        return opt, None
    if rest.startswith("="):
        rest = rest[1:]
    return opt, (rest or None)


def _clap_values(opt: Opt, attached: str | None, args: list[str]):
    if opt.kind == "flag":
        return True
    values = [attached] if attached is not None else []
    if not values and args and (args[0] == "-" or not _looks_like_option(args[0])):
        values.append(args.pop(0))
    if not values:
        raise FakeExit(2, f"error: a value is required for '{opt.label}' but none was "
                          "supplied\n\nFor more information, try '--help'.\n")
    if opt.kind == "variadic":
        while args and not _looks_like_option(args[0]):
            values.append(args.pop(0))
        values = [part for v in values for part in v.split(",")]
    for value in values:
        if opt.choices and value not in opt.choices:
            possible = ", ".join(opt.choices)
            raise FakeExit(2, f"error: invalid value '{value}' for '{opt.label}'\n"
                              f"  [possible values: {possible}]\n\n"
                              "For more information, try '--help'.\n")
    return values if opt.kind == "variadic" else values[0]


def _clap_store(parsed: Parsed, opt: Opt, value: Any) -> None:
    if opt.kind == "variadic":
        parsed.opts.setdefault(opt.key, []).extend(value)
    elif opt.repeatable:
        parsed.opts.setdefault(opt.key, []).append(value)
    else:
        parsed.opts[opt.key] = value

def parse_yargs(argv: list[str], table, unknown_message) -> Parsed:
    """Parse like yargs in strict mode (gemini, opencode): an unknown option exits 1.

    Kinds: "flag" (boolean; `--flag=false` allowed), "value" (the next argument, or
    `--opt=value`), "variadic" (yargs "array": every following argument that does not start
    with `-`). `unknown_message(names)` words the error the way that CLI does.
    """
    by_name = _index(table)
    parsed = Parsed()
    args = list(argv)
    unknown: list[str] = []
    while args:
        arg = args.pop(0)
        if arg == "--":
            parsed.positionals.extend(args)
            break
        if not _looks_like_option(arg):
            parsed.positionals.append(arg)
            continue
        name, eq, attached = arg.partition("=")
        opt = by_name.get(name)
        if opt is None:
            unknown.append(name.lstrip("-"))
            continue
        if opt.early:
            parsed.early = opt.early
            return parsed
        if opt.kind == "flag":
            parsed.opts[opt.key] = (attached != "false") if eq else True
            continue
        values = [attached] if eq else []
        if not values and args and not _looks_like_option(args[0]):
            values.append(args.pop(0))
        if not values:
            raise FakeExit(1, f"Not enough arguments following: {opt.key}\n")
        if opt.kind == "variadic":
            while args and not _looks_like_option(args[0]):
                values.append(args.pop(0))
            parsed.opts.setdefault(opt.key, []).extend(values)
            continue
        if opt.choices and values[0] not in opt.choices:
            choices = ", ".join(f'"{c}"' for c in opt.choices)
            raise FakeExit(1, f"Invalid values:\n  Argument: {opt.key}, Given: "
                              f'"{values[0]}", Choices: {choices}\n')
        parsed.opts[opt.key] = values[0]
    if unknown:
        raise FakeExit(1, unknown_message(unknown))
    return parsed


def read_json_file(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}

# ============================================================================
# 4. invocation log
# ============================================================================


class InvocationLog:
    """Writes one JSON record per process into $FAKE_AGENT_LOG, at most once."""

    def __init__(self, cli: str, argv: list[str]):
        self.cli = cli
        self.argv = list(argv)
        self.cwd = safe_getcwd()
        self.written = False

    def write(self, role: str | None = None, prompt: str | None = None,
              stdin: str | None = None, **extra: Any) -> None:
        logdir = os.environ.get("FAKE_AGENT_LOG")
        if self.written or not logdir:
            return
        self.written = True
        record = {
            "cli": self.cli, "argv": self.argv, "cwd": self.cwd, "role": role,
            "stdin": stdin, "env_names": sorted(os.environ),
            "env": {k: os.environ[k] for k in LOGGED_ENV if k in os.environ},
            "pid": os.getpid(), "pgid": os.getpgid(0), "prompt": prompt,
        }
        if os.environ.get("FAKE_AGENT_LOG_ENV") == "all":
            record["env_all"] = dict(os.environ)   # leak tests: every value the CLI saw
        record.update(extra)
        name = f"{time.time_ns()}-{os.getpid()}.json"
        write_json_atomic(os.path.join(logdir, name), record)


def write_json_atomic(path: str, data: Any) -> None:
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    # Not *.json: readers glob for that and must never see a half-written record.
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".partial")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, sort_keys=False)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def safe_getcwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:        # the directory was deleted under us
        return os.environ.get("PWD")

# ============================================================================
# 5. test script
# ============================================================================


def load_script(cli: str) -> dict[str, Any]:
    path = os.environ.get("FAKE_AGENT_SCRIPT")
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            script = json.load(handle)
    except (OSError, ValueError) as exc:
        raise script_error(cli, f"{path}: {exc}") from None
    if not isinstance(script, dict):
        raise script_error(cli, "top level must be an object")
    return script


def select_spec(cli: str, script: dict[str, Any], role: str, prompt: str,
                session: FakeSession | None = None) -> dict[str, Any]:
    """The role's default spec with the first matching case merged over it.

    A case may also name the `turn` (1 for the first message of a session) and a text that
    must be `in_history` (the session's earlier messages)."""
    spec = dict(script.get(role) or {})
    turn = session.turn if session is not None else 1
    history = session.history_text() if session is not None else ""
    for index, case in enumerate(script.get("cases") or []):
        if not isinstance(case, dict):
            raise script_error(cli, f"cases[{index}] must be an object")
        if case.get("role", "any") not in ("any", role):
            continue
        if "turn" in case and case["turn"] != turn:
            continue
        if str(case.get("in_history", "")) not in history:
            continue
        if str(case.get("match", "")) in prompt:
            spec.update(case.get("spec") or {})
            break
    validate_spec(cli, spec)
    return spec


def role_of(prompt: str, structured: bool) -> str:
    """grader when the CLI was asked for a verdict schema, user for the runner's user-agent
    prompt, executor otherwise."""
    if prompt.startswith(USER_HEADING + "\n") or prompt.strip() == USER_HEADING:
        return "user"
    return "grader" if structured else "executor"


def user_reads(spec: dict[str, Any], root: str) -> list[Action]:
    """A nosy user agent's `read_paths` (only what its CLI lets it read is read)."""
    return [Action("read", _absolute(path, root)) for path in spec.get("read_paths") or []]


def quoted_reads(spec: dict[str, Any], actions: list[Action]) -> str:
    if not spec.get("quote_reads"):
        return ""
    return "".join(f"\n\n{a.result}" for a in actions if a.kind == "read" and a.ok)


def user_reply(spec: dict[str, Any], prompt: str) -> str:
    """A scripted user: `messages[k-1]` after the agent's k-th reply, then the end signal.

    Only the agent replies quoted with the prompt's own boundary count, so a reply that
    forges a `BEGIN agent_turn_...` line of its own cannot move the script on."""
    boundary = line_value(prompt, BOUNDARY_PREFIX) or ""
    replies = sum(1 for line in prompt.splitlines()
                  if boundary and line.startswith("BEGIN agent_turn_")
                  and line.endswith(" " + boundary))
    messages = list(spec.get("messages") or [])
    if spec.get("never_end"):
        return messages[(replies - 1) % len(messages)] if messages else NEVER_ENDING_MESSAGE
    return messages[replies - 1] if 0 < replies <= len(messages) else END_SIGNAL

# ============================================================================
# 5b. sessions: what a CLI keeps between calls of one conversation
# ============================================================================


class FakeSession:
    """One conversation kept in a file the way the CLI keeps it: its id and every message so
    far, one JSON line each ({"role": "user" | "assistant", "text": ...})."""

    def __init__(self, ident: str, path: str | None, messages: list[dict[str, str]],
                 resumed: bool):
        self.id = ident
        self.path = path  # None: not kept (the CLI was told not to)
        self.messages = messages
        self.resumed = resumed

    @property
    def turn(self) -> int:
        """The number of the message being answered now, 1 for a new session."""
        return 1 + sum(1 for m in self.messages if m.get("role") == "user")

    def history_text(self) -> str:
        return "\n".join(str(m.get("text", "")) for m in self.messages)

    def log_record(self) -> dict[str, Any]:
        return {"id": self.id, "resumed": self.resumed, "kept": self.path is not None,
                "turn": self.turn, "history": list(self.messages)}

    def finish(self, prompt: str, answer: str, **extra: Any) -> None:
        """Keep this call's exchange, as the CLI does once it has answered (`extra` goes on
        the answer's line: codex keeps each turn's usage)."""
        if self.path is None:
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            if not self.messages and not self.resumed:
                handle.write(json.dumps({"session_id": self.id}) + "\n")
            for message in ({"role": "user", "text": prompt},
                            {"role": "assistant", "text": answer, **extra}):
                handle.write(json.dumps(message) + "\n")


def read_session_file(path: str) -> list[dict[str, str]]:
    messages = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("role") in ("user", "assistant"):
                messages.append(entry)
    return messages


def find_session_file(folder: str, pattern: str) -> str | None:
    """The first file under `folder` whose name matches `pattern` (a glob), or None."""
    found = sorted(glob.glob(os.path.join(folder, "**", pattern), recursive=True))
    return found[0] if found else None


def is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def validate_spec(cli: str, spec: dict[str, Any]) -> None:
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        raise script_error(cli, f"unknown spec field(s): {', '.join(unknown)}")
    fault = spec.get("fault")
    if fault is not None and fault not in FAULTS:
        raise script_error(cli, f"unknown fault {fault!r} (known: {', '.join(FAULTS)})")
    if fault in GEMINI_ONLY_FAULTS and cli != "gemini":
        raise script_error(cli, f"fault {fault!r} only applies to gemini")
    form = spec.get("verdict_form", "structured")
    if form not in VERDICT_FORMS:
        raise script_error(cli, f"unknown verdict_form {form!r}")
    policy = spec.get("verdicts", "all_pass")
    if not (policy in ("all_pass", "all_fail") or (
            isinstance(policy, dict) and len(policy) == 1
            and set(policy) <= {"fail_ids", "fail_if_text_contains"})):
        raise script_error(cli, "verdicts must be \"all_pass\", \"all_fail\", "
                                "{\"fail_ids\": [...]} or {\"fail_if_text_contains\": [...]}")
    bad = sorted(set((spec.get("shell_special") or {}).values()) - set(SPECIAL_KINDS))
    if bad:
        raise script_error(cli, f"shell_special kinds must be {', '.join(SPECIAL_KINDS)}, "
                                f"not {', '.join(map(str, bad))}")
    noisy = spec.get("noisy")
    if noisy is not None and not (
            isinstance(noisy, dict) and set(noisy) == {"if_text_contains", "votes", "counter_dir"}
            and isinstance(noisy["votes"], list) and noisy["votes"]
            and all(isinstance(v, bool) for v in noisy["votes"])
            and isinstance(noisy["counter_dir"], str)):
        raise script_error(cli, "noisy must be {\"if_text_contains\": [...], \"votes\": "
                                "[true, false, ...], \"counter_dir\": \"DIR\"}")
    chosen = spec.get("activate_skills", "auto")
    if chosen != "auto" and not (isinstance(chosen, list)
                                 and all(isinstance(n, str) for n in chosen)):
        raise script_error(cli, "activate_skills must be \"auto\" or a list of skill names")
    validate_tool_calls(cli, spec.get("tool_calls", []))
    writes = [k for k in ("write_artifact", "write_artifact_hex", "artifact_bytes") if k in spec]
    if len(writes) > 1:
        raise script_error(cli, f"use only one of {', '.join(writes)}")

def validate_tool_calls(cli: str, calls: Any) -> None:
    """tool_calls: a list of {"command", "exit_code"?, "output"?}, {"edit", "old", "new"} or
    {"read"} steps."""
    if not isinstance(calls, list):
        raise script_error(cli, "tool_calls must be a list of steps")
    for step in calls:
        kind = next((k for k in TOOL_CALL_KEYS if isinstance(step, dict) and k in step), None)
        if kind is None or not set(step) <= TOOL_CALL_KEYS[kind] or not all(
                isinstance(step.get(k, ""), str) for k in TOOL_CALL_KEYS[kind] - {"exit_code"}) \
                or not isinstance(step.get("exit_code", 0), int):
            raise script_error(cli, f"bad tool_calls step {step!r}: use {{\"command\", "
                                    "\"exit_code\", \"output\"}, {\"edit\", \"old\", \"new\"} "
                                    "or {\"read\"}")
        if kind == "edit" and not {"old", "new"} <= set(step):
            raise script_error(cli, f"an edit step needs old and new: {step!r}")

# ============================================================================
# 6. prompt conventions
# ============================================================================

# Words too common to tell one skill from another when a description is matched to a task.
DESCRIPTION_STOPWORDS = frozenset((
    "when", "with", "this", "that", "then", "than", "from", "into", "your", "about", "skill",
    "skills", "using", "used", "uses", "should", "must", "will", "have", "each", "only", "also",
    "some", "such", "them", "they", "what", "which"))
TASK_HEADING = "# Task"


def task_text(prompt: str) -> str:
    """The task section of an executor prompt (the runner's own text around it would match
    any description that speaks of files or paths)."""
    lines, inside = [], False
    for line in prompt.splitlines():
        if line.startswith("# "):
            inside = line.strip() == TASK_HEADING
            continue
        if inside:
            lines.append(line)
    return "\n".join(lines) if lines else prompt


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower())
            if len(w) >= 4 and w not in DESCRIPTION_STOPWORDS}


def discovered_skills(folder: str) -> list[tuple[str, str, str]]:
    """(name, description, SKILL.md path) of each skill in a discovery folder, by name."""
    found = []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    for name in names:
        path = os.path.join(folder, name, "SKILL.md")
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError:
            continue
        match = re.search(r"^description:\s*(.+)$", text, re.MULTILINE)
        found.append((name, match.group(1).strip() if match else "", path))
    return found


def skills_to_activate(spec: dict[str, Any], prompt: str,
                       skills: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The model's choice, made from each skill's description as a real one makes it: a skill
    whose description shares a word with the task. `activate_skills` in the spec overrides:
    a list of names, or "auto" (the default)."""
    chosen = spec.get("activate_skills", "auto")
    if chosen != "auto":
        return [skill for skill in skills if skill[0] in chosen]
    task = _words(task_text(prompt))
    return [skill for skill in skills if _words(skill[1]) & task]


def line_value(prompt: str, prefix: str) -> str | None:
    """Rest of the first line starting with `prefix`, stripped, or None."""
    for line in prompt.splitlines():
        if line.startswith(prefix):
            return line[len(prefix):].strip()
    return None


def parse_assertions(prompt: str) -> list[tuple[int, str]]:
    """(id, text) pairs from the `## Assertions` section of a grader prompt."""
    found: list[tuple[int, str]] = []
    inside = False
    for line in prompt.splitlines():
        if line.startswith("## "):
            if inside:
                break
            inside = line.startswith(ASSERTIONS_HEADING)
            continue
        match = re.match(r"^(\d+)\.\s+(.*?)\s*$", line) if inside else None
        if match:
            found.append((int(match.group(1)), match.group(2)))
    return found

# ============================================================================
# 7. grader verdicts
# ============================================================================


def assertion_passes(policy: Any, ident: int, text: str) -> bool:
    if policy in (None, "all_pass"):
        return True
    if policy == "all_fail":
        return False
    if isinstance(policy, dict) and "fail_ids" in policy:
        return ident not in policy["fail_ids"]
    if isinstance(policy, dict) and "fail_if_text_contains" in policy:
        lowered = text.lower()
        return not any(w.lower() in lowered for w in policy["fail_if_text_contains"])
    raise ValueError(f"unknown verdicts policy {policy!r}")


def claim_call_index(counter_dir: str, prompt: str) -> int:
    """How many grader calls with this exact prompt came before this one (0, 1, 2, ...).

    Each call claims the lowest free number by creating `<prompt hash>-<n>` exclusively,
    so concurrent calls never share a number and the order of calls alone decides it.
    """
    os.makedirs(counter_dir, exist_ok=True)
    digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:16]
    index = 0
    while True:
        try:
            os.close(os.open(os.path.join(counter_dir, f"{digest}-{index}"),
                             os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            return index
        except FileExistsError:
            index += 1


def noisy_vote(spec: dict[str, Any], text: str, call_index: int | None) -> bool | None:
    """The scripted vote for a marked assertion on this call, None for an unmarked one."""
    noisy = spec.get("noisy")
    if not noisy or call_index is None:
        return None
    lowered = text.lower()
    if not any(w.lower() in lowered for w in noisy["if_text_contains"]):
        return None
    votes = noisy["votes"]
    return votes[call_index % len(votes)]


def verdict_payload(spec: dict[str, Any], assertions: list[tuple[int, str]],
                    call_index: int | None = None) -> dict[str, Any]:
    """The JSON object a grader answers with (verdicts or legacy shape)."""
    legacy = spec.get("verdict_form") == "legacy"
    if "raw_verdicts" in spec:
        return {"expectations" if legacy else "verdicts": spec["raw_verdicts"]}
    rows = []
    for ident, text in assertions:
        noisy = noisy_vote(spec, text, call_index)
        passed = assertion_passes(spec.get("verdicts"), ident, text) if noisy is None else noisy
        verb = "holds" if passed else "does not hold"
        evidence = f"fake grader: assertion {ident} {verb}"
        if legacy:
            rows.append({"text": text, "passed": passed, "evidence": evidence})
        else:
            rows.append({"id": ident, "passed": passed, "evidence": evidence})
    if spec.get("fault") == "lone_surrogate":
        for row in rows:
            row["evidence"] += " " + LONE_SURROGATE
    if spec.get("fault") == "verdict_flood":   # ids no assertion has, after the real ones
        rows += [{"id": 1000 + n} for n in range(FLOOD_VERDICTS)]
    return {"expectations" if legacy else "verdicts": rows}


def compact_json(data: Any) -> str:
    # ensure_ascii: a lone surrogate (fault lone_surrogate) leaves as its \\uXXXX escape
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=ASCII_JSON[0])
    if DEEP_OBJECT in text or DEEP_TEXT in text:
        deep = deep_json()
        text = text.replace(json.dumps(DEEP_OBJECT), deep)
        text = text.replace(DEEP_TEXT, json.dumps(deep)[1:-1])
    return text


ASCII_JSON = [False]   # set once per process by prepare_faults


def prepare_faults(spec: dict[str, Any]) -> None:
    """Output settings some faults need before anything is printed."""
    ASCII_JSON[0] = spec.get("fault") == "lone_surrogate"


def deep_json() -> str:
    """The deep_nesting answer: a verdict list nested DEEP_LEVELS deep (too deep to dump)."""
    return '{"verdicts":' + "[" * DEEP_LEVELS + "]" * DEEP_LEVELS + "}"


def expand_plain(text: str) -> str:
    """Plain-text output: the deep_nesting marker becomes the raw deep JSON."""
    return text.replace(DEEP_TEXT, deep_json()) if DEEP_TEXT in text else text


def render_verdict(spec: dict[str, Any], prompt: str) -> tuple[dict[str, Any] | None, str]:
    """(structured object or None, answer text) for the spec's verdict_form.

    A structured object is returned for "structured" and "legacy"; the CLI
    delivers it through its structured channel. Other forms are text only.
    """
    form = spec.get("verdict_form", "structured")
    if spec.get("fault") == "deep_nesting":
        return DEEP_OBJECT, DEEP_TEXT   # printed as the real thing by compact_json
    if form == "prose":
        return None, spec.get("text", DEFAULT_PROSE_VERDICT)
    call_index = (claim_call_index(spec["noisy"]["counter_dir"], prompt)
                  if spec.get("noisy") else None)
    payload = verdict_payload(spec, parse_assertions(prompt), call_index)
    if form in ("structured", "legacy"):
        return payload, compact_json(payload)
    pretty = json.dumps(payload, indent=2, ensure_ascii=False)
    if form == "text":
        return None, pretty
    return None, f"Here is my assessment of the recorded output.\n\n```json\n{pretty}\n```\n"

# ============================================================================
# 8. executor actions
# ============================================================================


@dataclass
class Action:
    kind: str                 # "read", "write", "edit" or "command"
    path: str                 # absolute ("" for a command)
    data: bytes = b""
    result: str = ""          # filled when performed: file text or error text
    ok: bool = False
    existed: bool = False
    command: str = ""         # a command step: what the CLI's shell tool is said to run
    exit_code: int = 0
    output: str = ""          # ...and what it is said to print
    old: str = ""             # an edit step: the text replaced, and its replacement
    new: str = ""


def plan_actions(cli: str, spec: dict[str, Any], prompt: str, root: str) -> list[Action]:
    """The reads and writes an executor spec asks for, in a fixed order.

    `shell_write_files` and `shell_symlinks` are done here, at once, as a shell
    command would do them: no permission or sandbox check and no tool event.
    """
    perform_shell_actions(spec, root)
    actions: list[Action] = []
    skill = line_value(prompt, SKILL_PREFIX)
    if skill and spec.get("read_skill", True):
        actions.append(Action("read", _absolute(skill, root)))
    for path in spec.get("read_paths") or []:
        actions.append(Action("read", _absolute(path, root)))
    data = artifact_bytes(spec)
    if data is not None:
        artifact = line_value(prompt, ARTIFACT_PREFIX)
        if not artifact:
            raise script_error(cli, "spec writes the artifact but the prompt has no "
                                    f"'{ARTIFACT_PREFIX}' line")
        actions.append(Action("write", _absolute(artifact, root), data))
    for path, content in (spec.get("write_files") or {}).items():
        actions.append(Action("write", _absolute(path, root), content.encode("utf-8")))
    for step in spec.get("tool_calls") or []:
        actions.append(tool_call_action(step, root))
    return actions


def tool_call_action(step: dict[str, Any], root: str) -> Action:
    """A `tool_calls` step. A command is not run: the CLI's event says it ran, with the exit
    status and output the script gives. An edit and a read are real."""
    if "command" in step:
        return Action("command", "", command=step["command"],
                      exit_code=step.get("exit_code", 0), output=step.get("output", ""))
    if "edit" in step:
        return Action("edit", _absolute(step["edit"], root), old=step["old"], new=step["new"])
    return Action("read", _absolute(step["read"], root))


def executor_text(spec: dict[str, Any], actions: list[Action], root: str = ".") -> str:
    """The final answer; with `quote_reads`, followed by the text of every file read, so the
    answer depends on what the executor was given (a skill version, say); with `list_paths`,
    by a line per folder naming its entries, as `ls` would show them."""
    text = spec.get("text", DEFAULT_EXECUTOR_TEXT)
    if spec.get("quote_reads"):
        text += "".join(f"\n\n{a.result}" for a in actions if a.kind == "read" and a.ok)
    for path in spec.get("list_paths") or []:
        try:
            entries = ",".join(sorted(os.listdir(_absolute(path, root))))
        except OSError as exc:
            entries = f"<{exc.strerror}>"
        text += f"\nlisting {path}: {entries}"
    if spec.get("read_tree"):
        text += read_whole_tree(root)
    if spec.get("fault") == "lone_surrogate":
        text += " " + LONE_SURROGATE
    return text


def read_whole_tree(root: str) -> str:
    """A nosy executor: every regular file under its working root (.git included, no link
    followed), then every object its git can reach (`git cat-file --batch-all-objects`, the
    borrowed stores included, packs decompressed) and the history (`git log --all -p`)."""
    parts = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(folder, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            try:
                with open(path, "rb") as handle:
                    data = handle.read()
            except OSError:
                continue
            parts.append(f"\n\nfile {os.path.relpath(path, root)}:\n"
                         + data.decode("utf-8", "replace"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    for argv in (["git", "cat-file", "--batch-all-objects", "--batch"],
                 ["git", "log", "--all", "-p"]):
        try:
            done = subprocess.run(argv, cwd=root, env=env, capture_output=True, timeout=60,
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            continue
        parts.append(f"\n\n{' '.join(argv)}:\n" + done.stdout.decode("utf-8", "replace"))
    return "".join(parts)


def perform_shell_actions(spec: dict[str, Any], root: str) -> None:
    """A hostile executor's shell: write files and plant links, unchecked."""
    for path, content in (spec.get("shell_write_files") or {}).items():
        # `$PPID` expands as a shell would: the process that started this agent (the runner),
        # so `/proc/$PPID/cwd/...` reaches wherever the runner was started (the checkout).
        target = _absolute(path.replace("$PPID", str(os.getppid())), root)
        # a pattern is expanded as a shell would (`tee ../*/x`): existing matches only
        matches = sorted(glob.glob(target)) if set("*?[") & set(target) else [target]
        for match in matches:
            times = _times_of(match) if spec.get("shell_keep_times") else None
            write = Action("write", match, content.encode("utf-8"))
            perform_write(write)
            if times is not None and write.ok:  # `touch -r`: its times as they were before
                os.utime(match, ns=times)
    for path, target in (spec.get("shell_symlinks") or {}).items():
        link = _absolute(path, root)
        try:
            os.makedirs(os.path.dirname(link), exist_ok=True)
            if os.path.isdir(link) and not os.path.islink(link):
                shutil.rmtree(link)
            elif os.path.lexists(link):
                os.unlink(link)
            os.symlink(target, link)
        except OSError:
            pass
    for path, kind in (spec.get("shell_special") or {}).items():
        plant_special(_absolute(path, root), kind)
    for path, data in (spec.get("shell_write_hex") or {}).items():  # bytes no text can hold
        perform_write(Action("write", _absolute(path, root), bytes.fromhex(data)))
    for path, mode in (spec.get("shell_chmod") or {}).items():  # last: `chmod 000 .` locks it
        try:
            os.chmod(_absolute(path, root), int(mode, 8))
        except OSError:
            pass


def _times_of(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_atime_ns, info.st_mtime_ns


def plant_special(path: str, kind: str) -> None:
    """Put a FIFO, a socket or a folder at `path`, replacing whatever is there (mkfifo...)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        os.mkdir(path)
    else:  # bound from its folder: a socket path may not exceed about 100 bytes
        import socket
        here = os.getcwd()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            os.chdir(os.path.dirname(path))
            sock.bind(os.path.basename(path))
        finally:
            sock.close()
            os.chdir(here)


def artifact_bytes(spec: dict[str, Any]) -> bytes | None:
    if "write_artifact" in spec:
        return spec["write_artifact"].encode("utf-8")
    if "write_artifact_hex" in spec:
        return bytes.fromhex(spec["write_artifact_hex"])
    if "artifact_bytes" in spec:
        return b"a" * int(spec["artifact_bytes"])
    return None


def _absolute(path: str, root: str) -> str:
    return os.path.normpath(os.path.join(root, os.path.expanduser(path)))


def perform_read(action: Action) -> None:
    try:
        with open(action.path, "rb") as handle:
            action.result = handle.read().decode("utf-8", "replace")
        action.ok = True
    except OSError as exc:
        action.result = exc.strerror or str(exc)


def perform_write(action: Action) -> None:
    """Write as the OS does: parents created, symlinks followed."""
    action.existed = os.path.lexists(action.path)
    try:
        os.makedirs(os.path.dirname(action.path), exist_ok=True)
        with open(action.path, "wb") as handle:
            handle.write(action.data)
        action.ok = True
    except OSError as exc:
        action.result = exc.strerror or str(exc)


def perform_edit(action: Action) -> None:
    """Replace the first `old` with `new` in the file, as an edit tool does; a file that is
    missing or lacks `old` is an error."""
    try:
        with open(action.path, encoding="utf-8") as handle:
            text = handle.read()
        if action.old not in text:
            action.result = "old text not found in the file"
            return
        with open(action.path, "w", encoding="utf-8") as handle:
            handle.write(text.replace(action.old, action.new, 1))
        action.ok = True
    except OSError as exc:
        action.result = exc.strerror or str(exc)


def is_inside(path: str, roots: list[str]) -> bool:
    """Whether `path`, symlinks resolved, lies in one of `roots`."""
    real = os.path.realpath(path)
    for root in roots:
        top = os.path.realpath(root)
        if real == top or real.startswith(top.rstrip(os.sep) + os.sep):
            return True
    return False

# ============================================================================
# 9. process behaviour
# ============================================================================


def restore_sigpipe() -> None:
    """Die on a closed stdout like a native CLI instead of raising."""
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def stdin_is_terminal() -> bool:
    try:
        return os.isatty(0)
    except OSError:
        return True


def stdin_is_stream() -> bool:
    """True for a pipe, socket or regular file (anything but a tty/device)."""
    import stat
    try:
        mode = os.fstat(0).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISREG(mode)


def read_stdin_all() -> str:
    chunks = []
    while True:
        chunk = os.read(0, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def stdin_ready(timeout_s: float) -> bool:
    try:
        readable, _, _ = select.select([0], [], [], timeout_s)
    except (OSError, ValueError):
        return False
    return bool(readable)


def out(text: str) -> None:
    """Write to stdout right away (a streaming CLI flushes each line)."""
    sys.stdout.buffer.write(expand_plain(text).encode("utf-8", "surrogatepass"))
    sys.stdout.buffer.flush()


def err(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def jsonl(events: list[dict[str, Any]]) -> str:
    return "".join(compact_json(e) + "\n" for e in events)


def hang_forever() -> None:
    while True:
        time.sleep(3600)


def spawn_grandchild() -> subprocess.Popen:
    """A `sleep` in our process group that inherits env, stdout and stderr."""
    return subprocess.Popen(["sleep", "100000"], stdin=subprocess.DEVNULL)


def flood(total: int) -> None:
    chunk = b"x" * (1 << 20)
    left = total
    while left > 0:
        sys.stdout.buffer.write(chunk[:min(left, len(chunk))])
        left -= len(chunk)
    sys.stdout.buffer.write(b"\n")
    sys.stdout.buffer.flush()


def emit_stdout(text: str, spec: dict[str, Any]) -> None:
    """Print the finished stdout, bent by the output faults."""
    fault = spec.get("fault")
    if fault == "truncated":
        text = text[: len(text) // 2]
    elif fault == "flood":
        flood(int(spec.get("flood_bytes", DEFAULT_FLOOD_BYTES)))
    if spec.get("pause_after") and spec["pause_after"] in text:
        text = pause_after_line(text, spec)
    out(text)


def pause_after_line(text: str, spec: dict[str, Any]) -> str:
    """Print up to the first line holding `pause_after` as it would stream, then take
    `pause_s` seconds (a model still working) and write `then_write` (path -> text), which a
    process ended at that line never does; the rest of the output is returned."""
    at = text.index(spec["pause_after"])
    cut = text.find("\n", at) + 1 or len(text)
    out(text[:cut])
    time.sleep(float(spec.get("pause_s", 60)))
    for path, content in (spec.get("then_write") or {}).items():
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(content)
    return text[cut:]


def remove_tree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def new_uuid() -> str:
    return str(uuid.uuid4())


def new_uuid7() -> str:
    """A time-ordered UUID (version 7), as codex uses for thread ids."""
    millis = time.time_ns() // 1_000_000
    value = (millis & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= (int.from_bytes(os.urandom(2), "big") & 0x0FFF) << 64
    value |= 0b10 << 62
    value |= int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))


def run_cli(cli: str, argv: list[str], body) -> int:
    """Shared top level: run `body(log)`, turn FakeExit into output and a code."""
    restore_sigpipe()
    if os.environ.get("FAKE_AGENT_IGNORE_SIGTERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)   # inherited by grandchildren
    log = InvocationLog(cli, argv)
    try:
        return body(log)
    except FakeExit as stop:
        log.write()
        if stop.stdout:
            out(stop.stdout)
        if stop.stderr:
            err(stop.stderr)
        return stop.code
