"""Speaker labels: DER, cpWER, word accuracy and speed on synthetic conversations and a real call.

    python bench/speakers.py [--whisper tiny.en|base] [--speaker-model FOLDER]
                             [--rotations 4] [--sets two,three,four,call] [--sweep]
                             [--threads N] [--cache bench/out]

Synthetic sets: the espeak-ng conversations of ``tests/conversations.py`` (2, 3 and 4
speakers) in ``--rotations`` variants each (voices rotated over the roles, pauses shifted).
Real set: ``../shared/eval/two-speakers.wav`` (30 s phone call, reference turns in ``.rttm``,
words in ``.stm``). For each: diarization alone (VAD + embeddings + clustering) and the whole
``diarize_file`` path (Whisper with word timestamps, then diarization and word assignment).

Columns: DER (0.25 s collar) and its parts (missed speech, false alarm, speaker confusion, all
in % of scored reference speech), speakers found / in the reference, word accuracy (share of
words whose speaker is right, by time), cpWER (concatenated minimum-permutation WER: ASR and
speaker errors together), WER (the same words without speakers: ASR errors only), and time
per audio minute (diarization alone; transcription + diarization).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import conversations as cv
from common import (
    DEFAULT_CACHE,
    built_model,
    cpu_seconds,
    ct2_checkpoint,
    machine_line,
    markdown_table,
)

EVAL = Path(__file__).resolve().parents[2] / "shared" / "eval"
PYANNOTE = "pyannote/speaker-diarization-3.1: DER 11.2 % on VoxConverse (published, not run here)"


def speaker_model(cache: Path, given: str | None) -> Path:
    from deskscribe.models.speaker_build import convert_resemblyzer
    from deskscribe.speakers.convert import CONVERTER_VERSION, find_resemblyzer_checkpoint

    if given:
        from deskscribe.models.store import resolve_speaker_model

        return resolve_speaker_model(given)
    checkpoint = find_resemblyzer_checkpoint()
    if checkpoint is None:
        raise SystemExit("pip install --no-deps resemblyzer==0.1.4 (or pass --speaker-model)")
    dest = cache / f"speaker-resemblyzer-c{CONVERTER_VERSION}"
    if not (dest / "manifest.json").exists():
        convert_resemblyzer(checkpoint, dest, name="speaker-resemblyzer", overwrite=True)
    return dest


def load_sets(names: list[str], rotations: int, cache: Path) -> list[dict]:
    from deskscribe.audio.decode import decode_audio

    sets = []
    for name in names:
        if name == "call":
            stm = cv.read_stm(EVAL / "two-speakers.stm")
            text: dict[str, str] = {}
            for who, _, _, words in stm:
                text[who] = (text.get(who, "") + " " + words).strip()
            in_order = " ".join(words for *_, words in sorted(stm, key=lambda row: row[1]))
            path = EVAL / "two-speakers.wav"
            sets.append(
                {
                    "name": "call (real)",
                    "path": path,
                    "audio": decode_audio(path),
                    "turns": cv.read_rttm(EVAL / "two-speakers.rttm"),
                    "text": text,
                    "in_order": in_order,
                    "synthetic": False,
                }
            )
            continue
        for r in range(rotations):
            voices, pauses = cv.variant(r)
            conv = cv.build(name, cache / "conversations", voices=voices, pauses=pauses)
            sets.append(
                {
                    "name": f"{name}/{r}",
                    "path": conv.path,
                    "audio": conv.audio,
                    "turns": conv.turns,
                    "text": conv.text_by_speaker(),
                    "in_order": " ".join(t for _, t in conv.texts),
                    "synthetic": True,
                }
            )
    return sets


def measure(s: dict, whisper, encoder, options) -> dict:
    from deskscribe.speakers import metrics
    from deskscribe.speakers.diarize import diarize, diarize_file

    minutes = s["audio"].shape[0] / 16000 / 60
    start, cpu = time.perf_counter(), cpu_seconds()
    alone = diarize(s["audio"], encoder, options)
    diarize_s, diarize_cpu = time.perf_counter() - start, cpu_seconds() - cpu
    start = time.perf_counter()
    transcript, result = diarize_file(whisper, s["path"], encoder, options)
    total_s = time.perf_counter() - start
    score = metrics.der(s["turns"], result.turns, collar=0.25)
    words = [(w.start, w.end, w.speaker) for seg in transcript.segments for w in seg.words]
    hyp: dict[str, str] = {}
    for seg in transcript.segments:
        hyp[seg.speaker or "?"] = hyp.get(seg.speaker or "?", "") + seg.text
    return {
        "set": s["name"],
        "synthetic": s["synthetic"],
        "minutes": minutes,
        "der": score.error,
        "missed": score.rate("missed"),
        "false_alarm": score.rate("false_alarm"),
        "confusion": score.rate("confusion"),
        "scored_s": score.total,
        "found": len(result.speakers),
        "reference": len({t[2] for t in s["turns"]}),
        "same_as_alone": [tuple(t) for t in alone.turns] == [tuple(t) for t in result.turns],
        "word_accuracy": metrics.word_accuracy(s["turns"], words),
        "words": len(words),
        "cpwer": metrics.cpwer(s["text"], hyp),
        "wer": metrics.cpwer({"all": s["in_order"]}, {"all": transcript.text}),
        "diarize_s_per_min": diarize_s / minutes,
        "diarize_cpu_s_per_min": diarize_cpu / minutes,
        "total_s_per_min": total_s / minutes,
    }


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


def table(rows: list[dict]) -> str:
    header = [
        "set", "DER %", "missed %", "FA %", "confusion %", "speakers", "word acc %",
        "cpWER %", "WER %", "diarize s/min", "diarize CPU s/min", "all s/min",
    ]  # fmt: skip
    body = [
        [
            r["set"],
            *(pct(r[k]) for k in ("der", "missed", "false_alarm", "confusion")),
            f"{r['found']}/{r['reference']}",
            *(pct(r[k]) for k in ("word_accuracy", "cpwer", "wer")),
            f"{r['diarize_s_per_min']:.2f}",
            f"{r['diarize_cpu_s_per_min']:.2f}",
            f"{r['total_s_per_min']:.1f}",
        ]
        for r in rows
    ]
    return markdown_table(header, body)


def summary(rows: list[dict]) -> list[dict]:
    """One row per group (each synthetic script over its rotations), DER weighted by time."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["set"].split("/")[0] + (" (all)" if r["synthetic"] else ""), []).append(
            r
        )
    out = []
    for name, rs in groups.items():
        if len(rs) < 2:
            continue
        w = np.array([r["scored_s"] for r in rs])
        words = np.array([r["words"] for r in rs])
        mins = np.array([r["minutes"] for r in rs])

        def avg(key: str, weights: np.ndarray = w, rs: list[dict] = rs) -> float:
            return float(np.sum([r[key] for r in rs] * weights) / weights.sum())

        out.append(
            {
                "set": name,
                "synthetic": True,
                "der": avg("der"),
                "missed": avg("missed"),
                "false_alarm": avg("false_alarm"),
                "confusion": avg("confusion"),
                "found": sum(r["found"] == r["reference"] for r in rs),
                "reference": f"{len(rs)} right",
                "word_accuracy": avg("word_accuracy", words),
                "cpwer": avg("cpwer", words),
                "wer": avg("wer", words),
                "diarize_s_per_min": avg("diarize_s_per_min", mins),
                "diarize_cpu_s_per_min": avg("diarize_cpu_s_per_min", mins),
                "total_s_per_min": avg("total_s_per_min", mins),
            }
        )
    return out


def sweep(sets: list[dict], encoder) -> None:
    """DER and speaker count against the clustering threshold (diarization only)."""
    from deskscribe.speakers import metrics
    from deskscribe.speakers.diarize import DiarizeOptions, diarize

    print("\nthreshold sweep (DER % / speakers found; * marks a wrong count):\n")
    thresholds = [0.26, 0.28, 0.29, 0.30, 0.31, 0.32, 0.33, 0.34, 0.36, 0.40]
    rows = []
    for s in sets:
        row = [s["name"]]
        for thr in thresholds:
            d = diarize(s["audio"], encoder, DiarizeOptions(threshold=thr))
            ok = len(d.speakers) == len({t[2] for t in s["turns"]})
            err = metrics.der(s["turns"], d.turns).error
            row.append(f"{pct(err)}/{len(d.speakers)}{'' if ok else '*'}")
        rows.append(row)
    print(markdown_table(["set", *[f"{t:.2f}" for t in thresholds]], rows))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--whisper", default="tiny.en", choices=["tiny.en", "base"])
    p.add_argument("--speaker-model", help="store name or folder (default: Resemblyzer, converted)")
    p.add_argument("--sets", default="two,three,four,call")
    p.add_argument("--rotations", type=int, default=4, help="variants of each synthetic script")
    p.add_argument("--sweep", action="store_true", help="also sweep the clustering threshold")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = p.parse_args(argv)

    from deskscribe.speakers.diarize import DiarizeOptions
    from deskscribe.speakers.encoder import SpeakerEncoder
    from deskscribe.whisper.model import WhisperModel

    cache = args.cache
    source = ct2_checkpoint(args.whisper, cache)
    folder, _ = built_model(source, cache / "models" / f"{args.whisper}-fp32", "fp32", args.whisper)
    whisper = WhisperModel(folder, device="cpu", threads=args.threads)
    encoder = SpeakerEncoder(speaker_model(cache, args.speaker_model), "cpu", args.threads)
    sets = load_sets(args.sets.split(","), args.rotations, cache)
    options = DiarizeOptions()
    print(f"machine: {machine_line(args.threads)}")
    print(f"speaker model: {encoder.name} ({encoder.kind}); Whisper {args.whisper} fp32\n")
    rows = []
    for s in sets:
        rows.append(measure(s, whisper, encoder, options))
        print(f"  {s['name']}: DER {pct(rows[-1]['der'])} %", file=sys.stderr)
    print(table(rows + summary(rows)))
    print(f"\ncontext: {PYANNOTE}")
    if args.sweep:
        sweep(sets, encoder)
    out = cache / "results" / f"speakers-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "speaker_model": encoder.name}, indent=1))
    print(f"\nraw figures: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
