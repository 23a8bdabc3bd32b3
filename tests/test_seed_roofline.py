"""Every number the seeds work out in their roofline sections (seed 001, section 1; the H100 exercise)."""

from __future__ import annotations

import pytest

from roofline import crossover_tokens, forward_cost, pass_time, weights_only_crossover


def test_13b_on_a100_bytes_time_and_rate(m13b, a100):
    cost = forward_cost(m13b, 1, 1, 0, weight_dtype="fp16")
    assert float(cost.total_bytes) == 26e9
    assert float(cost.total_flops) == 26e9
    st = pass_time(m13b, a100, 1, 1, 0, "fp16")
    assert float(st.t_memory_s) == pytest.approx(12.75e-3, abs=0.005e-3)
    assert float(st.t_step_s) == pytest.approx(12.75e-3, abs=0.005e-3)
    assert float(st.tokens_per_s) == pytest.approx(78, abs=0.5)
    assert float(st.t_compute_s) == pytest.approx(0.0833e-3, abs=0.00005e-3)
    assert float(st.t_memory_s / st.t_compute_s) == pytest.approx(153, abs=0.5)
    assert float(st.intensity) == pytest.approx(1.0)
    assert a100.ridge("fp16") == pytest.approx(153, abs=0.5)
    assert bool(st.memory_bound)
    # the GPU idles ~99.35% of the step
    assert 1 - float(st.t_compute_s / st.t_step_s) == pytest.approx(0.9935, abs=0.0005)


def test_crossover_k_153(m13b, a100):
    assert weights_only_crossover(m13b, a100, "fp16") == pytest.approx(153, abs=0.5)
    assert int(crossover_tokens(m13b, a100, 1, 0, "fp16")) == 153
    # 20 candidates barely move the step; 154 tips it over
    t1 = float(pass_time(m13b, a100, 1, 1, 0, "fp16").t_step_s)
    assert float(pass_time(m13b, a100, 1, 20, 0, "fp16").t_step_s) == t1
    assert float(pass_time(m13b, a100, 1, 154, 0, "fp16").t_step_s) > t1


def test_h100_exercise(m13b, a100, h100):
    # The exercise holds peak FLOP/s at the A100's figure to isolate bandwidth.
    h = h100.replace(peak_flop_per_s={**h100.peak_flop_per_s, "fp16": 312e12})
    t_a = float(pass_time(m13b, a100, dtype="fp16").t_step_s)
    t_h = float(pass_time(m13b, h, dtype="fp16").t_step_s)
    assert t_h == pytest.approx(7.76e-3, abs=0.005e-3)
    assert weights_only_crossover(m13b, h, "fp16") == pytest.approx(93, abs=0.5)
    assert int(crossover_tokens(m13b, h, dtype="fp16")) == 93
    assert t_a / t_h == pytest.approx(1.64, abs=0.005)
    # with the real H100 peak the crossover is ~295
    assert int(crossover_tokens(m13b, h100, dtype="fp16")) == 295


def test_tree_and_chain_compute_times_from_the_seed(m13b, a100):
    # 14 nodes ~1.17 ms and 3 nodes ~0.25 ms of compute, both under the 12.75 ms floor
    t14 = float(pass_time(m13b, a100, 1, 14, 0, "fp16").t_compute_s)
    t3 = float(pass_time(m13b, a100, 1, 3, 0, "fp16").t_compute_s)
    assert t14 == pytest.approx(1.17e-3, abs=0.005e-3)
    assert t3 == pytest.approx(0.25e-3, abs=0.005e-3)
    assert float(pass_time(m13b, a100, 1, 14, 0, "fp16").t_step_s) == float(
        pass_time(m13b, a100, 1, 1, 0, "fp16").t_step_s
    )
