"""Mutation test for `validate`: damaged suites get a clean verdict, never a crash.

Valid suites (this repository's own, helpers.demo_suite and, when present, the peer corpus)
are damaged thousands of times with fixed seeds: keys deleted or misspelt, values of the wrong
type, NaN/Infinity, duplicate keys, colliding ids, deep nesting, huge strings, fixture paths
that point somewhere they must not, truncated text, flipped bytes, invalid UTF-8. Every
mutated file goes through `main(["validate", path])` in-process; the contract checked each
time is: exit 0 or 2, no traceback or internal error, and an exit 2 names at least one located
error with a fix. A share of the mutations also goes through `--json`, whose object must agree
with the exit code.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import random
import shutil
import sys
import time
import unittest
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import (
    PEER_CORPUS,
    PROJECT,
    TempDir,
    demo_suite,
    git,
    make_repo,
    runner,
    volume_test,
)

SEEDS = (1, 20240917, 4242, 777)
MUTATIONS_PER_SEED = 550          # 4 seeds x 550 = 2,200 mutated suites
JSON_EVERY = 6                    # every 6th mutation also goes through --json
MIN_MUTATIONS = 2000

# Inputs that once crashed the validator (see KnownCrashTests below); the random pool draws
# them too, so a regression shows up here as well as in the targeted tests.
INCLUDE_KNOWN_CRASHERS = True

BAD_UTF8 = (b"\xff", b"\xfe\xfe", b"\xc3\x28", b"\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
            b"\xc0\xaf", b"\xe2\x82", b"\xf0\x9f\x98")
JSON_JUNK = (",", "}", "]", "{", "[", ":", '"', "\\", "NaN", "Infinity", "-Infinity", "1e999",
             "tru", "nul", "\x00", "\ufeff", "//", "/*", "'", "\t\n")
ODD_VALUES = (None, True, False, 0, -1, 1.5, 2 ** 63, "", " ", "x", "\x00", "\ud800", [], [None],
              [[]], [""], {}, {"": ""}, {"id": 1}, ["a", 1, None], "evals", "../..")


def _capture(argv: list[str]) -> tuple[int, str, str]:
    """main(argv) in-process with streams that behave like the real ones.

    helpers.call_main captures into StringIO, which accepts any text; here stdout is strict
    UTF-8 (as a terminal or pipe is) and stderr uses backslashreplace (as Python's does), so a
    message that could not be printed for real also fails here.
    """
    out_raw, err_raw = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_raw, encoding="utf-8", errors="strict", newline="\n")
    err = io.TextIOWrapper(err_raw, encoding="utf-8", errors="backslashreplace", newline="\n")
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = runner.main(argv)
    out.flush()
    err.flush()
    return code, out_raw.getvalue().decode("utf-8"), err_raw.getvalue().decode("utf-8")


@dataclass
class Base:
    label: str
    root: Path
    suite: Path
    data: dict
    odd_paths: list


def _plant_odd_places(root: Path, suite: Path, outside: Path) -> list:
    """Files and links a fixture entry must not reach, plus a few it may; returns entries."""
    skill_dir = suite.parent
    fixtures = skill_dir / "fixtures"
    (fixtures / "dir" / "sub").mkdir(parents=True, exist_ok=True)
    (fixtures / "ok.txt").write_text("ok\n", encoding="utf-8")
    (fixtures / "dir" / "a.txt").write_text("a\n", encoding="utf-8")
    (fixtures / "dir" / "sub" / "b.txt").write_text("b\n", encoding="utf-8")
    planted = {".git/config": "[core]\n", ".claude/settings.json": "{}",
               ".agents/notes.md": "x", ".codex/config.toml": "x=1",
               "node_modules/pkg/index.js": "1;",
               f"{skill_dir.relative_to(root).as_posix()}/workspace/claude/iteration-1/run.json":
                   "{}"}
    for rel, text in planted.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        if not (root / rel).exists():
            (root / rel).write_text(text, encoding="utf-8")
    links = {"link-out": outside / "secret.txt", "link-out-dir": outside,
             "link-in": Path("ok.txt"), "link-git": root / ".git" / "config",
             "link-suite": suite, "link-loop": fixtures / "link-loop",
             "link-dangling": fixtures / "no-such-file"}
    for name, target in links.items():
        link = fixtures / name
        if not os.path.lexists(link):
            os.symlink(target, link)
    suite_rel = suite.relative_to(root).as_posix()
    skill_rel = skill_dir.relative_to(root).as_posix()
    return [
        "..", "../", "../outside/secret.txt", "../../../../../../etc/passwd", "/etc/passwd",
        str(fixtures / "ok.txt"), "~", "~/x", ".git", ".git/config", ".claude/settings.json",
        ".agents/notes.md", ".codex/config.toml", "node_modules", "node_modules/pkg/index.js",
        f"{skill_rel}/workspace", f"{skill_rel}/workspace/claude/iteration-1/run.json",
        suite_rel, "evals.json", "fixtures/../evals.json", f"{skill_rel}/./evals.json",
        "fixtures/link-out", "fixtures/link-out-dir", "fixtures/link-in", "fixtures/link-git",
        "fixtures/link-suite", "fixtures/link-loop", "fixtures/link-dangling", "link-out",
        "link-suite", "dir", "ok.txt", "fixtures/dir", f"{skill_rel}/fixtures/ok.txt",
        f"{skill_rel}/fixtures/dir/sub", "fixtures//ok.txt", "./fixtures/./ok.txt",
        "fixtures/ok.txt/", "", " ", "a\x00b", "\ud800", "C:\\Windows\\win.ini",
        "\\\\server\\share", "x" * 5000, "/".join([".."] * 60), "évals/ünïcode.txt",
        "fixtures/no-such-file", "skills", "evals",
    ]


def _build_bases(tmp: Path) -> list:
    outside = tmp / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n", encoding="utf-8")
    bases = []

    own = tmp / "own"
    (own / "evals" / "skill-eval").mkdir(parents=True)
    (own / "skills" / "skill-eval").mkdir(parents=True)
    shutil.copyfile(PROJECT / "evals" / "skill-eval" / "evals.json",
                    own / "evals" / "skill-eval" / "evals.json")
    shutil.copyfile(PROJECT / "skills" / "skill-eval" / "SKILL.md",
                    own / "skills" / "skill-eval" / "SKILL.md")
    bases.append(("own", own, own / "evals" / "skill-eval" / "evals.json"))

    (tmp / "demo").mkdir()
    demo = make_repo(tmp / "demo", demo_suite(4), use_git=False)
    bases.append(("demo", demo, demo / "evals" / "demo" / "evals.json"))

    if PEER_CORPUS.is_dir():
        peer = tmp / "peer"
        shutil.copytree(PEER_CORPUS, peer, symlinks=True, copy_function=shutil.copyfile)
        for dirpath, _, filenames in os.walk(peer):
            os.chmod(dirpath, 0o755)
            for name in filenames:
                os.chmod(os.path.join(dirpath, name), 0o644)
        for suite in sorted(peer.glob("evals/*/evals.json")):
            bases.append((f"peer:{suite.parent.name}", peer, suite))

    result = []
    for label, root, suite in bases:
        data = json.loads(suite.read_text(encoding="utf-8"))
        odd = _plant_odd_places(root, suite, outside)
        result.append(Base(label, root, suite, data, odd))
    return result


class Mutator:
    """Applies one to three random mutations to a suite and returns the bytes to write."""

    def __init__(self, rng: random.Random, base: Base):
        self.rng = rng
        self.base = base
        self.tokens: dict = {}   # placeholder string -> raw JSON text substituted after dumps
        self.kinds: list = []

    # -- helpers -----------------------------------------------------------

    def placeholder(self, raw_json: str) -> str:
        token = f"@@MUT{len(self.tokens)}@@"
        self.tokens[token] = raw_json
        return token

    def slots(self, doc) -> list:
        """Every (container, key) pair in the tree."""
        found, stack = [], [doc]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                pairs = list(node.items())
            elif isinstance(node, list):
                pairs = list(enumerate(node))
            else:
                continue
            for key, value in pairs:
                found.append((node, key))
                stack.append(value)
        return found

    def objects(self, doc) -> list:
        inner = [c[k] for c, k in self.slots(doc) if isinstance(c[k], dict)]
        return [doc, *inner] if isinstance(doc, dict) else inner

    def cases(self, doc) -> list:
        evals = doc.get("evals") if isinstance(doc, dict) else None
        return [c for c in evals if isinstance(c, dict)] if isinstance(evals, list) else []

    def typo(self, word: str) -> str:
        rng = self.rng
        if not word:
            return "x"
        i = rng.randrange(len(word))
        choice = rng.randrange(5)
        if choice == 0:
            return word[:i] + word[i + 1:] or "_"
        if choice == 1:
            return word[:i] + rng.choice("abcdefghijklmnopqrstuvwxyz_-") + word[i:]
        if choice == 2 and len(word) > 1:
            j = min(i + 1, len(word) - 1)
            chars = list(word)
            chars[i], chars[j] = chars[j], chars[i]
            return "".join(chars)
        if choice == 3:
            return word.upper() if word != word.upper() else word.lower() + "s"
        return word + rng.choice(("s", "_", " ", "2"))

    def odd_value(self):
        value = self.rng.choice(ODD_VALUES)
        return json.loads(json.dumps(value))  # a fresh copy

    # -- tree mutations ----------------------------------------------------

    def delete_key(self, doc):
        objs = [o for o in self.objects(doc) if o]
        if objs:
            obj = self.rng.choice(objs)
            del obj[self.rng.choice(list(obj))]
        return doc

    def rename_key(self, doc):
        objs = [o for o in self.objects(doc) if o]
        if objs:
            obj = self.rng.choice(objs)
            key = self.rng.choice(list(obj))
            obj[self.typo(key)] = obj.pop(key)
        return doc

    def change_type(self, doc):
        slots = self.slots(doc)
        if not slots:
            return self.odd_value()
        container, key = self.rng.choice(slots)
        container[key] = self.odd_value()
        return doc

    def non_finite(self, doc):
        slots = self.slots(doc)
        token = self.rng.choice(("NaN", "Infinity", "-Infinity", "1e400", "-1e400"))
        if slots:
            container, key = self.rng.choice(slots)
            container[key] = self.placeholder(token)
        return doc

    def duplicate_key(self, doc):
        objs = [o for o in self.objects(doc) if o]
        if objs:
            obj = self.rng.choice(objs)
            existing = self.rng.choice(list(obj))
            obj[self.placeholder(json.dumps(existing))] = self.odd_value()
        return doc

    def deep_nesting(self, doc):
        depth = self.rng.choice((10, 63, 64, 65, 66, 300, 990, 5000, 100000))
        if self.rng.random() < 0.5:
            raw = "[" * depth + "]" * depth
        else:
            raw = '{"a":' * depth + "1" + "}" * depth
        slots = self.slots(doc)
        if not slots:
            return doc
        container, key = self.rng.choice(slots)
        container[key] = self.placeholder(raw)
        return doc

    def huge_string(self, doc):
        size = self.rng.choice((1000, 50_000, 300_000, 1_500_000))
        unit = self.rng.choice(("word ", "é ", "\u4e2d ", "a\n", "\\ "))
        text = (unit * (size // len(unit) + 1))[:size]
        slots = self.slots(doc)
        if not slots:
            return text
        container, key = self.rng.choice(slots)
        if self.rng.random() < 0.2 and isinstance(container, dict):
            container[text[:5000]] = container.pop(key)   # a huge key
        else:
            container[key] = text
        return doc

    def long_name(self, doc):
        """A name that is a valid folder name in form but too long for the file system."""
        cases = self.cases(doc)
        length = self.rng.choice((200, 255, 256, 1000))
        if INCLUDE_KNOWN_CRASHERS and isinstance(doc, dict) and self.rng.random() < 0.5:
            doc["skill_name"] = "s" * length
        elif cases:
            self.rng.choice(cases)["id"] = "c" * length
        return doc

    def big_number(self, doc):
        digits = self.rng.choice((19, 20, 309, 400, 4300) +
                                 ((4301, 10000) if INCLUDE_KNOWN_CRASHERS else ()))
        raw = self.rng.choice(("", "-")) + "9" * digits
        if self.rng.random() < 0.3:
            raw += self.rng.choice((".5", "e5", "e-400", "e400"))
        cases = self.cases(doc)
        if cases and self.rng.random() < 0.7:
            self.rng.choice(cases)["id"] = self.placeholder(raw)
        else:
            slots = self.slots(doc)
            if slots:
                container, key = self.rng.choice(slots)
                container[key] = self.placeholder(raw)
        return doc

    def colliding_ids(self, doc):
        cases = self.cases(doc)
        if not cases:
            return doc
        pick = self.rng.randrange(4)
        if pick == 0 and len(cases) > 1:
            a, b = self.rng.sample(cases, 2)
            b["id"] = a.get("id")
        elif pick == 1 and len(cases) > 1:
            a, b = self.rng.sample(cases, 2)
            n = self.rng.randrange(100)
            a["id"], b["id"] = n, str(n)
        elif pick == 2:
            doc["evals"].append(json.loads(json.dumps(self.rng.choice(cases))))
        else:
            self.rng.choice(cases)["id"] = self.rng.choice(
                ("", " E01", "E01 ", "a/b", "..", ".", "-x", "E 01", True, 1.0, None, [], {},
                 "\u00e9", "\x00"))
        return doc

    def odd_files(self, doc):
        cases = self.cases(doc)
        if not cases:
            return doc
        case = self.rng.choice(cases)
        entries = self.rng.sample(self.base.odd_paths, self.rng.randint(1, 3))
        if self.rng.random() < 0.3:
            entries.append("fixtures/ok.txt")
        if self.rng.random() < 0.1:
            entries = entries * 2
        case["files"] = entries
        return doc

    def empty_lists(self, doc):
        targets = []
        if isinstance(doc, dict):
            targets += [(doc, "evals"), (doc, "common_assertions")]
        for case in self.cases(doc):
            targets += [(case, "expectations"), (case, "files")]
        for container, key in self.rng.sample(targets, min(len(targets),
                                                          self.rng.randint(1, 4))):
            container[key] = []
        return doc

    def many_cases(self, doc):
        cases = self.cases(doc)
        if cases:
            count = self.rng.choice((50, 400, 1500))
            # Each case its own deep copy: shallow copies shared their lists, so one later
            # huge_string landed in all 1,500 cases and built an 800 MB suite in memory (the
            # test suite's peak), only for validate to refuse it unread as over 10 MB.
            doc["evals"] = [dict(copy.deepcopy(self.rng.choice(cases)), id=f"M{i}")
                            for i in range(count)]
        return doc

    def replace_document(self, doc):
        return self.rng.choice((None, 0, "suite", [], [doc], {}, {"evals": []},
                                {"skill_name": doc.get("skill_name") if isinstance(doc, dict)
                                 else "x"}))

    TREE_OPS = ("delete_key", "rename_key", "change_type", "non_finite", "duplicate_key",
                "deep_nesting", "huge_string", "long_name", "big_number", "colliding_ids",
                "odd_files", "empty_lists", "many_cases", "replace_document")
    TREE_WEIGHTS = (12, 12, 12, 5, 6, 4, 3, 2, 3, 7, 12, 5, 1, 1)

    # -- byte mutations ----------------------------------------------------

    def truncate(self, data: bytes) -> bytes:
        return data[:self.rng.randrange(len(data) + 1)]

    def flip_bytes(self, data: bytes) -> bytes:
        buf = bytearray(data)
        for _ in range(self.rng.randint(1, 6)):
            if buf:
                i = self.rng.randrange(len(buf))
                buf[i] ^= self.rng.randrange(1, 256)
        return bytes(buf)

    def bad_utf8(self, data: bytes) -> bytes:
        i = self.rng.randrange(len(data) + 1)
        return data[:i] + self.rng.choice(BAD_UTF8) + data[i:]

    def junk_token(self, data: bytes) -> bytes:
        i = self.rng.randrange(len(data) + 1)
        return data[:i] + self.rng.choice(JSON_JUNK).encode("utf-8") + data[i:]

    def cut_slice(self, data: bytes) -> bytes:
        if not data:
            return data
        i = self.rng.randrange(len(data))
        return data[:i] + data[i + self.rng.randint(1, 200):]

    def bom_and_ends(self, data: bytes) -> bytes:
        pick = self.rng.randrange(6)
        if pick == 0:
            return b"\xef\xbb\xbf" + data                     # accepted
        if pick == 1:
            return b"\xef\xbb\xbf\xef\xbb\xbf" + data         # a second BOM is content
        if pick == 2:
            return data.replace(b"\n", b"\r\n")
        if pick == 3:
            return data + self.rng.choice((b"\n", b" x", b"{}", b"\x00", b"]"))
        if pick == 4:
            return self.rng.choice((b"", b" ", b"\n\n", b"\x00" * 8, b"null", b"{"))
        return "\ufeff".encode("utf-16") + data.decode("utf-8", "replace").encode("utf-16")

    def oversized(self, data: bytes) -> bytes:
        limit = runner.MAX_SUITE_BYTES
        pad = limit - len(data) + self.rng.choice((-1, 0, 1, 4096))
        return data.rstrip() + b" " * max(pad, 0) + b"\n"

    BYTE_OPS = ("truncate", "flip_bytes", "bad_utf8", "junk_token", "cut_slice", "bom_and_ends",
                "oversized")
    BYTE_WEIGHTS = (5, 5, 4, 5, 4, 3, 0.15)

    # -- one mutated document ----------------------------------------------

    def mutate(self) -> bytes:
        doc = json.loads(json.dumps(self.base.data))
        rng = self.rng
        roll = rng.random()
        if roll < 0.75:  # structural, sometimes followed by byte damage
            for _ in range(rng.choice((1, 1, 1, 2, 3))):
                op = rng.choices(self.TREE_OPS, self.TREE_WEIGHTS)[0]
                self.kinds.append(op)
                doc = getattr(self, op)(doc)
        text = json.dumps(doc, indent=rng.choice((None, 2)), ensure_ascii=rng.random() < 0.5)
        for token, raw in self.tokens.items():
            text = text.replace(json.dumps(token), raw)
        data = text.encode("utf-8", "surrogatepass")
        if roll >= 0.6:
            op = rng.choices(self.BYTE_OPS, self.BYTE_WEIGHTS)[0]
            self.kinds.append(op)
            data = getattr(self, op)(data)
        return data


class ValidateMutationTest(unittest.TestCase):
    maxDiff = 2000

    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.bases = _build_bases(self.tmp.path)

    def check_human(self, code: int, out: str, err: str, what: str) -> None:
        self.assertIn(code, (0, 2), what)
        self.assertNotIn("Traceback", out + err, what)
        self.assertNotIn("internal error", err, what)
        if code == 0:
            self.assertTrue(out.startswith("OK: "), what)
            self.assertNotIn(": error:", err, what)
        else:
            self.assertIn(f"{runner.PROG}: error: ", err, what)
            located = [line for line in err.splitlines()
                       if line.startswith(("  at: ", "  fix: "))]
            self.assertTrue(located, what)
            self.assertIn("INVALID: ", err, what)

    def check_json(self, code: int, out: str, err: str, what: str) -> None:
        self.assertIn(code, (0, 2), what)
        self.assertNotIn("Traceback", out + err, what)
        self.assertNotIn("internal error", err, what)
        report = json.loads(out)
        self.assertIsInstance(report, dict, what)
        for key in ("ok", "errors", "warnings", "counts"):
            self.assertIn(key, report, what)
        self.assertEqual(report["ok"], code == 0, what)
        self.assertEqual(bool(report["errors"]), code == 2, what)
        self.assertEqual(report["counts"]["errors"], len(report["errors"]), what)
        self.assertEqual(report["counts"]["warnings"], len(report["warnings"]), what)
        for problem in report["errors"] + report["warnings"]:
            self.assertTrue(problem["message"] and problem["fix"], what)
            self.assertTrue(problem["file"] or problem["json_path"], what)

    def test_bases_are_valid(self) -> None:
        for base in self.bases:
            with self.subTest(base.label):
                code, out, err = _capture(["validate", str(base.suite)])
                self.assertEqual(code, 0, err)

    @volume_test
    def test_mutated_suites_never_crash(self) -> None:
        started = time.monotonic()
        outcomes = {0: 0, 2: 0}
        as_json = 0
        count = 0
        for seed in SEEDS:
            rng = random.Random(seed)
            for i in range(MUTATIONS_PER_SEED):
                base = self.bases[(seed + i) % len(self.bases)]
                mutator = Mutator(rng, base)
                data = mutator.mutate()
                base.suite.write_bytes(data)
                argv = ["validate", str(base.suite)]
                use_json = i % JSON_EVERY == 0
                if use_json:
                    argv.append("--json")
                if rng.random() < 0.05:
                    argv += ["--repo-root", str(rng.choice(
                        (base.root, base.suite.parent, self.tmp.path / "outside",
                         self.tmp.path / "missing")))]
                what = (f"seed {seed} mutation {i} on {base.label}: {mutator.kinds} "
                        f"(argv {argv[2:]})")
                try:
                    code, out, err = _capture(argv)
                except BaseException as exc:  # noqa: BLE001 - any escape is the failure
                    self.fail(f"{what}: main raised {type(exc).__name__}: {exc}")
                if use_json:
                    as_json += 1
                    self.check_json(code, out, err, f"{what}\n{err[-2000:]}")
                else:
                    self.check_human(code, out, err, f"{what}\n{err[-2000:]}")
                outcomes[code] += 1
                count += 1
        elapsed = time.monotonic() - started
        print(f"\n[validate mutation test] {count} mutated suites ({as_json} via --json) over "
              f"{len(self.bases)} base suites: exit 0: {outcomes[0]}, exit 2: {outcomes[2]}; "
              f"{elapsed:.1f} s", file=sys.stderr)
        self.assertGreaterEqual(count, MIN_MUTATIONS)
        # Both outcomes must be common, or the mutations (or the bases) are not doing their job.
        self.assertGreater(outcomes[0], count // 20)
        self.assertGreater(outcomes[2], count // 2)

    def test_validate_writes_nothing(self) -> None:
        base = self.bases[0]
        before = sorted(p.relative_to(self.tmp.path) for p in self.tmp.path.rglob("*"))
        rng = random.Random(99)
        for _ in range(100):
            base.suite.write_bytes(Mutator(rng, base).mutate())
            _capture(["validate", str(base.suite)])
        after = sorted(p.relative_to(self.tmp.path) for p in self.tmp.path.rglob("*"))
        self.assertEqual(before, after)


class KnownCrashTests(unittest.TestCase):
    """Inputs that once made `validate` end in "internal error": now clear errors."""

    def setUp(self) -> None:
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)

    def validate_text(self, text: str) -> tuple[int, str, str]:
        root = make_repo(self.tmp.path, text, use_git=False)
        git(root, "init", "-q")   # the root is this folder, whatever the folders above hold
        return _capture(["validate", str(root / "evals" / "demo" / "evals.json")])

    def assert_clean_error(self, code: int, err: str) -> None:
        self.assertEqual(code, 2, err)
        self.assertNotIn("internal error", err)
        self.assertIn("  fix: ", err)

    def test_integer_with_more_than_4300_digits(self) -> None:
        # json.loads raises ValueError (int max str digits), which parse_json_document misses.
        text = '{"skill_name": "demo", "evals": [{"id": ' + "1" * 5000 + ', "prompt": "p"}]}'
        code, _, err = self.validate_text(text)
        self.assert_clean_error(code, err)

    def test_skill_name_longer_than_a_file_name(self) -> None:
        # Path.is_file raises OSError(ENAMETOOLONG) in check_skill_package.
        code, _, err = self.validate_text(json.dumps({"skill_name": "s" * 300, "evals": []}))
        self.assert_clean_error(code, err)


if __name__ == "__main__":
    unittest.main()
