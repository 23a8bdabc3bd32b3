"""Shared fixtures: the seeds' abstract 13B model and the two GPUs of the worked example."""

from __future__ import annotations

import pytest

from roofline import ModelSpec, load_hardware


@pytest.fixture(scope="session")
def m13b() -> ModelSpec:
    return ModelSpec.from_params(13e9)


@pytest.fixture(scope="session")
def a100():
    return load_hardware("a100-sxm-80gb")


@pytest.fixture(scope="session")
def h100():
    return load_hardware("h100-sxm-80gb")
