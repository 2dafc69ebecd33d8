#!/usr/bin/env bash
# Create bench/out/ct2-env: CTranslate2's Transformers converter (transformers on CPU torch
# 2.13.0), which bench/turbo_ct2.py uses to convert the random turbo-shaped checkpoint for
# faster-whisper. Bench only: neither the app nor the tests import torch.
#   bash bench/ct2_env.sh        (idempotent; prints the env's python)
set -euo pipefail
cd "$(dirname "$0")/.."
ENV=bench/out/ct2-env
# ctranslate2 as in .venv (faster-whisper's), so the converted model is the one it reads.
SPEC="ctranslate2==4.8.5 transformers safetensors"
TORCH="torch==2.13.0"
STAMP="$ENV/.deskscribe-ready"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$SPEC $TORCH" ] && [ -x "$ENV/bin/python" ]; then
  echo "$PWD/$ENV/bin/python"
  exit 0
fi
PY=python3
if [ -x .venv/bin/python ]; then
  PY="$(.venv/bin/python -c 'import sys; print(sys._base_executable)')"
fi
rm -rf "$ENV"
mkdir -p "$(dirname "$ENV")"
"$PY" -m venv "$ENV"
CONSTRAINTS="$(mktemp)"
trap 'rm -f "$CONSTRAINTS"' EXIT
echo "$TORCH" >"$CONSTRAINTS"
# shellcheck disable=SC2086
"$ENV/bin/pip" install -q --disable-pip-version-check -c "$CONSTRAINTS" "$TORCH" $SPEC \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
"$ENV/bin/python" -c "import torch, transformers, ctranslate2.converters" >/dev/null
echo "$SPEC $TORCH" >"$STAMP"
echo "$PWD/$ENV/bin/python"
