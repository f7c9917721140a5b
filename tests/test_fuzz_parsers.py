"""Fuzz (issue 14): whatever an agent CLI prints, each run ends with a documented status.

For each provider, 2,000 cells run through the real executor and grader steps with the
subprocess replaced by a generated ProcessResult: random JSON shapes and depths, invalid
UTF-8, NUL bytes, lone surrogates, huge numbers and truncated streams, from fixed seeds.
Every cell must end with a documented status (never runner_error), every file of the run must
be written and be valid UTF-8, and the benchmark of them all must be written and rendered.
"""

from __future__ import annotations

import concurrent.futures
import json
import random
import unittest
from unittest import mock

from tests import helpers as h

runner = h.runner
CELLS_PER_PROVIDER = 2000
FULL_EVERY = 10   # every 10th cell runs the whole step pipeline and writes its files
SEEDS = {"claude": 14_001, "codex": 14_002}
DOCUMENTED = set(runner._STATUSES) - {"runner_error"}
ASSERTIONS = ["It is polite.", "It mentions item 1.", "It is short."]


# -- generators --------------------------------------------------------------------------


def random_scalar(rng: random.Random) -> object:
    kind = rng.randrange(11)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randint(-5, 5)
    if kind == 2:
        return 10 ** rng.choice([19, 40, 309, 400, 4000])  # 4000: json.loads still reads it
    if kind == 3:
        return rng.choice([1e308, -1e308, 5e-324, 0.5])
    if kind == 4:
        return "\ud800" + rng.choice(["", "x", "\udc00"])  # lone and reversed surrogates
    if kind == 5:
        return "nul\x00byte"
    if kind == 6:
        return "".join(chr(rng.randrange(0x110000)) for _ in range(rng.randrange(8)))
    if kind == 7:
        return rng.choice(["", "1", " 2 ", "3", "x"])
    return "".join(rng.choice("ab {}[]\":,\\\n") for _ in range(rng.randrange(20)))


def random_value(rng: random.Random, depth: int = 0) -> object:
    if depth > 6 or rng.random() < 0.35:
        return random_scalar(rng)
    if rng.random() < 0.5:
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = ["id", "passed", "evidence", "verdicts", "expectations", "type", "result", "text",
            "usage", "item", "structured_output", "is_error", "message", "content", "x"]
    return {rng.choice(keys): random_value(rng, depth + 1) for _ in range(rng.randrange(5))}


def random_verdicts(rng: random.Random) -> object:
    choice = rng.randrange(5)
    if choice == 0:
        return random_value(rng)
    if choice == 1:
        return [runner_verdict(i) for i in range(1, len(ASSERTIONS) + 1)]
    items = []
    for _ in range(rng.randrange(6)):
        item = {"id": rng.choice([1, 2, 3, "2", 99, -1, True, None, 10 ** 30, random_scalar(rng)]),
                "passed": rng.choice([True, False, "true", None, 1]),
                "evidence": random_scalar(rng)}
        if rng.random() < 0.2:
            item.pop(rng.choice(list(item)))
        items.append(item)
    return items


def runner_verdict(ident: int) -> dict:
    return {"id": ident, "passed": True, "evidence": f"holds {ident}"}


def deep(rng: random.Random) -> str:
    levels = rng.choice([50, 500, 2000, 2000, 100_000])
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
    return opener * levels + ("1" if opener != "[" else "") + closer * levels


def dumps(rng: random.Random, value: object) -> str:
    return json.dumps(value, ensure_ascii=rng.random() < 0.7, separators=(",", ":"))


def claude_output(rng: random.Random, role: str) -> str:
    envelope = {"type": "result", "subtype": "success", "is_error": rng.random() < 0.1,
                "duration_ms": random_scalar(rng) if rng.random() < 0.3 else 1200,
                "num_turns": rng.choice([1, 2, 10 ** 400, "x", None]),
                "result": random_scalar(rng) if rng.random() < 0.5 else "the answer",
                "usage": random_value(rng) if rng.random() < 0.3 else {
                    "input_tokens": 10, "output_tokens": rng.choice([5, 10 ** 500, 1e308]),
                    "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
                "total_cost_usd": rng.choice([0.01, 1e308, -1, "free"]),
                "permission_denials": random_value(rng) if rng.random() < 0.2 else []}
    if role == "grader":
        envelope["structured_output"] = {"verdicts": random_verdicts(rng)}
        if rng.random() < 0.1:
            envelope["structured_output"] = "@DEEP@"
        if rng.random() < 0.3:
            envelope["result"] = dumps(rng, {"verdicts": random_verdicts(rng)})
        text = dumps(rng, envelope)
    else:
        lines = [{"type": "system", "subtype": "init"},
                 {"type": "assistant", "message": {"content": [
                     {"type": "tool_use", "name": random_scalar(rng), "input": random_value(rng)},
                     random_value(rng)]}},
                 random_value(rng), envelope]
        text = "\n".join(dumps(rng, line) for line in lines) + "\n"
    return text.replace('"@DEEP@"', deep(rng))


def codex_output(rng: random.Random, role: str) -> str:
    if role == "grader":
        message = dumps(rng, {"verdicts": random_verdicts(rng)})
        if rng.random() < 0.2:
            message = rng.choice([deep(rng), "```json\n" + message + "\n```", str(random_scalar(rng))])
    else:
        message = str(random_scalar(rng)) if rng.random() < 0.3 else "the answer"
    usage = {"input_tokens": rng.choice([120, 10 ** 500, "x", None, 1e308]),
             "cached_input_tokens": 0, "output_tokens": rng.choice([15, -3, 2.5]),
             "reasoning_output_tokens": 0}
    events = [{"type": "thread.started", "thread_id": "t"}, {"type": "turn.started"},
              {"type": "item.completed", "item": {"type": "command_execution",
                                                  "command": random_scalar(rng)}},
              {"type": "item.completed", "item": {"type": "file_change",
                                                  "changes": random_value(rng)}},
              random_value(rng),
              {"type": "item.completed", "item": {"type": "agent_message", "text": message}},
              {"type": "turn.completed", "usage": random_value(rng) if rng.random() < 0.3
               else usage}]
    return "\n".join(dumps(rng, event) for event in events) + "\n"


def hostile(rng: random.Random, text: str) -> bytes:
    """The printed bytes, bent: cut, spliced with invalid UTF-8 or NULs, or replaced."""
    data = text.encode("utf-8", "surrogatepass")
    roll = rng.random()
    if roll < 0.15:
        return data[:rng.randrange(len(data) + 1)]                 # truncated stream
    if roll < 0.25:
        at = rng.randrange(len(data) + 1)
        return data[:at] + rng.choice([b"\xff\xfe", b"\xed\xa0\x80", b"\x00", b"\xc3"]) + data[at:]
    if roll < 0.30:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(200)))
    if roll < 0.33:
        return deep(rng).encode()
    if roll < 0.38:
        return dumps(rng, random_value(rng)).encode("utf-8", "surrogatepass")
    return data


def process_result(rng: random.Random, printed: bytes) -> object:
    buffer = runner._BoundedBuffer(runner.STREAM_HEAD_BYTES, runner.STREAM_TAIL_BYTES)
    buffer.add(printed)
    return runner.ProcessResult(["agent"], rng.choice([0, 0, 0, 0, 1, -9]), buffer.text(),
                                rng.choice(["", "error: boom\x00\n", "\ufffd"]), 0.25,
                                stdout_bytes=buffer.total)


# -- the harness ---------------------------------------------------------------------------


@h.volume_test
class FuzzParsersTests(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = h.TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.parsed: list[dict] = []

    def context(self, provider: str):
        case = runner.Case("E01", 0, "Task number 1.", "case 1", ASSERTIONS[1:], [])
        suite = runner.Suite(self.tmp.path / "evals.json", self.tmp.path, "demo",
                             ASSERTIONS[:1], [case], "0" * 64)
        options = runner.RunOptions(agent=provider, configs=("without_skill",), concurrency=1)
        base = self.tmp.path / "sandboxes"
        base.mkdir()
        ctx = runner.RunContext(suite, options, runner.PROVIDERS[provider](),
                                self.tmp.path / "iteration-1", None, base,
                                runner.ProcessGroups())
        return ctx, case

    def run_cells(self, provider: str) -> None:
        rng = random.Random(SEEDS[provider])
        ctx, case = self.context(provider)
        make = claude_output if provider == "claude" else codex_output
        repo = ctx.sandbox_base / "cell" / "repo"
        (repo / ".skill-eval").mkdir(parents=True)
        done = concurrent.futures.Future()
        done.set_result(None)
        records = []
        for number in range(1, CELLS_PER_PROVIDER + 1):
            executor = make(rng, "executor")
            outputs = [hostile(rng, executor) if rng.random() < 0.5
                       else executor.encode("utf-8", "surrogatepass"),
                       hostile(rng, make(rng, "grader"))]
            results = [process_result(rng, printed) for printed in outputs]
            if number % FULL_EVERY:
                with self.subTest(provider=provider, cell=number, mode="parsers"):
                    self.check_parsers(ctx, results, outputs)
                continue
            cell = runner.Cell(case, "without_skill", number,
                               ctx.iteration_dir / "eval-E01" / "without_skill" / f"run-{number}")
            cell.run_dir.joinpath("outputs").mkdir(parents=True)
            answers = iter(results)
            sandbox = runner.Sandbox(repo.parent, self.tmp.path / "baseline.git",
                                     ctx.sandbox_base,
                                     runner.SandboxRecord(git=runner.SandboxGit(False, "full")))
            run = runner._CellRun(cell, runner._new_record(cell), runner.utc_now(), sandbox)
            with mock.patch.object(runner, "run_process", lambda *a, _it=answers, **k: next(_it)):
                run.answer = runner._guarded(run, runner._run_executor_step, ctx, cell,
                                             sandbox, run.record)
                if run.answer is not None:
                    runner._guarded(run, runner._run_grader_step, ctx, cell, sandbox, run.record,
                                    run.answer)
            record = runner.finish_cell(ctx, run, done)
            with self.subTest(provider=provider, cell=number):
                self.check_cell(cell, record, outputs)
            records.append(record)
        counts: dict[str, int] = {}
        for record in records:
            counts[record.status] = counts.get(record.status, 0) + 1
        self.assertGreater(counts.get("ok", 0), 10, counts)   # the fuzz reaches grading
        self.assertGreater(len(counts), 2, counts)
        self.check_benchmark(ctx, records)

    def check_parsers(self, ctx, results: list, outputs: list[bytes]) -> None:
        """The readers, the verdict parser and grading straight, and the write helper."""
        provider = ctx.provider
        executor = provider.read_executor(results[0])
        grader = provider.read_grader(results[1], self.tmp.path / "no-last-message.txt")
        self.assertIsInstance(executor.ok, bool)
        self.assertIsInstance(grader.ok, bool)
        record = {"executor_text": executor.text, "metrics": executor.metrics,
                  "denials": executor.permission_denials, "trace": executor.trace,
                  "grader_metrics": grader.metrics, "notes": executor.notes + grader.notes}
        payload = runner.parse_verdict_payload(grader.structured, grader.text)
        if payload is not None:
            record["grading"] = runner.grade_assertions(ASSERTIONS, payload).to_json()
        runner._skill_read_evidence(executor.trace, "demo", "with_skill")
        self.parsed.append(record)
        if len(self.parsed) == 8:  # written in batches: the disk is not what is tested
            path = self.tmp.path / "parsed.json"
            runner.write_json(path, self.parsed)
            json.loads(path.read_bytes().decode("utf-8"))
            runner.write_text(self.tmp.path / "output.txt",
                              "\n".join(r["executor_text"] for r in self.parsed))
            self.parsed = []

    def check_cell(self, cell, record, outputs: list[bytes]) -> None:
        detail = json.dumps(record.failure, default=str)[:400]
        self.assertIn(record.status, DOCUMENTED, f"{detail}\n{outputs[0][:300]!r}\n"
                                                    f"{outputs[1][:300]!r}")
        run = json.loads((cell.run_dir / "run.json").read_bytes().decode("utf-8"))
        self.assertEqual(run["status"], record.status)
        json.loads((cell.run_dir / "metrics.json").read_bytes().decode("utf-8"))
        if record.scored:
            grading = json.loads((cell.run_dir / "grading.json").read_bytes().decode("utf-8"))
            self.assertEqual(len(grading["expectations"]), len(ASSERTIONS))
        else:
            self.assertFalse((cell.run_dir / "grading.json").exists())
        for path in cell.run_dir.rglob("*"):
            if path.is_file():
                path.read_bytes().decode("utf-8")  # strict: every file is valid UTF-8

    def check_benchmark(self, ctx, records: list) -> None:
        meta = {"configs": ["without_skill"], "runs_per_configuration": 1,
                "skill_name": "demo", "agent": ctx.options.agent, "cells_planned": len(records),
                "incomplete": False}
        benchmark = runner.aggregate(records, runner.Metadata.from_json(meta, "metadata"))
        folder = ctx.iteration_dir
        runner.write_benchmark(folder, benchmark)
        json.loads((folder / "benchmark.json").read_bytes().decode("utf-8"))
        (folder / "benchmark.md").read_bytes().decode("utf-8")
        runner.write_text(folder / "results.xml", runner.render_junit(benchmark))

    def test_claude_outputs(self) -> None:
        self.run_cells("claude")

    def test_codex_outputs(self) -> None:
        self.run_cells("codex")


if __name__ == "__main__":
    unittest.main()
