"""A command reads and validates each input file once (#30 item 3): an LLM plan judged alone is one reading."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import run_cli

import dnnplace
import dnnplace.models.llm.plan_file as llm_plan
import dnnplace.utils.files as files

LLAMA = Path(__file__).resolve().parents[2] / "examples" / "llm" / "llama3.1-8b.json"


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    pr = dnnplace.load_llm(LLAMA, gpus=8, seq_len=4096, global_batch=16)
    sol = dnnplace.solve(pr, tp=1, pp=1, cp=1, mbs=1, recompute="none")
    dnnplace.save_plan(pr, sol.plan, path, sol.evaluation)
    return path


@pytest.mark.parametrize("command", [["evaluate"], ["simulate"], ["report", "-o", "{out}"]])
def test_an_llm_plan_file_is_read_and_validated_once(plan_file, command, monkeypatch, tmp_path):
    reads: list[str] = []
    validations: list[str] = []
    real_read, real_validate = files.read_json_file, llm_plan.read_llm_plan

    def counted_read(path, *args, **kwargs):
        reads.append(str(path))
        return real_read(path, *args, **kwargs)

    def counted_validate(doc, source="plan"):
        validations.append(source)
        return real_validate(doc, source)

    monkeypatch.setattr(files, "read_json_file", counted_read)
    monkeypatch.setattr(llm_plan, "read_llm_plan", counted_validate)
    args = [a.format(out=tmp_path / "r.html") for a in command]
    res = run_cli(args[0], plan_file, *args[1:])
    assert res.returncode == 0, res.stderr
    assert reads.count(str(plan_file)) == 1 and len(validations) == 1, (reads, validations)


def test_load_with_plan_gives_the_problem_and_the_plan_of_one_reading(plan_file):
    problem, plan = dnnplace.api.load_with_plan(plan_file)
    assert plan.problem is problem and dnnplace.load(plan_file) == problem
    w = dnnplace.example_path("gnmt_training")
    assert dnnplace.api.load_with_plan(w)[1] is None
