"""Equality of ``speakers/segmentation.py`` with pyannote.audio 4.0.7's own pipeline.

Both run community-1's recipe (segmentation-3.0 powerset + WeSpeaker ResNet34 + PLDA + VBx) on
the same weights: seeded random PyanNet (4 LSTM layers, the checkpoint's shape) and WeSpeaker
ResNet34, exported to ONNX for ours; a fabricated PLDA (orthonormal LDA, identity ``tr``,
spread ``psi``). Random weights are degenerate, so the segmentation classifier is scaled
(powerset classes vary across frames) and the AHC threshold lowered (several clusters; the
same value on both sides). Per clip it compares frame by frame: (a) binary segmentations,
(b) speaker count, (c) cluster assignments of the (chunk, speaker) pairs up to a
permutation, (d) the discrete diarization and the exclusive one (up to a permutation), and
times both per minute of audio. Sabotage runs change one step of ours (no overlap masking,
no PLDA/VBx, a 2 s step) and must fall below the tolerance.

    /work/main/.venv/bin/python bench/segmentation_equal.py [--pyannote-python PY] [--out DIR]
        [--clips a.wav ...] [--seconds N]

The pyannote side runs as ``PY bench/segmentation_equal.py --pyannote-side DIR --clips ...``
(default PY: ``$DESKSCRIBE_PYANNOTE_PYTHON``, ``.pyannote-env/bin/python``, then
``/work/pyannote-env/bin/python``); its weights and outputs are kept in DIR and reused.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EVAL = ROOT.parent / "shared" / "eval"
SEED = 7
SEG_SCALE = 5.0  # the segmentation classifier's standardised weights times this
# Target shares of the powerset classes: none, 1, 2, 3, 1+2, 1+3, 2+3.
CLASS_SHARE = [0.2, 0.2, 0.18, 0.17, 0.09, 0.08, 0.08]
THRESHOLD = 0.15  # AHC threshold (community-1: 0.6), both sides
TOLERANCE = 0.99  # share of frames that must agree
SABOTAGE = {
    "overlap": {"exclude_overlap": False},
    "no-plda": {"plda": False},
    "step-2s": {"step": 2.0},
}
VERSION = 2  # of the weights and the pyannote outputs kept in the folder


def default_clips() -> list[Path]:
    return [*sorted((EVAL / "ami").glob("*.wav")), EVAL / "two-speakers.wav"]


def pyannote_python() -> str | None:
    for candidate in (
        os.environ.get("DESKSCRIBE_PYANNOTE_PYTHON"),
        str(ROOT / ".pyannote-env" / "bin" / "python"),
        "/work/pyannote-env/bin/python",
    ):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def read_audio(path: Path, seconds: float | None) -> np.ndarray:
    from scipy.io import wavfile  # in both environments

    rate, data = wavfile.read(str(path))
    assert rate == 16000, path
    if data.dtype == np.int16:
        data = data / 32768.0
    audio = (data.mean(axis=1) if data.ndim == 2 else data).astype(np.float32)
    return audio[: int(seconds * rate)] if seconds else audio


# --------------------------------------------------------------------------- pyannote side


def pyannote_side(folder: Path, clips: list[Path], seconds: float | None) -> None:
    """Seeded weights -> ONNX + PLDA in ``folder``; pyannote's stages per clip as npz."""
    os.environ.setdefault("PYANNOTE_METRICS_ENABLED", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import warnings

    warnings.filterwarnings("ignore")
    import torch
    from pyannote.audio.core.plda import PLDA
    from pyannote.audio.core.task import Problem, Resolution, Specifications
    from pyannote.audio.models.embedding import WeSpeakerResNet34
    from pyannote.audio.models.segmentation import PyanNet
    from pyannote.audio.pipelines import SpeakerDiarization

    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    folder.mkdir(parents=True, exist_ok=True)
    seg = PyanNet(lstm={"num_layers": 4, "dropout": 0.5})
    seg.specifications = Specifications(
        problem=Problem.MONO_LABEL_CLASSIFICATION,
        resolution=Resolution.FRAME,
        duration=10.0,
        warm_up=(0.0, 0.0),
        classes=["speaker#1", "speaker#2", "speaker#3"],
        powerset_max_classes=2,
        permutation_invariant=True,
    )
    seg.setup()
    seg.eval()
    calibrate(seg, read_audio(calibration_clip(clips), 60.0))
    emb = WeSpeakerResNet34().eval()
    if not (folder / "plda.npz").exists():
        # mean1: the random model's mean embedding (of the calibration audio's windows), as
        # a real x-vector transform centres on its training mean; without it every random
        # embedding points the same way and VBx finds one speaker.
        audio = read_audio(calibration_clip(clips), 60.0)
        windows = torch.from_numpy(np.stack(windows_of(audio))[:, None])
        with torch.no_grad():
            mean1 = emb(windows).numpy().mean(axis=0).astype(np.float64)
        lda = np.linalg.qr(rng.standard_normal((256, 256)))[0][:, :128]
        np.savez(folder / "xvec_transform.npz", mean1=mean1, mean2=np.zeros(128), lda=lda)
        psi = np.sort(rng.uniform(0.5, 50.0, 128))[::-1].copy()
        np.savez(folder / "plda.npz", mu=np.zeros(128), tr=np.eye(128), psi=psi)

    class Tail(torch.nn.Module):
        def __init__(self, resnet):
            super().__init__()
            self.resnet = resnet

        def forward(self, fbank, weights=None):
            return self.resnet(fbank, weights=weights)[1]

    if not (folder / "embedding.onnx").exists():
        with torch.no_grad():
            torch.onnx.export(
                seg, (torch.zeros(1, 1, 160000),), str(folder / "segmentation.onnx"),
                dynamo=False, opset_version=17, input_names=["waveform"],
                output_names=["logits"],
                dynamic_axes={"waveform": {0: "B"}, "logits": {0: "B"}},
            )  # fmt: skip
            torch.onnx.export(
                Tail(emb.resnet), (torch.zeros(2, 998, 80), torch.ones(2, 589)),
                str(folder / "embedding.onnx"), dynamo=False, opset_version=17,
                input_names=["fbank", "weights"], output_names=["embedding"],
                dynamic_axes={"fbank": {0: "B"}, "weights": {0: "B"}, "embedding": {0: "B"}},
            )  # fmt: skip
    if not (folder / "wespeaker-plain.onnx").exists():
        # The same ResNet as WeSpeaker's own hub export has it: fbank in, embedding out, plain
        # statistics pooling (no weights). The model store turns such a file into the
        # weighted-pooling model above (``models/segmentation_build.py``); the tests compare.
        with torch.no_grad():
            torch.onnx.export(
                Tail(emb.resnet), (torch.zeros(1, 200, 80),), str(folder / "wespeaker-plain.onnx"),
                dynamo=False, opset_version=14, input_names=["feats"], output_names=["embs"],
                dynamic_axes={"feats": {0: "B", 1: "T"}, "embs": {0: "B"}},
            )  # fmt: skip
    plda = PLDA(str(folder / "xvec_transform.npz"), str(folder / "plda.npz"))
    pipe = SpeakerDiarization(
        segmentation=seg, embedding=emb, plda=plda, clustering="VBxClustering",
        embedding_exclude_overlap=True, segmentation_batch_size=32, embedding_batch_size=32,
    )  # fmt: skip
    pipe.instantiate(
        {
            "segmentation": {"min_duration_off": 0.0},
            "clustering": {"threshold": THRESHOLD, "Fa": 0.07, "Fb": 0.8},
        }
    )
    for clip in clips:
        dest = folder / f"{clip.stem}.npz"
        if dest.exists():
            continue
        audio = read_audio(clip, seconds)
        steps: dict[str, np.ndarray] = {}
        made: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        original = pipe.reconstruct

        def capture(segmentations, hard_clusters, count, original=original, made=made):
            out = original(segmentations, hard_clusters, count)
            made.append((hard_clusters.copy(), count.data[:, 0].copy(), out.data.copy()))
            return out

        def hook(step, artefact, file=None, completed=None, total=None, steps=steps):
            if completed is None and artefact is not None:
                steps[step] = np.asarray(getattr(artefact, "data", artefact))

        pipe.reconstruct = capture
        file = {"waveform": torch.from_numpy(audio[None]), "sample_rate": 16000, "uri": clip.stem}
        start = time.perf_counter()
        out = pipe(file, hook=hook)
        took = time.perf_counter() - start
        pipe.reconstruct = original
        turns = [(s.start, s.end, str(k)) for s, _, k in out.speaker_diarization.itertracks(True)]
        excl = [
            (s.start, s.end, str(k))
            for s, _, k in out.exclusive_speaker_diarization.itertracks(True)
        ]
        np.savez(
            dest,
            segmentations=steps["segmentation"],
            count=steps["speaker_counting"][:, 0],
            embeddings=steps["embeddings"],
            hard_clusters=made[0][0] if made else np.zeros((0, 3)),
            discrete=made[0][2] if made else np.zeros((0, 0)),
            exclusive=made[1][2] if made else np.zeros((0, 0)),
            turns=json.dumps(turns),
            exclusive_turns=json.dumps(excl),
            seconds=took,
            duration=len(audio) / 16000,
            version=VERSION,
        )
        print(f"pyannote {clip.stem}: {took:.1f} s", flush=True)


def calibration_clip(clips: list[Path]) -> Path:
    """The audio the random weights are fitted to: the first AMI dev clip when it is there
    (the bench and the test then share weights), else the first clip."""
    first = EVAL / "ami" / "dev00.wav"
    return first if first.exists() else clips[0]


def windows_of(audio: np.ndarray) -> list[np.ndarray]:
    """10 s windows every 5 s (the last zero-padded): the calibration audio's."""
    starts = range(0, max(len(audio) - 160000, 0) + 1, 80000)
    return [np.pad(audio[a : a + 160000], (0, max(0, a + 160000 - len(audio)))) for a in starts]


def calibrate(seg, audio: np.ndarray) -> None:
    """Give the random segmentation model's classifier varied, audio-driven classes: its
    inputs standardised (mean and spread over ``audio``), scaled by ``SEG_SCALE``, and biases
    set so the argmax classes come near ``CLASS_SHARE`` on that audio."""
    import torch

    seen: list = []
    handle = seg.classifier.register_forward_hook(lambda m, i, o: seen.append(i[0]))
    chunks = np.stack(windows_of(audio))
    with torch.no_grad():
        seg(torch.from_numpy(chunks[:, None]))
    handle.remove()
    feats = torch.cat([x.reshape(-1, x.shape[-1]) for x in seen])
    mean, std = feats.mean(0), feats.std(0) + 1e-6
    with torch.no_grad():
        w = seg.classifier.weight * SEG_SCALE / std
        b = -(w @ mean)
        target = torch.tensor(CLASS_SHARE)
        for _ in range(400):
            share = torch.bincount((feats @ w.T + b).argmax(1), minlength=7).float() / len(feats)
            b += 0.1 * (torch.log(target) - torch.log(share + 1e-3))
        seg.classifier.weight.copy_(w)
        seg.classifier.bias.copy_(b)


def run_pyannote(folder: Path, clips: list[Path], seconds: float | None, python: str) -> None:
    missing = [c for c in clips if not (folder / f"{c.stem}.npz").exists()]
    if not missing and (folder / "wespeaker-plain.onnx").exists():
        return
    cmd = [python, str(Path(__file__).resolve()), "--pyannote-side", str(folder)]
    cmd += ["--clips", *map(str, missing)] + (["--seconds", str(seconds)] if seconds else [])
    env = dict(os.environ, PYANNOTE_METRICS_ENABLED="0", HF_HUB_OFFLINE="1")
    subprocess.run(cmd, check=True, env=env)


# --------------------------------------------------------------------------- comparison


def permuted_agreement(ours: np.ndarray, theirs: np.ndarray) -> float:
    """Share of frames (rows) equal under the best relabelling of our columns."""
    n = min(len(ours), len(theirs))
    if n == 0:
        return 1.0
    k = max(ours.shape[1], theirs.shape[1])
    a = np.pad(ours[:n], ((0, 0), (0, k - ours.shape[1])))
    b = np.pad(theirs[:n], ((0, 0), (0, k - theirs.shape[1])))
    if k > 7:  # greedy column match beyond what brute force affords
        perm = [int(np.argmax([(a[:, i] == b[:, j]).mean() for i in range(k)])) for j in range(k)]
        return float(np.all(a[:, perm] == b, axis=1).mean() * n / max(len(ours), len(theirs)))
    best = max(np.all(a[:, list(p)] == b, axis=1).mean() for p in itertools.permutations(range(k)))
    return float(best * n / max(len(ours), len(theirs)))


def cluster_agreement(ours: np.ndarray, theirs: np.ndarray) -> float:
    """Share of (chunk, speaker) pairs with the same cluster under the best relabelling
    (-2, no cluster, maps to itself)."""
    if ours.shape != theirs.shape:
        return 0.0
    labels_a = sorted(set(ours.ravel()) - {-2})
    labels_b = sorted(set(theirs.ravel()) - {-2})
    k = max(len(labels_a), len(labels_b))
    a, b = ours.ravel(), theirs.ravel()
    best = 0.0
    for perm in itertools.permutations(labels_b + [None] * (k - len(labels_b)), len(labels_a)):
        mapped = a.copy().astype(object)
        for x, y in zip(labels_a, perm, strict=True):
            mapped[a == x] = y
        best = max(best, float(np.mean(mapped == b)))
        if best == 1.0:
            break
    return best if labels_a or labels_b else float(np.mean(a == b))


def compare(ours, theirs: dict) -> dict[str, float]:
    seg_a, seg_b = ours.segmentations, theirs["segmentations"]
    n = min(len(seg_a), len(seg_b))
    same_chunks = seg_a.shape == seg_b.shape
    seg = float(np.all(seg_a[:n] == seg_b[:n], axis=2).mean()) if same_chunks else 0.0
    ca, cb = ours.count, theirs["count"]
    m = min(len(ca), len(cb))
    count = float((ca[:m] == cb[:m]).sum() / max(len(ca), len(cb)))
    ea, eb = ours.embeddings, theirs["embeddings"]
    emb = float(np.mean(np.max(np.abs(ea - eb), axis=2) < 1e-3)) if ea.shape == eb.shape else 0.0
    return {
        "seg": seg,
        "emb": emb,
        "count": count,
        "clusters": cluster_agreement(ours.hard_clusters, theirs["hard_clusters"]),
        "diar": permuted_agreement(ours.discrete, theirs["discrete"]),
        "excl": permuted_agreement(ours.exclusive, theirs["exclusive"]),
        "emb_diff": float(np.nanmax(np.abs(ours.embeddings - theirs["embeddings"])))
        if ours.embeddings.shape == theirs["embeddings"].shape
        else float("nan"),
    }


def run_ours(folder: Path, clips, seconds, variants) -> dict[str, dict[str, dict[str, float]]]:
    sys.path.insert(0, str(ROOT / "src"))
    from deskscribe.speakers.segmentation import SegmentationOptions, SegmentationPipeline

    pipe = SegmentationPipeline(folder / "segmentation.onnx", folder / "embedding.onnx", folder)
    results: dict[str, dict[str, dict[str, float]]] = {}
    for clip in clips:
        theirs = dict(np.load(folder / f"{clip.stem}.npz"))
        audio = read_audio(clip, seconds)
        for name, change in variants.items():
            opts = SegmentationOptions(threshold=THRESHOLD, **change)
            start = time.perf_counter()
            ours = pipe(audio, opts)
            took = time.perf_counter() - start
            row = compare(ours, theirs)
            minutes = len(audio) / 16000 / 60
            row.update(
                ours_s_per_min=took / minutes,
                pyannote_s_per_min=float(theirs["seconds"]) / minutes,
                speakers=len(ours.labels),
                pyannote_speakers=len({t[2] for t in json.loads(str(theirs["turns"]))}),
            )
            results.setdefault(name, {})[clip.stem] = row
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pyannote-side", type=Path, help="(internal) run pyannote into DIR")
    parser.add_argument("--pyannote-python", default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "segmentation-equal")
    parser.add_argument("--clips", nargs="*", type=Path, default=None)
    parser.add_argument("--seconds", type=float, default=None, help="only the first N seconds")
    parser.add_argument("--no-sabotage", action="store_true")
    args = parser.parse_args()
    clips = args.clips or default_clips()
    if args.pyannote_side:
        pyannote_side(args.pyannote_side, clips, args.seconds)
        return
    python = args.pyannote_python or pyannote_python()
    if python is None:
        sys.exit("no pyannote env: run scripts/pyannote_env.sh or set DESKSCRIBE_PYANNOTE_PYTHON")
    run_pyannote(args.out, clips, args.seconds, python)
    variants = {"ours": {}} | ({} if args.no_sabotage else SABOTAGE)
    results = run_ours(args.out, clips, args.seconds, variants)
    keys = ("seg", "count", "emb", "clusters", "diar", "excl")
    print(
        f"tolerance: >= {100 * TOLERANCE:.0f} % of frames; emb: share of (chunk, speaker)"
        " embeddings within 1e-3 of pyannote's; emb_diff = max |ours - pyannote|"
    )
    for name, rows in results.items():
        print(f"\n== {name}")
        print(
            "clip      "
            + " ".join(f"{k:>8}" for k in keys)
            + "  emb_diff  spk(ours/pa)  s/min ours  s/min pa"
        )
        for clip, r in rows.items():
            print(
                f"{clip:<10}"
                + " ".join(f"{100 * r[k]:8.2f}" for k in keys)
                + f"  {r['emb_diff']:.1e}  {r['speakers']:>3}/{r['pyannote_speakers']:<3}"
                + f"       {r['ours_s_per_min']:6.1f}    {r['pyannote_s_per_min']:6.1f}"
            )
        mean = {k: np.mean([r[k] for r in rows.values()]) for k in keys}
        low = {k: np.min([r[k] for r in rows.values()]) for k in keys}
        print("mean      " + " ".join(f"{100 * mean[k]:8.2f}" for k in keys))
        print("min       " + " ".join(f"{100 * low[k]:8.2f}" for k in keys))
        passed = all(low[k] >= TOLERANCE for k in ("diar", "excl"))
        print(f"final frames >= tolerance on every clip: {passed}")
    (args.out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
