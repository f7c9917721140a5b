"""The three stored iterations under tests/data/golden/ and how they were made.

`python3 -m tests.golden_iterations` makes them again with the fake CLIs (only after a change
to what the runner writes that is meant, and reviewed). tests/test_golden.py checks that
`report` re-renders each one's benchmark.md byte for byte and that a fresh run writes files of
the same shape.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from tests.helpers import (
    PROJECT,
    SKILL_MD,
    TempDir,
    call_main,
    demo_suite,
    fake_env,
    git,
    make_repo,
)

GOLDEN = PROJECT / "tests" / "data" / "golden"
# What an iteration folder holds beside its run folders that a golden copy leaves out: the
# HTML page (large, and checked elsewhere) and the runner's baselines.
LEFT_OUT = ("benchmark.html", ".baselines")


def _marked(marker: str) -> str:
    return SKILL_MD.replace("Say hello.", f"Say hello. {marker}")


def make_two_arms(tmp: Path) -> Path:
    """with_skill against without_skill, two cases, one run each."""
    root = make_repo(tmp, demo_suite(2))
    env = fake_env(tmp, {"grader": {"verdicts": {"fail_ids": [2]}}})
    code, out, err = call_main(["run", str(root / "evals/demo/evals.json"), "--agent",
                                "claude", "--quiet", "--workspace", str(tmp / "ws")], env)
    _check(code, (0, 1), out + err)
    return tmp / "ws" / "iteration-1"


def make_three_arms(tmp: Path) -> Path:
    """with_skill, without_skill and with_skill@HEAD~1: the skill as committed before."""
    root = make_repo(tmp, demo_suite(2), skill_md=_marked("MARKER-V1"))
    (root / "skills/demo/SKILL.md").write_text(_marked("MARKER-V2"))
    git(root, "commit", "-qam", "skill v2")
    env = fake_env(tmp, {"executor": {"quote_reads": True},
                         "grader": {"verdicts": {"fail_ids": [2, 3]}},
                         "cases": [{"match": "MARKER-V2", "role": "grader",
                                    "spec": {"verdicts": "all_pass"}}]})
    code, out, err = call_main(["run", str(root / "evals/demo/evals.json"), "--agent",
                                "claude", "--quiet", "--workspace", str(tmp / "ws"), "--config",
                                "with_skill,without_skill,with_skill@HEAD~1"], env)
    _check(code, (0, 1), out + err)
    return tmp / "ws" / "iteration-1"


def make_regrade(tmp: Path) -> Path:
    """A re-grade of a two-arm iteration with two grader runs per cell."""
    root = make_repo(tmp, demo_suite(2))
    suite = str(root / "evals/demo/evals.json")
    env = fake_env(tmp, {})
    code, out, err = call_main(["run", suite, "--agent", "claude", "--quiet", "--workspace",
                                str(tmp / "ws")], env)
    _check(code, (0,), out + err)
    code, out, err = call_main(["run", suite, "--agent", "codex", "--quiet", "--workspace",
                                str(tmp / "ws"), "--regrade", str(tmp / "ws" / "iteration-1"),
                                "--grader-runs", "2"], env)
    _check(code, (0, 1), out + err)
    return tmp / "ws" / "iteration-2"


MAKERS = {"two_arms": make_two_arms, "three_arms": make_three_arms, "regrade": make_regrade}


def _check(code: int, allowed: tuple, text: str) -> None:
    if code not in allowed:
        raise RuntimeError(f"making a golden iteration exited {code}: {text}")


def store(iteration: Path, target: Path) -> None:
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(iteration, target, symlinks=True,
                    ignore=lambda folder, names: [n for n in names if n in LEFT_OUT])


def main() -> int:
    for name, make in MAKERS.items():
        tmp = TempDir()
        try:
            store(make(tmp.path), GOLDEN / name)
        finally:
            tmp.cleanup()
        print(f"wrote {GOLDEN / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
