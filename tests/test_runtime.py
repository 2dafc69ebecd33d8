"""Provider choice and fallback, and the I/O-binding decoder path (run here on the CPU)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from deskscribe.whisper.decoding import DecodingOptions, WindowDecoder
from deskscribe.whisper.features import log_mel
from deskscribe.whisper.model import ModelNotBuiltError, WhisperModel
from deskscribe.whisper.runtime import CPU, CUDA, DeviceError, Runtime, available_providers


def _speech(seconds: float = 4.0) -> np.ndarray:
    t = np.arange(int(16000 * seconds)) / 16000
    return (0.2 * np.sin(2 * np.pi * 220 * t) * (np.sin(2 * np.pi * 3 * t) > 0)).astype(np.float32)


def test_cpu_is_always_there() -> None:
    assert CPU in available_providers()


def test_missing_gpu_provider_falls_back_to_cpu_with_a_reason(tiny_fp32: Path) -> None:
    if CUDA in available_providers():
        pytest.skip("this machine has CUDA; the fallback is exercised where it has not")
    model = WhisperModel(tiny_fp32, device="cuda")
    assert model.runtime.provider == CPU
    assert any("CUDA" in note and "deskscribe[cuda]" in note for note in model.runtime.notes)
    features = model.encode(log_mel(_speech(), 80)[None])
    assert len(features.cross_k) == model.dims.n_text_layer == len(features.cross_v)


def test_unknown_device_is_refused(tiny_fp32: Path) -> None:
    with pytest.raises(DeviceError, match="unknown device 'tpu'"):
        WhisperModel(tiny_fp32, device="tpu")


def test_auto_reports_what_really_ran(tiny_fp32: Path) -> None:
    model = WhisperModel(tiny_fp32, device="auto")
    assert model.runtime.provider in available_providers()
    assert model.runtime.label


def test_io_binding_path_gives_the_same_tokens(tiny_fp32: Path, speech_dir: Path) -> None:
    from conftest import espeak, load

    audio = load(espeak("Bring the red box to the kitchen table.", speech_dir / "iobind.wav"))
    mel = log_mel(audio, 80)[None]
    plain = WhisperModel(tiny_fp32, device="cpu")
    bound = WhisperModel(tiny_fp32, device="cpu")
    bound.device_type = "cpu"  # the CUDA code path (OrtValues + I/O binding), on CPU memory
    for opts in (DecodingOptions(), DecodingOptions(beam_size=4)):
        a = WindowDecoder(plain, opts).decode(plain.encode(mel), "en")
        b = WindowDecoder(bound, opts).decode(bound.encode(mel), "en")
        assert a.tokens == b.tokens and len(a.tokens) > 5
        assert not isinstance(bound.encode(mel).cross_k[0], np.ndarray)


def test_folder_without_manifest_says_how_to_build(tmp_path: Path) -> None:
    with pytest.raises(ModelNotBuiltError, match="deskscribe models build"):
        WhisperModel(tmp_path)


def test_runtime_fallback_note() -> None:
    rt = Runtime(device="cuda")
    rt.provider = CUDA
    rt.fall_back_to_cpu("CUDA out of memory")
    assert rt.provider == CPU and rt.device == "cpu"
    assert "out of memory" in rt.notes[-1] and "CPU" in rt.notes[-1]


def test_model_built_by_another_version_asks_for_a_rebuild(tiny_fp32: Path, tmp_path: Path) -> None:
    import json
    import shutil

    old = tmp_path / "old"
    shutil.copytree(tiny_fp32, old)
    manifest = json.loads((old / "manifest.json").read_text())
    manifest["builder_version"] = 1
    (old / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelNotBuiltError, match="--overwrite"):
        WhisperModel(old, device="cpu")
