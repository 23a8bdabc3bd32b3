#!/usr/bin/env bash
# The measured path on a GPU in one run, sized for a 15-minute lease (about 5 minutes here):
# the engine's own cost (eager against CUDA-graph decode steps), device, microbenchmarks, a
# verify sweep of a Llama-3.1-8B-shaped model (random bf16 weights), the fit and its
# validation, the offline pair's speculative decoding (predicted against measured), and the
# main job (`specroof report --quick`). Each step has its own time limit and log, so one
# that fails or hangs does not take the others with it; the exit status counts the failures.
#
#   bash benchmarks/gpu.sh [OUT_DIR]        (default: $OUT, else ./gpu-out)
#   STEPS="spec report" bash benchmarks/gpu.sh    (some steps only: a rerun after a fix)
#
# Everything lands in OUT_DIR as a few files (a tarball of the folders), so that a machine
# that only returns a handful of files returns all of it. The plumbing can be checked on a
# CPU with small settings:
#   DEVICE=cpu MODEL=llama-68m TOKENS=1,2,4 CONTEXT=128 BATCH=1 SPEC_BUDGET=20 \
#     SWEEP_BUDGET=10 ENGINE_REPEATS=3 bash benchmarks/gpu.sh /tmp/gpu-check
set -uo pipefail

out=${1:-${OUT:-gpu-out}}
mkdir -p "$out"
work=$(mktemp -d)
py=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

device=${DEVICE:-cuda}
model=${MODEL:-llama-3.1-8b}
batch=${BATCH:-1,4,16}
tokens=${TOKENS:-1,2,4,8,16,32,64,128,256}
context=${CONTEXT:-512}
failed=0
# step NAME LIMIT_S COMMAND...: run with a time limit, log to $work/NAME.log, count a failure
step() {
    local name=$1 limit=$2
    shift 2
    case " ${STEPS:-engine device bench sweep fit spec frameworks report tp} " in *" $name "*) ;; *) return 0 ;; esac
    [ "$1" = specroof ] && { shift; set -- "$py" -m specroof.cli "$@"; }
    echo "== $name (limit ${limit}s) $(date -u +%T)"
    timeout "$limit" "$@" > >(tee "$work/$name.log") 2>&1
    local rc=$?
    echo "== $name: exit $rc"
    [ "$rc" -eq 0 ] || failed=$((failed + 1))
}

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null || true
    "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} | tee "$out/machine.txt"

step engine 120 "$py" -m benchmarks.bench_engine_overhead --device "$device" --repeats "${ENGINE_REPEATS:-50}" --json "$out/engine.json"
step device 30 specroof measure device --device "$device" --json
step bench 90 specroof measure bench --device "$device" --dtype bf16 --out "$work/apriori-profile.toml" --json
step sweep "$((${SWEEP_BUDGET:-60} + 60))" specroof measure sweep --model "$model" --device "$device" --dtype bf16 \
    --hardware "$work/apriori-profile.toml" --batch "$batch" --tokens "$tokens" --context "$context" \
    --repeats 5 --rounds 3 --budget "${SWEEP_BUDGET:-60}" --out "$work/sweep"
step fit 60 specroof measure fit --sweep "$work/sweep" --hardware "$work/apriori-profile.toml" --json
step spec "$((${SPEC_BUDGET:-75} + 60))" specroof measure spec --pair offline --early-exit 1 --device "$device" \
    --budget "${SPEC_BUDGET:-75}" --out "$work/spec" --json
step frameworks 480 "$py" -m benchmarks.bench_measure_engine --device "$device" --dtype bf16 --budget 120 \
  --json "$out/measure_engine.json" --no-record
step report 120 specroof report --quick --out "$work/report"
# tensor parallelism needs one GPU per rank (NCCL): on a one-GPU lease this step is skipped, not failed
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$device" = cuda ] && [ "${gpus:-0}" -ge 2 ]; then
    step tp 180 "$py" -m torch.distributed.run --standalone --nproc-per-node 2 -m specroof measure sweep --tp 2 \
        --model "$model" --device cuda --dtype bf16 --budget 60 --out "$work/tp"
else
    echo "== tp: skipped (${gpus:-0} GPU(s); tensor parallelism needs 2)"
fi

cat "$work"/*.log >"$out/all.log" 2>/dev/null
tar czf "$out/gpu-run.tgz" -C "$work" .  # at most 8 files come back: machine.txt engine.json all.log gpu-run.tgz
echo "wrote $out ($failed step(s) failed)"
exit "$failed"
