"""Provider choice and fallback, and the I/O-binding decoder path (run here on the CPU)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from conftest import EVAL, load
from deskscribe.errors import EngineError
from deskscribe.whisper.decoding import DecodingOptions, WindowDecoder
from deskscribe.whisper.features import log_mel
from deskscribe.whisper.model import ModelNotBuiltError, WhisperModel
from deskscribe.whisper.runtime import CPU, CUDA, DeviceError, available_providers
from skips import gpu
from threads_support import cpu_of_other_threads_while_idle

RuntimeException = onnxruntime.capi.onnxruntime_pybind11_state.RuntimeException


def _speech(seconds: float = 4.0) -> np.ndarray:
    t = np.arange(int(16000 * seconds)) / 16000
    return (0.2 * np.sin(2 * np.pi * 220 * t) * (np.sin(2 * np.pi * 3 * t) > 0)).astype(np.float32)


def test_missing_gpu_provider_falls_back_to_cpu_with_a_reason(tiny_fp32: Path) -> None:
    if CUDA in available_providers():
        pytest.skip(gpu("this machine has CUDA; the fallback is exercised where it has not"))
    model = WhisperModel(tiny_fp32, device="cuda")
    assert model.runtime.provider == CPU
    assert any("CUDA" in note and "deskscribe[cuda]" in note for note in model.runtime.notes)
    features = model.encode(log_mel(_speech(), 80)[None])
    assert len(features.cross_k) == model.dims.n_text_layer == len(features.cross_v)


def test_unknown_device_is_refused(tiny_fp32: Path) -> None:
    with pytest.raises(DeviceError, match="unknown device 'tpu'"):
        WhisperModel(tiny_fp32, device="tpu")


def test_io_binding_path_gives_the_same_tokens(tiny_fp32: Path, speech_dir: Path) -> None:
    from conftest import espeak, load

    audio = load(espeak("Bring the red box to the kitchen table.", speech_dir / "iobind.wav"))
    mel = log_mel(audio, 80)[None]
    plain = WhisperModel(tiny_fp32, device="cpu")
    bound = WhisperModel(tiny_fp32, device="cpu")
    # The CUDA code path (OrtValues + I/O binding), on CPU memory.
    bound.sessions = dataclasses.replace(bound.sessions, device_type="cpu")
    for opts in (DecodingOptions(), DecodingOptions(beam_size=4)):
        a = WindowDecoder(plain, opts).decode(plain.encode(mel), "en")
        b = WindowDecoder(bound, opts).decode(bound.encode(mel), "en")
        assert a.tokens == b.tokens and len(a.tokens) > 5
        assert not isinstance(bound.encode(mel).cross_k[0], np.ndarray)


def test_folder_without_manifest_says_how_to_build(tmp_path: Path) -> None:
    with pytest.raises(ModelNotBuiltError, match="deskscribe models build"):
        WhisperModel(tmp_path)


class _FailsOnce:
    """A real session whose first run fails the way CUDA out-of-memory does (fault injection)."""

    def __init__(self, session) -> None:
        self._session = session
        self.failures = 0

    def run(self, *args, **kwargs):
        if self.failures == 0:
            self.failures += 1
            raise RuntimeException(
                "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : BFCArena: Failed to allocate memory"
            )
        return self._session.run(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._session, name)


def test_a_run_failing_on_the_gpu_continues_on_the_cpu(tiny_fp32: Path, speech_dir: Path) -> None:
    from conftest import espeak, load

    mel = log_mel(load(espeak("Open the window please.", speech_dir / "fallback.wav")), 80)[None]
    reference = WhisperModel(tiny_fp32, device="cpu")
    expected = (
        WindowDecoder(reference, DecodingOptions()).decode(reference.encode(mel), "en").tokens
    )

    for part in ("encoder", "decoder"):
        model = WhisperModel(tiny_fp32, device="cpu")
        # Pretend the sessions run on a GPU, and make the first run of one of them fail there.
        model.runtime.provider = CUDA
        failing = _FailsOnce(getattr(model.sessions, part))
        model.sessions = dataclasses.replace(model.sessions, on_gpu=True, **{part: failing})
        tokens = WindowDecoder(model, DecodingOptions()).decode(model.encode(mel), "en").tokens
        assert failing.failures == 1
        assert tokens == expected  # the same transcript, finished on the CPU
        assert model.runtime.provider == CPU and not model.sessions.on_gpu
        assert any("Failed to allocate" in n and "CPU" in n for n in model.runtime.notes)


def test_a_failure_on_the_cpu_is_not_hidden(tiny_fp32: Path) -> None:
    model = WhisperModel(tiny_fp32, device="cpu")
    model.sessions = dataclasses.replace(model.sessions, encoder=_FailsOnce(model.sessions.encoder))
    with pytest.raises(EngineError, match="Failed to allocate") as failure:
        model.encode(np.zeros((1, 80, 3000), dtype=np.float32))
    assert isinstance(failure.value.__cause__, RuntimeException)  # ONNX Runtime's, wrapped


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


def test_a_folder_built_by_version_7_runs_and_agrees(
    tiny_ct2: Path, tiny_fp32: Path, tmp_path
) -> None:
    """Version 8 changed only the CPU variants' cross K/V layout (keys as rows), which stays
    inside a folder: a folder built by 7 (the old layout, rebuilt here with the builder's
    switch off) still loads, and both write the real JFK recording with the same words at the
    same times, beam 5 with word timestamps (the alignment heads come out of the new layout
    transposed back), and a window's tokens at beam 5 get the same log-probabilities to float
    rounding."""
    import json

    from conftest import EVAL, load
    from deskscribe.models.build import build_model
    from deskscribe.whisper import graph
    from deskscribe.whisper.options import TranscribeOptions
    from deskscribe.whisper.transcribe import transcribe_file

    old = tmp_path / "v7"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(graph._Cfg, "keys_first", property(lambda self: False))
        build_model(tiny_ct2, old, "fp32", name="tiny.en-fp32")
    manifest = json.loads((old / "manifest.json").read_text())
    manifest["builder_version"] = 7
    (old / "manifest.json").write_text(json.dumps(manifest))

    models = [WhisperModel(f, device="cpu") for f in (old, tiny_fp32)]
    jfk = load(EVAL / "jfk.flac")
    mel = log_mel(np.pad(jfk, (0, 30 * 16000 - len(jfk))), 80)[None, :, :3000]
    audio = [m.encode(mel) for m in models]
    assert audio[0].cross_k[0].shape[1:] == (6, 64, 1500)  # the old layout, [H, dh, S]
    assert audio[1].cross_k[0].shape[1:] == (6, 1500, 64)  # the new one, [H, S, dh]
    beam = [
        WindowDecoder(m, DecodingOptions(beam_size=5)).decode(a, "en")
        for m, a in zip(models, audio, strict=True)
    ]
    assert beam[0].tokens == beam[1].tokens and len(beam[1].tokens) > 15
    assert np.allclose(beam[0].token_logprobs, beam[1].token_logprobs, atol=1e-4)

    options = TranscribeOptions(beam_size=5, word_timestamps=True, language="en")
    words = []
    for m in models:
        transcript = transcribe_file(m, EVAL / "jfk.flac", options)
        words.append([w for s in transcript.segments for w in s.words])
    assert [w.text for w in words[0]] == [w.text for w in words[1]]
    assert len(words[1]) > 15
    for a, b in zip(*words, strict=True):
        assert abs(a.start - b.start) <= 0.02 and abs(a.end - b.end) <= 0.02, (a, b)


def test_cpu_sessions_do_not_keep_a_core_busy_after_their_run(tiny_fp32: Path) -> None:
    """Every CPU session the engine opens lets its threads sleep once a run is over. One left
    spinning (beam search's candidate session did) keeps a core busy for tens of milliseconds
    after each run, and the decoder's next step waits for it: a turbo-shaped beam-5 step took
    20-22 ms instead of 16. Real beam-search steps of tiny.en on two threads, then idle time:
    a deliberately spinning session of the same candidate graph is the control."""
    from deskscribe.whisper.decoding import _top_graph

    model = WhisperModel(tiny_fp32, device="cpu", threads=2)
    mel = log_mel(load(EVAL / "jfk.flac")[: 16000 * 8], model.n_mels)[None]
    audio = model.encode(mel)
    decoder = WindowDecoder(model, DecodingOptions(beam_size=5, sample_len=3))
    engine = cpu_of_other_threads_while_idle(lambda: decoder.decode(audio, "en"))

    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = 2
    spinning = onnxruntime.InferenceSession(_top_graph()[0], opts, providers=[CPU])
    logits = np.random.default_rng(0).standard_normal((5, model.dims.n_vocab)).astype(np.float32)
    feeds = {"logits": logits, "k": np.array([6], dtype=np.int64)}
    control = cpu_of_other_threads_while_idle(lambda: spinning.run(None, feeds))
    assert control > 0.05, f"the spinning control burnt only {control:.3f} CPU-s: cannot tell"
    assert engine < 0.25 * control, (
        f"the engine's threads burnt {engine:.3f} CPU-s while idle after its runs "
        f"(a spinning session: {control:.3f})"
    )
