#!/usr/bin/env bash
# The measured path on a GPU in one 10-minute device call (issue 45): the device and its
# microbenchmarks; a verify sweep of a Llama-3.1-8B-shaped model (random bf16 weights) at batch
# 1/4/16 and 1-256 new tokens with every pass a CUDA graph, and its fit; the same model eager
# (graphs off: the launch overhead the graphs remove, eager minus graph per pass) and compiled
# (--compile, batch 1, last: the longest to start); the offline pair's speculative decoding
# (measure spec, predicted against measured); measure serve at three request rates; the quick page. Each step has its
# own time limit and log, and every limit is cut to what is left of DEADLINE_S (default 560 s:
# the call's 600 less the start), so the run ends in time even when a step hangs; the steps run
# most important first. The last step writes summary.json with the figures the issue's "done
# when" asks for (benchmarks/gpu_summary.py). The exit status counts the failed steps.
#
#   bash benchmarks/gpu.sh [OUT_DIR]              (default: $OUT, else ./gpu-out)
#   STEPS="spec report" bash benchmarks/gpu.sh    (some steps only: a rerun after a fix)
#
# The device has torch, transformers and triton but no pip and no network. tomli_w (pure
# Python, used to write profiles) may be missing there: before the call, copy it into a folder
# git ignores and carry that folder; the script puts gpu-vendor/ on PYTHONPATH when it exists:
#   mkdir -p gpu-vendor && cp -r .venv/lib/python3*/site-packages/tomli_w gpu-vendor/ \
#     && echo /gpu-vendor/ >> .git/info/exclude          (then run with carry: ["gpu-vendor"])
#
# Everything lands in OUT_DIR as a few files (at most 8 come back from a device call):
# machine.txt, summary.json, all.log, gpu-run.tgz (every step's output and folders).
# The plumbing is checked on a CPU with small settings (tests/test_gpu_script.py runs this with a
# two-layer config.json for MODEL, and without the spec, serve, compile and report steps):
#   DEVICE=cpu DTYPE=fp32 MODEL=llama-68m BATCH=1,2 TOKENS=1,2,4,8,16,32 CONTEXT=64 SWEEP_BUDGET=5 \
#     SPEC_BUDGET=20 SERVE_BUDGET=20 STEPS="device bench sweep fit eager spec serve summary" \
#     bash benchmarks/gpu.sh /tmp/gpu-check
set -uo pipefail

out=${1:-${OUT:-gpu-out}}
mkdir -p "$out"
work=$(mktemp -d)
py=${PYTHON:-python3}
vendor=$PWD/gpu-vendor
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}${vendor:+:$vendor} PYTHONUNBUFFERED=1

device=${DEVICE:-cuda}
model=${MODEL:-llama-3.1-8b}
dtype=${DTYPE:-bf16}
batch=${BATCH:-1,4,16}
tokens=${TOKENS:-1,2,4,8,16,32,64,128,256}
context=${CONTEXT:-512}
deadline=${DEADLINE_S:-560}
# --graphs for the sweep, spec and serve steps: auto is on where there is a GPU (eager on the CPU check);
# GRAPHS=on makes a run without CUDA fail at once instead
graphs=${GRAPHS:-auto}
started=$(date +%s)
failed=0
: >"$work/steps.tsv"
# step NAME LIMIT_S COMMAND...: run with a time limit (cut to what is left of the deadline), stdout to
# $work/NAME.out (a --json payload), stderr to $work/NAME.log; count a failure
step() {
    local name=$1 limit=$2
    shift 2
    case " ${STEPS:-device bench sweep fit eager spec serve report compile summary} " in *" $name "*) ;; *) return 0 ;; esac
    local left=$((deadline - ($(date +%s) - started) - 10))
    if [ "$name" != summary ] && [ "$left" -lt 15 ]; then  # (the summary always runs: it only reads)
        echo "== $name: skipped (${left}s left of the ${deadline}s deadline)"
        printf '%s\t%s\t%s\n' "$name" 124 0 >>"$work/steps.tsv"
        failed=$((failed + 1))
        return 0
    fi
    [ "$name" != summary ] && [ "$limit" -gt "$left" ] && limit=$left
    [ "$1" = specroof ] && { shift; set -- "$py" -m specroof.cli "$@"; }
    echo "== $name (limit ${limit}s) $(date -u +%T)"
    local t0
    t0=$(date +%s)
    timeout "$limit" "$@" >"$work/$name.out" 2>"$work/$name.log"
    local rc=$?
    tail -n 3 "$work/$name.log"
    echo "== $name: exit $rc in $(($(date +%s) - t0))s"
    printf '%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - t0))" >>"$work/steps.tsv"
    [ "$rc" -eq 0 ] || failed=$((failed + 1))
}

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null || true
    "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    "$py" -c 'import tomli_w' 2>/dev/null || echo "tomli_w: missing (measured profiles cannot be written: see the header)"
    "$py" -c 'from torch.utils._triton import has_triton; print("triton:", has_triton())' 2>/dev/null || true
} | tee "$out/machine.txt"

step device 30 specroof measure device --device "$device" --json
step bench 60 specroof measure bench --device "$device" --dtype "$dtype" --out "$work/apriori-profile.toml" --json
# the main sweep: every pass a CUDA graph, timed by CUDA events
step sweep "$((${SWEEP_BUDGET:-45} + 60))" specroof measure sweep --model "$model" --device "$device" --dtype "$dtype" \
    --hardware "$work/apriori-profile.toml" --batch "$batch" --tokens "$tokens" --context "$context" \
    --repeats 5 --rounds 3 --budget "${SWEEP_BUDGET:-45}" --graphs "$graphs" --out "$work/sweep" --json
step fit 40 specroof measure fit --sweep "$work/sweep" --model "$model" --hardware "$work/apriori-profile.toml" --json
# graphs off: the same model eager at a few widths, and what graphs remove (eager minus graph, per pass)
step eager 90 specroof measure sweep --model "$model" --device "$device" --dtype "$dtype" \
    --hardware "$work/apriori-profile.toml" --batch "$batch" --tokens 1,4,16,64 --context "$context" \
    --repeats 3 --rounds 1 --budget 15 --graphs off --out "$work/eager" --json
step spec "$((${SPEC_BUDGET:-70} + 40))" specroof measure spec --pair offline --early-exit 1 --device "$device" \
    --budget "${SPEC_BUDGET:-70}" --graphs "$graphs" --out "$work/spec" --json
step serve "$((${SERVE_BUDGET:-60} + 40))" specroof measure serve --device "$device" --budget "${SERVE_BUDGET:-60}" \
    --graphs "$graphs" --out "$work/serve" --json
step report 90 specroof report --quick --out "$work/report" --json
# compiled, last (the longest to start): batch 1 at three widths of 1-16, inductor compiling each shape once (the
# compile time is reported); it gets what is left of the deadline, up to its limit
step compile 150 specroof measure sweep --model "$model" --device "$device" --dtype "$dtype" \
    --hardware "$work/apriori-profile.toml" --batch 1 --tokens 1,4,16 --context "$context" \
    --repeats 5 --rounds 2 --budget 20 --graphs "$graphs" --compile --out "$work/compile" --json
# opt-in (STEPS="frameworks"): measure engine's frameworks, minutes each; tensor parallelism needs 2 GPUs
step frameworks 480 "$py" -m benchmarks.bench_measure_engine --device "$device" --dtype bf16 --budget 120 \
    --json "$work/measure_engine.json" --no-record
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$device" = cuda ] && [ "${gpus:-0}" -ge 2 ]; then
    step tp 180 "$py" -m torch.distributed.run --standalone --nproc-per-node 2 -m specroof measure sweep --tp 2 \
        --model "$model" --device cuda --dtype bf16 --budget 60 --out "$work/tp"
fi
step summary 30 "$py" -m benchmarks.gpu_summary "$work" "$out/summary.json" --model "$model"

for f in "$work"/*.log; do echo "=== $(basename "$f")"; cat "$f"; done >"$out/all.log" 2>/dev/null
tar czf "$out/gpu-run.tgz" -C "$work" .
echo "wrote $out ($failed step(s) failed)"
exit "$failed"
