#!/usr/bin/env bash
# Create bench/out/ct2-env: CTranslate2's Transformers converter (transformers on CPU torch
# 2.13.0), which bench/turbo_ct2.py uses to convert the random turbo-shaped checkpoint for
# faster-whisper. Bench only: neither the app nor the tests import torch.
#   bash bench/ct2_env.sh        (idempotent; prints the env's python)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/reference_env.sh
source scripts/reference_env.sh
ENV=bench/out/ct2-env
# ctranslate2 as in .venv (faster-whisper's), so the converted model is the one it reads.
SPEC="ctranslate2==4.8.5 transformers safetensors"
TORCH="torch==2.13.0"
env_ready "$ENV" "$SPEC $TORCH" && exit 0
# shellcheck disable=SC2086
env_create "$ENV" "$TORCH" $SPEC
"$ENV/bin/python" -c "import torch, transformers, ctranslate2.converters" >/dev/null
env_done "$ENV" "$SPEC $TORCH"
