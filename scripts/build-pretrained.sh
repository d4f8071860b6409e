#!/usr/bin/env bash
# Rebuild the pretrained surrogate shipped inside the package (surrogate/checkpoints/pretrained/): the corpus of
# corpora/pretrain.yaml (pure embedded-engine runs; resumable, finished runs are skipped), then `hybridsim pretrain`
# on it (whole runs held out for validation and test; figures in surrogate/checkpoints/pretrained/pretrain.json).
#   bash scripts/build-pretrained.sh                 # CORPUS=results/corpus-pretrain WORKERS=2 by default
set -euo pipefail
cd "$(dirname "$0")/.."
CORPUS=${CORPUS:-results/corpus-pretrain}
WORKERS=${WORKERS:-2}
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1
python -m hybridsim corpus corpora/pretrain.yaml -o "$CORPUS" --workers "$WORKERS"
python -m hybridsim pretrain "$CORPUS" -o surrogate/checkpoints/pretrained --model pretrained --seed 0 --force
