"""Speaker labels with overlap: pyannote's community-1 recipe on numpy and ONNX Runtime.

pyannote.audio 4.0's ``speaker-diarization-community-1`` pipeline, step for step, without
PyTorch (``bench/segmentation_equal.py`` and ``tests/test_segmentation_equal.py`` run
pyannote's own pipeline on the same weights and compare every stage):

1. 10 s windows every 1 s (the last one zero-padded) through the segmentation model
   (segmentation-3.0: 589 frames, a powerset of up to 3 local speakers, 2 at once); the
   argmax class as 3 binary speaker tracks;
2. the number of speakers per frame: the binary tracks summed, averaged over the windows that
   cover the frame, rounded;
3. one WeSpeaker embedding per (window, local speaker), pooled over that speaker's frames with
   the overlapped frames left out (unless that leaves 2 frames or fewer); the model's Kaldi
   fbank (Hamming window) is computed here (``features.py``);
4. embeddings of speakers alone for at least 20 % of their window clustered: AHC (centroid
   linkage on unit vectors, threshold 0.6) as the start of VBx (PLDA space, Fa 0.07, Fb 0.8,
   20 iterations); each cluster's centroid is its responsibility-weighted mean embedding;
5. every (window, speaker) to a centroid by cosine, no two speakers of a window to one
   centroid (the best one-to-one assignment);
6. per frame, the ``count`` clusters with the highest summed activity are on; turns between
   frame middles; the exclusive timeline (one speaker per frame, what words are given from)
   is the same with the count capped at 1.

A fixed or bounded speaker count that VBx does not meet re-clusters with k-means, as
pyannote does; pyannote uses scikit-learn's (random_state 42), which is not reproduced here:
ours is deterministic (farthest-point start, Lloyd iterations), so only that case may differ.
scipy is imported for the AHC (``linkage``/``fcluster``, whose tie and inversion handling
pyannote's result depends on); everything else is numpy.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..audio_format import SAMPLE_RATE
from ..errors import Progress
from .diarize import Diarization, DiarizationCancelled, Turn
from .features import wespeaker_features

WINDOW_SECONDS = 10.0
# The segmentation model's output frames (pyannote's receptive field of SincNet + pools).
FRAME_STEP = 270 / SAMPLE_RATE
FRAME_DURATION = 991 / SAMPLE_RATE
# Powerset classes of 3 speakers, at most 2 at once, in pyannote's order.
POWERSET = np.array(
    [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [1, 0, 1], [0, 1, 1]], np.float32
)
MIN_EMBEDDING_SAMPLES = 400  # the shortest input WeSpeaker ResNet34 takes


@dataclass
class SegmentationOptions:
    num_speakers: int | None = None
    min_speakers: int | None = None
    max_speakers: int | None = None
    threshold: float = 0.6  # AHC distance on unit embeddings
    fa: float = 0.07
    fb: float = 0.8
    max_iters: int = 20
    init_smoothing: float = 7.0
    min_active_ratio: float = 0.2
    step: float = 1.0  # window step, seconds
    exclude_overlap: bool = True
    plda: bool = True  # False: the AHC clusters as they are (no VBx)
    batch: int = 32


@dataclass
class SegmentationResult:
    """``diarization``: the exclusive turns (one speaker at a time) and each speaker's unit
    centroid; ``overlapping``: the turns with overlap. The rest are the stages, for checks:
    binary segmentations ``[chunks, 589, 3]``, speaker count per frame, embeddings
    ``[chunks, 3, 256]``, hard clusters ``[chunks, 3]`` (-2: none) and the discrete
    diarizations ``[frames, clusters]``."""

    diarization: Diarization
    overlapping: list[Turn]
    segmentations: np.ndarray
    count: np.ndarray
    embeddings: np.ndarray
    hard_clusters: np.ndarray
    discrete: np.ndarray
    exclusive: np.ndarray
    labels: dict[int, str] = field(default_factory=dict)


class SegmentationCache:
    """What passes over one growing recording share (a live session's revisions and its pass
    at Stop): the binary segmentations and embeddings of the windows that lay wholly inside
    the audio a pass saw. A window's outputs depend on its own samples alone and windows
    start at fixed multiples of the step, so they stay right as the recording grows; the
    zero-padded last window is computed again by the next pass. Clustering and what follows
    run on every pass (their result may change anywhere). A recording that is not the one
    seen so far (shorter, or other samples where the cache looked), or other options, start
    it again. ``computed``: the windows the last pass ran through the models."""

    PROBE = 397  # every PROBE-th sample of the covered audio is compared

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.covered = 0  # samples the kept windows span
        self.probe = np.zeros(0, np.float32)
        self.seg = np.zeros((0, 0, 0), np.float32)
        self.emb = np.zeros((0, 0, 0), np.float64)
        self.computed = 0
        self.seen = 0  # samples of the recording the last pass saw
        # False once the live revisions stopped using the pipeline (``service.live.relabel``)
        self.keeps_up = True

    def reusable(self, audio: np.ndarray, options: SegmentationOptions) -> int:
        """How many of the kept windows hold for ``audio`` (0 after starting again)."""
        key = (options.step, options.exclude_overlap)
        if (
            key != self.key
            or audio.shape[0] < self.covered
            or not np.array_equal(audio[: self.covered : self.PROBE], self.probe)
        ):
            self.__init__()
            self.key = key
            return 0
        return len(self.seg)

    def keep(self, audio: np.ndarray, options: SegmentationOptions, seg, emb, computed) -> None:
        """Keep the outputs of the windows wholly inside ``audio`` (``computed``: how many
        windows this pass ran through the models)."""
        window, step = _window_and_step(options)
        whole = whole_windows(audio.shape[0], step, window)
        self.seg, self.emb = seg[:whole].copy(), emb[:whole].copy()
        self.covered = (whole - 1) * step + window if whole else 0
        self.probe = audio[: self.covered : self.PROBE].copy()
        self.computed, self.seen = computed, audio.shape[0]


class Plda:
    """pyannote's ``vbx_setup``: x-vector transform (centre, LDA, length norms) then the
    PLDA's diagonalising transform, from ``xvec_transform.npz`` and ``plda.npz``."""

    def __init__(self, folder: str | Path):
        folder = Path(folder)
        x = np.load(folder / "xvec_transform.npz")
        p = np.load(folder / "plda.npz")
        self.mean1, self.mean2, self.lda = x["mean1"], x["mean2"], x["lda"]
        self.mu = p["mu"]
        tr, psi = p["tr"], p["psi"]
        w = np.linalg.inv(tr.T @ tr)
        b = np.linalg.inv((tr.T / psi) @ tr)
        # eigh(B, W) through W's Cholesky factor; eigenvectors normalised so v' W v = 1.
        chol = np.linalg.cholesky(w)
        inv_chol = np.linalg.inv(chol)
        acvar, u = np.linalg.eigh(inv_chol @ b @ inv_chol.T)
        wccn = inv_chol.T @ u
        self.psi = acvar[::-1]
        self.tr = wccn.T[::-1]
        self.dim = self.lda.shape[1]

    @property
    def phi(self) -> np.ndarray:
        return self.psi[: self.dim]

    def __call__(self, embeddings: np.ndarray) -> np.ndarray:
        x = _l2(embeddings - self.mean1) * np.sqrt(self.lda.shape[0])
        y = _l2(x @ self.lda - self.mean2) * np.sqrt(self.lda.shape[1])
        return ((y - self.mu) @ self.tr.T)[:, : self.dim]


def _l2(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _logsumexp(a: np.ndarray) -> np.ndarray:
    top = np.max(a, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    return np.log(np.sum(np.exp(a - top), axis=-1)) + top[..., 0]


def vbx(x, phi, fa, fb, gamma, max_iters=20, epsilon=1e-4):
    """VBx (Landini et al.) as pyannote's ``utils/vbx.py`` runs it: responsibilities
    ``gamma`` [items, speakers] and speaker priors ``pi``."""
    d = x.shape[1]
    pi = np.ones(gamma.shape[1]) / gamma.shape[1]
    g = -0.5 * (np.sum(x**2, axis=1, keepdims=True) + d * np.log(2 * np.pi))
    rho = x * np.sqrt(phi)
    previous = None
    for ii in range(max_iters):
        inv_l = 1.0 / (1 + fa / fb * gamma.sum(axis=0, keepdims=True).T * phi)
        alpha = fa / fb * inv_l * gamma.T.dot(rho)
        log_p = fa * (rho.dot(alpha.T) - 0.5 * (inv_l + alpha**2).dot(phi) + g)
        lpi = np.log(pi + 1e-8)
        log_px = _logsumexp(log_p + lpi)
        gamma = np.exp(log_p + lpi - log_px[:, None])
        pi = np.sum(gamma, axis=0)
        pi = pi / pi.sum()
        elbo = np.sum(log_px) + fb * 0.5 * np.sum(np.log(inv_l) - inv_l - alpha**2 + 1)
        if ii > 0 and elbo - previous < epsilon:
            break
        previous = elbo
    return gamma, pi


# --------------------------------------------------------------------------- stages


def _window_and_step(options: SegmentationOptions) -> tuple[int, int]:
    """A window's length and the step between windows, in samples."""
    return int(WINDOW_SECONDS * SAMPLE_RATE), round(options.step * SAMPLE_RATE)


def whole_windows(num_samples: int, step: int, window: int) -> int:
    """How many windows fit wholly in ``num_samples`` (the ones not zero-padded)."""
    return (num_samples - window) // step + 1 if num_samples >= window else 0


def chunk_starts(num_samples: int, step: int, window: int) -> list[int]:
    """pyannote's windows: every ``step`` while a whole window fits, and one more (zero-padded)
    when samples are left over or the audio is shorter than a window."""
    full = whole_windows(num_samples, step, window)
    starts = [i * step for i in range(full)]
    if num_samples < window or (num_samples - window) % step > 0:
        starts.append(full * step)
    return starts


def _chunk(audio: np.ndarray, start: int, window: int) -> np.ndarray:
    piece = audio[start : start + window]
    return np.pad(piece, (0, window - len(piece))) if len(piece) < window else piece


def _closest_frame(t: float) -> int:
    return int(np.rint((t - 0.5 * FRAME_DURATION) / FRAME_STEP))


def aggregate(scores: np.ndarray, step_seconds: float, average: bool) -> np.ndarray:
    """pyannote's ``Inference.aggregate`` (no Hamming, no warm-up, missing 0): chunk scores
    ``[chunks, 589, k]`` (NaN: absent) onto the frame grid, summed or averaged."""
    chunks, frames, k = scores.shape
    total = _closest_frame(WINDOW_SECONDS + (chunks - 1) * step_seconds + 0.5 * FRAME_DURATION) + 1
    out = np.zeros((total, k), np.float32)
    seen = np.zeros((total, k), np.float32)
    present = np.zeros((total, k), np.float32)
    for c in range(chunks):
        mask = 1 - np.isnan(scores[c])
        score = np.nan_to_num(scores[c], nan=0.0)
        a = _closest_frame(c * step_seconds + 0.5 * FRAME_DURATION)
        out[a : a + frames] += score * mask
        seen[a : a + frames] += mask
        present[a : a + frames] = np.maximum(present[a : a + frames], mask)
    if average:
        out = out / np.maximum(seen, np.finfo(np.float32).eps)
    out[present == 0.0] = 0.0
    return out


def filter_embeddings(embeddings, segmentations, min_active_ratio=0.2):
    """(chunk, speaker) pairs alone for at least ``min_active_ratio`` of the window's frames
    and with a finite embedding."""
    single = np.sum(segmentations, axis=2, keepdims=True) == 1
    clean = np.sum(segmentations * single, axis=1)
    active = clean >= min_active_ratio * segmentations.shape[1]
    valid = ~np.any(np.isnan(embeddings), axis=2)
    chunk_idx, speaker_idx = np.where(active * valid)
    return embeddings[chunk_idx, speaker_idx], chunk_idx, speaker_idx


def ahc(embeddings: np.ndarray, threshold: float) -> np.ndarray:
    """Centroid-linkage AHC of unit embeddings cut at ``threshold``: labels 0..k-1."""
    from scipy.cluster.hierarchy import fcluster, linkage

    tree = linkage(_l2(embeddings), method="centroid", metric="euclidean")
    labels = fcluster(tree, threshold, criterion="distance") - 1
    return np.unique(labels, return_inverse=True)[1]


def kmeans(x: np.ndarray, k: int, iters: int = 100) -> np.ndarray:
    """Deterministic k-means: farthest-point start from the item nearest the mean, then
    Lloyd iterations. (pyannote uses scikit-learn's seeded k-means++ here.)"""
    start = [int(np.argmin(np.linalg.norm(x - x.mean(0), axis=1)))]
    dist = np.linalg.norm(x - x[start[0]], axis=1)
    while len(start) < min(k, len(x)):
        start.append(int(np.argmax(dist)))
        dist = np.minimum(dist, np.linalg.norm(x - x[start[-1]], axis=1))
    centres = x[start]
    labels = np.zeros(len(x), int)
    for _ in range(iters):
        new = np.argmin(((x[:, None] - centres[None]) ** 2).sum(-1), axis=1)
        if _ > 0 and np.array_equal(new, labels):
            break
        labels = new
        centres = np.stack(
            [
                x[labels == j].mean(0) if np.any(labels == j) else centres[j]
                for j in range(len(centres))
            ]
        )
    return labels


def _cosine_similarity2(embeddings: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """``2 - cosine distance`` of every row to every centroid, as pyannote scores them."""
    return 2 - (1 - _l2(embeddings) @ _l2(centroids).T)


def constrained_argmax(soft: np.ndarray) -> np.ndarray:
    """Per chunk, the one-to-one speaker -> cluster assignment of highest total score
    (exhaustive: 3 local speakers); speakers left without a cluster get -2."""
    soft = np.nan_to_num(soft, nan=np.nanmin(soft))
    chunks, speakers, clusters = soft.shape
    hard = np.full((chunks, speakers), -2, np.int8)
    if speakers <= clusters:
        options = [
            (np.arange(speakers), np.array(p))
            for p in itertools.permutations(range(clusters), speakers)
        ]
    else:
        options = [
            (np.array(p), np.arange(clusters))
            for p in itertools.permutations(range(speakers), clusters)
        ]
    rows = np.array([o[0] for o in options])
    cols = np.array([o[1] for o in options])
    for c in range(chunks):
        best = int(np.argmax(soft[c][rows, cols].sum(axis=1)))
        hard[c, rows[best]] = cols[best]
    return hard


def cluster(
    embeddings: np.ndarray,
    segmentations: np.ndarray,
    plda: Plda,
    options: SegmentationOptions,
    min_clusters: int,
    max_clusters: float,
    num_clusters: int | None,
) -> tuple[np.ndarray, np.ndarray]:
    """pyannote's ``VBxClustering``: hard clusters ``[chunks, speakers]`` and centroids."""
    train, _, _ = filter_embeddings(embeddings, segmentations, options.min_active_ratio)
    chunks, speakers, dim = embeddings.shape
    if train.shape[0] < 2:
        centroid = train[:1] if len(train) else np.zeros((1, dim))
        return np.zeros((chunks, speakers), np.int8), centroid
    labels = ahc(train, options.threshold)
    if options.plda:
        fea = plda(train)
        qinit = np.zeros((len(labels), labels.max() + 1))
        qinit[np.arange(len(labels)), labels] = 1.0
        qinit = np.exp(qinit * options.init_smoothing)
        qinit /= qinit.sum(axis=1, keepdims=True)
        q, sp = vbx(fea, plda.phi, options.fa, options.fb, qinit, options.max_iters)
    else:
        q = np.eye(labels.max() + 1)[labels]
        sp = q.sum(0)
    w = q[:, sp > 1e-7]
    centroids = w.T @ train / w.sum(0, keepdims=True).T
    constrained = True
    auto = centroids.shape[0]
    if auto < min_clusters:
        num_clusters = min_clusters
    elif auto > max_clusters:
        num_clusters = int(max_clusters)
    if num_clusters and num_clusters != auto:
        constrained = False
        groups = kmeans(_l2(train), num_clusters)
        centroids = np.vstack([np.mean(train[groups == k], axis=0) for k in range(num_clusters)])
    soft = _cosine_similarity2(embeddings.reshape(-1, dim), centroids).reshape(chunks, speakers, -1)
    if constrained:
        soft[segmentations.sum(1) == 0] = soft.min() - 1.0
        hard = constrained_argmax(soft)
    else:
        hard = np.argmax(soft, axis=2)
    return hard, centroids


def reconstruct(segmentations, hard_clusters, count, step_seconds) -> np.ndarray:
    """Discrete diarization ``[frames, clusters]``: per frame the ``count`` clusters with the
    highest summed activity (``to_diarization``)."""
    chunks, frames, _ = segmentations.shape
    k = int(np.max(hard_clusters)) + 1
    clustered = np.full((chunks, frames, max(k, 0)), np.nan)
    for c in range(chunks):
        for j in np.unique(hard_clusters[c]):
            if j == -2:
                continue
            clustered[c, :, j] = np.max(segmentations[c][:, hard_clusters[c] == j], axis=1)
    activations = aggregate(clustered, step_seconds, average=False)
    most = int(np.max(count))
    if activations.shape[1] < most:
        activations = np.pad(activations, ((0, 0), (0, most - activations.shape[1])))
    n = min(len(activations), len(count))
    activations, count = activations[:n], count[:n]
    order = np.argsort(-activations, axis=-1)
    binary = np.zeros_like(activations)
    for t in range(n):
        binary[t, order[t, : int(count[t])]] = 1.0
    return binary


def binarize(discrete: np.ndarray, labels: dict[int, str]) -> list[Turn]:
    """Turns of a discrete diarization, cut at frame middles (pyannote's ``Binarize`` at 0.5)."""
    middles = np.arange(len(discrete)) * FRAME_STEP + 0.5 * FRAME_DURATION
    turns: list[Turn] = []
    for k, name in labels.items():
        if k >= discrete.shape[1]:
            continue
        on = discrete[:, k] > 0.5
        start, active = middles[0], bool(on[0])
        for t, y in zip(middles[1:], on[1:], strict=True):
            if active and not y:
                turns.append(Turn(float(start), float(t), name))
                start, active = t, False
            elif not active and y:
                start, active = t, True
        if active and len(middles) > 1:
            turns.append(Turn(float(start), float(middles[-1]), name))
    return sorted(turns)


# --------------------------------------------------------------------------- pipeline


class SegmentationPipeline:
    """The ONNX models and PLDA, loaded once; :meth:`__call__` diarizes 16 kHz mono audio."""

    def __init__(self, segmentation: str | Path, embedding: str | Path, plda: str | Path):
        import onnxruntime as ort

        from ..whisper.runtime import sleep_between_runs

        # Threads sleep between runs, as the app's other CPU sessions, so that a file's
        # speaker stage leaves the cores to another file's transcription; ONNX Runtime's
        # other defaults stay (the app's ``session_options`` turn the memory arena off, which
        # made a pass over the real call take 11.7-13.4 s here instead of 9.3-10.4).
        opts = sleep_between_runs(ort.SessionOptions())
        providers = ["CPUExecutionProvider"]
        self.segmentation = ort.InferenceSession(str(segmentation), opts, providers=providers)
        self.embedding = ort.InferenceSession(str(embedding), opts, providers=providers)
        self.plda = Plda(plda)

    def segment(self, audio, options, progress=None, cancel=None, first=0) -> np.ndarray:
        """Binary local speaker tracks ``[chunks, 589, 3]`` (float32 0/1), from window
        ``first`` on."""
        window, step = _window_and_step(options)
        starts = chunk_starts(len(audio), step, window)[first:]
        if not starts:
            return np.zeros((0, 0, 3), np.float32)
        name = self.segmentation.get_inputs()[0].name
        out = []
        for i in range(0, len(starts), options.batch):
            _check(cancel)
            batch = np.stack([_chunk(audio, s, window) for s in starts[i : i + options.batch]])
            logits = self.segmentation.run(None, {name: batch[:, None].astype(np.float32)})[0]
            out.append(POWERSET[np.argmax(logits, axis=-1)])
            if progress is not None:
                progress(min(i + options.batch, len(starts)), len(starts), "segmentation")
        return np.concatenate(out)

    def embed(
        self, audio, segmentations, options, progress=None, cancel=None, first=0
    ) -> np.ndarray:
        """One embedding per (chunk, local speaker) ``[chunks, 3, dim]``; ``segmentations``
        are those of the windows from ``first`` on."""
        chunks, frames, speakers = segmentations.shape
        window, step = _window_and_step(options)
        if options.exclude_overlap:
            min_frames = int(np.ceil(frames * MIN_EMBEDDING_SAMPLES / window))
            clean = segmentations * (np.sum(segmentations, axis=2, keepdims=True) < 2)
        else:
            min_frames, clean = -1, segmentations
        names = [i.name for i in self.embedding.get_inputs()]
        jobs = [(c, s) for c in range(chunks) for s in range(speakers)]
        feats: dict[int, np.ndarray] = {}
        out = []
        for i in range(0, len(jobs), options.batch):
            _check(cancel)
            part = jobs[i : i + options.batch]
            feats = {
                c: feats[c]
                if c in feats
                else wespeaker_features(_chunk(audio, (first + c) * step, window), window="hamming")
                for c in sorted({c for c, _ in part})
            }
            fbank = np.stack([feats[c] for c, _ in part]).astype(np.float32)
            weights = np.stack(
                [
                    clean[c, :, s] if clean[c, :, s].sum() > min_frames else segmentations[c, :, s]
                    for c, s in part
                ]
            ).astype(np.float32)
            out.append(self.embedding.run(None, {names[0]: fbank, names[1]: weights})[0])
            if progress is not None:
                progress(min(i + options.batch, len(jobs)), len(jobs), "embeddings")
        return np.concatenate(out).reshape(chunks, speakers, -1).astype(np.float64)

    def __call__(
        self,
        audio: np.ndarray,
        options: SegmentationOptions | None = None,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
        cache: SegmentationCache | None = None,
    ) -> SegmentationResult:
        """``cache``: what earlier passes over the same growing recording computed."""
        options = options or SegmentationOptions()
        audio = np.asarray(audio, dtype=np.float32)
        num = options.num_speakers
        lo = num if num is not None else (options.min_speakers or 1)
        hi = num if num is not None else (options.max_speakers or np.inf)
        kept = cache.reusable(audio, options) if cache is not None else 0
        new = self.segment(audio, options, progress, cancel, first=kept)
        if kept and not len(new):  # every window whole and kept
            new = cache.seg[:0]
        seg = np.concatenate([cache.seg[:kept], new]) if kept else new
        count = np.rint(aggregate(seg.sum(axis=2, keepdims=True), options.step, True))[:, 0]
        count = count.astype(np.uint8)
        empty_clusters = np.full(seg.shape[:2], -2, np.int8)
        if count.max(initial=0) == 0:
            nothing = np.zeros((len(count), 0), np.float32)
            return SegmentationResult(
                Diarization([], {}), [], seg, count, np.zeros((*seg.shape[:2], 0)),
                empty_clusters, nothing, nothing,
            )  # fmt: skip
        emb = self.embed(audio, new, options, progress, cancel, first=kept) if len(new) else None
        if kept:
            emb = cache.emb[:kept] if emb is None else np.concatenate([cache.emb[:kept], emb])
        if cache is not None:
            cache.keep(audio, options, seg, emb, len(new))
        hard, centroids = cluster(emb, seg, self.plda, options, lo, hi, num)
        hard = hard.astype(np.int8)
        count = np.minimum(count, hi).astype(np.int8)
        hard[np.sum(seg, axis=1) == 0] = -2
        discrete = reconstruct(seg, hard, count, options.step)
        exclusive = reconstruct(seg, hard, np.minimum(count, 1), options.step)
        used = [k for k in range(discrete.shape[1]) if discrete[:, k].any()]
        labels = {k: f"S{i + 1}" for i, k in enumerate(used)}
        # A speaker with no centroid: a column pyannote pads in when a frame counts more
        # speakers than there are clusters.
        units = {
            labels[k]: centroids[k] / np.linalg.norm(centroids[k])
            for k in used
            if k < len(centroids) and np.linalg.norm(centroids[k]) > 0
        }
        return SegmentationResult(
            diarization=Diarization(binarize(exclusive, labels), units),
            overlapping=binarize(discrete, labels),
            segmentations=seg,
            count=count,
            embeddings=emb,
            hard_clusters=hard,
            discrete=discrete,
            exclusive=exclusive,
            labels=labels,
        )


def _check(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise DiarizationCancelled("diarization cancelled")
