"""The report page in headless Chromium: every embedded image loads and the tables are there."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from specroof.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs Debian's package)")
def test_report_renders_in_chromium(tmp_path, capsys):
    out = tmp_path / "report"
    args = ["report", "--out", str(out), "--hardware", "a100-sxm-80gb", "h100-sxm-80gb", "--quick"]
    try:
        import torch  # noqa: F401
    except ImportError:
        args.append("--skip-measure")
    assert main(args) == 0
    capsys.readouterr()
    page = (out / "index.html").as_uri()
    dom = subprocess.run(
        [
            CHROMIUM,
            *FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=10000",
            "--dump-dom",
            page,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    body = re.search(r"<body([^>]*)>", dom.stdout)
    assert body, dom.stderr[-2000:]
    attrs = dict(re.findall(r'data-([a-z-]+)="(\d+)"', body.group(1)))
    assert int(attrs["images-total"]) >= 8
    assert attrs["images-loaded"] == attrs["images-total"]
    assert int(attrs["tables"]) >= 6
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            CHROMIUM,
            *FLAGS,
            f"--user-data-dir={tmp_path / 'profile2'}",
            "--window-size=1200,2000",
            f"--screenshot={shot}",
            page,
        ],
        capture_output=True,
        timeout=120,
    )
    assert shot.stat().st_size > 50_000
