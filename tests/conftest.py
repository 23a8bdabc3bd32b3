"""Shared fixtures: the seeds' abstract 13B model and the two GPUs of the worked example."""

from __future__ import annotations

import os

import pytest

# the suite never reaches the network: a Hugging Face id no preset stands for is read from a local cache fixture
os.environ.setdefault("HF_HUB_OFFLINE", "1")

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
