#!/usr/bin/env bash
# Create .pyannote-env: pyannote.audio 4.0.7 on CPU torch 2.13.0, the reference that
# tests/test_segmentation_equal.py and bench/segmentation_equal.py compare our segmentation
# pipeline with. Test and bench only: the app never imports torch.
#   bash scripts/pyannote_env.sh        (idempotent; prints the env's python)
# PyPI's torchaudio 2.11.1 (the newest; none is built for torch 2.13) is the CUDA build, whose
# extension fails to load with CPU torch: it is renamed, and torchaudio falls back to pure
# Python (its Kaldi fbank, which pyannote's WeSpeaker uses, is pure Python).
set -euo pipefail
cd "$(dirname "$0")/.."
ENV=.pyannote-env
SPEC="pyannote.audio==4.0.7 onnxruntime onnx"
TORCH="torch==2.13.0"
STAMP="$ENV/.deskscribe-ready"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$SPEC $TORCH" ] && [ -x "$ENV/bin/python" ]; then
  echo "$PWD/$ENV/bin/python"
  exit 0
fi
PY=python3
# The interpreter .venv was made from, when there is one (the same Python version).
if [ -x .venv/bin/python ]; then
  PY="$(.venv/bin/python -c 'import sys; print(sys._base_executable)')"
fi
rm -rf "$ENV"
"$PY" -m venv "$ENV"
CONSTRAINTS="$(mktemp)"
trap 'rm -f "$CONSTRAINTS"' EXIT
echo "$TORCH" >"$CONSTRAINTS"
# shellcheck disable=SC2086
# (this machine's pip config names local indexes that may not exist: their warnings dropped)
"$ENV/bin/pip" install -q --disable-pip-version-check -c "$CONSTRAINTS" $SPEC \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
"$ENV/bin/python" -c "import torchaudio" 2>/dev/null || {
  lib="$("$ENV/bin/python" -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("torchaudio").origin))')/lib"
  if [ -f "$lib/_torchaudio.so" ]; then
    mv "$lib/_torchaudio.so" "$lib/_torchaudio.so.disabled-cuda-build"
  fi
}
PYANNOTE_METRICS_ENABLED=0 HF_HUB_OFFLINE=1 "$ENV/bin/python" -W ignore -c \
  "import torchaudio.compliance.kaldi, pyannote.audio.pipelines, onnxruntime" 2>/dev/null
echo "$SPEC $TORCH" >"$STAMP"
echo "$PWD/$ENV/bin/python"
