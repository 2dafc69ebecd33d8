"""The speaker bench's tools: ``--calibrate`` (a speaker model's clustering threshold from the
dev sets, stored in its manifest), ``--long`` (an hour of reappearing real voices),
``--growing`` (passes over a growing track), ``--overlap`` (overlapped speech on one track)
and ``--live-replay`` (live labels with their revisions, replayed without a sound device).

Run through ``bench/speakers.py``; see its docstring and bench/README.md.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import conversations as cv
from common import ami_clips, cpu_seconds, markdown_table, peak_rss_mb, pyannote_der

EVAL = Path(__file__).resolve().parents[2] / "shared" / "eval"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _speakers_in(turns, uem) -> int:
    lo, hi = uem if uem is not None else (-1e9, 1e9)
    return len({t[2] for t in turns if min(t[1], hi) - max(t[0], lo) > 0})


class CachedEncoder:
    """A speaker encoder whose window embeddings are remembered per (recording, windows), so
    that a threshold sweep embeds each recording once. Carries no stored thresholds: the
    sweep sets them explicitly."""

    def __init__(self, encoder) -> None:
        self.encoder, self.kind, self.name = encoder, encoder.kind, encoder.name
        self.window_seconds = encoder.window_seconds
        self.thresholds: dict = {}
        self._memo: dict = {}

    def embed_windows(self, audio: np.ndarray, windows) -> np.ndarray:
        key = (audio.__array_interface__["data"][0], audio.shape[0], tuple(map(tuple, windows)))
        if key not in self._memo:
            self._memo[key] = self.encoder.embed_windows(audio, windows)
        return self._memo[key]


def calibrate(sets: list[dict], encoder, folder: Path) -> float:
    """The clustering threshold that gives the lowest DER over the dev sets, stored in the
    speaker model's manifest (``"thresholds"``), where ``SpeakerEncoder`` reads it.

    Each group (the synthetic conversations, the call, the AMI clips) counts as one: the
    objective is the mean of the groups' mean DERs, so eleven AMI clips do not outvote the
    call. Ties go to the threshold nearer the middle of the best run."""
    from deskscribe.speakers import cluster
    from deskscribe.speakers.diarize import DiarizeOptions, diarize

    cached = CachedEncoder(encoder)
    base = cluster.threshold_for(encoder.kind)
    grid = [round(base * f, 3) for f in np.linspace(0.7, 1.4, 15)]
    groups: dict[str, list[dict]] = {}
    for s in sets:
        group = "synthetic" if s["synthetic"] else s["name"].split(" ")[0]
        groups.setdefault(group, []).append(s)
    table_rows, objective = [], []
    for thr in grid:
        row, means = [f"{thr:.3f}"], []
        for group, members in groups.items():
            ders, counts = [], 0
            for s in members:
                d = diarize(s["audio"], cached, DiarizeOptions(threshold=thr))
                ders.append(pyannote_der(s["turns"], d.turns, s.get("uem"))["der"])
                found, truth = (
                    _speakers_in(d.turns, s.get("uem")),
                    _speakers_in(s["turns"], s.get("uem")),
                )
                counts += abs(found - truth) <= (1 if group == "ami" else 0)
            means.append(float(np.mean(ders)))
            row.append(f"{pct(means[-1])} ({counts}/{len(members)})")
        objective.append(float(np.mean(means)))
        table_rows.append([*row, pct(objective[-1])])
        print(f"  threshold {thr:.3f}: {pct(objective[-1])} %", file=sys.stderr)
    print("\ncalibration (mean DER % (count right) per group; objective: mean of groups):\n")
    print(markdown_table(["threshold", *groups, "objective %"], table_rows))
    best = min(objective)
    run = [i for i, o in enumerate(objective) if o <= best + 1e-9]
    chosen = grid[run[len(run) // 2]]
    store_thresholds(
        folder,
        {
            "cluster": chosen,
            "calibration": {
                "by": "bench/speakers.py --calibrate",
                "objective_der": round(best, 4),
                "groups": {g: len(m) for g, m in groups.items()},
                "date": time.strftime("%Y-%m-%d"),
            },
        },
    )
    print(f"\nstored in {folder / 'manifest.json'}: cluster threshold {chosen:.3f}")
    return chosen


def store_thresholds(folder: Path, thresholds: dict) -> None:
    """Write ``thresholds`` into the speaker model's manifest (atomically: a reader never
    sees half a manifest)."""
    path = Path(folder) / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest["thresholds"] = thresholds
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    tmp.replace(path)


LONG_PIECES = ("dev01", "trn03", "trn09", "trn06")


def long_recording(minutes: float) -> tuple[np.ndarray, list, list[str]]:
    """A ``minutes``-long recording of real voices reappearing: the call and the annotated
    30 s of four AMI meetings, each back again and again in a shuffled order (the same voice
    minutes apart), and its reference turns (AMI speaker ids are the same person across
    clips). Returns (audio, turns, piece names in order)."""
    from deskscribe.audio.decode import decode_audio

    sr = 16000
    pieces = [
        (
            "call",
            decode_audio(EVAL / "two-speakers.wav")[: 30 * sr],
            cv.read_rttm(EVAL / "two-speakers.rttm"),
        )
    ]
    clips = {c["name"]: c for c in ami_clips(EVAL)}
    for name in LONG_PIECES:
        pieces.append((name, decode_audio(clips[name]["path"])[: 30 * sr], clips[name]["turns"]))
    n = max(len(pieces), round(minutes * 2))
    order = np.random.default_rng(0).permutation(np.resize(np.arange(len(pieces)), n))
    parts, ref, names, offset = [], [], [], 0.0
    for i in order:
        name, audio, turns = pieces[i]
        parts.append(audio)
        names.append(name)
        ref += [(a + offset, min(b, 30.0) + offset, w) for a, b, w in turns if a < 30.0]
        offset += audio.shape[0] / sr
    return np.concatenate(parts), ref, names


def measure_long(minutes: float, encoder) -> None:
    """Speaker count, DER against the per-piece mean, time per audio minute and peak memory
    of diarization alone on a long recording (run without Whisper loaded, so the peak is the
    speaker step's)."""
    from deskscribe.speakers.diarize import diarize

    audio, ref, names = long_recording(minutes)
    length = audio.shape[0] / 16000
    piece_ders = []
    for k, name in enumerate(dict.fromkeys(names)):
        i = names.index(name)
        seg = audio[i * 30 * 16000 : (i + 1) * 30 * 16000]
        turns = [(a - 30 * i, b - 30 * i, w) for a, b, w in ref if 30 * i <= a < 30 * (i + 1)]
        piece_ders.append(pyannote_der(turns, diarize(seg, encoder).turns, (0.0, 30.0))["der"])
        print(f"  piece {k} {name}: DER {pct(piece_ders[-1])} %", file=sys.stderr)
    rss0 = peak_rss_mb()
    start, cpu = time.perf_counter(), cpu_seconds()
    result = diarize(audio, encoder)
    wall, used = time.perf_counter() - start, cpu_seconds() - cpu
    score = pyannote_der(ref, result.turns, (0.0, length))
    truth = len({w for *_, w in ref})
    print(markdown_table(
        ["audio", "speakers", "DER %", "missed / FA / confusion %", "per-piece mean DER %",
         "s / audio min", "CPU s / audio min", "peak RSS MiB (before)"],
        [[f"{length / 60:.1f} min", f"{len(result.speakers)}/{truth}", pct(score["der"]),
          f"{pct(score['missed'])} / {pct(score['false_alarm'])} / {pct(score['confusion'])}",
          pct(float(np.mean(piece_ders))), f"{wall / (length / 60):.2f}",
          f"{used / (length / 60):.2f}", f"{peak_rss_mb():.0f} ({rss0:.0f})"]],
    ))  # fmt: skip


def measure_growing(minutes: float, encoder, every: float = 1.0) -> None:
    """The live revisions' pass over a growing track (``speakers.growing``) against a pass
    from scratch, every ``every`` minutes of a ``minutes``-long recording of reappearing real
    voices: seconds each pass took, speakers found and DER of the track so far, both ways."""
    from deskscribe.speakers.diarize import diarize
    from deskscribe.speakers.growing import GrowingTrack

    audio, ref, _ = long_recording(minutes)
    growing = GrowingTrack(encoder)
    rows, totals = [], [0.0, 0.0]
    points = np.arange(every, minutes + 1e-9, every)
    for at in points:
        track = audio[: int(at * 60 * 16000)]
        truth = [(a, min(b, at * 60), w) for a, b, w in ref if a < at * 60]
        start = time.perf_counter()
        fresh = diarize(track, encoder)
        fresh_s = time.perf_counter() - start
        start = time.perf_counter()
        kept = growing.diarize(track)
        kept_s = time.perf_counter() - start
        totals[0] += fresh_s
        totals[1] += kept_s
        der_fresh = pyannote_der(truth, fresh.turns, (0.0, at * 60))["der"]
        der_kept = pyannote_der(truth, kept.turns, (0.0, at * 60))["der"]
        people = len({w for *_, w in truth})
        rows.append(
            [f"{at:.0f} min", f"{fresh_s:.2f}", f"{kept_s:.2f}", f"{fresh_s / kept_s:.1f}x",
             f"{len(fresh.speakers)} / {len(kept.speakers)} ({people})",
             f"{pct(der_fresh)} / {pct(der_kept)}"]
        )  # fmt: skip
        print(f"  {rows[-1]}", file=sys.stderr)
    cached = growing.encoder
    print(markdown_table(
        ["recorded", "pass from scratch s", "growing pass s", "speed-up",
         "speakers scratch / growing (true)", "DER % scratch / growing"],
        rows,
    ))  # fmt: skip
    print(
        f"\nall passes: {totals[0]:.1f} s from scratch, {totals[1]:.1f} s growing; windows "
        f"embedded {cached.embedded}, reused {cached.reused}"
    )


def measure_overlap(encoder) -> None:
    """Can the shipped encoder tell where two people speak at once on one track? Each window
    of the encoder's length (0.4 s hop) over the scored span of the AMI clips and the call
    gets its best and second-best cosine to the voices ``diarize`` found; a window counts as
    overlapped when two reference speakers are active over half of its middle 0.8 s (windows
    whose middle is mostly silence are left out). Printed: the share of overlapped windows,
    the ROC AUC of two scores (second-best cosine; a small gap between best and second) and
    the precision and recall of flagging the windows with the smallest gap."""
    from sklearn.metrics import roc_auc_score

    from deskscribe.audio.decode import decode_audio
    from deskscribe.speakers.diarize import diarize

    clips = [(c["name"], c["path"], c["turns"], c["uem"]) for c in ami_clips(EVAL)]
    call = EVAL / "two-speakers.wav"
    clips.append(("call", call, cv.read_rttm(call.with_suffix(".rttm")), None))
    second, gap, overlapped, rows = [], [], [], []
    for name, path, turns, uem in clips:
        audio = decode_audio(path)
        lo, hi = uem if uem is not None else (0.0, audio.shape[0] / 16000)
        found = diarize(audio, encoder)
        if len(found.centroids) < 2:
            rows.append([name, "1", "-", "-"])
            continue
        voices = np.array(list(found.centroids.values()), dtype=np.float64)
        voices /= np.linalg.norm(voices, axis=1, keepdims=True)
        win, hop = round(encoder.window_seconds * 16000), 6400
        windows = [(a, a + win) for a in range(int(lo * 16000), int(hi * 16000) - win + 1, hop)]
        sims = np.sort(encoder.embed_windows(audio, windows) @ voices.T, axis=1)[:, ::-1]
        flags = []
        for (a, b), s in zip(windows, sims, strict=True):
            middle = (a + b) / 32000 + np.linspace(-0.4, 0.4, 9)
            active = np.array([len({w for t0, t1, w in turns if t0 <= m < t1}) for m in middle])
            if np.mean(active >= 1) >= 0.5:
                flags.append(np.mean(active >= 2) >= 0.5)
                second.append(s[1])
                gap.append(s[0] - s[1])
        overlapped += flags
        share = pct(float(np.mean(flags))) if flags else "-"
        rows.append([name, str(len(found.centroids)), str(len(flags)), share])
    y, second, gap = np.array(overlapped), np.array(second), np.array(gap)
    print(markdown_table(["clip", "voices found", "speech windows", "overlapped %"], rows))
    print(f"\nall: {len(y)} speech windows, {pct(y.mean())} % overlapped")
    print(f"ROC AUC: second-best cosine {roc_auc_score(y, second):.3f}; small best-second "
          f"gap {roc_auc_score(y, -gap):.3f} (0.5 is chance)")  # fmt: skip
    for share in (0.05, 0.1, 0.2):
        flagged = -gap >= np.quantile(-gap, 1 - share)
        print(
            f"flag the {share:.0%} with the smallest gap: precision {pct(y[flagged].mean())} %, "
            f"recall {pct(flagged[y].mean())} %"
        )


def measure_live_replay(whisper, encoder, cache: Path, ami: bool = False) -> None:
    """Live labels with the revisions, without a sound device: each conversation's words
    (Whisper, word timestamps) are fed to the live labeller in the batches a live session
    commits (``commit_batches``), with the audio heard up to 1 s past each batch, and the
    revision pass (``revise_labels`` over a ``GrowingTrack`` and a ``TranscriptStore``) runs
    on the audio so far at the session's spacing (first after ``first_seconds``, then every
    ``every_seconds``). Printed per conversation, over the batchings: word accuracy of the
    labels given at commit, of the shown labels averaged over the moments after each batch
    (what the window shows while recording), and of the shown labels at the end (before the
    pass at Stop); labels shown at the end; shown words whose label changed; the same without
    revisions. ``ami``: the AMI clips too (their annotated 30 s; four far-field voices)."""
    from deskscribe.audio.decode import decode_audio
    from deskscribe.whisper.transcribe import TranscribeOptions, transcribe_file
    from live_replay import BATCHINGS, replay_labels

    cases = []
    for name in ("two", "three", "four"):
        conv = cv.build(name, cache / "conversations")
        cases.append((f"{name} (espeak-ng)", conv.path, conv.audio, conv.turns))
    call = EVAL / "two-speakers.wav"
    cases.append(("call (real)", call, decode_audio(call), cv.read_rttm(call.with_suffix(".rttm"))))
    for clip in ami_clips(EVAL) if ami else []:  # the annotated span only (no word references)
        lo, hi = clip["uem"]
        audio = decode_audio(clip["path"])[int(lo * 16000) : int(hi * 16000)]
        turns = [(max(a, lo) - lo, min(b, hi) - lo, w) for a, b, w in clip["turns"]
                 if a < hi and b > lo]  # fmt: skip
        (cache / "ami-scored").mkdir(parents=True, exist_ok=True)
        path = cv.write_wav(cache / "ami-scored" / f"{clip['name']}.wav", audio)
        cases.append((f"ami {clip['name']}", path, audio, turns))
    rows = []
    for name, path, audio, turns in cases:
        t = transcribe_file(whisper, path, TranscribeOptions(language="en", word_timestamps=True))
        words = [(w.start, w.end, w.text) for s in t.segments for w in s.words]
        if not words:
            continue
        runs, alone = (
            [
                replay_labels(encoder, audio, turns, words, how, seed, revise)
                for how, seed in BATCHINGS
            ]
            for revise in (True, False)
        )

        rows.append(
            [name, span([r.at_commit for r in runs]), span([r.while_recording for r in runs]),
             span([r.at_end for r in runs]), "/".join(str(r.labels) for r in runs),
             str(sum(r.relabelled for r in runs)), span([r.at_commit for r in alone]),
             "/".join(str(r.labels) for r in alone)]
        )  # fmt: skip
        print(f"  {rows[-1]}", file=sys.stderr)
    print(markdown_table(
        ["conversation", "at commit", "shown while recording", "shown at the end",
         "labels", "relabelled words", "without revisions", "labels"],
        rows,
    ))  # fmt: skip
    print(f"\nword accuracy, mean (lowest-highest) over the batchings {BATCHINGS}")


def span(values) -> str:
    """Mean (lowest-highest)."""
    return f"{np.mean(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def measure_sentence_turns(whisper, encoder, sets: list[dict]) -> list[dict]:
    """Speaker changes inside sentences, with the sentence rule of the word assignment off
    and on (``speakers.sentence_turns``), side by side on the same words and diarization:
    each set is transcribed with word timestamps and diarized once, then its words assigned
    both ways. Per set: changes between neighbouring words, how many of them fall inside a
    sentence (not after a sentence end, nor at a pause of ``PAUSE_SECONDS`` or more), word
    accuracy (share of the words inside a reference turn that got the right speaker) and DER
    of the words (each word's span as a turn; pyannote.metrics, collar 0.25 s, on the UEM).
    Totals: cuts summed, word accuracy pooled over the words counted, DER pooled over the
    scored reference time (a set without words counts its speech as missed both ways)."""
    import speaker_metrics as metrics
    from common import word_turns
    from deskscribe.speakers.assign import assign_speakers
    from deskscribe.speakers.diarize import diarize, transcribe_words
    from deskscribe.speakers.sentence_turns import PAUSE_SECONDS, mid_sentence_changes

    rows = []
    for s in sets:
        transcript, audio = transcribe_words(whisper, s["path"])
        result = diarize(audio, encoder)
        row: dict = {"set": s["name"], "group": _group(s)}
        for rule, tag in ((False, "off"), (True, "on")):
            labelled = assign_speakers(transcript, result, sentences=rule)
            words = [w for seg in labelled.segments for w in seg.words]
            said = [w for w in words if w.speaker is not None]
            spans = word_turns(labelled)
            counted = sum(metrics.speaker_at(s["turns"], a, b) is not None for a, b, _ in spans)
            score = pyannote_der(s["turns"], spans, s.get("uem"))
            row[tag] = {
                "changes": sum(a.speaker != b.speaker for a, b in itertools.pairwise(said)),
                "mid": mid_sentence_changes(words),
                "accuracy": metrics.word_accuracy(s["turns"], spans) if counted else None,
                "counted": counted,
                "der": score["der"],
                "scored_s": score["scored_s"],
            }
        rows.append(row)
        print(
            f"  {s['name']}: mid-sentence {row['off']['mid']} -> {row['on']['mid']}, "
            f"word acc {pct(row['off']['accuracy'])} -> {pct(row['on']['accuracy'])} %",
            file=sys.stderr,
        )
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    totals = [_pooled(f"{g} (all {len(rs)})", rs) for g, rs in groups.items() if len(rs) > 1]
    real = [r for r in rows if r["group"] in ("call", "ami")]
    if len(real) > 1 and len(totals) > 1:
        totals.append(_pooled(f"call + ami (all {len(real)})", real))
    print(
        f"\nspeaker changes inside sentences (not after . ? ! … nor at a pause >= "
        f"{PAUSE_SECONDS} s between words), rule off -> on:\n"
    )
    print(markdown_table(
        ["set", "words counted", "changes", "mid-sentence", "word acc %", "words DER %"],
        [[r["set"], str(r["on"]["counted"]),
          f"{r['off']['changes']} -> {r['on']['changes']}",
          f"{r['off']['mid']} -> {r['on']['mid']}",
          f"{pct(r['off']['accuracy'])} -> {pct(r['on']['accuracy'])}",
          f"{pct(r['off']['der'])} -> {pct(r['on']['der'])}"]
         for r in rows + totals],
    ))  # fmt: skip
    return rows


def _group(s: dict) -> str:
    if s["synthetic"]:
        return s["name"].split("/")[0]
    return "ami" if s["name"].startswith("ami ") else "call"


def _pooled(name: str, rows: list[dict]) -> dict:
    out: dict = {"set": name}
    for tag in ("off", "on"):
        parts = [r[tag] for r in rows]
        counted = sum(p["counted"] for p in parts)
        scored = sum(p["scored_s"] for p in parts)
        out[tag] = {
            "changes": sum(p["changes"] for p in parts),
            "mid": sum(p["mid"] for p in parts),
            "counted": counted,
            "accuracy": (
                sum((p["accuracy"] or 0.0) * p["counted"] for p in parts) / counted
                if counted
                else None
            ),
            "der": sum(p["der"] * p["scored_s"] for p in parts) / scored if scored else None,
        }
    return out
