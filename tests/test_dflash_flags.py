"""A DFlash block drafter in the engines' own flags: SGLang's DFLASH (one --speculative-dflash-block-size) and vLLM's
"dflash" method, emitted by plan --emit and read back by --engine-config (roofline.deploy.engine_flags)."""

from __future__ import annotations

import json

import pytest

from roofline.core.errors import SpecroofError
from roofline.deploy.engine_flags import emit_flags, knobs_for, read_engine_config
from roofline.speculation.engine_trees import EngineSetting
from specroof.cli import main

HW, TARGET = "b200-180gb", "qwen3.5-27b"
DRAFT = "z-lab/Qwen3.5-27B-DFlash"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_sglang_takes_the_block_as_its_one_knob() -> None:
    s = EngineSetting.sglang(11, 1, 12)
    assert knobs_for(s, "dflash") == {"speculative_dflash_block_size": 12}
    assert knobs_for(s, "eagle3") == s.knobs()
    line = emit_flags(s, target=TARGET, drafter="dflash")
    assert "--speculative-algorithm DFLASH" in line and f"--speculative-draft-model-path {DRAFT}" in line
    assert line.endswith("--speculative-dflash-block-size 12") and "--speculative-num-steps" not in line
    back = read_engine_config(line)
    assert (back.drafter, back.setting, back.draft_model) == (f"dflash:{DRAFT}", s, DRAFT)


def test_vllm_takes_the_drafts_as_num_speculative_tokens() -> None:
    line = emit_flags(EngineSetting.vllm(15), target=TARGET, drafter="dflash")
    cfg = json.loads(line.split("--speculative-config ", 1)[1].strip("'"))
    assert cfg == {"method": "dflash", "model": DRAFT, "num_speculative_tokens": 15}
    assert read_engine_config(line).setting == EngineSetting.vllm(15)


def test_sglang_dflash_reads_either_width_flag_and_refuses_two_that_disagree() -> None:
    one = read_engine_config("--speculative-algorithm DFLASH --speculative-num-draft-tokens 8")
    assert one.setting == EngineSetting.sglang(7, 1, 8)
    default = read_engine_config("--speculative-algorithm DFLASH")
    assert default.setting == EngineSetting.sglang(15, 1, 16) and any("16" in n for n in default.notes)
    with pytest.raises(SpecroofError, match="--speculative-dflash-block-size 8.*equal"):
        read_engine_config(
            "--speculative-algorithm DFLASH --speculative-num-draft-tokens 12 --speculative-dflash-block-size 8"
        )


def test_tensorrt_llm_has_no_dflash_method() -> None:
    with pytest.raises(SpecroofError, match="no trtllm method"):
        emit_flags(EngineSetting.vllm(7), "trtllm", target=TARGET, drafter="dflash")


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_plan_emits_dflash_and_speedup_prices_what_it_emitted(capsys, engine) -> None:
    plan = ["plan", "--hardware", HW, "--target", TARGET, "--drafter", "dflash", "--acceptance", "dflash=mean:6",
            "--engine", engine, "--emit", engine]  # fmt: skip
    code, out, err = run(capsys, *plan, "--json")
    assert code == 0, err
    deploy = json.loads(out)["deploy"][0]
    assert deploy["speedup"] > 1.0
    if engine == "sglang":
        assert deploy["knobs"] == {"speculative_dflash_block_size": deploy["num_draft_tokens"]}
        assert deploy["label"] == f"speculative_dflash_block_size={deploy['num_draft_tokens']}"
    code, got, err = run(capsys, "speedup", "--engine-config", out, "--acceptance", "dflash=mean:6", "--json")
    assert code == 0, err
    d = json.loads(got)
    assert d["label"] == deploy["label"]
    assert d["speedup"] == pytest.approx(deploy["speedup"], rel=1e-9)


def test_the_engine_config_search_stays_within_the_drafters_block(capsys) -> None:
    line = emit_flags(EngineSetting.sglang(11, 1, 12), target=TARGET, drafter="dflash")
    code, out, err = run(capsys, "plan", "--hardware", HW, "--acceptance", "dflash=mean:6", "--engine-config", line,
                         "--json")  # fmt: skip
    assert code == 0, err
    rows = json.loads(out)
    table = next(v for k, v in rows.items() if isinstance(v, list) and v and "num_draft_tokens" in v[0])
    assert max(int(r["num_draft_tokens"]) for r in table) == 16  # a block of 16: at most 15 drafts a pass
    assert all(str(r["label"]).startswith("speculative_dflash_block_size=") for r in table)
