#!/usr/bin/env bash
# Rebuild the pretrained surrogate shipped inside the package (surrogate/checkpoints/pretrained/): the corpora of
# corpora/pretrain.yaml (48 runs, jobs of 4-128 ranks on 72 and 1,056 nodes) and corpora/pretrain-1056.yaml (6 runs of
# large co-running jobs on 1,056 nodes) -- pure embedded-engine runs, resumable (finished runs are skipped) -- then
# `hybridsim pretrain` on both (each split by whole run into train / validation / test; the test runs are scored
# once, into surrogate/checkpoints/pretrained/pretrain.json).
#   bash scripts/build-pretrained.sh       # RESULTS=results WORKERS=2 by default
set -euo pipefail
cd "$(dirname "$0")/.."
RESULTS=${RESULTS:-results}
WORKERS=${WORKERS:-2}
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1
python -m hybridsim corpus corpora/pretrain.yaml -o "$RESULTS/corpus-pretrain" --workers "$WORKERS"
python -m hybridsim corpus corpora/pretrain-1056.yaml -o "$RESULTS/corpus-pretrain-1056" --workers "$WORKERS"
python -m hybridsim pretrain "$RESULTS/corpus-pretrain" "$RESULTS/corpus-pretrain-1056" \
    -o surrogate/checkpoints/pretrained --model pretrained --seed 0 --force
