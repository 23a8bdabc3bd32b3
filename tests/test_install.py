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


def _fake_wheel(folder: Path, name: str, version: str, body: str = "") -> Path:
    """A pure-Python wheel of ``name`` ``version`` with no dependencies: what pip's resolver sees of a package."""
    import zipfile

    dist, mod = name.replace("-", "_"), name.replace("-", "_").lower()
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    info = f"{dist}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{mod}/__init__.py", body or f"__version__ = {version!r}\n")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return path


#: every requirement of specroof[measure] beside torch, at a version its range accepts
DEPENDENCIES = {
    "numpy": "2.0.0",
    "scipy": "1.11.0",
    "pandas": "2.1.0",
    "matplotlib": "3.8.0",
    "tomli-w": "1.0.0",
    "nvidia-ml-py": "12.0.0",
    "tqdm": "4.66.0",
    "safetensors": "0.4.0",
}


@pytest.mark.slow
def test_the_measure_extra_keeps_the_torch_a_user_has(tmp_path):
    """A venv holding torch 2.11 (a fake wheel standing in for a CUDA build: no other real torch is offline here)
    resolves specroof[measure] without replacing it, though a newer torch is on offer; README's command 1, which
    names torch==2.13.0, installs that version where none is. Offline: every package pip sees is a local wheel."""
    import json

    wheel_dir, fakes, env_dir = tmp_path / "wheel", tmp_path / "fakes", tmp_path / "venv"
    fakes.mkdir()
    built = subprocess.run(
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
        capture_output=True,
        text=True,
    )
    if built.returncode != 0:
        pytest.skip(f"cannot build the wheel here: {built.stderr.strip().splitlines()[-1:]}")
    wheel = next(wheel_dir.glob("specroof-*.whl"))
    for name, version in DEPENDENCIES.items():
        _fake_wheel(fakes, name, version)
    _fake_wheel(fakes, "torch", "2.13.0")  # what pip would take if the extra still pinned it
    held = _fake_wheel(tmp_path, "torch", "2.11.0")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    target_py = env_dir / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(target_py), "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "-q", "--no-index", "--no-deps", str(held)], check=True, capture_output=True)

    def would_install(*reqs: str) -> dict[str, str]:
        report = tmp_path / "report.json"
        run = subprocess.run(
            [*pip, "install", "--dry-run", "--no-index", "--find-links", str(fakes), "--report", str(report), *reqs],
            capture_output=True,
            text=True,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        got = json.loads(report.read_text())["install"]
        return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in got}

    plan = would_install(f"specroof[measure] @ {wheel.as_uri()}")
    assert "torch" not in plan and {"tqdm", "safetensors", "numpy"} <= set(plan)  # kept, the rest installed
    # README's command 1 names the version: into a venv without torch that version is installed
    subprocess.run([*pip, "uninstall", "-q", "-y", "torch"], check=True, capture_output=True)
    plan = would_install("torch==2.13.0", f"specroof[measure] @ {wheel.as_uri()}")
    assert plan["torch"] == "2.13.0"
