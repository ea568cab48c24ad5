"""``export --to torch-pipelining`` writes the model spec as data: it cannot execute in the script."""

from __future__ import annotations

import pytest
from hostile import BARE_SPLIT, HOSTILE_SPECS, _spec_constant, invoke, write_tmp_workload

import dnnplace
from dnnplace.models.paper import paper_json


@pytest.fixture
def fake_chain(monkeypatch):
    """The export's checks of the profiled model pass (they need torch); the script template is real."""
    from dnnplace.runtime import export

    monkeypatch.setattr(export, "_stages", lambda w, s: [])
    monkeypatch.setattr(export, "_chain_problem", lambda w, s, st: None)
    monkeypatch.setattr(export, "export_pipelining",
                        lambda w, s: {"notes": [], "split_spec": {"fc2": "BEGINNING"}, "num_stages": 2})


@pytest.mark.parametrize("spec", HOSTILE_SPECS)
def test_model_spec_cannot_execute_in_the_script(fake_chain, spec):
    from dnnplace.runtime.export import pipelining_script

    w = dnnplace.load(write_tmp_workload())
    text = pipelining_script(w, paper_json.parse_split(BARE_SPLIT), spec)
    assert _spec_constant(text) == spec
    docstring = text.split('"""')[1]
    assert spec not in docstring and "pwned" not in docstring


@pytest.mark.parametrize("spec", HOSTILE_SPECS[:3])
def test_export_cli_with_a_hostile_model(fake_chain, paper, tmp_path, spec):
    w, s = paper
    out = tmp_path / "train.py"
    code, _, err = invoke("export", s, "-w", w, "--to", "torch-pipelining", "--model", spec, "-o", out)
    assert code == 0, err
    assert _spec_constant(out.read_text()) == spec
