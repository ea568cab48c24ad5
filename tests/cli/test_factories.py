"""``file.py:fn`` factories run behind one guard (#33 item 17): whatever the user's code does, one line, exit 2.

An exception, a syntax error, ``sys.exit(0)`` or ``sys.exit(3)`` in the factory or its module names the
factory and what happened (never a silent success, never "internal error", never a bare exit code), and
what the factory prints goes to stderr, so ``--json`` on stdout stays one JSON document.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import run_cli

import dnnplace
from dnnplace.errors import DnnplaceError
from dnnplace.utils.guard import UserCodeError, user_code

LLAMA = Path(__file__).resolve().parents[2] / "examples" / "llm" / "llama3.1-8b.json"
SRC = str(Path(dnnplace.__file__).resolve().parents[1])
PLAN = ["--gpus", "8", "--seq-len", "4096", "--global-batch", "16"]

BODIES = {  # what the factory (or its module) does -> what the one line must say
    "raise": ("def cfg():\n    raise ValueError('no such checkpoint')\n", "the factory failed: ValueError: no such"),
    "syntax": ("def cfg(:\n    pass\n", "failed: SyntaxError"),
    "exit0": ("import sys\ndef cfg():\n    sys.exit(0)\n", "the factory called sys.exit(0)"),
    "exit3": ("import sys\ndef cfg():\n    sys.exit(3)\n", "the factory called sys.exit(3)"),
    "exit_on_import": ("import sys\nsys.exit(0)\ndef cfg():\n    pass\n", "called sys.exit(0)"),
    "raise_on_import": ("import nonexistent_module_xyz\ndef cfg():\n    pass\n", "failed: ModuleNotFoundError"),
    "recursion": ("def cfg():\n    return cfg()\n", "failed: RecursionError"),
}


def _factory(tmp_path: Path, body: str) -> str:
    path = tmp_path / "factory.py"
    path.write_text(body)
    return f"{path}:cfg"


@pytest.mark.parametrize("case", sorted(BODIES))
def test_a_failing_llm_config_factory_is_one_line_exit_2(tmp_path, case):
    body, needle = BODIES[case]
    spec = _factory(tmp_path, body)
    res = run_cli("plan", spec, *PLAN, "-o", tmp_path / "plan.json")
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "factory.py:cfg" in lines[0], res.stderr
    assert "internal error" not in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "plan.json").exists() and res.stdout == ""


def test_the_api_raises_the_same_one_line(tmp_path):
    spec = _factory(tmp_path, BODIES["exit3"][0])
    with pytest.raises(DnnplaceError, match="the factory called sys.exit.3.") as exc:
        dnnplace.load_llm(spec, gpus=8, seq_len=4096, global_batch=16)
    assert isinstance(exc.value, UserCodeError) and exc.value.exited


def test_a_factorys_prints_never_reach_stdout(tmp_path):
    body = (f"import json, os\nprint('hello from the module')\ndef cfg():\n    print('hello from the factory')\n"
            f"    os.write(1, b'raw bytes on fd 1\\n')\n    return json.load(open({str(LLAMA)!r}))\n")
    spec = _factory(tmp_path, body)
    proc = subprocess.run([sys.executable, "-m", "dnnplace", "plan", spec, *PLAN, "--json"], capture_output=True,
                          text=True, env={"PYTHONPATH": SRC, "PATH": ""}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # stdout is the plan and nothing else
    assert doc["format"] == "dnnplace.llm-plan"
    assert "hello from the factory" in proc.stderr and "hello from the module" in proc.stderr
    assert "raw bytes on fd 1" in proc.stderr


def test_the_guard_restores_stdout_and_lets_ctrl_c_through(capfd):
    with pytest.raises(UserCodeError, match="^x failed: KeyError: 'k'$"):
        with user_code("x"):
            print("inside")
            raise KeyError("k")
    print("outside")
    out, err = capfd.readouterr()
    assert out == "outside\n" and err == "inside\n"
    with pytest.raises(KeyboardInterrupt):
        with user_code("x"):
            raise KeyboardInterrupt


@pytest.mark.parametrize("case", ["raise", "syntax", "exit0", "exit3", "exit_on_import"])
def test_a_failing_torch_factory_is_one_line(tmp_path, case):
    pytest.importorskip("torch")
    from dnnplace.frontends.torch_model.loader import load_factory

    body, needle = BODIES[case]
    spec = _factory(tmp_path, body.replace("def cfg", "def build"))
    spec = spec.replace(":cfg", ":build")
    for meta in (False, True):
        with pytest.raises(DnnplaceError) as exc:
            load_factory(spec, meta=meta, quiet=True)
        assert needle in str(exc.value) and "factory.py:build" in str(exc.value), str(exc.value)


def test_a_torch_factorys_prints_go_to_stderr(tmp_path, capfd):
    pytest.importorskip("torch")
    from dnnplace.frontends.torch_model.loader import load_factory

    path = tmp_path / "net.py"
    path.write_text("import torch\nprint('module says hi')\ndef build():\n    print('factory says hi')\n"
                    "    return torch.nn.Linear(2, 2), (torch.zeros(1, 2),)\n")
    capfd.readouterr()
    load_factory(f"{path}:build", meta=True)
    out, err = capfd.readouterr()
    assert out == "" and "module says hi" in err and "factory says hi" in err
