#!/usr/bin/env bash
# Every GPU check of issue 33 in one call of about 8 minutes (docs/training.md, "On a GPU"), for a machine with
# torch and CUDA but without the project installed and without network: run from the repository root.
#
#   here, once:  .venv/bin/python ../shared/gpu/slim_data.py .gpu/slim       (the corpora, cut small)
#                git clone https://github.com/karpathy/nanoGPT .gpu/nanoGPT  (a contender; not ours, not shipped)
#   there:       OUT=/some/dir bash benchmarks/gpu_check.sh                   (carry .gpu)
#
# A session's 15 minutes of GPU time, planned: one call of the default steps (tests, train, demo: about 7
# minutes with the start; give the call timeout_s=540) and the machine given back. The 2026-11-27 second session
# (docs/bench/gpu-check-2026-11-27b.md) ran `STEPS="train demos"` (7 minutes) and then `STEPS="demo-best tests"`
# (4.5 minutes) at once, after a start of about half a minute: 742 s of the 900.
#
# Steps, each bounded by `timeout` so that one failure leaves the others their time:
#   tests      the GPU paths' tests: precision (bf16, fp16 with its scaler, resume), compile (and what it needs:
#              Triton, a C compiler), captured decoding, bad ids named on the GPU, the loop's numerics
#   profile    (not in the default STEPS) benchmarks.step_profile on demo-gpu's first (growing) batches: per
#              step the wall time, the GPU's busy share, kernels, host waits and cudaMallocs, and outside the
#              steps collation and one evaluation; again with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
#   profile-compiled  (not in the default STEPS) the same with train.compile=true
#   train      GPT-2 124M (12 x 768, T = 1024, batch 16: the first 2026-11-27 run took 8; a larger batch spreads
#              the optimizer step and the launches over more tokens) in bf16, forward and loss compiled together
#              for every contender (nanoGPT's model returns its loss): tformer against GPT2LMHeadModel (SDPA)
#              and nanoGPT's model.py, MFU against the bf16 matmul timed in the same run
#   decode     (not in the default STEPS: its targets were met on 2026-11-27) benchmarks.gpu_decode_check:
#              batch 1 and 8 generation eager / captured / captured + compiled
#              against transformers' generate (default and static cache); translation captured
#   demo       `tformer demo demo-gpu` (3-minute budget) alone on the card, and its test BLEU
#   demos      (not in the default STEPS) the GPU demo four ways at once on the card, 4 CPU threads each (so
#              each slower than alone): as shipped; compiled (train.compile=true, evaluating every 1,500
#              steps; on 2026-11-27 its cold compilation beside three others took the whole budget: 15
#              steps); 3 + 3 layers of width 768 instead of 6 + 6 of 512 (1,224 operators a step for the host
#              to launch instead of 2,238, 12% more FLOPs; 21.4 against 21.8 as shipped); AdamW at 1e-3 with
#              the default init (the recipe before 2026-11-27: 18.6). Each is one change from the recipe. The
#              best one's changes go to runs/gpu-check-best-demo.txt
#   demo-best  (not in the default STEPS) `demo` with the changes of the last `demos` call's best run, alone
# Logs and JSON go to $OUT (default: a new temporary folder); STEPS="train demo" runs only those steps;
# DEMO_OVERRIDES="key=value ..." changes the recipe of the `demo` and `demos` runs (e.g. train.compile=true;
# on the CPU, a dry run of the script can shrink the model and the budget with it).
set -u
STEPS=${STEPS:-tests train demo}
want() { [[ " $STEPS " == *" $1 "* ]]; }
for step in $STEPS; do
  case $step in tests|profile|profile-compiled|train|decode|demo|demos|demo-best) ;;
    *) echo "gpu_check.sh: STEPS has '$step'; the steps are tests profile profile-compiled train decode demo demos" \
            "demo-best" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$(mktemp -d)}; RUNS=$(mktemp -d); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src:$PWD:$PWD/.gpu/slim"
log() { echo "=== $(date +%T) $*"; }
log env; nvidia-smi -L; python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0))"

want tests && {
log "tests of the GPU paths"
timeout 80 python3 -m pytest -q -p no:cacheprovider -rfE tests/training/test_precision.py \
  tests/decoding/test_static_cache.py tests/cli/test_bad_input.py tests/models/test_host_reads.py \
  tests/training/test_training_numerics.py tests/training/test_compiling.py > "$OUT/pytest.log" 2>&1
echo "rc=$?"; tail -3 "$OUT/pytest.log"
}

want profile && {
log "where the GPU demo's step time goes: eager, then with expandable allocator segments"
timeout 75 python3 -m benchmarks.step_profile demo-gpu --steps 20 --warmup 10 --out "$OUT/step-profile.json" \
  > "$OUT/step-profile.log" 2>&1; echo "rc=$?"; tail -4 "$OUT/step-profile.log"
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 75 python3 -m benchmarks.step_profile demo-gpu \
  --steps 20 --warmup 10 --out "$OUT/step-profile-expandable.json" > "$OUT/step-profile-expandable.log" 2>&1
echo "rc=$?"; tail -4 "$OUT/step-profile-expandable.log"
}

want profile-compiled && {
log "the GPU demo's step compiled (the warm-up holds the compilation)"
timeout 240 python3 -m benchmarks.step_profile demo-gpu train.compile=true --steps 20 --warmup 10 \
  --out "$OUT/step-profile-compiled.json" > "$OUT/step-profile-compiled.log" 2>&1; echo "rc=$?"
tail -4 "$OUT/step-profile-compiled.log"
}

want train && {
log "training speed: GPT-2 124M, bf16, compiled"
NANO=(); [ -f .gpu/nanoGPT/model.py ] && NANO=(--nanogpt .gpu/nanoGPT)
timeout 170 python3 -m benchmarks.train_speed --families gpt --layers 12 --d-model 768 --heads 12 --d-ff 3072 \
  --vocab 50304 --batch 16 --seq 1024 --precision bf16 --compile --hf-attention sdpa "${NANO[@]}" \
  --reps 7 --steps-per-rep 10 --warmup 2 --out "$OUT/train-124m.json" > "$OUT/train-124m.log" 2>&1
echo "rc=$?"; tail -8 "$OUT/train-124m.log"
}

want decode && {
log "decoding: captured against eager and transformers"
timeout 130 python3 -m benchmarks.gpu_decode_check --out "$OUT/gpu-decode.json" > "$OUT/gpu-decode.log" 2>&1
echo "rc=$?"; tail -14 "$OUT/gpu-decode.log"
}

if want demo-best; then  # the best of the last `demos` call (kept in runs/, which a warm machine keeps)
  DEMO_OVERRIDES="$(cat runs/gpu-check-best-demo.txt 2>/dev/null) ${DEMO_OVERRIDES:-}"; STEPS="$STEPS demo"
fi
want demo && {
log "the GPU demo, 3-minute budget"
timeout 250 python3 -m tformer demo demo-gpu out_dir="$RUNS/demo-gpu" ${DEMO_OVERRIDES:-} --overwrite --no-progress \
  > "$OUT/demo-gpu.log" 2>&1; echo "rc=$?"
grep -E "stopped at|BLEU|chrF|degenerate" "$OUT/demo-gpu.log" | tail -5
cp "$RUNS/demo-gpu/test.json" "$OUT/demo-gpu-test.json" 2>/dev/null
cp "$RUNS/demo-gpu/metrics.jsonl" "$OUT/demo-gpu-metrics.jsonl" 2>/dev/null
}

want demos && {
log "the GPU demo four ways at once: as shipped; compiled; 3 + 3 layers x 768; AdamW with the default init"
shallow="model.overrides.n_layers=3 model.overrides.d_model=768 model.overrides.d_ff=3072 model.overrides.n_heads=12"
adam="train.optim.name=adam train.optim.lr=1e-3 model.overrides.init.zero_residual=false"
names=(recipe compiled shallow adam)
# compiled, a step should take a fraction of the eager one's time: evaluations every 1,500 steps rather than 500
# keep them about as often in time, so that they do not eat the budget the compilation saved
changes=("" "train.compile=true train.eval_every=1500" "$shallow" "$adam")
for i in 0 1 2 3; do
  # shellcheck disable=SC2086  # the overrides are words
  OMP_NUM_THREADS=4 timeout 330 python3 -m tformer demo demo-gpu out_dir="$RUNS/${names[i]}" ${changes[i]} \
    ${DEMO_OVERRIDES:-} --overwrite --no-progress > "$OUT/demo-${names[i]}.log" 2>&1 &
done
wait
for i in 0 1 2 3; do
  echo "--- ${names[i]}: ${changes[i]:-as shipped}"
  grep -E "eval step|stopped at|^test BLEU" "$OUT/demo-${names[i]}.log" | tail -5
  cp "$RUNS/${names[i]}/test.json" "$OUT/demo-${names[i]}-test.json" 2>/dev/null
  cp "$RUNS/${names[i]}/metrics.jsonl" "$OUT/demo-${names[i]}-metrics.jsonl" 2>/dev/null  # tokens/s every 50 steps
done
best=-1; mkdir -p runs; : > runs/gpu-check-best-demo.txt
for i in 0 1 2 3; do
  bleu=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['bleu'])" "$OUT/demo-${names[i]}-test.json" \
         2>/dev/null) || continue
  if python3 -c "import sys; sys.exit(float(sys.argv[1]) <= float(sys.argv[2]))" "$bleu" "$best"; then
    best=$bleu; echo "${changes[i]}" > runs/gpu-check-best-demo.txt
  fi
done
echo "best beside the others: test BLEU $best with '$(cat runs/gpu-check-best-demo.txt)'; STEPS=demo-best runs it alone"
}

log done
