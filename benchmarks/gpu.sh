#!/usr/bin/env bash
# The measured path on a GPU in one run: device, microbenchmarks, a verify sweep of a
# Llama-3.1-8B-shaped model (random bf16 weights), the fit and its validation, then the
# offline pair's speculative decoding, predicted against measured. Written for an H200 (about
# 8 minutes is the estimate); checked end to end on the CPU only, as no GPU was lent so far.
#
#   bash benchmarks/gpu.sh [OUT_DIR]        (default: $OUT, else ./gpu-out)
#
# Everything lands in OUT_DIR as a few files (a tarball of the folders), so that a machine
# that only returns a handful of files returns all of it. The plumbing can be checked on a
# CPU with small settings:
#   DEVICE=cpu MODEL=llama-68m TOKENS=1,2,4,8,16 CONTEXT=128 BATCH=1,4 SPEC_REPEATS=1 \
#     SPEC_GAMMA=2,4 SPEC_TOKENS=16 WIDTH=4 bash benchmarks/gpu.sh /tmp/gpu-check
set -euo pipefail

out=${1:-${OUT:-gpu-out}}
mkdir -p "$out"
work=$(mktemp -d)
py=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

device=${DEVICE:-cuda}
model=${MODEL:-llama-3.1-8b}
batch=${BATCH:-1,4,16}
tokens=${TOKENS:-1,2,4,8,16,32,64,128,256,512}
context=${CONTEXT:-512,4096}
specroof() { "$py" -m roofline.cli "$@"; }

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null || true
    "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} | tee "$out/machine.txt"

specroof measure device --device "$device" --json >"$out/device.json"
specroof measure bench --device "$device" --dtype bf16 --out "$work/apriori-profile.toml" --json >"$out/bench.json"

specroof measure sweep --model "$model" --device "$device" --dtype bf16 --hardware "$work/apriori-profile.toml" \
    --batch "$batch" --tokens "$tokens" --context "$context" --repeats 5 --rounds 3 --out "$work/sweep"
specroof measure fit --sweep "$work/sweep" --hardware "$work/apriori-profile.toml" --json | tee "$out/fit.json"

specroof measure spec --pair offline --early-exit 1 --device "$device" --width "${WIDTH:-16}" \
    --gamma "${SPEC_GAMMA:-1,2,4,6,8}" --batch 1,4 --tokens "${SPEC_TOKENS:-48}" --repeats "${SPEC_REPEATS:-3}" \
    --out "$work/spec" --json >"$out/spec.json"

tar czf "$out/gpu-run.tgz" -C "$work" .
echo "wrote $out: machine.txt device.json bench.json fit.json spec.json gpu-run.tgz"
