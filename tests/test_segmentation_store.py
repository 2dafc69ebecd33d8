"""The overlap-aware speaker models from the hub into the store, and what files and the live
pass at Stop do with them.

The weights are the equality bench's (seeded random segmentation-3.0 and WeSpeaker ResNet34,
a fabricated PLDA: ``pyannote_weights.py``), served by a real local hub as the three
repositories the catalog names, the PLDA's gated. WeSpeaker's hub file pools every frame
alike: the store rewrites its pooling into pyannote's weighted one, which must give what
pyannote's own weighted model gives. Then real speech (18 s of an AMI meeting) through
Whisper tiny.en, ``label_file`` and ``label_recording``: labels from the segmentation
pipeline, words said under a second voice marked, "[overlapping]" in the subtitles; live
revisions that run only the new windows and label as one pass over the whole would.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import EVAL, run_cli
from deskscribe.models.catalog import SEGMENTATION_CATALOG
from deskscribe.models.download import GatedError
from deskscribe.models.install import install_segmentation_model
from deskscribe.models.segmentation_build import weighted_pooling
from deskscribe.models.store import find_segmentation_model, list_models
from deskscribe.speakers.convert import CheckpointFormatError
from deskscribe.speakers.diarize import DiarizeOptions, transcribe_words
from deskscribe.speakers.encoder import SpeakerEncoder
from deskscribe.speakers.features import wespeaker_features
from deskscribe.speakers.segmentation import (
    FRAME_STEP,
    SegmentationCache,
    SegmentationOptions,
    SegmentationPipeline,
    chunk_starts,
)
from gui_support import app_env  # noqa: F401 (fixture)
from hub_server import HubServer, load_repo
from pyannote_weights import equality_weights, se
from threads_support import cpu_of_other_threads_while_idle

TOKEN = "hf_accepted_conditions"
CALL = EVAL / "two-speakers.wav"  # real speech that tiny.en writes (the AMI clip is far-field)
ENTRY = SEGMENTATION_CATALOG[0]


@pytest.fixture(scope="module")
def weights() -> tuple[Path, Path]:
    return equality_weights()


def _session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _windows_and_masks(folder: Path, clip: Path) -> tuple[np.ndarray, np.ndarray]:
    """Fbank of the clip's 10 s windows and each window's first speaker track."""
    pipe = SegmentationPipeline(folder / "segmentation.onnx", folder / "embedding.onnx", folder)
    audio = se.read_audio(clip, None)
    seg = pipe.segment(audio, SegmentationOptions(step=4.0))
    fbank = np.stack(
        [wespeaker_features(audio[s : s + 160000], window="hamming") for s in (0, 64000)]
    ).astype(np.float32)
    masks = np.concatenate([seg[:2, :, 0], seg[:2, :, 1]]).astype(np.float32)
    return np.concatenate([fbank, fbank]), masks


def test_weighted_pooling_equals_pyannotes(weights, tmp_path: Path) -> None:
    folder, clip = weights
    model = weighted_pooling(onnx.load(str(folder / "wespeaker-plain.onnx")))
    onnx.save(model, tmp_path / "weighted.onnx")
    ours, theirs = _session(tmp_path / "weighted.onnx"), _session(folder / "embedding.onnx")
    fbank, masks = _windows_and_masks(folder, clip)
    masks[0] = 1.0  # every frame, as the plain model pools
    a = ours.run(None, dict(zip([i.name for i in ours.get_inputs()], (fbank, masks), strict=True)))[
        0
    ]
    b = theirs.run(None, {"fbank": fbank, "weights": masks})[0]
    assert np.abs(a - b).max() < 1e-5 * max(1.0, np.abs(b).max())
    # The weights change the embedding (a transform that ignored them would pass above).
    plain = _session(folder / "wespeaker-plain.onnx").run(None, {"feats": fbank})[0]
    assert np.abs(plain[1] - a[1]).max() > 1e-3


def _tstp_model(channels: int = 4, bins: int = 20) -> onnx.ModelProto:
    """A speaker model laid out as WeSpeaker's own export: fbank [B, T, 80] to [B, C, F, T],
    TSTP statistics (mean, and sqrt(var + 1e-7) as torch.var exports), flatten, linear."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 2 * channels * bins)).astype(np.float32)

    def c(name, value):
        return numpy_helper.from_array(np.asarray(value), name)

    nodes = [
        helper.make_node("Transpose", ["feats"], ["t"], perm=[0, 2, 1]),
        helper.make_node("Reshape", ["t", "shape4"], ["x"]),
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1], keepdims=0),
        helper.make_node("ReduceMean", ["x"], ["m1"], axes=[-1], keepdims=1),
        helper.make_node("Sub", ["x", "m1"], ["d"]),
        helper.make_node("Mul", ["d", "d"], ["d2"]),
        helper.make_node("ReduceMean", ["d2"], ["vb"], axes=[-1], keepdims=0),
        helper.make_node("Shape", ["x"], ["xs"], start=-1),
        helper.make_node("Cast", ["xs"], ["n"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["n", "one"], ["n1"]),
        helper.make_node("Div", ["n", "n1"], ["corr"]),
        helper.make_node("Mul", ["vb", "corr"], ["var"]),
        helper.make_node("Add", ["var", "tiny"], ["var2"]),
        helper.make_node("Sqrt", ["var2"], ["std"]),
        helper.make_node("Flatten", ["mean"], ["mf"], axis=1),
        helper.make_node("Flatten", ["std"], ["sf"], axis=1),
        helper.make_node("Concat", ["mf", "sf"], ["stats"], axis=1),
        helper.make_node("Gemm", ["stats", "w"], ["embs"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tstp",
        [helper.make_tensor_value_info("feats", TensorProto.FLOAT, ["B", "T", 80])],
        [helper.make_tensor_value_info("embs", TensorProto.FLOAT, ["B", 8])],
        [
            c("shape4", np.array([0, channels, bins, -1], np.int64)),
            c("one", np.float32(1.0)),
            c("tiny", np.float32(1e-7)),
            c("w", w),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    onnx.checker.check_model(model)
    return model


def test_weighted_pooling_of_wespeaker_layout(tmp_path: Path) -> None:
    """WeSpeaker's TSTP pools a [B, C, F, T] tensor; the weights are resized to T by nearest
    neighbour (as torch's interpolate) and applied to every (C, F)."""
    model = _tstp_model()
    onnx.save(weighted_pooling(model), tmp_path / "w.onnx")
    rng = np.random.default_rng(5)
    feats = rng.standard_normal((2, 37, 80)).astype(np.float32)
    weights = (rng.random((2, 589)) > 0.4).astype(np.float32)
    got = _session(tmp_path / "w.onnx").run(None, {"feats": feats, "weights": weights})[0]
    x = feats.transpose(0, 2, 1).reshape(2, 4, 20, 37).astype(np.float64)
    w = weights[:, (np.arange(37) * 589 / 37).astype(int)][:, None, None, :]
    v1 = w.sum(-1) + 1e-8
    mean = (x * w).sum(-1) / v1
    var = (w * (x - mean[..., None]) ** 2).sum(-1) / (v1 - (w**2).sum(-1) / v1 + 1e-8)
    stats = np.concatenate([mean.reshape(2, -1), np.sqrt(var).reshape(2, -1)], axis=1)
    gemm = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "w"))
    assert np.abs(got - stats @ gemm.T).max() < 1e-4
    # With every frame weighted alike it is the model's own embedding.
    ones = np.ones((2, 589), np.float32)
    got1 = _session(tmp_path / "w.onnx").run(None, {"feats": feats, "weights": ones})[0]
    onnx.save(model, tmp_path / "plain.onnx")
    plain = _session(tmp_path / "plain.onnx").run(None, {"feats": feats})[0]
    assert np.abs(got1 - plain).max() < 1e-4


def test_model_without_statistics_pooling_is_refused() -> None:
    graph = helper.make_graph(
        [helper.make_node("ReduceMax", ["feats"], ["embs"], axes=[1], keepdims=0)],
        "no-pooling",
        [helper.make_tensor_value_info("feats", TensorProto.FLOAT, ["B", "T", 80])],
        [helper.make_tensor_value_info("embs", TensorProto.FLOAT, ["B", 80])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    with pytest.raises(CheckpointFormatError, match="pooling"):
        weighted_pooling(model)


# --------------------------------------------------------------------------- from the hub


@pytest.fixture(scope="module")
def hub(weights, tmp_path_factory):
    """The catalog's three repositories on a local hub, the PLDA's gated."""
    folder, _ = weights
    root = tmp_path_factory.mktemp("segmentation-hub")
    seg, emb, plda = (root / str(i) for i in range(3))
    (seg / "onnx").mkdir(parents=True)
    shutil.copy(folder / "segmentation.onnx", seg / ENTRY.segmentation.files[0])
    emb.mkdir()
    shutil.copy(folder / "wespeaker-plain.onnx", emb / ENTRY.embedding.files[0])
    (plda / "plda").mkdir(parents=True)
    for f in ("xvec_transform.npz", "plda.npz"):
        shutil.copy(folder / f, plda / "plda" / f)
    (plda / "config.yaml").write_text("pipeline: community-1\n")
    repos = [
        load_repo(ENTRY.segmentation.repo_id, seg, lfs=("*.onnx",)),
        load_repo(ENTRY.embedding.repo_id, emb, lfs=("*.onnx",)),
        load_repo(ENTRY.plda.repo_id, plda, lfs=("*.npz",)),
    ]
    with HubServer(repos) as server:
        server.gated[ENTRY.plda.repo_id] = TOKEN
        yield server


@pytest.fixture(scope="module")
def store(hub, weights, tmp_path_factory) -> Path:
    """A model store with the overlap-aware models installed from the hub by the CLI."""
    root = tmp_path_factory.mktemp("store")
    out = run_cli(
        ["models", "download", "community-1", "--endpoint", hub.url, "--token", TOKEN], root
    )
    assert out.returncode == 0, out.stderr
    return root


def test_gated_plda_needs_the_token(hub, tmp_path: Path) -> None:
    with pytest.raises(GatedError) as err:
        install_segmentation_model("community-1", root=tmp_path, endpoint=hub.url)
    message = str(err.value)
    assert ENTRY.plda.repo_id in message and "hf auth login" in message and "--token" in message
    assert find_segmentation_model(tmp_path) is None  # nothing half-installed is listed


def test_installed_from_the_hub(store: Path, weights) -> None:
    folder, clip = weights
    installed = find_segmentation_model(store)
    assert installed is not None and installed.name == ENTRY.folder
    manifest = json.loads((installed / "manifest.json").read_text())
    assert manifest["task"] == "speaker-segmentation"
    assert set(manifest["sources"]) == {p.repo_id for p in ENTRY.parts}
    assert not list((store / ".downloads").glob("*/*.onnx"))  # the downloads are dropped
    # The installed embedding model is pyannote's weighted one.
    ours, theirs = _session(installed / "embedding.onnx"), _session(folder / "embedding.onnx")
    fbank, masks = _windows_and_masks(folder, clip)
    a = ours.run(None, dict(zip([i.name for i in ours.get_inputs()], (fbank, masks), strict=True)))[
        0
    ]
    b = theirs.run(None, {"fbank": fbank, "weights": masks})[0]
    assert np.abs(a - b).max() < 1e-5 * max(1.0, np.abs(b).max())
    listed = run_cli(["models", "list"], store)
    lines = [line for line in listed.stdout.splitlines() if ENTRY.folder in line]
    assert len(lines) == 1 and "speakers/overlap" in lines[0], listed.stdout
    # Not a Whisper model: never picked to transcribe with.
    assert ENTRY.folder not in [m.name for m in list_models(store)]


# --------------------------------------------------------------------------- files, Stop


@pytest.fixture
def with_store(store: Path, monkeypatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("DESKSCRIBE_MODELS_DIR", str(store))
    monkeypatch.setenv("DESKSCRIBE_SETTINGS", str(tmp_path / "settings.json"))
    return find_segmentation_model(store)


@pytest.fixture(scope="module")
def encoder(speaker_model: Path) -> SpeakerEncoder:
    return SpeakerEncoder(speaker_model, device="cpu")


def _two_voices(installed: Path, clip: Path):
    pipe = SegmentationPipeline(
        installed / "segmentation.onnx", installed / "embedding.onnx", installed
    )
    return pipe(se.read_audio(clip, None), SegmentationOptions(num_speakers=2))


def _check_overlap_marks(transcript, expected) -> None:
    """Marked words are those said while the segmentation heard two or more voices."""
    several = expected.discrete.sum(axis=1) >= 2
    times = np.arange(len(several)) * FRAME_STEP

    def heard_two(a: float, b: float) -> bool:
        return bool(several[(times >= a - FRAME_STEP) & (times <= b + FRAME_STEP)].any())

    words = [w for s in transcript.segments for w in s.words]
    marked = [w for w in words if w.overlap]
    assert marked, "no word marked, though the segmentation heard two voices at once"
    assert len(marked) < len(words)
    assert all(heard_two(w.start, w.end) for w in marked)
    alone = [w for w in words if not heard_two(w.start - 0.05, w.end + 0.05)]
    assert alone and not any(w.overlap for w in alone)


def test_file_labels_with_overlap(with_store, weights, tiny_model, encoder, tmp_path) -> None:
    from deskscribe.service.speakers import label_file
    from deskscribe.transcript.export import render

    clip = CALL
    expected = _two_voices(with_store, clip)
    warnings: list[str] = []
    options = DiarizeOptions(num_speakers=2)
    transcript = label_file(tiny_model, clip, encoder, options, warn=warnings.append)
    assert warnings == []
    got = [(round(t.start, 3), round(t.end, 3)) for t in transcript.turns]
    want = [(round(t.start, 3), round(t.end, 3)) for t in expected.diarization.turns]
    assert got == want  # the exclusive timeline of the segmentation pipeline
    assert len(transcript.speaker_ids()) == 2
    _check_overlap_marks(transcript, expected)
    srt, vtt = render(transcript, "srt"), render(transcript, "vtt")
    assert "[overlapping]" in srt and "[overlapping]" in vtt
    assert "[overlapping]" in render(transcript, "txt")
    import io

    import docx

    paragraphs = docx.Document(io.BytesIO(render(transcript, "docx"))).paragraphs
    marked = [p.text for p in paragraphs if "[overlapping]" in p.text]
    overlapped = [s for s in transcript.segments if any(w.overlap for w in s.words)]
    assert len(marked) == len(overlapped) > 0

    # "voices": the voice encoder's pipeline, which cannot hear overlap.
    from deskscribe import settings

    settings.set_value("speaker_pipeline", "voices")
    by_voice = label_file(tiny_model, clip, encoder, options)
    assert not any(w.overlap for s in by_voice.segments for w in s.words)
    assert [(t.start, t.end) for t in by_voice.turns] != [
        (t.start, t.end) for t in transcript.turns
    ]
    assert "[overlapping]" not in render(by_voice, "srt")


def test_broken_model_falls_back_to_voices(
    with_store, weights, tiny_model, encoder, monkeypatch, tmp_path
) -> None:
    from deskscribe.service.speakers import label_file

    clip = CALL
    broken = tmp_path / "store"
    shutil.copytree(with_store.parent / with_store.name, broken / with_store.name)
    (broken / with_store.name / "embedding.onnx").write_bytes(b"not a model")
    monkeypatch.setenv("DESKSCRIBE_MODELS_DIR", str(broken))
    warnings: list[str] = []
    transcript = label_file(tiny_model, clip, encoder, DiarizeOptions(), warn=warnings.append)
    assert len(warnings) == 1 and "labelled by voice instead" in warnings[0], warnings
    assert transcript.turns and transcript.speaker_ids()


def test_pass_at_stop_uses_it_within_its_time(
    with_store, weights, tiny_model, encoder, monkeypatch
) -> None:
    import deskscribe.service.speakers as service

    clip = CALL
    transcript, audio = transcribe_words(tiny_model, clip)
    expected = _two_voices(with_store, clip)
    options = DiarizeOptions(num_speakers=2)
    labelled = service.label_recording(transcript, audio, encoder, options=options)
    assert [(t.start, t.end) for t in labelled.turns] == [
        (t.start, t.end) for t in expected.diarization.turns
    ]
    _check_overlap_marks(labelled, expected)
    # Past its time the pass labels by voice: still labels, none of the overlap ones.
    monkeypatch.setattr(service, "SEGMENTATION_AT_STOP_SECONDS", 0.0)
    quick = service.label_recording(transcript, audio, encoder, options=options)
    assert quick.turns and not any(w.overlap for s in quick.segments for w in s.words)


# --------------------------------------------------------------------------- live


def _windows(samples: int) -> int:
    return len(chunk_starts(samples, 16000, 160000))


def _whole_windows(samples: int) -> int:
    return (samples - 160000) // 16000 + 1 if samples >= 160000 else 0


def test_growing_passes_equal_one_pass(weights) -> None:
    """Passes over a growing recording run only the windows they have not seen whole, and end
    where one pass over the whole recording does; another recording starts again."""
    folder, _ = weights
    pipe = SegmentationPipeline(folder / "segmentation.onnx", folder / "embedding.onnx", folder)
    audio = se.read_audio(CALL, None)
    options = SegmentationOptions(num_speakers=2)
    cache = SegmentationCache()
    seen = 0
    for seconds in (12.0, 21.5, len(audio) / 16000):
        samples = int(seconds * 16000)
        grown = pipe(audio[:samples], options, cache=cache)
        assert cache.computed == _windows(samples) - _whole_windows(seen), seconds
        seen = samples
    whole = pipe(audio, options)
    assert grown.segmentations.shape == whole.segmentations.shape
    assert np.array_equal(grown.segmentations, whole.segmentations)
    assert np.allclose(grown.embeddings, whole.embeddings, rtol=1e-5, atol=1e-6)
    assert np.array_equal(grown.discrete, whole.discrete)
    assert np.array_equal(grown.exclusive, whole.exclusive)
    # Other samples where the cache looked (a new session in the same track): from scratch.
    pipe(audio[: 12 * 16000] * 0.5, options, cache=cache)
    assert cache.computed == _windows(12 * 16000)


def _partition_equal(a: dict, b: dict) -> bool:
    """The same words grouped alike (the names may differ)."""
    pairs = {(a[k], b.get(k)) for k in a}
    return a.keys() == b.keys() and len(pairs) == len({x for x, _ in pairs}) == len(
        {y for _, y in pairs}
    )


def _live_session(tiny_model, encoder, options: DiarizeOptions):
    """The call transcribed, its words labelled live and published to a ``TranscriptStore``
    as a live session does: (transcript, audio, labeller, store, growing track)."""
    from deskscribe.service.live.store import TranscriptStore
    from deskscribe.speakers.growing import GrowingTrack
    from deskscribe.speakers.online import LiveSpeakerLabeller
    from deskscribe.transcript import Segment
    from deskscribe.whisper.streaming import StreamUpdate

    transcript, audio = transcribe_words(tiny_model, CALL)
    labeller, store = LiveSpeakerLabeller(["system"], encoder), TranscriptStore()
    labeller.add_audio({"system": audio})
    for i, seg in enumerate(transcript.segments):
        words = [dataclasses.replace(w) for w in seg.words]
        labeller.label(words)
        store.publish(StreamUpdate(segments=[
            Segment(seg.start, seg.end, seg.text, words=words, id=i, speaker=words[0].speaker)
        ]))  # fmt: skip
    return transcript, audio, labeller, store, GrowingTrack(encoder, options)


def test_live_revisions_use_it_while_it_keeps_up(with_store, weights, tiny_model, encoder) -> None:
    from deskscribe.service.live.relabel import revise_labels
    from deskscribe.service.live.store import word_key
    from deskscribe.service.speakers import label_recording
    from deskscribe.speakers.assign import assign_speakers
    from deskscribe.speakers.growing import GrowingTrack
    from deskscribe.transcript import Transcript

    options = DiarizeOptions(num_speakers=2)
    transcript, audio, labeller, store, growing = _live_session(tiny_model, encoder, options)
    pipe = SegmentationPipeline(
        with_store / "segmentation.onnx", with_store / "embedding.onnx", with_store
    )

    def revise(samples: np.ndarray, share: float):
        """One revision over ``samples``: (what it was given, the labels shown after it)."""
        snap = store.snapshot(language="en", duration=len(samples) / 16000, source=None, model="")
        revise_labels(store, snap, samples, labeller, 20, None, growing, share)
        shown = store.snapshot(language="en", duration=len(samples) / 16000, source=None, model="")
        return snap, {word_key(w): w.speaker for s in shown.segments for w in s.words}

    def one_pass(samples: np.ndarray, snap):
        """The pipeline's result over ``samples`` in one pass, and the labels it gives."""
        once = pipe(samples, SegmentationOptions(num_speakers=2))
        want = assign_speakers(Transcript(segments=snap.segments), once.diarization)
        return once, {word_key(w): w.speaker for s in want.segments for w in s.words}

    cache = growing.segmentation
    snap, shown = revise(audio[: 18 * 16000], share=100.0)
    assert cache.seen == 18 * 16000 and cache.computed == _windows(18 * 16000)
    assert _partition_equal(shown, one_pass(audio[: 18 * 16000], snap)[1])
    assert len(set(shown.values())) == 2
    snap, shown = revise(audio, share=100.0)
    assert cache.computed == _windows(len(audio)) - _whole_windows(18 * 16000)
    once, want = one_pass(audio, snap)
    assert _partition_equal(shown, want) and cache.keeps_up
    # The pass at Stop reuses the windows (the call is 30 s: every window is whole).
    at_stop = label_recording(transcript, audio, encoder, growing=growing, options=options)
    assert cache.computed == 0
    assert [(t.start, t.end) for t in at_stop.turns] == [
        (t.start, t.end) for t in once.diarization.turns
    ]
    # A pass that costs more than its share of the new audio hands the revisions to voices.
    more = np.concatenate([audio, audio[: 4 * 16000]])
    revise(more, share=0.0)
    assert not cache.keeps_up
    computed = cache.computed
    snap, shown = revise(more, share=100.0)
    assert cache.computed == computed  # the pipeline did not run
    voices = GrowingTrack(encoder, options).diarize(more)
    by_voice = assign_speakers(Transcript(segments=snap.segments), voices)
    assert _partition_equal(shown, {word_key(w): w.speaker for s in by_voice.segments
                                    for w in s.words})  # fmt: skip


def test_live_revisions_try_a_broken_model_once(
    with_store, weights, tiny_model, encoder, monkeypatch, tmp_path, caplog
) -> None:
    """A folder that cannot load is said once per session, not at every revision (each would
    also try to load it again), and the revisions label by voice."""
    from deskscribe.service.live.relabel import revise_labels

    broken = tmp_path / "store"
    shutil.copytree(with_store, broken / with_store.name)
    (broken / with_store.name / "embedding.onnx").write_bytes(b"not a model")
    monkeypatch.setenv("DESKSCRIBE_MODELS_DIR", str(broken))
    _, audio, labeller, store, growing = _live_session(
        tiny_model, encoder, DiarizeOptions(num_speakers=2)
    )
    for seconds in (15, 30):
        snap = store.snapshot(language="en", duration=seconds, source=None, model="")
        revise_labels(store, snap, audio[: seconds * 16000], labeller, 20, None, growing, 100.0)
    said = [r for r in caplog.records if "cannot be loaded" in r.getMessage()]
    assert len(said) == 1 and not growing.segmentation.keeps_up
    assert growing.segmentation.seen == 0  # the pipeline never ran
    shown = store.snapshot(language="en", duration=30, source=None, model="")
    assert len({w.speaker for s in shown.segments for w in s.words}) == 2  # by voice


# --------------------------------------------------------------------------- in the app


def test_models_page_installs_it(qtbot, app_env, hub, monkeypatch) -> None:  # noqa: F811
    """Models → Transcription lists community-1 with its licences and the gated part; a
    download without the hub's consent says how to get it; with it, the models install and
    are listed as speaker labels with overlap."""
    from deskscribe.gui.context import AppContext
    from deskscribe.gui.models_panel import ModelsPanel

    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    panel = ModelsPanel(AppContext())
    qtbot.addWidget(panel)
    panel.resize(905, 600)
    panel.show()
    qtbot.waitUntil(lambda: panel.catalog.rowCount() > 0, timeout=20_000)
    row = next(
        r for r in range(panel.catalog.rowCount())
        if panel.catalog.item(r, 0).text().startswith(ENTRY.id)
    )  # fmt: skip
    tip = panel.catalog.item(row, 0).toolTip()
    assert ENTRY.plda.repo_id in tip and "gated" in tip and "CC-BY-4.0" in tip
    panel.catalog.selectRow(row)
    panel.download_btn.click()
    qtbot.waitUntil(lambda: panel.banner.kind == "error", timeout=60_000)
    assert "gated" in panel.banner.text.text() and "hf auth login" in panel.banner.text.text()
    assert find_segmentation_model(app_env.store) is None
    token = hub.gated.pop(ENTRY.plda.repo_id)  # as after `hf auth login` on the real hub
    try:
        panel.catalog.selectRow(row)
        panel.download_btn.click()
        qtbot.waitUntil(lambda: "is installed" in panel.banner.text.text(), timeout=120_000)
    finally:
        hub.gated[ENTRY.plda.repo_id] = token
    assert find_segmentation_model(app_env.store) is not None
    qtbot.waitUntil(
        lambda: any(
            "with overlap" in (panel.table.item(r, 1).text() if panel.table.item(r, 1) else "")
            for r in range(panel.table.rowCount())
        ),
        timeout=20_000,
    )


def test_segmentation_sessions_do_not_keep_a_core_busy(weights) -> None:
    """The speaker stage of one file runs while another file is transcribed: its sessions'
    threads sleep after a run, as the engine's do. Real windows of the call through the
    segmentation model; the same model in a session with ONNX Runtime's defaults (spinning
    threads) is the control."""
    folder, clip = weights
    pipe = SegmentationPipeline(folder / "segmentation.onnx", folder / "embedding.onnx", folder)
    audio = se.read_audio(clip, None)[: 16000 * 12]
    options = SegmentationOptions(step=4.0)
    ours = cpu_of_other_threads_while_idle(lambda: pipe.segment(audio, options), times=8)
    spinning = _session(folder / "segmentation.onnx")
    name = spinning.get_inputs()[0].name
    window = np.ascontiguousarray(audio[None, None, :160000], dtype=np.float32)
    control = cpu_of_other_threads_while_idle(lambda: spinning.run(None, {name: window}), times=8)
    assert control > 0.03, f"the spinning control burnt only {control:.3f} CPU-s: cannot tell"
    assert ours < 0.25 * control, (
        f"the segmentation sessions burnt {ours:.3f} CPU-s while idle (spinning: {control:.3f})"
    )
