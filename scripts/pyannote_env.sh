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
# shellcheck source=scripts/reference_env.sh
source scripts/reference_env.sh
ENV=.pyannote-env
SPEC="pyannote.audio==4.0.7 onnxruntime onnx"
TORCH="torch==2.13.0"
env_ready "$ENV" "$SPEC $TORCH" && exit 0
# shellcheck disable=SC2086
env_create "$ENV" "$TORCH" $SPEC
"$ENV/bin/python" -c "import torchaudio" 2>/dev/null || {
  lib="$("$ENV/bin/python" -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("torchaudio").origin))')/lib"
  if [ -f "$lib/_torchaudio.so" ]; then
    mv "$lib/_torchaudio.so" "$lib/_torchaudio.so.disabled-cuda-build"
  fi
}
PYANNOTE_METRICS_ENABLED=0 HF_HUB_OFFLINE=1 "$ENV/bin/python" -W ignore -c \
  "import torchaudio.compliance.kaldi, pyannote.audio.pipelines, onnxruntime" 2>/dev/null
env_done "$ENV" "$SPEC $TORCH"
