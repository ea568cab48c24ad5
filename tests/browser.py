"""What the report tests share: an HTML tag collector and the headless-Chromium checks (the page loads with
nothing logged, and a screenshot of it is neither blank nor one colour)."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np

CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run"]


class Tags(HTMLParser):
    """Every start tag with its attributes, and the text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def having(self, cls: str) -> list[dict[str, str]]:
        return [a for _, a in self.tags if cls in a.get("class", "").split()]


def parse(page: str) -> Tags:
    t = Tags()
    t.feed(page)
    t.close()
    return t


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "make installs Debian's chromium"
    return exe


def dom_of(page: Path, tmp_path: Path) -> str:
    """The DOM Chromium builds from ``page``; fails when the page logs anything (a script error, a missing
    resource)."""
    run = subprocess.run([chromium(), *CHROME_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                          "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    console = [ln for ln in run.stderr.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]
    assert not console, console
    return run.stdout


def screenshot(page: Path, tmp_path: Path, width: int, height: int, min_height: int) -> Path:
    """A screenshot of ``page`` at ``width`` x ``height``, checked to be at least ``min_height`` x 1000 pixels,
    not blank and of more than ten colours (bars, segments, text)."""
    shot = tmp_path / f"{page.stem}.png"
    subprocess.run([chromium(), *CHROME_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                    f"--window-size={width},{height}", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[0] >= min_height and pixels.shape[1] >= 1000
    assert float(np.std(pixels[..., :3])) > 0.05  # not blank
    colours = {tuple(np.round(p, 1)) for p in pixels[::20, ::20, :3].reshape(-1, 3)}
    assert len(colours) > 10
    return shot
