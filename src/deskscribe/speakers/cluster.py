"""Clustering speaker embeddings: offline (a whole file) and online (live, one window at a time).

Everything works on L2-normalised embeddings and cosine similarity; numpy only.

- :func:`agglomerative`: average linkage on cosine distance (nearest-neighbour chain, O(n²)
  time and memory), cut by a distance threshold (automatic count), a fixed count, or the
  threshold's count clipped to ``[min, max]``.
- :func:`spectral`: the refined-affinity spectral clustering of Wang et al. 2018 (as in
  Google's ``spectralcluster``) with the eigengap for the count; kept as an alternative (it
  measured worse on our sets, see docs/architecture.md "Speakers").
- :class:`OnlineClusterer`: running centroids for live audio.

Labels are always renumbered by first appearance (0 is whoever speaks first).
"""

from __future__ import annotations

import numpy as np

# Thresholds depend on the speaker model: its embeddings spread differently. Resemblyzer's were
# measured on our synthetic conversations and the real phone call (bench/speakers.py, see
# docs/architecture.md "Speakers"); WeSpeaker's are pyannote 3.1's published clustering
# threshold (0.7045 cosine distance for the same ResNet34 embeddings), not measured here.
THRESHOLDS = {"resemblyzer": 0.31, "wespeaker": 0.7}  # average-linkage cut, cosine distance
ONLINE_THRESHOLDS = {"resemblyzer": 0.7, "wespeaker": 0.3}  # new speaker below this similarity
DEFAULT_THRESHOLD = THRESHOLDS["resemblyzer"]
DEFAULT_ONLINE_THRESHOLD = ONLINE_THRESHOLDS["resemblyzer"]


def threshold_for(kind: str | None, online: bool = False, stored: dict | None = None) -> float:
    """The clustering threshold for a speaker model: the one calibrated for this very model
    and stored in its manifest (``stored``: ``SpeakerEncoder.thresholds``, written by
    ``bench/speakers.py --calibrate``), else the table's for its kind (``SpeakerEncoder.kind``)."""
    value = (stored or {}).get("online" if online else "cluster")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 2:
        return float(value)
    table = ONLINE_THRESHOLDS if online else THRESHOLDS
    return table.get(kind or "", DEFAULT_ONLINE_THRESHOLD if online else DEFAULT_THRESHOLD)


def normalize(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    x = np.asarray(x, dtype=np.float64)
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norm > 0, norm, 1.0)


def renumber(labels: np.ndarray | list[int]) -> np.ndarray:
    """Labels renamed 0, 1, 2, … in order of first appearance."""
    labels = np.asarray(labels, dtype=np.int64)
    mapping: dict[int, int] = {}
    for lab in labels.tolist():
        mapping.setdefault(lab, len(mapping))
    return np.array([mapping[lab] for lab in labels.tolist()], dtype=np.int64)


# --------------------------------------------------------------------------- agglomerative


def average_linkage(embeddings: np.ndarray) -> np.ndarray:
    """The merges of average-linkage clustering on cosine distance, lowest first.

    Returns an array of rows ``(a, b, height)``: items are referred to by their index, and a
    merged cluster by the index of any of its members, so applying the first ``m`` rows with a
    union-find gives the ``n - m`` clusters of the dendrogram.
    """
    x = normalize(embeddings)
    n = x.shape[0]
    if n < 2:
        return np.zeros((0, 3))
    dist = np.clip(1.0 - x @ x.T, 0.0, 2.0)
    np.fill_diagonal(dist, np.inf)
    size = np.ones(n)
    active = np.ones(n, dtype=bool)
    merges: list[tuple[int, int, float]] = []
    chain: list[int] = []
    for _ in range(n - 1):
        if not chain:
            chain.append(int(np.flatnonzero(active)[0]))
        while True:  # follow nearest neighbours until two are each other's nearest
            a = chain[-1]
            b = int(np.argmin(dist[a]))
            if len(chain) > 1 and dist[a, chain[-2]] <= dist[a, b]:
                b = chain[-2]
            if len(chain) > 1 and b == chain[-2]:
                break
            chain.append(b)
        chain.pop()
        chain.pop()
        height = float(dist[a, b])
        merges.append((a, b, height))
        # Lance-Williams for average linkage; the merged cluster lives on in row b.
        row = (size[a] * dist[a] + size[b] * dist[b]) / (size[a] + size[b])
        size[b] += size[a]
        active[a] = False
        row[~active] = np.inf
        row[b] = np.inf
        dist[b, :] = row
        dist[:, b] = row
        dist[a, :] = np.inf
        dist[:, a] = np.inf
    out = np.array(merges, dtype=np.float64)
    return out[np.argsort(out[:, 2], kind="stable")]


def cut(merges: np.ndarray, n: int, n_clusters: int) -> np.ndarray:
    """Labels of ``n`` items after applying the first ``n - n_clusters`` merges."""
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b, _ in merges[: max(0, n - max(1, n_clusters))]:
        ra, rb = find(int(a)), find(int(b))
        if ra != rb:
            parent[ra] = rb
    return renumber([find(i) for i in range(n)])


def count_for(
    merges: np.ndarray,
    n: int,
    threshold: float,
    num: int | None = None,
    min_count: int | None = None,
    max_count: int | None = None,
) -> int:
    """How many clusters: ``num`` if given, else the threshold's count clipped to the bounds."""
    if n == 0:
        return 0
    if num is not None:
        return max(1, min(num, n))
    k = n - int(np.sum(merges[:, 2] <= threshold)) if len(merges) else n
    if min_count is not None:
        k = max(k, min_count)
    if max_count is not None:
        k = min(k, max_count)
    return max(1, min(k, n))


def agglomerative(
    embeddings: np.ndarray,
    threshold: float = DEFAULT_THRESHOLD,
    num: int | None = None,
    min_count: int | None = None,
    max_count: int | None = None,
    min_size: int = 1,
    floor: float | None = None,
) -> np.ndarray:
    """Cluster labels (renumbered by first appearance) by average linkage on cosine distance.

    With ``num`` the count is fixed; otherwise merging stops at ``threshold`` (cosine distance)
    and the resulting count is clipped to ``[min_count, max_count]``. Clusters of fewer than
    ``min_size`` items do not count as speakers: the dendrogram is cut where the wanted number
    of clusters has at least ``min_size`` items, and the items of smaller ones join the most
    similar large cluster (a cough, a laugh or a noisy stretch is not a new person).

    ``floor`` (cosine distance) bounds what an asked-for count (``num``, ``min_count``) may
    split: clusters closer than that are one voice, so five speakers asked of a two-person
    call give the voices there are (fewer labels), not five made of noise.
    """
    x = normalize(embeddings)
    n = x.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    merges = average_linkage(x)
    k = count_for(merges, n, threshold, num, min_count, max_count)
    k_cap = n
    if floor is not None and (num is not None or min_count is not None) and len(merges):
        k_cap = max(1, n - int(np.sum(merges[:, 2] <= floor)))
        k = min(k, max(k_cap, count_for(merges, n, threshold)))
    if min_size <= 1:
        return cut(merges, n, k)
    want_lo = num if num is not None else (min_count or 1)
    want_hi = num if num is not None else (max_count or n)
    labels = cut(merges, n, k)
    large = _large(labels, min_size)
    if num is not None or len(large) < want_lo:
        # More clusters until enough of them are large (small ones do not count).
        while len(large) < want_lo and k < k_cap:
            k += 1
            labels = cut(merges, n, k)
            large = _large(labels, min_size)
    while len(large) > want_hi and k > 1:
        k -= 1
        labels = cut(merges, n, k)
        large = _large(labels, min_size)
    return absorb_small(x, labels, large)


def _large(labels: np.ndarray, min_size: int) -> list[int]:
    counts = np.bincount(labels)
    large = [int(c) for c in np.flatnonzero(counts >= min_size)]
    return large or [int(np.argmax(counts))]


def absorb_small(x: np.ndarray, labels: np.ndarray, keep: list[int]) -> np.ndarray:
    """Items of clusters not in ``keep`` move to the kept cluster with the nearest centroid."""
    centroids = np.array([normalize(x[labels == c].mean(axis=0)) for c in keep])
    out = labels.copy()
    small = ~np.isin(labels, keep)
    if np.any(small):
        out[small] = np.array(keep)[np.argmax(x[small] @ centroids.T, axis=1)]
    return renumber(out)


# --------------------------------------------------------------------------- spectral


def spectral(
    embeddings: np.ndarray,
    num: int | None = None,
    min_count: int | None = None,
    max_count: int | None = None,
    percentile: float = 0.8,
    blur: float = 0.0,
    seed: int = 0,
) -> np.ndarray:
    """Spectral clustering with refined affinity; the count from the largest eigengap ratio."""
    x = normalize(embeddings)
    n = x.shape[0]
    if n < 3:
        return np.zeros(n, dtype=np.int64) if num in (None, 1) else np.arange(n)
    aff = (x @ x.T + 1.0) / 2.0
    np.fill_diagonal(aff, 0.0)
    np.fill_diagonal(aff, aff.max(axis=1))  # crop the diagonal
    if blur > 0:
        aff = _gaussian_blur(aff, blur)
    # Row-wise threshold: keep each row's strongest (1 - percentile) share, damp the rest.
    keep = np.quantile(aff, percentile, axis=1, keepdims=True)
    aff = np.where(aff >= keep, aff, aff * 0.01)
    aff = np.maximum(aff, aff.T)  # symmetrize
    aff = aff @ aff.T  # diffuse
    aff = aff / aff.max(axis=1, keepdims=True)  # row-wise max normalisation
    aff = (aff + aff.T) / 2
    values, vectors = np.linalg.eigh(aff)
    values, vectors = values[::-1], vectors[:, ::-1]
    lo = max(1, min_count or 1)
    hi = min(n - 1, max_count or min(n - 1, 8))
    if num is not None:
        k = max(1, min(num, n))
    elif hi <= lo:
        k = lo
    else:
        gaps = values[lo - 1 : hi] / np.maximum(values[lo : hi + 1], 1e-10)
        k = lo + int(np.argmax(gaps))
    if k == 1:
        return np.zeros(n, dtype=np.int64)
    spec = normalize(vectors[:, :k])
    return renumber(kmeans(spec, k, seed=seed))


def _gaussian_blur(a: np.ndarray, sigma: float) -> np.ndarray:
    radius = max(1, round(3 * sigma))
    t = np.arange(-radius, radius + 1)
    kernel = np.exp(-(t**2) / (2 * sigma**2))
    kernel /= kernel.sum()
    padded = np.pad(a, radius, mode="edge")
    rows = np.apply_along_axis(lambda r: np.convolve(r, kernel, mode="valid"), 1, padded)
    return np.apply_along_axis(lambda c: np.convolve(c, kernel, mode="valid"), 0, rows)


def kmeans(x: np.ndarray, k: int, iterations: int = 100, seed: int = 0, restarts: int = 5):
    """k-means++ with a few restarts; returns labels of the lowest-inertia run."""
    rng = np.random.default_rng(seed)
    best, best_inertia = None, np.inf
    for _ in range(restarts):
        centres = [x[rng.integers(len(x))]]
        for _ in range(1, k):
            d = np.min(((x[:, None, :] - np.array(centres)[None]) ** 2).sum(-1), axis=1)
            p = d / d.sum() if d.sum() > 0 else np.full(len(x), 1 / len(x))
            centres.append(x[rng.choice(len(x), p=p)])
        c = np.array(centres)
        labels = np.zeros(len(x), dtype=np.int64)
        for _ in range(iterations):
            d = ((x[:, None, :] - c[None]) ** 2).sum(-1)
            new = np.argmin(d, axis=1)
            if np.array_equal(new, labels) and _ > 0:
                break
            labels = new
            for j in range(k):
                if np.any(labels == j):
                    c[j] = x[labels == j].mean(axis=0)
        inertia = float(((x - c[labels]) ** 2).sum())
        if inertia < best_inertia:
            best, best_inertia = labels, inertia
    assert best is not None
    return best


# --------------------------------------------------------------------------- online


class OnlineClusterer:
    """Live speaker clustering against running centroids.

    ``assign`` gives an embedding the speaker whose centroid is most similar (cosine) and
    folds it into that centroid (running mean of unit vectors, re-normalised); when even the
    best similarity is below ``threshold`` a new speaker starts, unless ``max_speakers`` are
    already known. ``assign(..., update=False)`` only looks (for tentative text that may still
    change). Ids are 0, 1, 2, … in order of creation; :meth:`merge_close` folds speakers whose
    centroids have grown together and returns the id mapping so callers can relabel.
    """

    def __init__(
        self, threshold: float = DEFAULT_ONLINE_THRESHOLD, max_speakers: int | None = None
    ):
        self.threshold = threshold
        self.max_speakers = max_speakers
        self._sums: list[np.ndarray] = []
        self.counts: list[int] = []

    @property
    def centroids(self) -> np.ndarray:
        """[speakers, dim] unit vectors (empty [0, 0] before the first embedding)."""
        if not self._sums:
            return np.zeros((0, 0))
        return normalize(np.array(self._sums))

    def __len__(self) -> int:
        return len(self._sums)

    def similarities(self, embedding: np.ndarray) -> np.ndarray:
        """Cosine similarity of ``embedding`` to every centroid."""
        if not self._sums:
            return np.zeros(0)
        return self.centroids @ normalize(embedding)

    def assign(self, embedding: np.ndarray, *, update: bool = True) -> int:
        e = normalize(np.asarray(embedding, dtype=np.float64).reshape(-1))
        sims = self.similarities(e)
        full = self.max_speakers is not None and len(self._sums) >= self.max_speakers
        if sims.size and (sims.max() >= self.threshold or full):
            best = int(np.argmax(sims))
            if update:
                self._sums[best] = self._sums[best] + e
                self.counts[best] += 1
            return best
        if not update:
            return len(self._sums)  # the id a new speaker would get
        self._sums.append(e.copy())
        self.counts.append(1)
        return len(self._sums) - 1

    def seed(self, index: int, centroid: np.ndarray, count: int) -> None:
        """Set speaker ``index``'s centroid (as if ``count`` windows had made it; new ids up to
        ``index`` take it as their first): a better estimate found elsewhere, e.g. by an
        offline pass over more audio."""
        e = normalize(np.asarray(centroid, dtype=np.float64).reshape(-1))
        while len(self._sums) <= index:
            self._sums.append(e.copy())
            self.counts.append(count)
        self._sums[index] = e * count
        self.counts[index] = count

    def merge_close(self, threshold: float | None = None) -> dict[int, int]:
        """Merge speakers whose centroids are at least ``threshold`` similar (default: the
        new-speaker threshold + 0.1; merging at the threshold itself undid real speakers in
        our measurements). Returns {old id: new id} for every id; survivors are renumbered
        0, 1, … in their old order."""
        limit = min(self.threshold + 0.1, 0.99) if threshold is None else threshold
        target = list(range(len(self._sums)))
        while True:
            c = self.centroids
            alive = [i for i in range(len(target)) if target[i] == i]
            best, pair = limit, None
            for ai, i in enumerate(alive):
                for j in alive[ai + 1 :]:
                    s = float(c[i] @ c[j])
                    if s >= best:
                        best, pair = s, (i, j)
            if pair is None:
                break
            i, j = pair  # fold j into i (i is older)
            self._sums[i] = self._sums[i] + self._sums[j]
            self.counts[i] += self.counts[j]
            self._sums[j] = np.zeros_like(self._sums[j])
            self.counts[j] = 0
            target = [i if t == j else t for t in target]
        survivors = sorted(set(target))
        new_id = {old: k for k, old in enumerate(survivors)}
        self._sums = [self._sums[i] for i in survivors]
        self.counts = [self.counts[i] for i in survivors]
        return {old: new_id[t] for old, t in enumerate(target)}
