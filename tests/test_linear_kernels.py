"""The model's per-shape kernel choice: every kernel computes the same product, the choice is cached, training keeps autograd."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from measure import models
from measure.models import Linear, Transformer, fastest_linear, kernel_candidates, rows_bucket, run_linear
from roofline.passes.model import ModelSpec

SPEC = ModelSpec("tiny", 2, 64, 4, 2, 16, 128, 97, max_context=64)


def kinds(rows: int, out_features: int = 48) -> list[str]:
    return kernel_candidates(out_features, rows)


@pytest.mark.parametrize("rows", [1, 3, 40])
@pytest.mark.parametrize("bias", [True, False])
def test_every_kernel_computes_the_linear_product(rows: int, bias: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # blocks of 20 rows: 48 output features split 20 + 20 + 8 (a last block shorter than the others); the
    # batched product in 3 blocks of 16
    monkeypatch.setattr(models, "SPLIT_ROWS", 20)
    monkeypatch.setattr(models, "BMM_ROWS", 16)
    torch.manual_seed(0)
    w, b = torch.randn(48, 32), torch.randn(48) if bias else None
    x = torch.randn(1, rows, 32)
    ref = F.linear(x, w, b)
    assert ("split" in kinds(rows)) == (rows > 1)
    assert ("bmm" in kinds(rows)) == (rows <= 16)
    for kind in kinds(rows):
        out = run_linear(kind, x, w, b)
        assert out.shape == ref.shape, kind
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5, msg=kind)


def test_bmm_keeps_every_sequence_of_a_batch_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "BMM_ROWS", 16)
    torch.manual_seed(0)
    w, b = torch.randn(48, 32), torch.randn(48)
    x = torch.randn(3, 2, 32)  # 3 sequences of 2 tokens: 6 rows
    torch.testing.assert_close(run_linear("bmm", x, w, b), F.linear(x, w, b), rtol=1e-5, atol=1e-5)
    assert "bmm" not in kernel_candidates(40, 2)  # 40 features are not whole blocks of 16


def test_split_is_a_candidate_only_for_wide_weights_and_several_rows() -> None:
    wide = models.SPLIT_ROWS + 1
    assert "split" in kernel_candidates(wide, 5) and "split" in kernel_candidates(wide, 64)
    assert "split" not in kernel_candidates(wide, 1)  # one row streams the weight: nothing to block
    assert "split" not in kernel_candidates(models.SPLIT_ROWS, 64)  # one block already


def test_a_truncated_probe_block_is_whole_blocks_of_the_batched_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "BMM_ROWS", 16)
    monkeypatch.setattr(models, "PROBE_BYTES", 50 * 32 * 4)  # 50 rows of a 32-wide fp32 weight
    assert models.probe_rows(torch.empty(96, 32)) == 48  # cut: to whole blocks of 16
    assert models.probe_rows(torch.empty(40, 32)) == 40  # the whole weight fits: kept whole
    monkeypatch.setattr(models, "PROBE_BYTES", 10 * 32 * 4)
    assert models.probe_rows(torch.empty(96, 32)) == 10  # less than one block: as cut


def test_rows_bucket() -> None:
    assert [rows_bucket(r) for r in (1, 2, 3, 5, 16, 17, 64, 500)] == [1, 2, 5, 5, 5, 64, 64, 64]


def test_choice_is_one_of_the_candidates_and_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "_KERNEL_CHOICE", {})
    w = torch.randn(40, 24)
    first = fastest_linear(w, None, 1, repeats=1)
    assert first in kinds(1)
    key = next(iter(models._KERNEL_CHOICE))
    models._KERNEL_CHOICE[key] = "mv"  # a cached entry is returned without timing again
    assert fastest_linear(w, None, 1) == "mv"


def test_model_defaults_to_the_probed_kernels_and_keeps_its_logits() -> None:
    torch.manual_seed(0)
    auto = Transformer(SPEC, dtype="fp32")
    plain = Transformer(SPEC, dtype="fp32", matvec=False)
    plain.load_state_dict(auto.state_dict())
    assert auto.auto_kernels and not plain.auto_kernels
    tokens = torch.randint(0, SPEC.vocab_size, (1, 6))
    outs = []
    for m in (auto, plain):
        m.setup_cache(1, 32)
        with torch.no_grad():
            prefill = m(tokens[:, :5])
            m.advance(5)
            outs.append((prefill, m(tokens[:, 5:])))
    assert not auto.auto_kernels  # chosen at setup_cache
    lin = auto.layers[0].self_attn.wqkv
    n_out = lin.weight.shape[0]  # (128 output features: the batched product over 64-feature blocks is a candidate)
    assert set(lin.kernels) == {1, 2, 5, 64}
    assert lin.kernels[1] in kinds(1, n_out) and lin.kernels[5] in kinds(5, n_out)
    for a, b in zip(outs[0], outs[1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_set_matvec_pins_the_one_token_path() -> None:
    m = Transformer(SPEC, dtype="fp32", matvec=True)
    lins = [x for x in m.modules() if isinstance(x, Linear)]
    assert all(x.matvec and x.kernels == {1: "mv"} for x in lins)
    m.set_matvec(False)
    assert not any(x.matvec for x in lins)


def test_training_pass_keeps_autograd_when_onednn_is_chosen() -> None:
    torch.manual_seed(0)
    m = Transformer(SPEC, dtype="fp32", matvec=False)
    for x in m.modules():
        if isinstance(x, Linear):
            x.kernels = {1: "onednn", 5: "onednn", 64: "onednn"}
    tokens = torch.randint(0, SPEC.vocab_size, (2, 8))
    logits, _ = m.forward_train(tokens)
    logits.float().logsumexp(-1).mean().backward()
    assert m.layers[0].self_attn.wqkv.weight.grad is not None


def test_the_transposed_kernel_reads_a_copy_kept_in_step_with_the_weight() -> None:
    """One-row products may read the weight's stored transpose: the same product, a copy made once per weight
    version (remade after an in-place update through the parameter, or a new weight), an ordinary tensor even when
    first made inside inference mode, and F.linear under autograd (the copy is no view of the weight)."""
    torch.manual_seed(0)
    assert "transposed" in kinds(1) and "transposed" in kinds(16) and "transposed" not in kinds(17)
    # input features in K_SPLITS blocks (a batched product, summed) or, not divisible, one product; every
    # sequence and token of a batch kept apart
    for features, shape in ((30, (1, 1, 30)), (32, (3, 2, 32)), (32, (1, 1, 32))):
        w, b, xs = torch.randn(48, features), torch.randn(48), torch.randn(*shape)
        torch.testing.assert_close(run_linear("transposed", xs, w, b), F.linear(xs, w, b), rtol=1e-5, atol=1e-5)
    lin = Linear(32, 48, bias=True)
    lin.kernels = {1: "transposed"}
    x = torch.randn(1, 1, 32)
    with torch.inference_mode():
        out = lin(x)
    torch.testing.assert_close(out, F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)
    first = lin.weight_t()
    assert not first.is_inference() and first.shape == (32, 48) and first.is_contiguous()
    assert lin.weight_t() is first  # made once
    with torch.no_grad():
        lin.weight.mul_(2.0)  # an in-place update (an optimizer's step, load_state_dict): the copy is stale
        torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)
    assert lin.weight_t() is not first
    lin.weight = torch.nn.Parameter(torch.randn(48, 32))  # a new weight
    with torch.no_grad():
        torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)
    y = lin(x)  # grad enabled and the weight requires it: F.linear, so the gradient reaches the weight
    y.sum().backward()
    assert lin.weight.grad is not None and torch.count_nonzero(lin.weight.grad) > 0
    lin.matvec = True  # no kernel reads the copy any more: it is freed
    assert lin.held_copies() == []


def test_choose_kernels_makes_the_copies_its_choice_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "_KERNEL_CHOICE", {})
    monkeypatch.setattr(
        models,
        "fastest_linears",
        lambda w, b, rows, repeats=3, stream_bytes=0, copies=True: {
            r: "transposed" if r == 1 and copies else "gemm" for r in rows
        },
    )
    m = Transformer(SPEC, dtype="fp32")
    m.choose_kernels()
    lins = [x for x in m.modules() if isinstance(x, Linear)]
    assert all(x.held_copies() == ["transposed"] for x in lins)  # made at the choice, not inside the first timed pass
    tokens = torch.randint(0, SPEC.vocab_size, (1, 1))
    ref = Transformer(SPEC, dtype="fp32", matvec=False)
    ref.load_state_dict(m.state_dict())
    outs = []
    for model in (m, ref):
        model.setup_cache(1, 8)
        with torch.inference_mode():
            outs.append(model(tokens))
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-4, atol=1e-4)
    # where a copy of the weights would take more than a quarter of the memory available, no kernel copies them
    import measure.device

    monkeypatch.setattr(measure.device, "device_memory", lambda dev: (None, 3.0 * m.weight_bytes()))
    tight = Transformer(SPEC, dtype="fp32")
    tight.choose_kernels()
    assert all(x.kernels.get(1) == "gemm" and not x.held_copies() for x in tight.modules() if isinstance(x, Linear))
    chosen = [fastest_linear(torch.randn(40, 24), None, 1, repeats=1, copies=False) for _ in range(3)]
    assert not set(chosen) & set(models.COPY_KERNELS)


def test_the_probe_streams_as_many_bytes_as_the_model_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``stream_bytes`` a probe's timing cycles through copies of the block until it has read that many bytes
    (a weight smaller than the cache is timed from memory, as it runs in a model that does not fit the cache), and
    the choice is cached per streaming regime."""
    monkeypatch.setattr(models, "_KERNEL_CHOICE", {})
    w = torch.randn(40, 24)
    seen: list[set[int]] = []
    real = models.run_linear

    def spy(kind, x, weight, bias, weight_t=None, packed=None):
        seen[-1].add((kind == "transposed", weight.data_ptr()))
        if kind == "transposed":  # its block: the leading input features at the whole output width
            assert weight.shape[0] == w.shape[0] and weight_t is not None
        if kind == "packed":  # the block's own packed copy, made before the timing
            assert packed is not None and packed.is_mkldnn
        return real(kind, x, weight, bias, weight_t, packed)

    monkeypatch.setattr(models, "run_linear", spy)
    for stream in (0, 3 * w.numel() * w.element_size()):
        seen.append(set())
        assert fastest_linear(w, None, 1, repeats=1, stream_bytes=stream) in kinds(1, 40)
    assert len(seen[0]) == 2 and len(seen[1]) == 6  # each layout's block alone; each block and two copies
    assert len(models._KERNEL_CHOICE) == 2  # one choice per regime
    small = Transformer(SPEC, dtype="fp32")
    assert small.stream_bytes() == 0  # a model that fits the last-level cache is timed from it


def test_the_decode_path_choice_times_each_path_it_names(monkeypatch):
    """fastest_decode_path times the per-shape choice, torch.mv everywhere and a one-row product everywhere, each as
    named (a first setup_cache used to choose the per-shape kernels inside the torch.mv timing, so "torch.mv" was
    the per-shape choice's time), and leaves the model on the path it reports."""
    import measure.choose as choose

    torch.manual_seed(0)
    model = Transformer(SPEC, dtype="fp32")
    assert model.auto_kernels
    seen = []
    fake = {"mv": 3e-3, "gemm": 2e-3}

    def step_s(m, context=64, repeats=5):
        m.setup_cache(1, context + 8)
        one_row = {lin.kernels.get(1, "gemm") for lin in m.modules() if isinstance(lin, Linear)}
        seen.append(one_row)
        return 4e-3 if len(seen) == 1 else fake[next(iter(one_row))]  # (the per-shape choice: slowest here)

    monkeypatch.setattr(choose, "one_token_step_s", step_s)
    use, why = choose.fastest_decode_path(model)
    assert len(seen) == 3 and seen[0]  # the per-shape choice, made before the first timing, then the two paths
    assert seen[1] == {"mv"} and seen[2] == {"gemm"}  # each timed as named
    assert use is False and "a one-row matrix product" in why.split("uses ")[1].split(" for ")[0]
    assert {lin.kernels.get(1) for lin in model.modules() if isinstance(lin, Linear)} == {"gemm"}


@pytest.mark.skipif(not models.onednn_available(), reason="this torch build has no oneDNN")
def test_the_packed_kernel_reads_onednns_copy_kept_in_step_with_the_weight() -> None:
    """Every row count may read the weight reordered once by oneDNN: the same product, a copy made once per weight
    version and remade after an in-place update, F.linear under autograd, never part of a deep copy, and freed
    when no kernel reads it."""
    import copy

    torch.manual_seed(0)
    assert all("packed" in kinds(r) for r in (1, 2, 5, 64))
    w, b = torch.randn(48, 32), torch.randn(48)
    for shape in ((1, 1, 32), (3, 2, 32), (1, 40, 32)):
        xs = torch.randn(*shape)
        torch.testing.assert_close(run_linear("packed", xs, w, b), F.linear(xs, w, b), rtol=1e-5, atol=1e-5)
    lin = Linear(32, 48, bias=True)
    lin.kernels = {1: "packed", 5: "packed", 64: "gemm"}
    x = torch.randn(1, 1, 32)
    with torch.inference_mode():
        torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)
    first = lin.weight_copy("packed")
    assert first.is_mkldnn and lin.weight_copy("packed") is first and lin.held_copies() == ["packed"]
    with torch.no_grad():
        lin.weight.mul_(2.0)
        torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)
    assert lin.weight_copy("packed") is not first
    twin = copy.deepcopy(lin)  # oneDNN's opaque tensors cannot be deep-copied: the copy is left out, then remade
    assert twin.held_copies() == [] and lin.held_copies() == ["packed"]
    with torch.no_grad():
        torch.testing.assert_close(twin(x), lin(x), rtol=0, atol=0)
    y = lin(x)
    y.sum().backward()
    assert lin.weight.grad is not None and torch.count_nonzero(lin.weight.grad) > 0
    lin.kernels = {1: "gemm"}
    lin.free_copies()
    assert lin.held_copies() == []


@pytest.mark.skipif(
    not (models.onednn_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()),
    reason="oneDNN has no bf16 kernels on this CPU",
)
def test_the_packed_kernel_in_bf16_equals_the_linear_product_to_bf16_rounding() -> None:
    torch.manual_seed(0)
    w, b = (torch.randn(96, 64) * 0.1).bfloat16(), torch.randn(96).bfloat16()
    for rows in (1, 2, 5, 64):
        x = torch.randn(1, rows, 64).bfloat16()
        ref = F.linear(x.float(), w.float(), b.float())
        out = run_linear("packed", x, w, b)
        assert out.dtype == torch.bfloat16 and out.shape == ref.shape
        # bf16 keeps 8 significant bits: one rounding of the output (2^-8 relative) and of the accumulation order
        torch.testing.assert_close(out.float(), ref, rtol=2**-7, atol=2**-7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_both_attention_kernels_compute_the_same_attention(dtype: torch.dtype) -> None:
    """One query and five (causal, tree-shaped) over keys sliced from a longer cache, as the model slices its own."""
    torch.manual_seed(0)
    cache_k, cache_v = torch.randn(2, 4, 64, 16).to(dtype), torch.randn(2, 4, 64, 16).to(dtype)
    keys, values = cache_k[:, :, :40], cache_v[:, :, :40]
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for n in (1, 5):
        q = torch.randn(2, 4, n, 16).to(dtype)
        mask = None if n == 1 else (torch.rand(2, 1, n, 40) < 0.7) | torch.eye(n, 40, dtype=torch.bool).roll(35, 1)
        ref = F.scaled_dot_product_attention(q.float(), keys.float(), values.float(), attn_mask=mask)
        for kind in ("sdpa", "matmul"):
            out = models.attend(kind, q, keys, values, mask)
            assert out.dtype == dtype and out.shape == ref.shape
            torch.testing.assert_close(out.float(), ref, rtol=tol, atol=tol, msg=kind)


def test_choose_kernels_picks_an_attention_kernel_per_query_bucket_and_the_logits_stay(monkeypatch) -> None:
    monkeypatch.setattr(models, "_KERNEL_CHOICE", {})
    monkeypatch.setattr(models, "_ATTENTION_CHOICE", {})
    asked = []

    def pick(kv, queries, hd, dtype, device, repeats=3):
        asked.append(queries)
        return "matmul" if queries <= 2 else "sdpa"

    monkeypatch.setattr(models, "fastest_attention", pick)
    torch.manual_seed(0)
    m = Transformer(SPEC, dtype="fp32")
    m.choose_kernels()
    attn = [x for x in m.modules() if isinstance(x, models.Attention)]
    assert all(a.kernels == {1: "matmul", 2: "matmul", 5: "sdpa", 64: "sdpa"} for a in attn)
    assert sorted(set(asked)) == [1, 2, 5, 64]
    ref = Transformer(SPEC, dtype="fp32", matvec=False)
    ref.load_state_dict(m.state_dict())
    tokens = torch.randint(0, SPEC.vocab_size, (2, 3))
    for n in (1, 3):  # one token (matmul) and three (sdpa), over a prefix
        outs = []
        for model in (m, ref):
            model.setup_cache(2, 16)
            model.cache.rollback([4, 6])
            with torch.inference_mode():
                outs.append(model(tokens[:, :n]))
        torch.testing.assert_close(outs[0], outs[1], rtol=1e-4, atol=1e-4)


def test_the_attention_probe_times_both_kernels_once_per_shape(monkeypatch) -> None:
    monkeypatch.setattr(models, "_ATTENTION_CHOICE", {})
    monkeypatch.setattr(models, "ATTENTION_PROBE_CONTEXT", 32)
    seen = []
    real = models.attend

    def spy(kind, q, keys, values, mask):
        seen.append((kind, q.shape[2], keys.is_contiguous()))
        return real(kind, q, keys, values, mask)

    monkeypatch.setattr(models, "attend", spy)
    first = models.fastest_attention(2, 5, 16, torch.float32, torch.device("cpu"), repeats=1)
    assert first in ("sdpa", "matmul")
    assert {k for k, _, _ in seen} == {"sdpa", "matmul"} and all(n == 5 and not c for _, n, c in seen)
    count = len(seen)
    assert models.fastest_attention(2, 5, 16, torch.float32, torch.device("cpu")) == first and len(seen) == count
