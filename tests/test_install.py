"""A non-editable install (a built wheel) can still list and load every profile."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_ships_the_profiles(tmp_path):
    wheel_dir, target = tmp_path / "wheel", tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheel_dir),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    wheel = next(wheel_dir.glob("specroof-*.whl"))
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert "measure/pair_weights/target.safetensors" in names and "measure/pair_weights/meta.json" in names
    assert "published/kernels/vllm_pr24700_fused_moe_h100.toml" in names  # the fused-MoE kernel tables (section 40)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    code = (
        "import roofline, hardware_profiles, sys;"
        f"assert roofline.__file__.startswith({str(target)!r}), roofline.__file__;"
        "df = roofline.list_hardware(); assert len(df) >= 25, len(df);"
        "[roofline.load_hardware(i) for i in df['id']]; print(len(df))"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) >= 25
