"""The acceptance vocabulary: every kind, its conversions checked against hand computations, the importers."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline.core.errors import SpecroofError
from roofline.speculation.acceptance import (
    MeanAccepted,
    PerToken,
    PositionCounts,
    PositionCurve,
    SiblingRankVector,
    VllmDraftRate,
    alpha_for_tokens,
    check_mean_accepted,
    conditional_from_unconditional,
    from_json,
    parse_acceptance,
    parse_acceptance_items,
    read_sibling_vector,
    unconditional_from_conditional,
)
from roofline.speculation.importers import import_file, import_text, parse_prometheus, sniff_format
from roofline.speculation.speculative import expected_tokens_curve, metrics_from_counts
from roofline.speculation.trees import SiblingRankAcceptance, optimal_tree

DATA = Path(__file__).parent / "data"


def series(a: float, g: int) -> float:
    """Tokens per round of a chain of g drafts at per-token rate a, summed term by term: 1 + a + ... + a^g."""
    return sum(a**j for j in range(g + 1))


# -- vLLM draft acceptance rate <-> per-token rate <-> mean accepted length ------------------


def test_vllm_rate_to_mean_and_per_token_by_hand():
    # the case: vLLM logs 0.7 at 5 speculative tokens -> 1 + 0.7 x 5 = 4.5 tokens per round
    acc = VllmDraftRate(0.7, 5)
    assert acc.tokens_per_round() == pytest.approx(4.5, abs=1e-12)
    a = acc.alpha()
    assert series(a, 5) == pytest.approx(4.5, abs=1e-9)
    assert series(0.88, 5) < 4.5 < series(0.885, 5)  # a per-token 0.88, as the issue says, not 0.7
    assert 0.88 < a < 0.885
    # and back: a per-token rate logged by vLLM at k = 5 is (E - 1) / 5
    assert PerToken(a).draft_acceptance_rate(5) == pytest.approx(0.7, abs=1e-9)
    assert PerToken(0.88).draft_acceptance_rate(5) == pytest.approx((series(0.88, 5) - 1) / 5)
    # the curve it implies is that per-token rate at every position
    np.testing.assert_allclose(acc.curve(), [a] * 5)
    assert acc.for_plan() == pytest.approx(a)


def test_mean_accepted_to_per_token_and_vllm_rate_by_hand():
    m = MeanAccepted(3.2, gamma=4)
    a = m.alpha()
    assert series(a, 4) == pytest.approx(3.2, abs=1e-9)
    assert m.draft_acceptance_rate() == pytest.approx((3.2 - 1) / 4)
    assert m.tokens_per_round() == 3.2
    assert m.tokens_per_round(2) == pytest.approx(series(a, 2))  # another length: the i.i.d. rate extrapolates
    # the inverse is exact at the ends and broadcasts
    np.testing.assert_allclose(alpha_for_tokens([1.0, 5.0, 3.0], [4, 4, 2]), [0.0, 1.0, 1.0])
    np.testing.assert_allclose(alpha_for_tokens(series(0.6, 7), 7), 0.6, atol=1e-12)
    with pytest.raises(SpecroofError, match=r"tokens per round must lie in \[1, gamma \+ 1\] = \[1, 3\]"):
        alpha_for_tokens(3.5, 2)


def test_mean_without_its_length_refuses_to_convert():
    m = parse_acceptance("mean:3.2")
    assert m.tokens_per_round() == 3.2 and "no chain length" in m.describe()
    with pytest.raises(SpecroofError, match=r"write mean:3.2@G"):
        m.alpha()
    tree = MeanAccepted(4.1, depth=5)
    with pytest.raises(SpecroofError, match="tree of depth 5: it prices that tree only"):
        tree.for_plan()
    assert parse_acceptance("mean:3.2", gamma=4) == MeanAccepted(3.2, gamma=4)


# -- conditional <-> unconditional per position -----------------------------------------------


def test_conditional_and_unconditional_curves_by_hand():
    v = [0.9, 0.8, 0.7, 0.6, 0.5]
    # as P(position i accepted): they sum to tokens per round - 1
    u = PositionCurve(tuple(v), conditional=False)
    assert u.tokens_per_round() == pytest.approx(1 + 0.9 + 0.8 + 0.7 + 0.6 + 0.5)  # 4.5
    np.testing.assert_allclose(u.curve(), [0.9, 0.8 / 0.9, 0.7 / 0.8, 0.6 / 0.7, 0.5 / 0.6])
    # as P(i accepted | i - 1 accepted): running products
    c = PositionCurve(tuple(v), conditional=True)
    hand = 1 + 0.9 + 0.9 * 0.8 + 0.9 * 0.8 * 0.7 + 0.9 * 0.8 * 0.7 * 0.6 + 0.9 * 0.8 * 0.7 * 0.6 * 0.5
    assert hand == pytest.approx(3.5776)
    assert c.tokens_per_round() == pytest.approx(hand)
    assert c.tokens_per_round(2) == pytest.approx(1 + 0.9 + 0.72)
    np.testing.assert_allclose(unconditional_from_conditional(v), [0.9, 0.72, 0.504, 0.3024, 0.1512])
    np.testing.assert_allclose(conditional_from_unconditional(unconditional_from_conditional(v)), v)
    # an unconditional rate cannot rise: position 3 needs position 2
    with pytest.raises(SpecroofError, match="must not increase"):
        PositionCurve((0.9, 0.5, 0.6), conditional=False)
    # a position never reached: 0/0 -> 0, and nothing after it counts
    np.testing.assert_allclose(conditional_from_unconditional([0.5, 0.0, 0.0]), [0.5, 0.0, 0.0])
    with pytest.raises(SpecroofError, match="exceeds the acceptance curve's 5 positions"):
        c.curve(6)


def test_metrics_from_counts_gives_both_per_position_kinds():
    # 10 rounds of 5 drafts; position i accepted in 9, 8, 7, 6, 5 rounds -> 35 accepted
    m = metrics_from_counts(10, 50, 35, 45, 5, accepted_per_position=[9, 8, 7, 6, 5])
    np.testing.assert_allclose(m.per_position_unconditional, [0.9, 0.8, 0.7, 0.6, 0.5])
    np.testing.assert_allclose(m.per_position_conditional, [0.9, 0.8 / 0.9, 0.7 / 0.8, 0.6 / 0.7, 0.5 / 0.6])
    assert m.mean_acceptance_length == pytest.approx(4.5)
    # the conditional curve is what the chain formula takes: it gives the measured tokens per round back
    assert float(expected_tokens_curve(m.per_position_conditional)) == pytest.approx(4.5)
    # fed the unconditional rates instead, it undercounts (the 3.58)
    assert float(expected_tokens_curve(m.per_position_unconditional)) == pytest.approx(3.5776)
    assert m.per_position is m.per_position_unconditional  # the old name
    assert m.acceptance_rate == pytest.approx(0.7)
    with pytest.raises(SpecroofError, match=r"accepted_per_position\[0\] \(11\) cannot exceed rounds \(10\)"):
        metrics_from_counts(10, 50, 35, 45, 5, accepted_per_position=[11, 8, 7, 6, 3])


def test_position_counts_by_hand():
    c = PositionCounts(6, (4, 3, 1))
    np.testing.assert_allclose(c.unconditional, [4 / 6, 3 / 6, 1 / 6])
    np.testing.assert_allclose(c.curve(), [4 / 6, 3 / 4, 1 / 3])
    assert c.tokens_per_round() == pytest.approx(1 + 8 / 6)
    assert c.tokens_per_round(1) == pytest.approx(1 + 4 / 6)
    assert c.draft_acceptance_rate() == pytest.approx(8 / 18)
    with pytest.raises(SpecroofError, match="must not increase"):
        PositionCounts(6, (3, 4))
    with pytest.raises(SpecroofError, match=r"accepted at position 1 \(7\) cannot exceed the rounds \(6\)"):
        PositionCounts(6, (7,))


# -- bounds -----------------------------------------------------------------------------------------


def test_mean_accepted_bounds():
    assert check_mean_accepted(4.0, gamma=3) == 4.0  # every draft and the bonus
    with pytest.raises(SpecroofError, match=r"exceeds gamma \+ 1 = 4"):
        check_mean_accepted(4.5, gamma=3)
    # the eagle2 case: 11.3 tokens per round on a depth-5 tree is impossible
    with pytest.raises(SpecroofError, match=r"11.3 exceeds depth \+ 1 = 6"):
        check_mean_accepted(11.3, depth=5)
    with pytest.raises(SpecroofError, match="> 1"):
        check_mean_accepted(1.0)
    assert check_mean_accepted(1.0, speculative=False) == 1.0
    assert check_mean_accepted(np.float64(2.5), gamma=2) == 2.5 and check_mean_accepted(np.array(2.5)) == 2.5
    for bad in (0.5, float("nan"), float("inf"), "3"):
        with pytest.raises(SpecroofError):
            check_mean_accepted(bad)  # type: ignore[arg-type]
    with pytest.raises(SpecroofError, match=r"exceeds gamma \+ 1 = 3"):
        MeanAccepted(3.2, gamma=2)
    with pytest.raises(SpecroofError, match="not both"):
        MeanAccepted(3.0, gamma=3, depth=3)


# -- the command-line grammar ----------------------------------------------------------------------


def test_parse_every_form():
    assert parse_acceptance("0.7") == PerToken(0.7)
    assert parse_acceptance("alpha:0.7") == PerToken(0.7)
    assert parse_acceptance(0.7) == PerToken(0.7)
    assert parse_acceptance("mean:3.2@5") == MeanAccepted(3.2, gamma=5)
    assert parse_acceptance("vllm-rate:0.7@5") == VllmDraftRate(0.7, 5)
    assert parse_acceptance("vllm-rate:70%@5").rate == pytest.approx(0.7)  # as vLLM's log prints it
    assert parse_acceptance("curve:0.9,0.8") == PositionCurve((0.9, 0.8))
    assert parse_acceptance("unconditional:0.9,0.72") == PositionCurve((0.9, 0.72), conditional=False)
    with pytest.raises(SpecroofError, match=r"needs the number of speculative tokens.*vllm-rate:0.7@K"):
        parse_acceptance("vllm-rate:0.7")
    with pytest.raises(SpecroofError, match=r"alpha must lie in \[0, 1\] \(got 1.5\)"):
        parse_acceptance("alpha:1.5")
    with pytest.raises(SpecroofError, match=r"the length after @ must be a whole number >= 1"):
        parse_acceptance("mean:3@2.5")
    with pytest.raises(SpecroofError, match="neither a number, a known kind nor a file"):
        parse_acceptance("banana")


def test_parse_files(tmp_path):
    (tmp_path / "c.json").write_text("[0.9, 0.8]")
    assert parse_acceptance(str(tmp_path / "c.json")).values == (0.9, 0.8)
    (tmp_path / "c.txt").write_text("0.9 0.8, 0.7\n")
    assert parse_acceptance(str(tmp_path / "c.txt")).values == (0.9, 0.8, 0.7)
    (tmp_path / "u.json").write_text('{"unconditional": [0.9, 0.72]}')
    assert parse_acceptance(str(tmp_path / "u.json")).curve() == pytest.approx([0.9, 0.8])
    (tmp_path / "n.json").write_text('{"rounds": 6, "accepted_per_position": [4, 3, 1]}')
    assert parse_acceptance(str(tmp_path / "n.json")) == PositionCounts(6, (4, 3, 1), source="n.json")
    (tmp_path / "m.json").write_text('{"mean": 3.2, "gamma": 4}')
    assert parse_acceptance(str(tmp_path / "m.json")).alpha() == pytest.approx(MeanAccepted(3.2, gamma=4).alpha())
    (tmp_path / "bad.json").write_text('{"kind": "nonsense"}')
    with pytest.raises(SpecroofError, match="unknown kind 'nonsense'"):
        parse_acceptance(str(tmp_path / "bad.json"))
    (tmp_path / "short.json").write_text('{"kind": "vllm-rate", "rate": 0.7}')
    with pytest.raises(SpecroofError, match="needs the field 'num_speculative_tokens'"):
        parse_acceptance(str(tmp_path / "short.json"))
    # a raw metrics file is recognised by its content
    assert isinstance(parse_acceptance(str(DATA / "vllm_metrics.prom")), PositionCounts)
    assert isinstance(parse_acceptance(str(DATA / "sglang_server.log")), MeanAccepted)
    # a one-question Spec-Bench file is one JSON object: still read as Spec-Bench
    (tmp_path / "one.jsonl").write_text((DATA / "spec_bench_answers.jsonl").read_text().splitlines()[0])
    assert parse_acceptance(str(tmp_path / "one.jsonl")).tokens_per_round() == pytest.approx((1 + 2 + 3 + 3) / 4)


def test_every_kind_round_trips_through_its_json(tmp_path):
    kinds = [
        PerToken(0.7),
        PositionCurve((0.9, 0.8, 0.7)),
        PositionCurve((0.9, 0.8, 0.7), conditional=False),
        PositionCounts(6, (4, 3, 1)),
        MeanAccepted(3.2, gamma=4),
        MeanAccepted(4.1, depth=5),
        MeanAccepted(3.2),
        VllmDraftRate(0.7, 5),
        SiblingRankVector.from_values([0.0, 0.6, 0.2, 0.1, 0.1]),
    ]
    for acc in kinds:
        data = json.loads(json.dumps(acc.to_json()))
        back = from_json(data)
        assert type(back) is type(acc) and back.to_json()["describe"] == acc.to_json()["describe"], acc
        assert data["describe"].startswith("given ") and "converted to" in data["describe"]
        if acc.length:  # what `plan --acceptance-curve` and `--acceptance KEY=FILE` read: the conditional curve
            np.testing.assert_allclose(data["curve"], acc.curve())
            assert float(expected_tokens_curve(data["curve"])) == pytest.approx(acc.tokens_per_round())


def test_acceptance_items_per_drafter():
    keys = ["model:llama-3.2-1b", "early-exit:8", "eagle3"]
    out = parse_acceptance_items(["model=0.7", "early-exit=mean:2.5@4", "eagle3=vllm-rate:0.6@3"], keys)
    assert out == {
        "model:llama-3.2-1b": PerToken(0.7),
        "early-exit:8": MeanAccepted(2.5, gamma=4),
        "eagle3": VllmDraftRate(0.6, 3),
    }
    # the full name works too
    assert parse_acceptance_items(["model:llama-3.2-1b=0.7"], keys[:1]) == {"model:llama-3.2-1b": PerToken(0.7)}
    named = parse_acceptance_items(["draft llama-3.2-1b=0.6"], ["draft"], aliases={"draft llama-3.2-1b": "draft"})
    assert named == {"draft": PerToken(0.6)}
    with pytest.raises(SpecroofError, match="given twice"):
        parse_acceptance_items(["model=0.7", "model=0.6"], keys[:1])
    with pytest.raises(SpecroofError, match=r"no --acceptance for drafter\(s\) early-exit:8"):
        parse_acceptance_items(["model=0.7"], keys[:2])
    with pytest.raises(SpecroofError, match="KEY must be one of the drafters asked for"):
        parse_acceptance_items(["medusa=0.7"], keys[:1])
    with pytest.raises(SpecroofError, match="write KEY=VALUE"):
        parse_acceptance_items(["model"], keys[:1])
    with pytest.raises(
        SpecroofError, match=r"names 2 drafters \(model:a, model:b\); use the full name, e.g. model:a=0.7"
    ):
        parse_acceptance_items(["model=0.7"], ["model:a", "model:b"])
    # one drafter: its value alone (as speedup and serve take it); with two, the message names the keys to write
    assert parse_acceptance_items(["0.7"], keys[:1]) == {keys[0]: PerToken(0.7)}
    with pytest.raises(SpecroofError, match=r"with 2 drafters write KEY=VALUE, KEY one of model:llama-3.2-1b, early"):
        parse_acceptance_items(["0.7"], keys[:2])


def test_a_number_past_one_says_what_it_could_mean():
    # a rate lies in [0, 1]: 1.3 is most likely a mean accepted length written without its kind
    with pytest.raises(SpecroofError, match=r"rate lies in \[0, 1\].*written mean:1.3"):
        parse_acceptance("1.3")
    with pytest.raises(SpecroofError, match=r"written mean:1.3"):
        parse_acceptance_items(["model=1.3"], ["model"])


# -- Sequoia's sibling-rank vector: detected, never shifted ---------------------------------------


def test_sequoia_leading_zero_is_detected_not_shifted(tmp_path):
    saved = [0.0, 0.6, 0.2, 0.1, 0.1]  # Sequoia's layout: unused 0, ranks 0..2, 'none accepted'
    v = read_sibling_vector(DATA / "sequoia_vector.json")
    assert v.p == pytest.approx((0.6, 0.2, 0.1)) and v.layout == "sequoia"
    assert "Sequoia's saved layout" in v.describe()
    assert v.model().p.tolist() == pytest.approx(SiblingRankAcceptance.from_sequoia(saved).p.tolist())
    # the tree is the one its ranks give, not the one of the vector shifted by one rank
    right = optimal_tree(SiblingRankAcceptance([0.6, 0.2, 0.1]), 8, 4).expected_tokens
    assert optimal_tree(v.model(), 8, 4).expected_tokens == pytest.approx(right)
    shifted = optimal_tree(SiblingRankAcceptance([0.0, 0.6, 0.2, 0.1]), 8, 4).expected_tokens
    assert shifted < right - 0.3  # what the shifted reading used to cost
    # plain ranks pass unchanged; {"sequoia": ...} and {"p": ...} are read
    assert read_sibling_vector([0.6, 0.2]).p == (0.6, 0.2)
    (tmp_path / "s.json").write_text(json.dumps({"sequoia": saved}))
    assert read_sibling_vector(tmp_path / "s.json").p == pytest.approx((0.6, 0.2, 0.1))
    (tmp_path / "p.json").write_text('{"p": [0.5, 0.3]}')
    assert read_sibling_vector(tmp_path / "p.json").p == (0.5, 0.3)
    # a leading 0 that is not Sequoia's layout is refused with the reason
    with pytest.raises(SpecroofError, match="starts with 0 .* not Sequoia's saved layout"):
        read_sibling_vector([0.0, 0.6, 0.2])
    with pytest.raises(SpecroofError, match="a Sequoia acceptance vector has element 0 unused"):
        SiblingRankVector.from_values([0.5, 0.3, 0.2], sequoia=True)
    # a chain curve is not a sibling-rank vector
    (tmp_path / "c.json").write_text(json.dumps(PositionCounts(6, (4, 3, 1)).to_json()))
    with pytest.raises(SpecroofError, match="holds a counts acceptance .* not a sibling-rank vector"):
        read_sibling_vector(tmp_path / "c.json")
    with pytest.raises(SpecroofError, match="does not exist"):
        read_sibling_vector(tmp_path / "missing.json")


# -- importers ---------------------------------------------------------------------------------------


def test_prometheus_parser():
    samples = parse_prometheus('# HELP x y\na_total{b="1",c="x \\"q\\""} 2.5 1700000000\nplain 3\n')
    assert samples == [("a_total", {"b": "1", "c": 'x \\"q\\"'}, 2.5), ("plain", {}, 3.0)]
    with pytest.raises(SpecroofError, match="line 1: not a Prometheus sample"):
        parse_prometheus("this is not one")


def test_vllm_prometheus_by_hand():
    acc = import_file(DATA / "vllm_metrics.prom", "vllm")
    # two engines summed: 1000 drafts, 3000 drafted, 1700 accepted; per position 850, 520, 330
    assert acc == PositionCounts(1000, (850, 520, 330), source=acc.source)
    assert acc.tokens_per_round() == pytest.approx(1 + 1700 / 1000)  # vLLM's mean acceptance length
    assert acc.draft_acceptance_rate() == pytest.approx(1700 / 3000)  # vLLM's draft acceptance rate
    np.testing.assert_allclose(acc.curve(), [0.85, 0.52 / 0.85, 0.33 / 0.52])
    text = (DATA / "vllm_metrics.prom").read_text()
    other = text.replace('engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"', 'engine="0",model_name="other"')
    with pytest.raises(SpecroofError, match="hold 2 models"):
        import_text(other, "vllm")
    one = import_text(other, "vllm", model="other")
    assert one == PositionCounts(400, (350, 220, 130), source=one.source)
    # without the per-position counters (older servers): the draft rate at drafted / drafts tokens
    lean = "\n".join(ln for ln in text.splitlines() if "per_pos" not in ln)
    assert import_text(lean, "vllm") == VllmDraftRate(1700 / 3000, 3, source=import_text(lean, "vllm").source)
    with pytest.raises(SpecroofError, match="is speculative decoding on"):
        import_text('vllm:num_requests_running{engine="0"} 1\n', "vllm")


def test_vllm_log_by_hand():
    acc = import_file(DATA / "vllm_spec_decode.log", "vllm")
    # interval 1: 1500 drafted / 3 = 500 drafts at [.85, .52, .33]; interval 2: 300 drafts at [.9, .6, .4]
    hand = (500 * np.array([0.85, 0.52, 0.33]) + 300 * np.array([0.9, 0.6, 0.4])) / 800
    assert isinstance(acc, PositionCurve) and not acc.conditional
    np.testing.assert_allclose(acc.values, hand)
    assert acc.tokens_per_round() == pytest.approx(1 + (850 + 570) / 800)


def test_sglang_log_by_hand(tmp_path):
    acc = import_file(DATA / "sglang_server.log", "sglang")
    # accept len 3.10 over 4 running requests and 2.90 over 12; topk 1 with 4 draft tokens: a chain of 3
    assert acc == MeanAccepted((4 * 3.10 + 12 * 2.90) / 16, gamma=3, source=acc.source)
    assert acc.tokens_per_round() == pytest.approx(2.95)
    tree_log = (DATA / "sglang_server.log").read_text().replace("speculative_eagle_topk=1", "speculative_eagle_topk=8")
    tree = import_text(tree_log, "sglang")
    assert tree.depth == 3 and tree.gamma is None
    assert import_text(tree_log, "sglang", gamma=5).gamma == 5  # the caller's shape wins
    with pytest.raises(SpecroofError, match="no 'accept len: X' above 0"):
        import_text("Decode batch, #running-req: 1, accept len: 0.00, \n", "sglang")
    with pytest.raises(SpecroofError, match=r"exceeds gamma \+ 1 = 2"):
        import_text("Decode batch, #running-req: 1, accept len: 3.50, \n", "sglang", gamma=1)


def test_spec_bench_by_hand(tmp_path):
    acc = import_file(DATA / "spec_bench_answers.jsonl", "spec-bench")
    # steps emitted 1, 2, 3, 3 and 4, 1 tokens: position 1 accepted in 4 steps, 2 in 3, 3 in 1
    assert acc == PositionCounts(6, (4, 3, 1), source=acc.source)
    assert acc.tokens_per_round() == pytest.approx(np.mean([1, 2, 3, 3, 4, 1]))  # its "#Mean accepted tokens"
    assert "10.0 tokens/s" in acc.source  # 14 new tokens in 1.4 s
    math = import_file(DATA / "spec_bench_answers.jsonl", "spec-bench", category="math_reasoning")
    assert math == PositionCounts(2, (1, 1, 1), source=math.source)
    base = json.dumps({"question_id": 1, "category": "qa", "choices": [{"accept_lengths": [1, 1, 1]}]})
    with pytest.raises(SpecroofError, match="every step emitted one token"):
        import_text(base, "spec-bench")
    with pytest.raises(SpecroofError, match="line 1: no choices"):
        import_text('{"question_id": 1, "choices": [{"turns": ["x"]}]}', "spec-bench")
    with pytest.raises(SpecroofError, match="line 2: not JSON"):
        import_text(base + "\n{oops\n", "spec-bench")


def test_sniffing_and_unknown_format(tmp_path):
    assert sniff_format((DATA / "vllm_metrics.prom").read_text()) == "vllm"
    assert sniff_format((DATA / "vllm_spec_decode.log").read_text()) == "vllm"
    assert sniff_format((DATA / "sglang_server.log").read_text()) == "sglang"
    assert sniff_format((DATA / "spec_bench_answers.jsonl").read_text()) == "spec-bench"
    assert sniff_format("[0.9, 0.8]") is None
    with pytest.raises(SpecroofError, match="unknown metrics format 'tgi'"):
        import_text("", "tgi")
    with pytest.raises(SpecroofError, match="does not exist"):
        import_file(tmp_path / "nothing.prom", "vllm")


# -- the command -----------------------------------------------------------------------------------------


def _run(argv, capsys):
    from specroof.commands.acceptance import add_parser

    parser = argparse.ArgumentParser(prog="specroof")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    return capsys.readouterr().out


def test_import_command_writes_the_file_plan_reads(tmp_path, capsys):
    out = tmp_path / "curve.json"
    text = _run(
        ["acceptance", "import", str(DATA / "vllm_metrics.prom"), "--format", "vllm", "--out", str(out)], capsys
    )
    assert text.startswith("given accepted per position [850, 520, 330] over 1000 rounds")
    assert "converted to 2.700 tokens per round at gamma 3" in text and f"wrote {out}" in text
    data = json.loads(out.read_text())
    np.testing.assert_allclose(data["curve"], [0.85, 0.52 / 0.85, 0.33 / 0.52])
    # plan's curve reader takes it as it is, and the vocabulary reads its kind back
    from specroof.commands.common import read_curve

    assert read_curve(str(out)) == pytest.approx(data["curve"])
    assert parse_acceptance(str(out)).tokens_per_round() == pytest.approx(2.7)
    payload = json.loads(
        _run(["acceptance", "import", str(DATA / "sglang_server.log"), "--format", "sglang", "--json"], capsys)
    )
    assert payload["kind"] == "mean" and payload["tokens_per_round"] == pytest.approx(2.95)
    assert [r["position"] for r in payload["table"]] == [1, 2, 3]


def test_show_command_converts_one_value(capsys):
    text = _run(["acceptance", "show", "vllm-rate:0.7@5"], capsys)
    assert "given vLLM draft acceptance rate 0.7 at 5 speculative tokens" in text
    assert "4.500 tokens per round" in text and "per-token rate 0.883" in text
    payload = json.loads(_run(["acceptance", "show", "0.8", "--gamma", "3", "--json"], capsys))
    assert [round(r["tokens_per_round"], 6) for r in payload["table"]] == [1.8, 2.44, 2.952]


# -- properties ------------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(a=st.floats(0, 1), g=st.integers(1, 32))
def test_per_token_rate_and_tokens_per_round_invert(a, g):
    e = PerToken(a).tokens_per_round(g)
    assert 1.0 <= e <= g + 1
    back = float(alpha_for_tokens(e, g))
    assert PerToken(back).tokens_per_round(g) == pytest.approx(e, rel=1e-9, abs=1e-12)
    # vLLM's rate at k = g says the same: 1 + r k tokens per round
    assert VllmDraftRate(PerToken(a).draft_acceptance_rate(g), g).tokens_per_round() == pytest.approx(e)


@settings(max_examples=150, deadline=None)
@given(curve=st.lists(st.floats(0, 1), min_size=1, max_size=12))
def test_conditional_and_unconditional_give_the_same_tokens(curve):
    u = unconditional_from_conditional(curve)
    uncond = PositionCurve(tuple(u), conditional=False)
    assert uncond.tokens_per_round() == pytest.approx(PositionCurve(tuple(curve)).tokens_per_round())
    assert uncond.tokens_per_round() == pytest.approx(1 + u.sum())
