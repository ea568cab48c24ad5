"""Names and paths from files reach the terminal and Graphviz literally: no escapes, markup or emoji codes."""

from __future__ import annotations

import copy
import subprocess

from hostile import GOOD, LABELS, NASTY, SPLIT, clean_error, cli, invoke, needs_dot, write

from dnnplace.utils.text import printable


def test_control_characters_in_names_are_escaped(tmp_path):
    doc = copy.deepcopy(GOOD)
    doc["maxCPUs"] = 0
    doc["nodes"][2]["supportedOnFpga"] = 0
    doc["nodes"][2]["name"] = NASTY
    w = write(tmp_path / "w.json", doc)
    proc = cli("solve", w)
    line = clean_error(proc.returncode, proc.stdout, proc.stderr, "not supported on accelerators")
    for bad in ("\x1b", "\x07", "\x9b", "\u202e", "\r"):
        assert bad not in proc.stderr
    assert "\\x1b]0;pwned\\x07\\x1b[31mred\\x9b2J\\u202eevil" in line


def test_control_characters_in_paths_are_escaped(tmp_path):
    proc = cli("solve", tmp_path / "\x1b[2Jgone.json")
    clean_error(proc.returncode, proc.stdout, proc.stderr, "\\x1b[2Jgone.json: no such file")
    assert "\x1b" not in proc.stderr
    w = write(tmp_path / "\x1b[31mw.json", GOOD)
    proc = cli("solve", w)
    assert proc.returncode == 0 and "\x1b" not in proc.stdout and "\\x1b[31mw.json" in proc.stdout


def test_printable_escapes_every_control_character():
    assert printable("".join(map(chr, range(0x20)))) == "".join(f"\\x{c:02x}" for c in range(0x20))
    assert printable("\x7f\x80\x9f\ud800ok é中") == "\\x7f\\x80\\x9f\\ud800ok é中"
    assert printable("a\nb", keep_newlines=True) == "a\nb"


@needs_dot
def test_graphviz_labels_are_drawn_literally():
    import xml.etree.ElementTree as ET

    from dnnplace.models.paper.report import dot_label, dot_tooltip

    src = "\n".join(["digraph G {"] + [f'n{i} [label="{dot_label(n)}", tooltip="{dot_tooltip(n)}"];'
                                      for i, n in enumerate(LABELS)] + ["}"])
    proc = subprocess.run(["dot", "-Tsvg"], input=src, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    root = ET.fromstring(proc.stdout)
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    tips = [a.get("{http://www.w3.org/1999/xlink}title") for a in root.iter("{http://www.w3.org/2000/svg}a")]
    assert texts == [printable(n) for n in LABELS]
    assert tips == [printable(n) for n in LABELS]


@needs_dot
def test_report_keeps_the_graph_with_backslash_names(tmp_path):
    doc = copy.deepcopy(GOOD)
    for nd, name in zip(doc["nodes"], ("x\\", "\\N\\G\\L", 'q"\\'), strict=True):
        nd["name"] = name
    w = write(tmp_path / "w.json", doc)
    s = write(tmp_path / "s.json", SPLIT)
    code, out, err = invoke("report", w, s, "-o", tmp_path / "r.html")
    assert code == 0, err
    page = (tmp_path / "r.html").read_text()
    assert 'id="graph-missing"' not in page and '<svg class="graph"' in page
    assert "x\\</text>" in page and "\\N\\G\\L</text>" in page and "q&quot;\\</text>" in page


def test_markup_and_emoji_codes_in_paths_are_literal(tmp_path):
    code, out, err = invoke("solve", tmp_path / ":llama: [bold]x[/bold].json")
    line = clean_error(code, out, err, ":llama: [bold]x[/bold].json: no such file")
    assert "🦙" not in line
    w = write(tmp_path / ":llama:[red]w.json", GOOD)
    code, out, err = invoke("solve", w)
    assert code == 0 and ":llama:[red]w.json" in out and "🦙" not in out
    code, out, err = invoke("profile", str(tmp_path / "models.py") + ":llama", "-o", tmp_path / "o.json")
    assert code == 2 and "🦙" not in out + err and len(err.strip().splitlines()) == 1
