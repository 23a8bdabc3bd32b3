"""``specroof serve``: the JSON keys, the answer first, the plot, and one line + exit 2 for bad input."""

from __future__ import annotations

import json

import pytest

import specroof.cli as cli

BASE = ["serve", "--hardware", "h100-sxm-80gb", "--target", "llama-3.1-8b", "--drafter", "model:llama-3.2-1b",
        "--acceptance", "0.75", "--requests", "60", "--input-len", "128"]  # fmt: skip
SHORT = ["--output-len", "32"]


@pytest.fixture
def run(monkeypatch, capsys):
    """``specroof ...`` through the real ``main`` (with ``serve`` registered, as the CLI wires it)."""
    if "serve" not in cli.COMMAND_MODULES:
        monkeypatch.setattr(cli, "COMMAND_MODULES", (*cli.COMMAND_MODULES, "serve"))

    def go(*argv: str) -> tuple[int, str, str]:
        try:
            code = cli.main(list(argv))
        except SystemExit as e:  # argparse's own refusals (a malformed flag value) exit from parse_args
            code = int(e.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    return go


def test_json_prints_the_per_rate_keys_and_the_crossover(run):
    code, out, _ = run(*BASE, *SHORT, "--rate", "1,8", "--policy", "static:3", "--policy", "by-batch:1=3,8=0",
                       "--engine", "serving", "--json")  # fmt: skip
    assert code == 0
    data = json.loads(out)
    assert "speculation_stops_paying_at_rate" in data
    stop = data["speculation_stops_paying_at_rate"]
    assert stop is None or stop > 0
    rows = data["per_rate"]
    policies = ("off", "static:3", "by-batch:1=3,8=0")
    assert {(r["policy"], r["rate_req_s"]) for r in rows} == {(p, r) for p in policies for r in (1.0, 8.0)}
    assert set(data["stops_paying_by_policy"]) == set(policies[1:])
    for r in rows:
        for key in ("ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "tpot_p90_s", "throughput_tok_s", "goodput_req_s"):
            assert r[key] > 0, key


def test_text_answers_first_and_explains_its_terms(run, tmp_path):
    png = tmp_path / "curves.png"
    code, out, _ = run(*BASE, *SHORT, "--rate", "1,4", "--policy", "goodput", "--slo-ttft", "0.5", "--slo-tpot", "0.05",
                       "--plot", str(png))  # fmt: skip
    assert code == 0
    first = out.splitlines()[0]
    assert first.startswith("speculation (goodput:8)") and "h100-sxm-80gb" in first
    assert "TTFT: time to first token" in out and "goodput" in out
    assert png.stat().st_size > 1000


@pytest.mark.parametrize(
    "extra,match",
    [
        (["--rate", "-1"], "request rates must be positive"),
        (["--rate", "1", "--slo-ttft", "0"], "--slo-ttft"),
        (["--rate", "1", "--output-len", "200000"], "context window"),
        (["--rate", "1", "--policy", "static:x"], "static gamma"),
        (["--rate", "1", "--acceptance", "1.7"], "alpha"),
        (["--rate", "1", "--metric", "nonsense"], "unknown metric"),
        ([], "give --rate"),
        (["--rate", "1", "--disaggregate", "0:2"], "at least one server per pool"),
        (["--rate", "1", "--ep", "2"], "dense model"),
        (["--rate", "1", "--output-len", "sharegpt-2099"], "azure-conv-2023"),
        (["--rate", "1", "--idle-start-us", "-5"], "microseconds >= 0"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(run, extra, match):
    code, out, err = run(*BASE, *(extra if "--output-len" in extra else [*SHORT, *extra]))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and match in err


@pytest.mark.parametrize(
    "text,match",
    [
        ("arrival_s,input_tokens,output_tokens\n1.0,10,10\n0.5,10,10\n", "must be sorted"),
        ("arrival_s,output_tokens\n0.0,10\n", "missing column(s) input_tokens"),
    ],
)
def test_bad_trace_file_is_one_line_and_exit_2(run, tmp_path, text, match):
    f = tmp_path / "trace.csv"
    f.write_text(text)
    code, _, err = run(*BASE, *SHORT, "--trace", str(f))
    assert code == 2 and len(err.strip().splitlines()) == 1 and match in err


def test_an_moe_question_runs_end_to_end_over_8_expert_parallel_gpus(run):
    """A DeepSeek-style deployment question on the MoE preset: Mixtral's 8 experts over 8 H100s (bf16 Mixtral does
    not fit one 80 GB GPU), prompt and output lengths of the Azure 2023 conversation trace."""
    moe = ["serve", "--hardware", "h100-sxm-80gb", "--target", "mixtral-8x7b", "--drafter", "eagle3",
           "--rate", "2,16", "--requests", "80", "--input-len", "azure-conv-2023", "--output-len", "azure-conv-2023",
           "--policy", "static:3", "--acceptance", "0.75"]  # fmt: skip
    code, out, err = run(*moe, "--ep", "8", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["settings"]["ep"] == 8 and data["settings"]["kv_capacity_tokens"]["off"] > 0
    assert {(r["policy"], r["rate_req_s"]) for r in data["per_rate"]} == {
        (p, r) for p in ("off", "static:3") for r in (2.0, 16.0)
    }
    assert all(r["tpot_p50_s"] > 0 and r["ttft_p50_s"] > 0 for r in data["per_rate"])
    code, out, _ = run(*moe, "--ep", "8")
    assert code == 0 and "experts over 8 GPUs" in out
    code, _, err = run(*moe, "--ep", "16")
    assert code == 2 and "must divide" in err and len(err.strip().splitlines()) == 1


def test_an_engines_measured_loop_terms_reach_the_simulator(run):
    """The host terms `measure serve` prints go in as flags: at a rate where every request finds the server idle,
    the cold start and the prefill host time add to time to first token, microseconds for microseconds."""
    common = [*BASE, *SHORT, "--rate", "0.01", "--policy", "static:3", "--json", "--prefill", "separate"]
    code, out, _ = run(*common)
    assert code == 0
    base = {r["policy"]: r for r in json.loads(out)["per_rate"]}
    code, out, _ = run(*common, "--idle-start-us", "3000", "--prefill-host-us", "1000", "--round-host-us", "200")
    assert code == 0
    got = {r["policy"]: r for r in json.loads(out)["per_rate"]}
    for pol in ("off", "static:3"):
        assert got[pol]["ttft_p50_s"] - base[pol]["ttft_p50_s"] == pytest.approx(4e-3, rel=0.05)
        assert got[pol]["tpot_p50_s"] > base[pol]["tpot_p50_s"]  # every decode round pays its 200 us


def test_measure_serve_prints_its_engine_terms_as_flags_specroof_serve_takes():
    """The side-by-side's text ends its calibration lines with the engine's terms as `specroof serve` flags, and
    those flags parse: what one command measured, the other asks with."""
    import argparse
    from types import SimpleNamespace

    import pandas as pd

    from specroof.commands import serve as serve_cmd
    from specroof.commands.measure_serve import text

    rows = []
    for rate in (2.0, 9.0):
        for pol, a, s, p, c in (("off", 0.0, 0.0, 5e-4, 3e-3), ("static:3", 2.3e-3, 4e-4, 1.9e-3, 3.5e-3)):
            row = {"rate_req_s": rate, "policy": pol, "replays": 2, "round_host_s": a, "round_host_per_seq_s": s,
                   "prefill_host_s": p, "idle_start_s": c}  # fmt: skip
            for m in ("ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90"):
                row.update({f"{m}_measured_s": 0.01, f"{m}_simulated_s": 0.011, f"{m}_rel_error": 0.1,
                            f"{m}_noisy": False, f"{m}_speed_matched_rel_error": -0.04,
                            f"{m}_speed_matched_noisy": m == "ttft_p90"})  # fmt: skip
            row["replay_speed"], row["calibration_speed"] = (1.08, 1.02) if rate == 2.0 else (0.97, 1.0)
            share = 0.6 if rate == 2.0 else 0.02  # (at 9 req/s nearly every arrival finds the engine busy)
            row.update(
                idle_share_measured=share,
                idle_share_simulated=share + 0.1,
                ttft_idle_p50_measured_s=0.012,
                ttft_idle_p50_simulated_s=0.011,
                ttft_busy_p50_measured_s=0.025,
                ttft_busy_p50_simulated_s=0.021,
            )  # fmt: skip (measure.serve_check.found_columns' names)
            rows.append(row)
    check = SimpleNamespace(
        table=pd.DataFrame(rows),
        verdicts=pd.DataFrame(columns=["rate_req_s", "policy", "pays_measured", "pays_simulated", "agree"]),
        host_per_round_s={"off": 0.0, "static:3": 2.3e-3},
        host_per_seq_s={"off": 0.0, "static:3": 4e-4},
        settings={"target": "t", "draft": "d", "threads": 1, "slots": 4, "load": {}, "fit_mape": 0.05,
                  "plain_step_s": 5e-3, "prefill_per_request_s": 8e-3, "capacity_req_s": 20.0, "seconds": 100.0},
    )  # fmt: skip
    out = text(check)
    found = [x for x in out.splitlines() if "of arrivals found it idle" in x]
    assert found == [
        "  2 req/s off: 60% / 70% of arrivals found it idle, TTFT p50 12.0 / 11.0 ms; the others 25.0 / 21.0 ms",
        "  2 req/s static:3: 60% / 70% of arrivals found it idle, TTFT p50 12.0 / 11.0 ms; the others 25.0 / 21.0 ms",
    ]
    # the simulator at each replay's own speed: a line per rate and policy, its noisy figures marked
    at = out.splitlines().index(next(x for x in out.splitlines() if x.startswith("at each replay's own speed")))
    assert out.splitlines()[at + 1 : at + 5] == [
        "  2 req/s off: the replays ran x1.08 the prices (the calibrations around them x1.02); ttft_p50 -4% ttft_p90 -4%~ tpot_p50 -4% tpot_p90 -4%",
        "  2 req/s static:3: the replays ran x1.08 the prices (the calibrations around them x1.02); ttft_p50 -4% ttft_p90 -4%~ tpot_p50 -4% tpot_p90 -4%",
        "  9 req/s off: the replays ran x0.97 the prices (the calibrations around them x1.00); ttft_p50 -4% ttft_p90 -4%~ tpot_p50 -4% tpot_p90 -4%",
        "  9 req/s static:3: the replays ran x0.97 the prices (the calibrations around them x1.00); ttft_p50 -4% ttft_p90 -4%~ tpot_p50 -4% tpot_p90 -4%",
    ]
    line = next(x for x in out.splitlines() if x.startswith("this engine's terms for specroof serve"))
    spec = line.split("static:3: ")[1]
    assert spec == "--prefill separate --round-host-us 2300 --round-host-per-seq-us 400 --prefill-host-us 1900 " \
                   "--idle-start-us 3500"  # fmt: skip
    parser = argparse.ArgumentParser()
    serve_cmd.add_parser(parser.add_subparsers())
    args = parser.parse_args(["serve", "--hardware", "h", "--target", "t", "--drafter", "d", *spec.split()])
    assert args.prefill == "separate" and args.round_host_us == pytest.approx(2.3e-3)
    assert args.idle_start_us == pytest.approx(3.5e-3) and args.prefill_host_us == pytest.approx(1.9e-3)


def test_progress_goes_to_stderr_once_a_sweep_takes_a_second_and_never_under_json(run, monkeypatch):
    """A long sweep (100,000 requests take seconds per run) reports each finished run on stderr; stdout keeps the
    answer and the table, and --json stays one parseable document with nothing on stderr."""
    import sys
    import types

    import specroof.commands.serve as serve_cmd

    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # the main job's install has no tqdm: a line per run
    clock = iter(range(0, 1000, 2))  # each read of the sweep's clock 2 s after the last: every run "takes" seconds
    monkeypatch.setattr(serve_cmd, "time", types.SimpleNamespace(perf_counter=lambda: float(next(clock))))
    code, out, err = run(*BASE, *SHORT, "--rate", "1,8", "--policy", "static:3")
    assert code == 0
    lines = [x for x in err.splitlines() if x.startswith("simulated ")]
    assert [x.split(":")[0] for x in lines] == [f"simulated {i}/4" for i in range(1, 5)]
    assert {x.split(": ", 1)[1].rsplit(" (", 1)[0] for x in lines} == {
        "off at 1 req/s", "static:3 at 1 req/s", "off at 8 req/s", "static:3 at 8 req/s"}  # fmt: skip
    assert "simulated" not in out and out.startswith("speculation (static:3)")
    code, out, err = run(*BASE, *SHORT, "--rate", "1,8", "--policy", "static:3", "--json")
    assert code == 0 and json.loads(out) and "simulated" not in err


def test_a_signed_host_line_is_taken_from_the_flags_and_a_negative_cold_start_is_not(run):
    """measure serve prints the host line as it measured it, negative where the fitted profile overprices the
    engine's rounds: `specroof serve` takes those flags back; a negative cold start is refused (exit 2)."""
    import argparse

    from specroof.commands import serve as serve_cmd

    parser = argparse.ArgumentParser()
    serve_cmd.add_parser(parser.add_subparsers())
    args = parser.parse_args(["serve", "--hardware", "h", "--target", "t", "--drafter", "d", "--round-host-us",
                              "-825", "--round-host-per-seq-us", "146", "--prefill-host-us", "-90"])  # fmt: skip
    assert args.round_host_us == pytest.approx(-825e-6) and args.prefill_host_us == pytest.approx(-90e-6)
    code, out, err = run(*BASE, *SHORT, "--rate", "1", "--policy", "static:3", "--round-host-us", "-300", "--json")
    assert code == 0 and json.loads(out)["settings"]["round_host_s"] == pytest.approx(-3e-4)
    code, _, err = run(*BASE, *SHORT, "--rate", "1", "--idle-start-us", "-5")
    assert code == 2 and ">= 0" in err


def test_workers_cut_a_long_light_run_and_the_page_says_so(run, monkeypatch):
    import roofline.serving.split as split

    monkeypatch.setattr(split, "CHUNK_REQUESTS", 300)
    monkeypatch.setattr(split, "WINDOW_REQUESTS", 150)
    monkeypatch.setattr(split, "PILOT_REQUESTS", 150)
    argv = [a if a != "60" else "900" for a in BASE]
    code, out, _ = run(*argv, *SHORT, "--rate", "2", "--policy", "static:3", "--workers", "2")
    assert code == 0
    assert "Cut where the server stood empty" in out and "static:3@2 in 3 chunks" in out
    code, out, _ = run(*argv, *SHORT, "--rate", "2", "--policy", "static:3")  # one worker: whole
    assert code == 0 and "Cut where" not in out
