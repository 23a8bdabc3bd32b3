"""Knobs in: the engines' own speculative configuration read back into a setting (roofline.deploy.engine_flags)."""

from __future__ import annotations

import json

import pytest

from roofline.core.errors import SpecroofError
from roofline.deploy.engine_flags import emit_flags, read_engine_config, read_yaml_subset
from roofline.deploy.engine_search import engine_settings
from roofline.speculation.engine_trees import EngineSetting

T8B = "llama-3.1-8b"


def test_sglang_flags_as_the_issue_writes_them() -> None:
    c = read_engine_config(
        "--speculative-algorithm EAGLE --speculative-num-steps 5 --speculative-eagle-topk 4 "
        "--speculative-num-draft-tokens 8"
    )
    assert (c.engine, c.drafter, c.setting) == ("sglang", "eagle", EngineSetting.sglang(5, 4, 8))
    assert c.target is None and c.tp is None


def test_flags_given_with_equals_signs_read_the_same() -> None:
    a = read_engine_config("--speculative-algorithm=EAGLE3 --speculative-num-steps=3 --speculative-eagle-topk=1 "
                           "--speculative-num-draft-tokens=4")  # fmt: skip
    b = read_engine_config("--speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 1 "
                           "--speculative-num-draft-tokens 4")  # fmt: skip
    assert a.setting == b.setting == EngineSetting.sglang(3, 1, 4) and a.drafter == "eagle3"


def test_vllm_json_as_the_issue_writes_it() -> None:
    c = read_engine_config('{"method": "eagle3", "num_speculative_tokens": 3}')
    assert (c.engine, c.drafter, c.setting) == ("vllm", "eagle3", EngineSetting.vllm(3))


def test_vllm_infers_the_method_from_the_draft_model_name_as_vllm_does() -> None:
    assert (
        read_engine_config('{"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 2}').drafter
        == "eagle3"
    )
    assert read_engine_config('{"model": "ngram", "num_speculative_tokens": 4}').drafter == "prompt-lookup"
    c = read_engine_config('{"model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 4}')
    assert c.drafter == "model:meta-llama/Llama-3.2-1B-Instruct" and c.method == "draft_model"


def test_a_whole_vllm_serve_line_reads_model_tp_dtype_and_quantization() -> None:
    c = read_engine_config(
        "vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 8 --dtype bfloat16 --quantization fp8 "
        """--speculative-config '{"method": "mtp", "num_speculative_tokens": 3}'"""
    )
    assert (c.target, c.tp, c.dtype, c.weight_dtype) == ("deepseek-ai/DeepSeek-V3", 8, "bf16", "fp8")
    assert c.drafter == "mtp" and c.setting == EngineSetting.vllm(3)
    assert c.target_spec().name == "deepseek-v3"
    short = read_engine_config('vllm serve deepseek-ai/DeepSeek-V3 -tp 8 --speculative_config \'{"method": "mtp"}\'')
    assert short.tp == 8 and short.setting == EngineSetting.vllm(1)  # vLLM's default: the checkpoint's n_predict


def test_a_whole_sglang_launch_line_reads_model_tp_and_its_own_default_knobs() -> None:
    c = read_engine_config(
        "python3 -m sglang.launch_server --model-path openai/gpt-oss-120b --tp 4 --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path lmsys/EAGLE3-gpt-oss-120b-bf16"
    )
    assert (c.target, c.tp, c.draft_model) == ("openai/gpt-oss-120b", 4, "lmsys/EAGLE3-gpt-oss-120b-bf16")
    assert c.setting == EngineSetting.sglang(3, 1, 4)  # SGLang's auto choice for gpt-oss
    assert "auto_choose_speculative_params" in c.notes[0]
    llama = read_engine_config(f"--speculative-algorithm EAGLE --speculative-draft-model-path x --model-path {T8B}")
    assert llama.setting == EngineSetting.sglang(5, 4, 8)


def test_trtllm_yaml_reads_dynamic_trees_chains_mtp_and_static_choices() -> None:
    dyn = read_engine_config(
        "speculative_config:\n  decoding_type: Eagle3\n  max_draft_len: 4\n  use_dynamic_tree: true\n"
        "  dynamic_tree_max_topK: 4\n  max_total_draft_tokens: 10  # a comment\n  speculative_model: d\n"
    )
    assert dyn.setting == EngineSetting.trtllm(4, 4, 10) and dyn.draft_model == "d"
    assert read_engine_config("speculative_config:\n  decoding_type: MTP\n  num_nextn_predict_layers: 3\n").setting == (
        EngineSetting.trtllm(3)
    )
    static = read_engine_config("speculative_config:\n  decoding_type: Eagle\n  eagle_choices: [[0], [1], [0, 0]]\n")
    assert static.setting.choices == ((0,), (1,), (0, 0)) and static.setting.draft_pass_widths == (1, 2)
    assert read_engine_config('{"decoding_type": "Eagle3", "max_draft_len": 3}').setting == EngineSetting.trtllm(3)


def test_the_yaml_subset_reads_block_lists_and_nesting() -> None:
    doc = read_yaml_subset("a:\n  b: 1\n  c:\n    - [0]\n    - [0, 1]\nd: 'x y'\ne: 2.5\n")
    assert doc == {"a": {"b": 1, "c": [[0], [0, 1]]}, "d": "x y", "e": 2.5}
    with pytest.raises(SpecroofError, match="anchors"):
        read_yaml_subset("a: &x 1\n")


def test_file_form_reads_the_same_text(tmp_path) -> None:
    f = tmp_path / "spec.json"
    f.write_text(json.dumps({"method": "eagle3", "num_speculative_tokens": 5}))
    assert read_engine_config(f"@{f}").setting == EngineSetting.vllm(5)
    flags = tmp_path / "flags.txt"
    flags.write_text("--speculative-algorithm EAGLE3 \\\n --speculative-num-steps 3 --speculative-eagle-topk 4 \\\n"
                     " --speculative-num-draft-tokens 16\n")  # fmt: skip
    assert read_engine_config(f"@{flags}").setting == EngineSetting.sglang(3, 4, 16)


@pytest.mark.parametrize("engine", ["sglang", "vllm", "trtllm"])
def test_every_setting_the_search_emits_reads_back_to_itself(engine: str) -> None:
    """The round trip the issue asks for, on every setting engine_search prices (vLLM trees included)."""
    settings = engine_settings(engine, steps=range(1, 6), vllm_trees=True)
    assert len(settings) > 10
    for s in settings:
        text = emit_flags(s, target=T8B, drafter="eagle3")
        back = read_engine_config(text)
        assert back.setting == s, text
        assert back.engine == engine and back.drafter == "eagle3"
        assert back.target == "meta-llama/Llama-3.1-8B-Instruct"


@pytest.mark.parametrize(
    "drafter, draft_model", [("mtp", None), ("prompt-lookup", None), ("model", "meta-llama/Llama-3.2-1B-Instruct")]
)
@pytest.mark.parametrize("engine", ["sglang", "vllm", "trtllm"])
def test_chain_drafters_read_back_to_the_same_drafter(engine: str, drafter: str, draft_model: str | None) -> None:
    s = EngineSetting(engine, 3, 1, 4)
    back = read_engine_config(emit_flags(s, target=T8B, drafter=drafter, draft_model=draft_model))
    assert back.setting == s
    assert back.drafter == (f"model:{draft_model}" if draft_model else drafter)


@pytest.mark.parametrize(
    "text, knob",
    [
        ("--speculative-algorithm FOO --speculative-num-steps 3 --speculative-eagle-topk 1 "
         "--speculative-num-draft-tokens 4", "--speculative-algorithm"),
        ('{"method": "eagle9", "num_speculative_tokens": 3}', '"method"'),
        ("speculative_config:\n  decoding_type: Lookahed\n  max_draft_len: 3\n", "decoding_type"),
        # SGLang scores topk + (steps - 1) topk^2 candidates: 2 steps of top-2 score 6, fewer than 15 drafts
        ("--speculative-algorithm EAGLE --speculative-num-steps 2 --speculative-eagle-topk 2 "
         "--speculative-num-draft-tokens 16", "--speculative-num-draft-tokens"),
        ("--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 "
         "--speculative-num-draft-tokens 8", "--speculative-num-draft-tokens"),
        ('{"method": "eagle", "num_speculative_tokens": 3, "speculative_token_tree": "[(0,), (1,), (2, 0)]"}',
         "speculative_token_tree"),
        ("speculative_config:\n  decoding_type: Eagle\n  eagle_choices: [[0], [1, 0]]\n", "eagle_choices"),
        (f"vllm serve {T8B} -tp 3 --speculative-config " + """'{"method": "eagle3", "num_speculative_tokens": 3}'""",
         "--tensor-parallel-size 3"),
        ("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --tp-size 6 "
         "--speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 1 "
         "--speculative-num-draft-tokens 4", "--tp-size 6"),
        ("vllm serve deepseek-ai/DeepSeek-V3 -tp 8 --speculative-config "
         """'{"method": "mtp", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 2}'""",
         "draft_tensor_parallel_size"),
        ('{"method": "eagle3", "num_speculative_tokens": 0}', "num_speculative_tokens"),
        ("--speculative-algorithm EAGLE3 --speculative-num-steps 3", "--speculative-eagle-topk"),
        ("--speculative-num-steps 3 --speculative-num-steps 4", "given twice"),
        ("@/no/such/file.yaml", "no such file"),
        ("hello world", "cannot read"),
    ],
)  # fmt: skip
def test_bad_knobs_get_one_line_naming_the_knob(text: str, knob: str) -> None:
    with pytest.raises(SpecroofError) as err:
        read_engine_config(text)
    msg = str(err.value)
    assert knob in msg and "\n" not in msg


def test_sglangs_documented_example_with_more_draft_tokens_than_topk_times_steps_is_accepted() -> None:
    """SGLang's own docs run steps 3, top-4, 16 draft tokens: 16 > 4 x 3, but 3 steps score 4 + 2 x 16 = 36
    candidates, so the engine runs it (its real bound is the candidates, not topk x steps)."""
    c = read_engine_config("--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 4 "
                           "--speculative-num-draft-tokens 16")  # fmt: skip
    assert c.setting.n_nodes == 15


# -- the same price: emit, read back, price ---------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["sglang", "vllm", "trtllm"])
@pytest.mark.parametrize("batch", [1, 32])
def test_the_emitted_best_tree_setting_reads_back_to_the_same_price(engine: str, batch: int) -> None:
    """plan --emit ENGINE searches the engine's knobs (engine_search.plan_engine) and prints the best as flags: those
    flags, read back and priced, give the number the search chose them by."""
    from roofline.costing.pricing import Pricing
    from roofline.deploy.engine_search import plan_engine
    from roofline.deploy.planner import price_engine_config
    from roofline.speculation.trees import IIDAcceptance

    pr = Pricing.of("h100-sxm-80gb", engine=engine)
    acc = IIDAcceptance(0.7)
    ep = plan_engine(hardware=pr, target=T8B, drafter="eagle3", framework=engine, acceptance=acc, batches=[batch])
    best = ep.best_settings[0]
    text = emit_flags(best, target=T8B, drafter="eagle3")
    config = read_engine_config(text)
    assert config.setting == best
    row = price_engine_config(config, pr, acceptance=acc, batch=batch)
    assert row["speedup"] == pytest.approx(float(ep.best["speedup"].item()), rel=1e-12)
    # the hardware's name alone builds the same pricing from the configuration (its engine, no TP: one GPU)
    assert price_engine_config(config, "h100-sxm-80gb", acceptance=0.7, batch=batch)["speedup"] == pytest.approx(
        row["speedup"], rel=1e-12
    )


@pytest.mark.parametrize("engine", ["sglang", "vllm", "trtllm"])
def test_the_emitted_best_chain_reads_back_to_the_plans_price(engine: str) -> None:
    """A chain drafter's plan --emit deploys the plan's best gamma as the engine's chain: read back, the same price."""
    from roofline.costing.pricing import Pricing
    from roofline.deploy.planner import plan, price_engine_config

    pr = Pricing.of("h100-sxm-80gb", engine=engine, tp=2)
    table = plan(pr, T8B, "model:llama-3.2-1b", 0.75, batch=4, gammas=range(0, 9))
    row = table.iloc[0]
    g = int(row["gamma"])
    assert g >= 1
    text = emit_flags(EngineSetting(engine, g, 1, g + 1), target=T8B, drafter="model",
                      draft_model="meta-llama/Llama-3.2-1B-Instruct", tp=2)  # fmt: skip
    config = read_engine_config(text)
    assert config.tp == 2 and config.drafter == "model:meta-llama/Llama-3.2-1B-Instruct"
    priced = price_engine_config(config, "h100-sxm-80gb", acceptance=0.75, batch=4)
    assert priced["speedup"] == pytest.approx(float(row["speedup"]), rel=1e-9)


def test_yours_against_the_best_setting_names_the_flags() -> None:
    from roofline.deploy.planner import compare_engine_config

    config = read_engine_config(
        "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path yuhuili/EAGLE3-LLaMA3.1-Instruct-8B --speculative-num-steps 5 "
        "--speculative-eagle-topk 4 --speculative-num-draft-tokens 8"
    )
    v = compare_engine_config(config, "h100-sxm-80gb", mean_accepted=3.2, batch=64)
    assert v.yours["expected_tokens"] == pytest.approx(3.2)  # the mean is what the user's setting measured
    assert v.gain > 1.0 and v.best_setting != config.setting
    assert v.sentence().startswith("yours (sglang ") and "--speculative-num-steps" in v.flags
    back = read_engine_config(v.flags)
    assert back.setting == v.best_setting and back.draft_model == config.draft_model
    assert v.best["speedup"] == pytest.approx(float(v.table["speedup"].max()))
    # the best setting read back from its flags and priced on its own gives the figure the verdict quotes
    from roofline.deploy.planner import price_engine_config

    again = price_engine_config(back, "h100-sxm-80gb", acceptance=v.acceptance, batch=64)
    assert again["speedup"] == pytest.approx(v.best["speedup"], rel=1e-12)


def test_a_reused_mtp_module_is_searched_only_as_deep_as_the_acceptance_covers() -> None:
    from roofline.deploy.planner import compare_engine_config, price_engine_config

    text = "vllm serve deepseek-ai/DeepSeek-V3 -tp 8 --quantization fp8 --speculative-config " + (
        """'{"method": "mtp", "num_speculative_tokens": 3}'"""
    )
    config = read_engine_config(text)
    v = compare_engine_config(config, "h200-sxm-141gb", mean_accepted=2.4, batch=8)
    assert v.table["num_steps"].max() == 3 and v.notes
    assert "--tensor-parallel-size 8" in v.flags
    with pytest.raises(SpecroofError, match="ships 1 MTP module"):
        price_engine_config(config, "h200-sxm-141gb", acceptance=0.85, batch=8)
    assert price_engine_config(config, "h200-sxm-141gb", acceptance=[0.85, 0.6, 0.5], batch=8)["speedup"] > 0
