#!/usr/bin/env bash
# The measured path on a GPU in one device call of at most 420 s (issues 45 and 53): the device and its
# microbenchmarks; a verify sweep of a Llama-3.1-8B-shaped model (random bf16 weights) at batch 1/4/16 and 1-256
# new tokens with every pass a CUDA graph, and its fit; the same model eager at a few widths; the offline pair's
# speculative decoding (measure spec, predicted against measured); measure serve; compiled (--compile, batch 1,
# last: the longest to start). Each step has its own time limit and log, and every limit is cut to what is left of
# DEADLINE_S (default 400 s), so the run ends in time even when a step hangs; the steps run most important first.
#
#   bash benchmarks/gpu.sh --smoke [OUT_DIR]      (about 90 s: the FIRST call on any GPU, see below)
#   bash benchmarks/gpu.sh [OUT_DIR]              (the full run; default OUT_DIR: $OUT, else ./gpu-out)
#   STEPS="spec report" bash benchmarks/gpu.sh    (some steps only: a rerun after a fix; report is opt-in)
#
# --smoke checks what a first GPU run can break on, in about 90 s: the device, capturing and replaying graphs,
# greedy decoding through graphs equal to eager (plain, draft model, early exit, tree), every replay under
# torch.cuda.set_sync_debug_mode("error") (benchmarks/gpu_smoke.py), and one sweep point of the 8B shape.
#
# Preflight: before any step the script imports everything the steps need (numpy, pandas, scipy, torch, tomli_w,
# tqdm, safetensors; pynvml on CUDA; matplotlib when the report runs). One missing stops the run with one line
# naming it. A bare GPU machine often lacks the pure-Python ones (tomli_w, tqdm, nvidia-ml-py): download their
# wheels here, into a folder git ignores, carry that folder, and name it in WHEELS (each *.whl in it, and the folder
# itself, go on PYTHONPATH: a pure-Python wheel imports as a zip):
#   echo /gpu-wheels/ >> .git/info/exclude
#   pip download --no-deps --only-binary=:all: -d gpu-wheels tomli_w tqdm nvidia-ml-py
#   WHEELS=gpu-wheels bash benchmarks/gpu.sh --smoke               (the device call carries gpu-wheels)
# (A folder gpu-vendor/ of unpacked packages is put on PYTHONPATH too when it exists.)
#
# Output: every step's files reach OUT_DIR as the step finishes (a device call returns at most 8 files, so they
# are one archive, rewritten after each step): machine.txt, all.log (every step's log so far), gpu-run.tgz (every
# finished step's stdout, log and folders, and steps.tsv) and summary.json (benchmarks/gpu_summary.py, rebuilt after
# each step from what is there). A run killed by TERM or INT stops its step, and keeps every finished step and a
# summary; a run killed harder still has every step that finished before it, and the summary can be rebuilt from
# the archive anywhere:  mkdir w && tar xzf gpu-run.tgz -C w && python -m benchmarks.gpu_summary w summary.json
# The exit status counts the failed steps (3: the preflight failed).
#
# Budgets (docs/cost-model.md, section 46, from the H200 runs in BENCHMARKS.md): a command's --budget counts from
# its start, imports and building the 16 GB model included, so each step's limit is its budget plus what precedes
# the measuring; a budget is also cut to its step's limit less 15 s, so the command closes with its rows before the
# limit kills it. The compiled sweep gets what is left up to 150 s (inductor's first compile of the 8B shape takes
# 30-70 s); the quick page (report) is left out of the default run: its measured section needs ~40 s on a GPU.
# Context: 384 new-token chains end at 385-640 slots, inside the ladder of buckets (384 + 64 = 448, + 128 = 512,
# + 256 = 640 are bucket tops); the summary records each row's KV slots beside it.
#
# The plumbing is checked on a CPU with small settings (tests/test_gpu_script.py runs this with a two-layer
# config.json for MODEL; LIMIT_SCALE stretches every step's limit for a slow or loaded CPU):
#   DEVICE=cpu DTYPE=fp32 MODEL=llama-68m BATCH=1,2 TOKENS=1,2,4,8,16,32 CONTEXT=64 SWEEP_BUDGET=5 LIMIT_SCALE=4 \
#     DEADLINE_S=1800 STEPS="device bench sweep fit kernels eager" bash benchmarks/gpu.sh /tmp/gpu-check
set -uo pipefail

smoke=0
if [ "${1:-}" = --smoke ]; then
    smoke=1
    shift
fi
out=${1:-${OUT:-gpu-out}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
py=${PYTHON:-python3}
# carried wheels and vendored packages on the path (see the header)
extra=""
if [ -n "${WHEELS:-}" ]; then
    wheels=$(cd "$WHEELS" && pwd) || { echo "preflight: WHEELS=$WHEELS is not a folder (give a folder of .whl files)"; exit 3; }
    extra=$wheels
    for w in "$wheels"/*.whl; do [ -e "$w" ] && extra=$extra:$w; done
fi
[ -d "$PWD/gpu-vendor" ] && extra=${extra:+$extra:}$PWD/gpu-vendor
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}${extra:+:$extra} PYTHONUNBUFFERED=1

device=${DEVICE:-cuda}
model=${MODEL:-llama-3.1-8b}
dtype=${DTYPE:-bf16}
batch=${BATCH:-1,4,16}
tokens=${TOKENS:-1,2,4,8,16,32,64,128,256}
context=${CONTEXT:-384}
deadline=${DEADLINE_S:-400}
# --graphs for the sweep, spec and serve steps: auto is on where there is a GPU (eager on the CPU check);
# GRAPHS=on makes a run without CUDA fail at once instead
graphs=${GRAPHS:-auto}
if [ "$smoke" = 1 ]; then
    steps=${STEPS:-device smoke point}
    deadline=${DEADLINE_S:-150}
else
    steps=${STEPS:-device bench sweep fit kernels eager spec serve compile}
fi
started=$(date +%s)
failed=0
: >"$work/steps.tsv"

# preflight: every module a step imports, before any step (one line naming the first missing one)
mods="numpy pandas scipy torch tomli_w tqdm safetensors"
[ "$device" = cuda ] && mods="$mods pynvml"
case " $steps " in *" report "*) mods="$mods matplotlib" ;; esac
if ! miss=$("$py" - $mods 2>&1 <<'EOF'
import importlib, sys
for m in sys.argv[1:]:
    try:
        importlib.import_module(m)
    except Exception as exc:  # ImportError, or a broken install
        print(f"{m} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no message'})")
        raise SystemExit(1)
EOF
); then
    line="preflight: cannot import ${miss:-python ($py)}; no step ran. Carry its wheel: pip download --no-deps -d gpu-wheels NAME, then WHEELS=gpu-wheels (see benchmarks/gpu.sh's header)"
    echo "$line" | tee "$out/preflight.txt"
    exit 3
fi

# save: every finished step's files into $out (an archive written aside and moved, so a kill never leaves half a
# file), the logs so far, and the summary rebuilt from what is there
save() {
    for f in "$work"/*.log; do [ -e "$f" ] && { echo "=== $(basename "$f")"; cat "$f"; }; done >"$out/all.log.tmp" 2>/dev/null
    mv -f "$out/all.log.tmp" "$out/all.log"
    tar czf "$out/gpu-run.tgz.tmp" -C "$work" . 2>/dev/null && mv -f "$out/gpu-run.tgz.tmp" "$out/gpu-run.tgz"
    if [ "${1:-}" = summary ]; then
        "$py" -m benchmarks.gpu_summary "$work" "$out/summary.json" --model "$model" >/dev/null 2>"$work/summary.log" \
            || echo "== summary failed: $(tail -n 1 "$work/summary.log")"
    fi
}

child=""
running=""
on_signal() {
    local sig=$1
    echo "== $sig: stopping${running:+ $running}; saving the finished steps and the summary"
    if [ -n "$child" ]; then
        kill -TERM "$child" 2>/dev/null
        wait "$child" 2>/dev/null
        [ -n "$running" ] && printf '%s\t%s\t%s\n' "$running" 143 "$(($(date +%s) - step_t0))" >>"$work/steps.tsv"
    fi
    save summary
    exit 130
}
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT

# fit_budget N: a command's --budget, N seconds cut to what is left of the deadline less the margin its step keeps
# (evaluated as its step starts)
fit_budget() {
    local left=$((deadline - ($(date +%s) - started) - 25))
    [ "$left" -lt "$1" ] && echo $((left > 5 ? left : 5)) || echo "$1"
}

# step NAME LIMIT_S COMMAND...: run with a time limit (cut to what is left of the deadline), stdout to
# $work/NAME.out (a --json payload), stderr to $work/NAME.log; count a failure; save its files into $out
step() {
    local name=$1 limit=$2
    shift 2
    case " $steps " in *" $name "*) ;; *) return 0 ;; esac
    limit=$((limit * ${LIMIT_SCALE:-1}))  # a slow or loaded CPU check stretches every limit (the budgets stay)
    local left=$((deadline - ($(date +%s) - started) - 10))
    if [ "$left" -lt 15 ]; then
        echo "== $name: skipped (${left}s left of the ${deadline}s deadline)"
        printf '%s\t%s\t%s\n' "$name" 124 0 >>"$work/steps.tsv"
        failed=$((failed + 1))
        return 0
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    [ "$1" = specroof ] && { shift; set -- "$py" -m specroof.cli "$@"; }
    echo "== $name (limit ${limit}s) $(date -u +%T)"
    step_t0=$(date +%s)
    running=$name
    # in the background and waited for: a TERM to this script runs its trap at once, not after the step
    timeout "$limit" "$@" >"$work/$name.out" 2>"$work/$name.log" &
    child=$!
    wait "$child"
    local rc=$?
    child=""
    running=""
    tail -n 3 "$work/$name.log"
    echo "== $name: exit $rc in $(($(date +%s) - step_t0))s"
    printf '%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - step_t0))" >>"$work/steps.tsv"
    [ "$rc" -eq 0 ] || failed=$((failed + 1))
    save summary
}

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "mode: $([ "$smoke" = 1 ] && echo smoke || echo full); steps: $steps; deadline ${deadline}s"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null || true
    "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    "$py" -c 'from torch.utils._triton import has_triton; print("triton:", has_triton())' 2>/dev/null || true
} | tee "$out/machine.txt"

step device 30 specroof measure device --device "$device" --json
# --smoke: graphs captured and replayed (sync-debug "error"), greedy equality, then one point of the 8B shape
step smoke 60 "$py" -m benchmarks.gpu_smoke --device "$device" --json
step point 60 specroof measure sweep --model "$model" --device "$device" --dtype "$dtype" --batch 1 --tokens 4 \
    --context "$context" --repeats 3 --rounds 1 --budget "$(fit_budget 45)" --graphs "$graphs" --out "$work/point" --json
step bench 45 specroof measure bench --device "$device" --dtype "$dtype" --out "$work/apriori-profile.toml" --json
# the main sweep: every pass a CUDA graph, timed by CUDA events
step sweep "$((${SWEEP_BUDGET:-45} + 40))" specroof measure sweep --model "$model" --device "$device" --dtype "$dtype" \
    --hardware "$work/apriori-profile.toml" --batch "$batch" --tokens "$tokens" --context "$context" \
    --repeats 5 --rounds 3 --budget "$(fit_budget "${SWEEP_BUDGET:-45}")" --graphs "$graphs" --out "$work/sweep" --json
step fit 30 specroof measure fit --sweep "$work/sweep" --model "$model" --hardware "$work/apriori-profile.toml" --json
# kernels per layer of a verify pass (torch.profiler, on a two-layer copy of the shape) and what graphs remove on
# the same static pass (benchmarks/gpu_kernels.py): the summary prints them beside the sweep's pass times
step kernels 40 "$py" -m benchmarks.gpu_kernels --model "$model" --device "$device" --dtype "$dtype" \
    --context "$context" --json
# graphs off: the same model eager at a few widths, and what graphs remove (uncaptured minus captured, per pass)
step eager 50 specroof measure sweep --model "$model" --device "$device" --dtype "$dtype" \
    --hardware "$work/apriori-profile.toml" --batch "$batch" --tokens 1,4,16,64 --context "$context" \
    --repeats 3 --rounds 1 --budget "$(fit_budget 35)" --graphs off --out "$work/eager" --json
step spec "$((${SPEC_BUDGET:-60} + 15))" specroof measure spec --pair offline --early-exit 1 --device "$device" \
    --budget "$(fit_budget "${SPEC_BUDGET:-60}")" --graphs "$graphs" --out "$work/spec" --json
step serve "$((${SERVE_BUDGET:-45} + 15))" specroof measure serve --device "$device" \
    --budget "$(fit_budget "${SERVE_BUDGET:-45}")" --graphs "$graphs" --out "$work/serve" --json
# opt-in (STEPS="... report"): the quick page, its measured section given what it needs on a GPU
step report 75 specroof report --quick --budget "$(fit_budget 45)" --out "$work/report" --json
# compiled, last (the longest to start): batch 1 at three widths of 1-16, inductor compiling each shape once (the
# compile time is reported and counted in its budget); it gets what is left of the deadline, up to its limit
step compile 150 specroof measure sweep --model "$model" --device "$device" --dtype "$dtype" \
    --hardware "$work/apriori-profile.toml" --batch 1 --tokens 1,4,16 --context "$context" \
    --repeats 5 --rounds 2 --budget "$(fit_budget 135)" --graphs "$graphs" --compile --out "$work/compile" --json
# opt-in (STEPS="frameworks"): measure engine's frameworks, minutes each; tensor parallelism needs 2 GPUs
step frameworks 480 "$py" -m benchmarks.bench_measure_engine --device "$device" --dtype bf16 --budget 120 \
    --json "$work/measure_engine.json" --no-record
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$device" = cuda ] && [ "${gpus:-0}" -ge 2 ]; then
    step tp 180 "$py" -m torch.distributed.run --standalone --nproc-per-node 2 -m specroof measure sweep --tp 2 \
        --model "$model" --device cuda --dtype bf16 --budget 60 --out "$work/tp"
fi

save summary
echo "wrote $out ($failed step(s) failed) in $(($(date +%s) - started))s"
rm -rf "$work"
exit "$failed"
