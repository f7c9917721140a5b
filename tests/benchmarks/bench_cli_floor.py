#!/usr/bin/env python3
"""Per-call floor of the real gemini and opencode CLIs: what one call costs when the model
answers at once.

The runner drives each CLI found on PATH against its loopback model server from
tests/integration (an instant text answer for the executor, an instant verdict for the grader):
N cases, without_skill only, one at a time, unconfined. Reported per CLI and role: the median
(and min / max) of the call durations the runner recorded in run.json.

    python3 tests/benchmarks/bench_cli_floor.py [--quick] [--cases 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(PROJECT))

from tests.integration import model_servers as ms  # noqa: E402

RUNNER = PROJECT / "skills" / "skill-eval" / "scripts" / "eval_runner.py"
VERDICT = {"verdicts": [{"id": 1, "passed": True, "evidence": "it answers"}]}
SKILL_MD = "---\nname: demo\ndescription: Use when measuring.\n---\n\n# Demo\n"


def gemini_setup(home: Path) -> tuple[ms.GeminiServer, dict[str, str], list[str]]:
    server = ms.GeminiServer().start()
    server.add_rule(ms.has_response_schema(), [ms.gemini_json(VERDICT)])
    server.add_rule(ms.always(), [ms.gemini_text("done")])
    return server, ms.gemini_env(server), ["--model", ms.GEMINI_MODEL]


def opencode_setup(home: Path) -> tuple[ms.ChatCompletionsServer, dict[str, str], list[str]]:
    server = ms.ChatCompletionsServer().start()
    server.add_rule(ms.no_tools(), [ms.chat_json(VERDICT)])
    server.add_rule(ms.always(), [ms.chat_text("done")])
    ms.write_opencode_config(server, str(home))  # as the user configured it
    return server, ms.opencode_env(), []


SETUPS = {"gemini": gemini_setup, "opencode": opencode_setup}


def make_repo(root: Path, cases: int) -> Path:
    (root / "skills" / "demo").mkdir(parents=True)
    (root / "skills" / "demo" / "SKILL.md").write_text(SKILL_MD, encoding="utf-8")
    (root / "evals" / "demo").mkdir(parents=True)
    suite = {"skill_name": "demo", "evals": [
        {"id": f"E{i}", "prompt": f"Say done ({i}).", "expectations": ["It answers."]}
        for i in range(1, cases + 1)]}
    (root / "evals" / "demo" / "evals.json").write_text(json.dumps(suite), encoding="utf-8")
    return root


def measure(agent: str, binary: str, cases: int, tmp: Path) -> dict[str, list[float]]:
    home, sandboxes, workspace = tmp / "home", tmp / "sandboxes", tmp / "workspace"
    for folder in (home, sandboxes):
        folder.mkdir()
    repo = make_repo(tmp / "repo", cases)
    server, agent_env, args = SETUPS[agent](home)
    try:
        env = ms.clean_base_env()
        env.update(HOME=str(home), SKILL_EVAL_SANDBOX_ROOT=str(sandboxes),
                   PATH=os.pathsep.join([os.path.dirname(binary), env.get("PATH", "")]),
                   **agent_env)
        argv = [sys.executable, str(RUNNER), "run", str(repo / "evals/demo/evals.json"),
                "--agent", agent, "--config", "without_skill", "--concurrency", "1",
                "--isolation", "none", "--timeout", "300", "--workspace", str(workspace),
                "--quiet", *args]
        done = subprocess.run(argv, cwd=repo, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=cases * 700)
    finally:
        server.stop()
    if done.returncode not in (0, 1):
        raise SystemExit(f"{agent}: the runner exited {done.returncode}:\n{done.stderr[-3000:]}")
    durations: dict[str, list[float]] = {"executor": [], "grader": []}
    for path in sorted((workspace / "iteration-1").glob("eval-*/without_skill/run-1/run.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if record["status"] != "ok":
            raise SystemExit(f"{agent}: {path.parent} ended {record['status']}: "
                             f"{record.get('failure')}")
        for role in durations:
            durations[role].append(float(record[role]["duration_s"]))
    return durations


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=5, help="calls per CLI and role")
    parser.add_argument("--quick", action="store_true", help="two cases")
    args = parser.parse_args()
    cases = 2 if args.quick else args.cases
    found = {name: shutil.which(name) for name in SETUPS}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"bench_cli_floor: {cases} calls per CLI and role, concurrency 1, unconfined; "
          f"{os.cpu_count()} CPUs, load average {load:.1f}, Python {sys.version.split()[0]}")
    medians = []
    for agent, binary in found.items():
        if not binary:
            print(f"  {agent}: not on PATH, skipped (PATH=\"$(.ci/install-clis | tail -1):$PATH\")")
            continue
        with tempfile.TemporaryDirectory(prefix=f"bench-floor-{agent}-") as tmp:
            durations = measure(agent, binary, cases, Path(tmp))
        for role, values in durations.items():
            median = statistics.median(values)
            medians.append(f"{agent} {role} {median:.2f} s")
            print(f"  {agent:9} {role:9} median {median:6.2f} s  (min {min(values):.2f}, "
                  f"max {max(values):.2f}, n={len(values)})")
    print(f"summary: bench_cli_floor: {'; '.join(medians) or 'no CLI found'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
