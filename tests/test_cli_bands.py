"""Every priced answer carries the error band of its own group (issue 47, item 5): engine, kind, batch bucket,
dense/MoE and context, from :func:`roofline.evidence.error_bands.band_for`, the old per-kind sentence where no group has rows;
and ``plan`` shows where verification turns KV-bound and the notes of what it left unpriced."""

from __future__ import annotations

import json

from roofline.evidence.error_bands import band_for, band_sentence
from specroof.cli import main

HW = "h100-sxm-80gb"
T8B = "llama-3.1-8b"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def note_of(engine, kind, *, batch=1, model=T8B, context=0, hw=HW):
    band = band_for(engine, kind, hw, batch=batch, model=model, context=context)
    return band.description if band is not None else band_sentence(engine, kind, hw)


def test_roofline_answers_carry_the_band_of_their_batch_bucket(capsys):
    one = json.loads(run(capsys, "roofline", "--hardware", HW, "--target", T8B, "--engine", "vllm", "--json"))
    big = json.loads(run(capsys, "roofline", "--hardware", HW, "--target", T8B, "--engine", "vllm", "--batch", "128",
                         "--context", "2048", "--json"))  # fmt: skip
    assert one["error_band_note"] == note_of("vllm", "decode")
    assert big["error_band_note"] == note_of("vllm", "batched", batch=128, context=2048)
    assert ">64" in big["error_band_note"]  # the group it was read from is named
    assert big["error_band"]["kind"] == "batched" and big["error_band"]["group"]["bucket"] == ">64"
    sweep = run(capsys, "roofline", "--hardware", HW, "--target", T8B, "--engine", "vllm", "--batch", "1,128")
    assert note_of("vllm", "batched", batch=128) in sweep and note_of("vllm", "decode") in sweep


def test_a_kind_no_group_covers_falls_back_to_the_old_sentence(capsys):
    d = json.loads(run(capsys, "roofline", "--hardware", HW, "--target", T8B, "--engine", "compiled", "--tp", "2",
                       "--json"))  # fmt: skip
    assert band_for("compiled", "tp", HW) is None
    assert d["error_band_note"] == band_sentence("compiled", "tp", HW)
    assert (d["error_band"] is None) == ("no error band" in d["error_band_note"])


def test_speedup_tree_plan_and_serve_carry_the_band_of_their_answer(capsys, tmp_path):
    d = json.loads(run(capsys, "speedup", "--hardware", HW, "--target", T8B, "--drafter", "eagle3", "--engine", "vllm",
                       "--batch", "64", "--context", "4096", "--json"))  # fmt: skip
    assert d["error_band_note"] == note_of("vllm", "speculative", batch=64, context=4096)
    vec = tmp_path / "v.json"
    vec.write_text("[0.6, 0.2, 0.1]")
    d = json.loads(run(capsys, "tree", "--hardware", HW, "--target", T8B, "--drafter", "eagle2", "--acceptance-vector",
                       str(vec), "--engine", "hf", "--batch", "4", "--json"))  # fmt: skip
    assert d["error_band_note"] == note_of("hf", "speculative", batch=4, context=1024)
    d = json.loads(run(capsys, "plan", "--hardware", HW, "--target", "deepseek-v3", "--drafter", "mtp", "--tp", "8",
                       "--weight-dtype", "fp8", "--engine", "sglang", "--batch", "1,32", "--json"))  # fmt: skip
    for r in d["recommendations"]:  # per cell: its batch bucket, a MoE target
        assert r["error_band_note"] == note_of("sglang", "speculative", batch=r["batch"], model="deepseek-v3",
                                               context=r["context"])  # fmt: skip
    d = json.loads(run(capsys, "serve", "--hardware", HW, "--target", T8B, "--drafter", "eagle3", "--rate", "2",
                       "--requests", "50", "--engine", "vllm", "--json"))  # fmt: skip
    assert d["error_band_note"] == note_of("vllm", "serving")


def test_plan_shows_where_verification_turns_kv_bound_and_what_it_left_unpriced(capsys):
    from roofline.costing.pricing import Pricing
    from roofline.deploy.planner import plan

    argv = ["plan", "--hardware", "h200-sxm-141gb", "--target", "deepseek-v3", "--drafter", "mtp", "--tp", "8",
            "--weight-dtype", "fp8", "--engine", "sglang", "--acceptance", "mtp=0.85", "--batch", "1,32"]  # fmt: skip
    d = json.loads(run(capsys, *argv, "--json"))
    pr = Pricing.of("h200-sxm-141gb", engine="sglang", tp=8, weight_dtype="fp8", dtype="bf16")
    table = plan(pr, "deepseek-v3", "mtp", 0.85, batch=[1, 32], gammas=range(0, 17))
    assert d["notes"] == table.attrs["notes"] and d["notes"]  # one MTP module: one rate is not stretched past it
    assert all("kv_bound_context" in r for r in d["table"])
    text = run(capsys, *argv)
    assert all(f"note: {n}" in text for n in d["notes"])
    header = next(line for line in text.splitlines() if line.lstrip().startswith("hardware strategy"))
    assert header.split()[-1] == "kv_bound_context"
    assert "kv_bound_context: the context (tokens per sequence) from which verification is KV-bound" in text
