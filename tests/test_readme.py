"""The README's Python API example runs as written (in a scratch folder)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_api_example_runs(tmp_path, monkeypatch, capsys):
    text = README.read_text()
    section = text[text.index("## Python API"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert 8 <= len([ln for ln in code.splitlines() if ln.strip()]) <= 14
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out.split("\n")
    assert out[0].startswith("optimal 107.004")
    assert out[2].startswith("heuristic ") and out[2].endswith("('max_ideals', 'gap', 'contract_layers', 'linearize')")
    assert (tmp_path / "split.json").is_file() and (tmp_path / "report.html").is_file()
