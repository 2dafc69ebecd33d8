"""Speaker embeddings: Resemblyzer's real weights converted without torch, run by ONNX Runtime.

Oracles: a numpy LSTM written from PyTorch's equations (the graph), librosa (Resemblyzer's
mel frames), kaldi-native-fbank (WeSpeaker's fbank), and espeak-ng voices (what a user
notices: the same voice is recognised, different voices are told apart).
"""

from __future__ import annotations

import io
import json
import pickle
import struct
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import espeak, load, run_cli
from deskscribe.models.install import install_speaker_model, install_speaker_starter
from deskscribe.models.store import (
    ModelNotInstalledError,
    list_models,
    list_speaker_models,
    resolve_speaker_model,
    verify_model,
)
from deskscribe.speakers import features
from deskscribe.speakers.convert import (
    CheckpointFormatError,
    find_resemblyzer_checkpoint,
    read_torch_checkpoint,
    resemblyzer_weights,
)
from deskscribe.speakers.encoder import SpeakerEncoder
from hub_server import HubServer, load_repo

SENTENCES = (
    "The quick brown fox jumps over the lazy dog near the river bank this morning.",
    "Please remember to send the quarterly report before the meeting on Thursday afternoon.",
    "We walked along the beach and watched the boats come back into the harbour at sunset.",
)
# espeak-ng variants that Resemblyzer tells apart. Variants that only change the accent
# (en-us, en-gb+m3, en-gb-scotland, +grandpa) sound alike to it: measured cross-voice
# cosines of 0.94-0.985, above the same-voice ones (0.91). See docs/architecture.md.
VOICES = ("en-us+edward", "en-us+steph", "en-us+travis", "en-us+zac")
WESPEAKER_REPO = "Wespeaker/wespeaker-voxceleb-resnet34-LM"


@pytest.fixture(scope="module")
def encoder(speaker_model: Path) -> SpeakerEncoder:
    return SpeakerEncoder(speaker_model, device="cpu")


@pytest.fixture(scope="module")
def weights() -> dict[str, np.ndarray]:
    checkpoint = find_resemblyzer_checkpoint()
    if checkpoint is None:
        pytest.skip("resemblyzer is not installed (pip install --no-deps resemblyzer==0.1.4)")
    return resemblyzer_weights(read_torch_checkpoint(checkpoint))


@pytest.fixture(scope="module")
def voices(speech_dir: Path) -> dict[tuple[str, int], np.ndarray]:
    """Every voice saying every sentence (16 kHz float32)."""
    out = {}
    for voice in VOICES:
        for i, text in enumerate(SENTENCES):
            path = speech_dir / f"speaker-{voice.replace('+', '_')}-{i}.wav"
            if not path.exists():
                espeak(text, path, voice=voice)
            out[voice, i] = load(path)
    return out


# --------------------------------------------------------------------------- references


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def reference_embedding(w: dict[str, np.ndarray], mels: np.ndarray) -> np.ndarray:
    """Resemblyzer's VoiceEncoder.forward for one sequence [T, 40], in float64 numpy from
    PyTorch's LSTM equations (gates i, f, g, o)."""
    x = mels.astype(np.float64)
    for layer in range(3):
        w_ih, w_hh, b_ih, b_hh = (
            w[f"lstm.{k}_l{layer}"].astype(np.float64)
            for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        )
        h, c, outputs = np.zeros(w_hh.shape[1]), np.zeros(w_hh.shape[1]), []
        for t in range(len(x)):
            i, f, g, o = np.split(w_ih @ x[t] + b_ih + w_hh @ h + b_hh, 4)
            c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
            h = _sigmoid(o) * np.tanh(c)
            outputs.append(h)
        x = np.array(outputs)
    e = np.maximum(w["linear.weight"] @ h + w["linear.bias"], 0.0)
    return e / np.linalg.norm(e)


def reference_utterance(w: dict[str, np.ndarray], wav: np.ndarray) -> np.ndarray:
    """Resemblyzer's normalize_volume + embed_utterance, with librosa's mel frames."""
    librosa = pytest.importorskip("librosa")
    rms = np.sqrt(np.mean((wav.astype(np.float64) * 32767) ** 2))
    change = -30 - 20 * np.log10(rms / 32767)
    if change > 0:
        wav = wav * 10 ** (change / 20)
    n_frames = int(np.ceil((len(wav) + 1) / 160))
    step = int(np.round((16000 / 1.3) / 160))
    slices = [(i, i + 160) for i in range(0, max(1, n_frames - 160 + step + 1), step)]
    coverage = (len(wav) - slices[-1][0] * 160) / (160 * 160)
    if coverage < 0.75 and len(slices) > 1:
        slices = slices[:-1]
    if slices[-1][1] * 160 >= len(wav):
        wav = np.pad(wav, (0, slices[-1][1] * 160 - len(wav)))
    mel = librosa.feature.melspectrogram(y=wav, sr=16000, n_fft=400, hop_length=160, n_mels=40)
    mel = mel.astype(np.float32).T
    partials = np.array([reference_embedding(w, mel[a:b]) for a, b in slices])
    mean = partials.mean(axis=0)
    return mean / np.linalg.norm(mean)


# --------------------------------------------------------------------------- checkpoint + graph


def test_checkpoint_is_read_without_torch(weights: dict[str, np.ndarray]) -> None:
    assert weights["lstm.weight_ih_l0"].shape == (1024, 40)
    assert weights["lstm.weight_hh_l2"].shape == (1024, 256)
    assert weights["linear.weight"].shape == (256, 256)
    assert all(np.isfinite(v).all() and v.std() > 0 for v in weights.values())


def test_onnx_graph_equals_numpy_lstm(
    speaker_model: Path, weights: dict[str, np.ndarray], voices: dict
) -> None:
    """Real mel frames of speech, three rows of different lengths in one padded batch."""
    mel = features.mel_power(voices[VOICES[0], 0])
    lengths = np.array([160, 100, 37], np.int32)
    batch = np.zeros((3, 160, 40), np.float32)
    for row, n in enumerate(lengths):
        batch[row, :n] = mel[50 * row : 50 * row + n]
    session = ort.InferenceSession(str(speaker_model / "encoder.onnx"))
    (out,) = session.run(["embedding"], {"mels": batch, "lengths": lengths})
    for row, n in enumerate(lengths):
        expected = reference_embedding(weights, batch[row, :n])
        np.testing.assert_allclose(out[row], expected, atol=1e-4)
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)


def test_embed_equals_resemblyzer_embed_utterance(
    encoder: SpeakerEncoder, weights: dict[str, np.ndarray], voices: dict
) -> None:
    """The whole path (volume, partials, mel, LSTM, average) against an independent one."""
    for key in ((VOICES[1], 0), (VOICES[2], 2)):
        wav = voices[key]
        np.testing.assert_allclose(encoder.embed(wav), reference_utterance(weights, wav), atol=1e-4)
    short = voices[VOICES[0], 1][:8000]  # 0.5 s: one partial, zero-padded to 1.6 s
    np.testing.assert_allclose(encoder.embed(short), reference_utterance(weights, short), atol=1e-4)


class _Global:
    """Pickled as a reference to ``module.name``, which need not be importable here."""

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name

    def __call__(self, *args: object) -> None:  # pickle wants reduce functions callable
        raise TypeError


class _View:
    """A tensor as torch stores it: a 1-D storage, an offset, a shape and strides."""

    def __init__(self, storage: np.ndarray, offset: int, shape: tuple, stride: tuple) -> None:
        self.storage, self.offset, self.shape, self.stride = storage, offset, shape, stride

    def expected(self) -> np.ndarray:
        item = self.storage.itemsize
        strides = tuple(s * item for s in self.stride)
        return np.lib.stride_tricks.as_strided(self.storage[self.offset :], self.shape, strides)


class _TorchZipPickler(pickle._Pickler):
    """Writes data.pkl the way torch.save does (protocol 2, storages as persistent ids)."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=2)
        self.storages: dict[int, tuple[str, np.ndarray]] = {}

    def save(self, obj: object, save_persistent_id: bool = True) -> None:
        if isinstance(obj, _Global):
            self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())
            return
        super().save(obj, save_persistent_id)

    def persistent_id(self, obj: object) -> object:
        if isinstance(obj, np.ndarray) and id(obj) in self.storages:
            key, array = self.storages[id(obj)]
            return ("storage", _Global("torch", "FloatStorage"), key, "cpu", array.size)
        return None

    def reducer_override(self, obj: object) -> object:
        if not isinstance(obj, _View):
            return NotImplemented
        self.storages.setdefault(id(obj.storage), (str(len(self.storages)), obj.storage))
        rebuild = _Global("torch._utils", "_rebuild_tensor_v2")
        return rebuild, (obj.storage, obj.offset, obj.shape, obj.stride, False, OrderedDict())


def test_zip_checkpoint_layout(weights: dict[str, np.ndarray], tmp_path: Path) -> None:
    """torch >= 1.6 saves a zip: data.pkl + data/<key>; views share storages."""
    flat_w = np.ascontiguousarray(weights["linear.weight"]).ravel()
    bias = weights["linear.bias"]
    state = OrderedDict(
        [
            ("linear.weight", _View(flat_w, 0, (256, 256), (256, 1))),
            ("linear.bias", _View(bias, 0, (256,), (1,))),
            ("transposed", _View(flat_w, 0, (256, 256), (1, 256))),
            ("row_one", _View(flat_w, 256, (256,), (1,))),  # same storage, an offset
            ("slice", _View(bias, 10, (5,), (1,))),
        ]
    )
    buffer = io.BytesIO()
    pickler = _TorchZipPickler(buffer)
    pickler.dump({"step": 3, "model_state": state})
    with zipfile.ZipFile(tmp_path / "model.pt", "w") as z:
        z.writestr("model/data.pkl", buffer.getvalue())
        z.writestr("model/version", "3\n")
        for key, array in pickler.storages.values():
            z.writestr(f"model/data/{key}", array.astype("<f4").tobytes())
    assert len(pickler.storages) == 2
    read = read_torch_checkpoint(tmp_path / "model.pt")
    assert read["step"] == 3 and list(read["model_state"]) == list(state)
    for name, view in state.items():
        np.testing.assert_array_equal(read["model_state"][name], view.expected())
    np.testing.assert_array_equal(read["model_state"]["transposed"], weights["linear.weight"].T)


def test_checkpoint_that_would_run_code_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            import os

            return (os.system, (f"touch {marker}",))

    with zipfile.ZipFile(tmp_path / "evil.pt", "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"model_state": Evil()}, 2))
    with pytest.raises(CheckpointFormatError, match="system"):
        read_torch_checkpoint(tmp_path / "evil.pt")
    assert not marker.exists()
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointFormatError):
        read_torch_checkpoint(tmp_path / "junk.pt")


# --------------------------------------------------------------------------- features


def test_mel_frames_match_librosa(voices: dict) -> None:
    librosa = pytest.importorskip("librosa")
    wav = voices[VOICES[3], 1]
    ours = features.mel_power(wav)
    ref = librosa.feature.melspectrogram(y=wav, sr=16000, n_fft=400, hop_length=160, n_mels=40)
    ref = ref.astype(np.float32).T
    assert ours.shape == ref.shape == (1 + len(wav) // 160, 40)
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-6 * ref.max())
    # A span computed alone equals the same frames of the whole signal.
    np.testing.assert_array_equal(features.mel_power_span(wav, 16000, 40000), ours[100:250])


def test_fbank_matches_kaldi_native_fbank(voices: dict) -> None:
    knf = pytest.importorskip("kaldi_native_fbank")
    wav = voices[VOICES[0], 2]
    opts = knf.FbankOptions()
    opts.frame_opts.dither = 0
    opts.frame_opts.samp_freq = 16000
    opts.mel_opts.num_bins = 80
    fbank = knf.OnlineFbank(opts)
    fbank.accept_waveform(16000, (wav * 32768).tolist())
    fbank.input_finished()
    ref = np.array([fbank.get_frame(i) for i in range(fbank.num_frames_ready)])
    ours = features.kaldi_fbank(wav)
    assert ours.shape == ref.shape == (1 + (len(wav) - 400) // 160, 80)
    np.testing.assert_allclose(ours, ref, atol=2e-3)
    normalised = features.wespeaker_features(wav)
    np.testing.assert_allclose(normalised, ref - ref.mean(axis=0), atol=2e-3)


# --------------------------------------------------------------------------- voices


def _cosines(embeds: dict) -> tuple[list[float], list[float]]:
    keys = list(embeds)
    same, different = [], []
    for a in range(len(keys)):
        for b in range(a + 1, len(keys)):
            value = float(embeds[keys[a]] @ embeds[keys[b]])
            (same if keys[a][0] == keys[b][0] else different).append(value)
    return same, different


def test_same_voice_is_closer_than_different_voices(encoder: SpeakerEncoder, voices: dict) -> None:
    """Measured (3 sentences x 4 voices): same voice 0.928-0.960, different voices
    0.468-0.626, a gap of 0.30. The bounds leave 0.07 of room on each side."""
    same, different = _cosines({k: encoder.embed(v) for k, v in voices.items()})
    assert min(same) > 0.85, same
    assert max(different) < 0.70, different
    assert min(same) - max(different) > 0.2


def test_windows_find_their_voice(encoder: SpeakerEncoder, voices: dict) -> None:
    """Each 1.6 s window of sentence 1 or 2 is nearest to its own voice's sentence-0
    embedding. Measured: 40 of 40 windows, by a cosine margin of 0.25 or more."""
    enrol = np.array([encoder.embed(voices[v, 0]) for v in VOICES])
    n = round(encoder.window_seconds * 16000)
    right = total = 0
    for (voice, sentence), wav in voices.items():
        if sentence == 0:
            continue
        windows = [(s, s + n) for s in range(0, len(wav) - n, n // 2)]
        scores = encoder.embed_windows(wav, windows) @ enrol.T
        right += int(np.sum(np.argmax(scores, axis=1) == VOICES.index(voice)))
        total += len(windows)
    assert total >= 40
    assert right / total >= 0.95, f"{right}/{total}"


# --------------------------------------------------------------------------- windows


def test_embed_windows_contract(encoder: SpeakerEncoder, voices: dict) -> None:
    wav = voices[VOICES[1], 2]
    n = len(wav)
    windows = [(0, 25600), (-500, 8000), (n - 4000, n + 9999), (16000, 16000 + 64000), (3, 4000)]
    out = encoder.embed_windows(wav, windows)
    assert out.shape == (5, encoder.dim) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    # Clipping: a window hanging over the ends is the window inside the signal.
    np.testing.assert_allclose(out[1], encoder.embed_windows(wav, [(0, 8000)])[0], atol=1e-6)
    # Batching does not change results.
    one_by_one = np.array([encoder.embed_windows(wav, [w])[0] for w in windows])
    np.testing.assert_allclose(out, one_by_one, atol=1e-5)
    # A 4 s window is the average of its 1.6 s partials: close to its own halves.
    halves = encoder.embed_windows(wav, [(16000, 48000), (48000, 80000)])
    assert float(out[3] @ halves.mean(axis=0)) > 0.9
    assert encoder.embed_windows(wav, []).shape == (0, encoder.dim)
    with pytest.raises(ValueError, match="no audio"):
        encoder.embed_windows(wav, [(n + 10, n + 20)])


def test_quiet_recordings_are_raised_to_the_same_level(
    encoder: SpeakerEncoder, voices: dict
) -> None:
    wav = voices[VOICES[2], 1]
    quiet, quieter = wav * 0.01, wav * 0.001  # both below -30 dBFS: raised to it
    np.testing.assert_allclose(encoder.embed(quiet), encoder.embed(quieter), atol=1e-4)
    windows = [(0, 24000), (24000, 48000)]
    np.testing.assert_allclose(
        encoder.embed_windows(quiet, windows), encoder.embed_windows(quieter, windows), atol=1e-4
    )
    silence = np.zeros(32000, np.float32)
    assert np.isfinite(encoder.embed_windows(silence, [(0, 32000)])).all()


# --------------------------------------------------------------------------- store + install


def test_install_speaker_starter_cli(tmp_path: Path, speaker_model: Path) -> None:
    store = tmp_path / "store"
    proc = run_cli(["models", "install-speaker-starter"], store)
    assert proc.returncode == 0, proc.stderr
    folder = Path(proc.stdout.strip())
    assert folder == store / "speaker-resemblyzer"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert (manifest["kind"], manifest["task"], manifest["embedding_dim"]) == (
        "resemblyzer",
        "speaker-embedding",
        256,
    )
    # The same graph as the test fixture's, bit for bit.
    assert (folder / "encoder.onnx").read_bytes() == (speaker_model / "encoder.onnx").read_bytes()
    assert verify_model(folder) == []
    listed = run_cli(["models", "list"], store)
    assert "speaker-resemblyzer" in listed.stdout and "speakers/resemblyzer" in listed.stdout
    assert list_models(store) == []  # never offered as a Whisper model
    assert resolve_speaker_model(None, store) == folder.resolve()
    again = run_cli(["models", "install-speaker-starter"], store)
    assert again.returncode == 2 and "--overwrite" in again.stderr


def test_no_speaker_model_names_the_commands(tmp_path: Path) -> None:
    with pytest.raises(ModelNotInstalledError, match="install-speaker-starter"):
        resolve_speaker_model(None, tmp_path)
    with pytest.raises(ModelNotInstalledError, match="models download wespeaker"):
        resolve_speaker_model("nope", tmp_path)


def test_a_speaker_model_cut_short_is_called_damaged_not_missing(tmp_path: Path) -> None:
    folder = tmp_path / "speaker-wespeaker-resnet34"
    folder.mkdir()
    (folder / "manifest.json").write_text('{"task": "speaker-embed')  # a full disk, a crash
    with pytest.raises(
        ModelNotInstalledError, match=r"is damaged.*manifest\.json.*Install it again"
    ):
        resolve_speaker_model("speaker-wespeaker-resnet34", tmp_path)


def _tiny_wespeaker(path: Path, input_rank: int = 3) -> np.ndarray:
    """A stand-in with WeSpeaker's interface: feats [B, T, 80] → embs [B, 256]
    (mean of squared features, then a fixed projection). Returns the projection."""
    proj = np.random.default_rng(7).standard_normal((80, 256)).astype(np.float32)
    shape = ["B", "T", 80] if input_rank == 3 else ["T", 80]
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["feats", "feats"], ["sq"]),
            helper.make_node("ReduceMean", ["sq"], ["pooled"], axes=[-2], keepdims=0),
            helper.make_node("MatMul", ["pooled", "proj"], ["embs"]),
        ],
        "tiny_wespeaker",
        [helper.make_tensor_value_info("feats", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("embs", TensorProto.FLOAT, [*shape[:-2], 256])],
        [numpy_helper.from_array(proj, "proj")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return proj


def test_download_wespeaker_from_the_hub(tmp_path: Path, voices: dict) -> None:
    repo_dir = tmp_path / "repo"
    repo_dir.mkdir()
    proj = _tiny_wespeaker(repo_dir / "voxceleb_resnet34_LM.onnx")
    (repo_dir / "README.md").write_text("tiny stand-in\n")
    store = tmp_path / "store"
    with HubServer([load_repo(WESPEAKER_REPO, repo_dir, lfs=("*.onnx",))]) as hub:
        proc = run_cli(["models", "download", "wespeaker", "--endpoint", hub.url], store)
        assert proc.returncode == 0, proc.stderr
        assert hub.seen("GET", "/lfs/")  # the ONNX file came through the LFS route
    folder = Path(proc.stdout.strip().splitlines()[-1])
    assert folder == store / "speaker-wespeaker-resnet34"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["kind"] == "wespeaker"
    assert (manifest["input_name"], manifest["output_name"], manifest["n_mels"]) == (
        "feats",
        "embs",
        80,
    )
    assert manifest["source"] == f"hf:{WESPEAKER_REPO}/voxceleb_resnet34_LM.onnx"
    assert not (store / ".downloads" / WESPEAKER_REPO.replace("/", "--")).exists()  # dropped
    assert verify_model(folder) == []

    # WeSpeaker is preferred over Resemblyzer once both are installed.
    install_speaker_starter(store)
    assert resolve_speaker_model(None, store) == folder.resolve()
    assert {m.kind for m in list_speaker_models(store)} == {"wespeaker", "resemblyzer"}

    # The WeSpeaker path: fbank + CMN per window, windows of different lengths batched.
    enc = SpeakerEncoder(folder)
    assert (enc.kind, enc.dim) == ("wespeaker", 256)
    wav = voices[VOICES[0], 0]
    windows = [(0, 24000), (12000, 36000), (30000, 40000), (500, 3000)]
    got = enc.embed_windows(wav, windows)
    for row, (a, b) in enumerate(windows):
        piece = wav[a:b] if b - a >= 8000 else np.resize(wav[a:b], 8000)  # repeat-padded
        feats = features.wespeaker_features(piece)
        expected = (feats**2).mean(axis=0) @ proj
        np.testing.assert_allclose(got[row], expected / np.linalg.norm(expected), atol=1e-5)


def test_wrong_onnx_is_refused_and_nothing_installed(tmp_path: Path) -> None:
    _tiny_wespeaker(tmp_path / "flat.onnx", input_rank=2)
    with pytest.raises(CheckpointFormatError, match="WeSpeaker"):
        install_speaker_model(str(tmp_path / "flat.onnx"), root=tmp_path / "store")
    assert list_speaker_models(tmp_path / "store") == []
    assert not [p for p in (tmp_path / "store").glob("*") if not p.name.startswith(".")]


def test_legacy_format_header_is_checked(tmp_path: Path) -> None:
    """Torch's legacy stream (what Resemblyzer ships): every pickle in it is restricted."""
    (tmp_path / "bad.pt").write_bytes(pickle.dumps(12345, 2) + struct.pack("<q", 0))
    with pytest.raises(CheckpointFormatError, match="magic"):
        read_torch_checkpoint(tmp_path / "bad.pt")
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            import os

            return (os.system, (f"touch {marker}",))

    (tmp_path / "evil.pt").write_bytes(pickle.dumps(Evil(), 2))
    with pytest.raises(CheckpointFormatError):
        read_torch_checkpoint(tmp_path / "evil.pt")
    assert not marker.exists()
    # A truncated copy of the real checkpoint fails cleanly.
    checkpoint = find_resemblyzer_checkpoint()
    if checkpoint is not None:
        (tmp_path / "cut.pt").write_bytes(checkpoint.read_bytes()[:1_000_000])
        with pytest.raises(CheckpointFormatError):
            read_torch_checkpoint(tmp_path / "cut.pt")
