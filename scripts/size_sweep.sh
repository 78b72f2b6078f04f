#!/usr/bin/env bash
# One size of the translate-en-ja model sweep at equal training compute (docs/experiments.md, "A larger model").
# The recipe is scripts/train_defaults.sh's with the sizes changed; a run's length is given in optimizer steps,
# chosen so that steps x (multiply-adds per token) equals the default model's at a step count of its own run.
# Usage: scripts/size_sweep.sh NAME D_MODEL HEADS LAYERS D_FF STEPS [extra s2s train flags, e.g. --resume]
# Runs at nice 19 so that other work on the machine goes first; runs/sweep/NAME holds the run.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCHRUN=${TORCHRUN:-.venv/bin/torchrun}
name=$1 d=$2 heads=$3 layers=$4 ff=$5 steps=$6
shift 6
exec nice -n 19 "$TORCHRUN" --nproc_per_node 2 -m s2s.cli train --task translation \
  --data data/en-ja/ui-strings.tsv,data/en-ja/ui-strings-copyleft.tsv --vocab-size "${VOCAB:-8000}" \
  --d-model "$d" --n-heads "$heads" --n-layers "$layers" --d-ff "$ff" --dropout 0.1 --max-len 64 \
  --epochs 20 --batch-tokens 2500 --warmup 300 --lr-factor 0.5 --average-every 100 --average-last 5 \
  --bleu-tokenize char --eval-max 400 --threads 1 --max-steps "$steps" "$@" \
  --out "runs/sweep/$name"
