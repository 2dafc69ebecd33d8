"""One error root, one "cancelled" base, and ONNX Runtime's failures in our own type."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import deskscribe
from deskscribe.errors import Cancelled, DeskScribeError, EngineError


def _all_exception_classes() -> list[type[BaseException]]:
    """Every exception class defined in a deskscribe module (the GUI's too)."""
    for info in pkgutil.walk_packages(deskscribe.__path__, "deskscribe."):
        if info.name.endswith("__main__"):  # runs the CLI
            continue
        importlib.import_module(info.name)
    found = []
    for name, module in sorted(sys.modules.items()):
        if name == "deskscribe" or name.startswith("deskscribe."):
            for value in vars(module).values():
                if (
                    inspect.isclass(value)
                    and issubclass(value, BaseException)
                    and value.__module__ == name
                ):
                    found.append(value)
    return found


def test_every_error_has_the_one_root_and_every_cancel_the_one_base(monkeypatch) -> None:
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")  # the GUI modules import without a display
    classes = _all_exception_classes()
    assert len(classes) >= 30  # the walk really found the package's errors
    names = {f"{c.__module__}.{c.__qualname__}" for c in classes}
    assert "deskscribe.models.download.DownloadCancelled" in names
    assert [c for c in classes if not issubclass(c, DeskScribeError)] == []
    cancels = [c for c in classes if c.__name__.endswith("Cancelled")]
    assert len(cancels) >= 4
    assert [c for c in cancels if not issubclass(c, Cancelled)] == []


def test_callers_keep_the_builtin_bases_they_catch() -> None:
    from deskscribe.fsutil import UnsafePathError
    from deskscribe.models.download import DownloadCancelled, DownloadError
    from deskscribe.speakers.profiles import ProfileError
    from deskscribe.transcript.export import ExportExistsError

    assert issubclass(ProfileError, ValueError) and issubclass(UnsafePathError, ValueError)
    assert issubclass(ExportExistsError, FileExistsError)
    assert issubclass(DownloadCancelled, DownloadError)
    assert str(ExportExistsError(Path("a.txt"))).startswith("a.txt already exists")


def test_a_whisper_run_that_fails_raises_engine_error(tiny_fp32: Path) -> None:
    from deskscribe.whisper.model import WhisperModel
    from deskscribe.whisper.runtime import ORT_ERRORS

    model = WhisperModel(tiny_fp32, device="cpu")
    wrong = np.zeros((1, model.n_mels + 3, 3000), np.float32)  # mel bins the model has not
    with pytest.raises(EngineError) as failure:
        model.encode(wrong)
    assert isinstance(failure.value.__cause__, ORT_ERRORS)  # ONNX Runtime's own, kept as cause
    assert str(failure.value) == str(failure.value.__cause__)  # the same message for users
    # The model still works after the failure.
    good = model.encode(np.zeros((1, model.n_mels, 3000), np.float32))
    assert len(good.cross_k) == model.dims.n_text_layer


def _speaker_model_that_breaks_on_long_windows(folder: Path) -> Path:
    """A real WeSpeaker-shaped ONNX model (fbank [B, T, 80] -> [B, 1]) that runs on the
    200-frame probe the encoder checks it with, and fails inside ONNX Runtime on other
    lengths (a fixed reshape): a broken model file found only when it runs."""
    frames = helper.make_tensor_value_info("feats", TensorProto.FLOAT, ["B", "T", 80])
    out = helper.make_tensor_value_info("embs", TensorProto.FLOAT, ["B", 1])
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [-1, 200 * 80])
    graph = helper.make_graph(
        [
            helper.make_node("Reshape", ["feats", "shape"], ["flat"]),
            helper.make_node("ReduceMean", ["flat"], ["embs"], axes=[1], keepdims=1),
        ],
        "broken-speaker",
        [frames],
        [out],
        [shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    folder.mkdir()
    onnx.save(model, folder / "encoder.onnx")
    manifest = {"task": "speaker-embedding", "kind": "wespeaker", "name": "broken"}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_a_speaker_model_run_that_fails_raises_engine_error(tmp_path: Path) -> None:
    from deskscribe.speakers.encoder import SpeakerEncoder

    encoder = SpeakerEncoder(_speaker_model_that_breaks_on_long_windows(tmp_path / "spk"))
    audio = np.random.default_rng(0).standard_normal(16000 * 3).astype(np.float32) * 0.1
    with pytest.raises(EngineError, match=r"\S"):
        encoder.embed_windows(audio, [(0, 16000 * 3)])
