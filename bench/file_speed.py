"""File transcription speed and accuracy: DeskScribe vs faster-whisper, side by side.

Builds an English recording (JFK's 11 s + espeak-ng sentences in varied voices and speeds,
short pauses between them, reference transcript alongside; 10 minutes by default), then for
each model and precision runs, with the same threads, beam 5 and language en:

- ``faster-whisper``: its sequential ``WhisperModel.transcribe`` (condition on previous text,
  temperature fallback, no VAD);
- ``faster-whisper-batched``: its ``BatchedInferencePipeline`` (Silero VAD, batch 8);
- ``ours``: our sequential seek loop with the same options as faster-whisper's;
- ``ours-batched``: our batched VAD path (``TranscribeOptions(batched=True)``, batch 8).

Precision ``int8enc`` (ours only) pairs the int8 encoder with the fp32 decoder. Each engine
runs in its own child process so that its peak RSS is its own.

    python bench/file_speed.py [--models tiny.en,base] [--precisions fp32,int8]
                               [--engines ...] [--threads N] [--minutes 10] [--repeat 2]
    python bench/file_speed.py --recording call [--precisions fp32,int8,int8-8bit]  # real call
    python bench/file_speed.py --memory [--minutes 10]      # peak RSS: 1 minute vs --minutes

Prints a markdown table (load time, transcription wall time, real-time factor, peak RSS,
WER, ratios) and summary lines. Not a test: figures only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import wave
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    DEFAULT_CACHE,
    built_model,
    call_recording,
    contractions_kept,
    cpu_seconds,
    ct2_checkpoint,
    emit,
    machine_line,
    markdown_table,
    peak_rss_mb,
    rss_mb,
    run_child,
    wer,
)

EVAL = Path(__file__).resolve().parents[2] / "shared" / "eval"
ENGINES = ("faster-whisper", "faster-whisper-batched", "ours", "ours-batched")
BATCH = 8  # chunks per batch for both batched engines (faster-whisper's default)
OURS_ONLY = {"int8enc", "int8-8bit"}  # precisions only we have
FW_COMPUTE = {
    "fp32": "float32",
    "int8": "int8",
    "fp16": "float16",
    "int8enc": None,
    "int8-8bit": None,  # our int8 before graph version 6: 8-bit weights (saturate without VNNI)
}
SAMPLE_RATE = 16000

# Plain words only: no digits, abbreviations or spellings that differ between US and UK
# English, so that WER measures recognition rather than formatting.
SENTENCES = [
    "Good morning everyone, thank you for joining the weekly planning meeting.",
    "Before we start, please make sure your microphone is muted when you are not speaking.",
    "The first item on the agenda is the status of the new release.",
    "Most of the work on the import feature was finished last week.",
    "We still need to fix a few problems with long audio files.",
    "The team found that the export to text files was missing the speaker names.",
    "Sarah will look into that problem and report back on Thursday.",
    "The second item is the budget for the next quarter.",
    "We have spent a little less than we planned, which is good news.",
    "However, the cost of the cloud servers went up again this month.",
    "We should think about moving some of the work to our own computers.",
    "Running the models locally also keeps the recordings private.",
    "Several customers asked whether their audio ever leaves the building.",
    "With the new design, nothing is sent anywhere unless the user asks for it.",
    "The third item is the feedback from the user interviews.",
    "People liked the simple window and the large record button.",
    "Some found the settings page confusing and hard to navigate.",
    "A few users wanted to see the transcript while the meeting is still going on.",
    "That is exactly what the live mode will do when it is ready.",
    "The words appear in grey at first and turn black once they are confirmed.",
    "We also heard that the program should start faster on older laptops.",
    "Loading the model takes most of that time, so we will cache it.",
    "Another request was to search across all past meetings at once.",
    "The history database already stores every session, so this should be easy.",
    "Let us move on to the hiring plan for the summer.",
    "We are looking for two engineers and one designer.",
    "The job descriptions will be posted on the website by the end of the week.",
    "If you know someone who might be a good fit, please send them our way.",
    "Next, a short update on the office move.",
    "The new building is close to the train station and has more meeting rooms.",
    "Boxes will be delivered on Monday, and the movers come on Friday.",
    "Please label your equipment clearly with your name and team.",
    "The kitchen will be closed during the last two days of the move.",
    "Now for some questions from the group.",
    "Someone asked whether the application works without an internet connection.",
    "The answer is yes, once the model has been downloaded the first time.",
    "Another question was about the accuracy for people with strong accents.",
    "The larger models handle accents much better than the small ones.",
    "On a machine with a graphics card, the large model runs comfortably in real time.",
    "On a plain laptop, the smaller models are the better choice.",
    "We will publish a short guide to help people pick the right model.",
    "The weather this week has been cold and windy along the coast.",
    "Heavy rain is expected on Saturday, with sunshine returning on Sunday afternoon.",
    "Farmers in the valley are worried about flooding near the river.",
    "The local council has opened a shelter in the old school hall.",
    "Volunteers are bringing blankets, hot soup and fresh bread every evening.",
    "In other news, the city library will extend its opening hours.",
    "Students will be able to study there until midnight during the exam period.",
    "The museum is planning an exhibition about the history of the railway.",
    "It will include old photographs, maps and a restored steam engine.",
    "Tickets go on sale next month and children under twelve enter for free.",
    "A new bicycle path will connect the harbour district with the park.",
    "The path should be finished before the end of the summer.",
    "Traffic on the main bridge will be reduced to one lane during the work.",
    "Drivers are advised to leave early and allow extra time for their journey.",
    "The recipe calls for flour, butter, sugar and a pinch of salt.",
    "Mix the dry ingredients first, then slowly add the melted butter.",
    "Bake the cake in a hot oven for about forty minutes.",
    "Let it cool completely before you cut it into slices.",
    "My grandmother always served it with fresh cream and strawberries.",
    "The children spent the whole afternoon playing in the garden.",
    "They built a small wooden house for the birds near the apple tree.",
    "Later they walked down to the lake to watch the boats.",
    "The sun was setting and the water turned a deep shade of orange.",
    "On the way home they stopped to buy ice cream from a small shop.",
    "Learning a new language takes patience and a lot of practice.",
    "Listening to the radio every day can help you get used to the sounds.",
    "Reading simple stories is a good way to learn new words.",
    "Do not be afraid to make mistakes when you speak.",
    "Most people are happy to help if you ask them politely.",
    "That brings us to the end of the meeting, thank you all for your time.",
    "The notes will be shared this afternoon, and we will meet again next week.",
]
# espeak-ng voices (+variant) with speed (words per minute) and pitch.
VOICES = [
    ("en-us", 160, 50),
    ("en-gb", 150, 45),
    ("en-us+f3", 170, 60),
    ("en-gb-scotland", 145, 40),
    ("en-gb+f2", 155, 65),
    ("en-029", 150, 50),
    ("en-us+m3", 180, 35),
    ("en-gb-x-rp+f4", 165, 55),
]


# --------------------------------------------------------------------------- test audio


def _write_wav(path: Path, samples: np.ndarray) -> None:
    pcm = np.clip(np.rint(samples * 32767.0), -32768, 32767).astype("<i2")
    tmp = path.with_suffix(".tmp")
    with wave.open(str(tmp), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(pcm.tobytes())
    tmp.replace(path)


def _level(x: np.ndarray, peak: float = 0.6) -> np.ndarray:
    m = float(np.max(np.abs(x))) if x.size else 0.0
    return x * (peak / m) if m > 0 else x


def make_recording(cache: Path, minutes: float) -> tuple[Path, str, float]:
    """(wav path, reference text, duration s); generated once per settings, then reused."""
    from deskscribe.audio.decode import decode_audio

    jfk_text = (EVAL / "jfk.txt").read_text(encoding="utf-8").strip()
    key = hashlib.sha256(
        json.dumps([SENTENCES, VOICES, float(minutes), jfk_text]).encode()
    ).hexdigest()[:10]
    wav = cache / "audio" / f"speech-{minutes:g}min-{key}.wav"
    ref = wav.with_suffix(".txt")
    if wav.exists() and ref.exists():
        with wave.open(str(wav)) as w:
            return wav, ref.read_text(encoding="utf-8"), w.getnframes() / SAMPLE_RATE
    if shutil.which("espeak-ng") is None:
        raise SystemExit(
            "espeak-ng is needed to make the test recording (apt-get install espeak-ng)"
        )
    wav.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    pieces = [_level(decode_audio(EVAL / "jfk.flac"))]
    texts = [jfk_text]
    total = pieces[0].shape[0] / SAMPLE_RATE
    target = minutes * 60.0
    i = 0
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir) / "s.wav"
        while total < target:
            text = SENTENCES[i % len(SENTENCES)]
            # A later pass over the sentences (long --minutes) gives each one another voice.
            voice, speed, pitch = VOICES[(i + 3 * (i // len(SENTENCES))) % len(VOICES)]
            cmd = [
                "espeak-ng",
                "-v",
                voice,
                "-s",
                str(speed),
                "-p",
                str(pitch),
                "-w",
                str(tmp),
                text,
            ]
            subprocess.run(cmd, check=True, capture_output=True)
            gap = np.zeros(int(rng.uniform(0.3, 1.0) * SAMPLE_RATE), np.float32)
            speech = _level(decode_audio(tmp), float(rng.uniform(0.4, 0.8)))
            pieces += [gap, speech]
            texts.append(text)
            total += (gap.shape[0] + speech.shape[0]) / SAMPLE_RATE
            i += 1
    pieces.append(np.zeros(SAMPLE_RATE // 2, np.float32))
    audio = np.concatenate(pieces)
    _write_wav(wav, audio)
    ref.write_text(" ".join(texts), encoding="utf-8")
    return wav, ref.read_text(encoding="utf-8"), audio.shape[0] / SAMPLE_RATE


# --------------------------------------------------------------------------- child side


def worker(engine: str, model_dir: str, precision: str, audio: str, threads: int) -> None:
    """Load one engine, transcribe once, emit figures. Runs in its own process."""
    base_rss = rss_mb()
    if engine.startswith("ours"):
        from deskscribe.whisper.model import WhisperModel
        from deskscribe.whisper.transcribe import TranscribeOptions, transcribe_file

        start = time.perf_counter()
        model = WhisperModel(model_dir, device="cpu", threads=threads)
        loaded = time.perf_counter()
        load_rss, cpu0 = rss_mb(), cpu_seconds()
        batched = engine == "ours-batched"
        options = TranscribeOptions(
            language="en",
            beam_size=5,
            # as faster-whisper's sequential transcribe; the batched path has no previous text
            condition_on_previous_text=None if batched else True,
            word_timestamps=False,
            batched=batched,
            batch_size=BATCH,
        )
        transcript = transcribe_file(model, audio, options)
        text = " ".join(s.text.strip() for s in transcript.segments)
        n_segments = len(transcript.segments)
    else:
        from faster_whisper import BatchedInferencePipeline
        from faster_whisper import WhisperModel as FasterWhisper

        start = time.perf_counter()
        model = FasterWhisper(
            model_dir,
            device="cpu",
            compute_type=FW_COMPUTE[precision],
            cpu_threads=threads,
            num_workers=1,
        )
        loaded = time.perf_counter()
        load_rss, cpu0 = rss_mb(), cpu_seconds()
        if engine == "faster-whisper-batched":
            segments, _info = BatchedInferencePipeline(model).transcribe(
                audio, language="en", beam_size=5, batch_size=BATCH, word_timestamps=False
            )
        else:
            segments, _info = model.transcribe(
                audio,
                language="en",
                beam_size=5,
                condition_on_previous_text=True,
                vad_filter=False,
                word_timestamps=False,
            )
        segments = list(segments)
        text = " ".join(s.text.strip() for s in segments)
        n_segments = len(segments)
    done = time.perf_counter()
    emit(
        {
            "load_s": loaded - start,
            "transcribe_s": done - loaded,
            "transcribe_cpu_s": cpu_seconds() - cpu0,
            "child_cpu_s": cpu_seconds(),
            "peak_rss_mb": peak_rss_mb(),
            "base_rss_mb": base_rss,
            "load_rss_mb": load_rss,
            "segments": n_segments,
            "text": text,
        }
    )


# --------------------------------------------------------------------------- parent side


def prepare_models(model: str, precision: str, cache: Path) -> dict[str, str]:
    """Model folders for both engines (ours built from the same CT2 weights, cached)."""
    ct2 = ct2_checkpoint(model, cache)
    folders = {"faster-whisper": str(ct2), "faster-whisper-batched": str(ct2)}
    if precision == "int8enc":
        ours = hybrid_model(model, cache)
    elif precision == "int8-8bit":
        ours = eight_bit_model(ct2, model, cache)
    else:
        ours, seconds = built_model(
            ct2, cache / "models" / f"{model}-{precision}", precision, f"{model}-{precision}"
        )
        if seconds is not None:
            print(f"built {ours.name} in {seconds:.1f} s", flush=True)
    folders["ours"] = folders["ours-batched"] = str(ours)
    return folders


def eight_bit_model(ct2: Path, model: str, cache: Path) -> Path:
    """Our int8 as it was built before graph version 6 (weights in -127..127), to compare."""
    from deskscribe.whisper import graph

    saved = graph.INT8_WEIGHT_LEVELS
    graph.INT8_WEIGHT_LEVELS = 127
    try:
        dest = cache / "models" / f"{model}-int8-8bit"
        ours, seconds = built_model(ct2, dest, "int8", f"{model}-int8-8bit")
    finally:
        graph.INT8_WEIGHT_LEVELS = saved
    if seconds is not None:
        print(f"built {ours.name} (8-bit weights) in {seconds:.1f} s", flush=True)
    return ours


def hybrid_model(model: str, cache: Path) -> Path:
    """The int8 build's encoder with the fp32 build's decoder (links to both builds): what
    int8 costs in accuracy and buys in speed when only the encoder is quantized."""
    fp32 = Path(prepare_models(model, "fp32", cache)["ours"])
    int8 = Path(prepare_models(model, "int8", cache)["ours"])
    folder = cache / "models" / f"{model}-int8enc"
    folder.mkdir(parents=True, exist_ok=True)
    for name, src in (
        ("encoder.onnx", int8),
        ("encoder.onnx.data", int8),
        ("decoder.onnx", fp32),
        ("decoder.onnx.data", fp32),
        ("tokenizer.json", fp32),
    ):
        link = folder / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(src / name)
    manifest = json.loads((fp32 / "manifest.json").read_text(encoding="utf-8"))
    manifest["name"] = f"{model}-int8enc"
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return folder


def _fmt(value: float | None, spec: str) -> str:
    return (
        "–"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else format(value, spec)
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="tiny.en,base")
    p.add_argument("--precisions", default="fp32,int8")
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument(
        "--recording",
        choices=["synthetic", "call"],
        default="synthetic",
        help="synthetic: JFK + espeak-ng sentences (--minutes); call: the real phone call in "
        "shared/eval (two-speakers.wav, WER against its .stm, contractions counted)",
    )
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    p.add_argument("--repeat", type=int, default=2, help="runs per engine; the fastest counts")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per engine run")
    p.add_argument(
        "--memory",
        action="store_true",
        help="peak RSS of our engines on a 1-minute recording and on a --minutes one",
    )
    p.add_argument(
        "--worker",
        nargs=5,
        metavar=("ENGINE", "MODEL_DIR", "PRECISION", "AUDIO", "THREADS"),
        help=argparse.SUPPRESS,
    )
    args = p.parse_args(argv)
    if args.worker:
        engine, model_dir, precision, audio, threads = args.worker
        worker(engine, model_dir, precision, audio, int(threads))
        return 0

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    precisions = [q.strip() for q in args.precisions.split(",") if q.strip()]
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    for e in engines:
        if e not in ENGINES:
            raise SystemExit(f"unknown engine {e!r}; use one of {', '.join(ENGINES)}")
    for q in precisions:
        if q not in FW_COMPUTE:
            raise SystemExit(f"unknown precision {q!r}; use one of {', '.join(FW_COMPUTE)}")
    cache = args.cache.resolve()
    if args.memory:
        return memory_main(args, models, precisions, cache)
    if args.recording == "call":
        audio, reference, duration = call_recording(EVAL)
    else:
        audio, reference, duration = make_recording(cache, args.minutes)
    print(f"audio: {audio} ({duration / 60:.1f} min, {len(reference.split())} words)")
    print(f"machine: {machine_line(args.threads)}", flush=True)

    results = []
    for model in models:
        for precision in precisions:
            folders = prepare_models(model, precision, cache)
            these = [e for e in engines if e.startswith("ours") or precision not in OURS_ONLY]
            runs = measure(these, folders, model, precision, audio, args)
            for engine in these:
                results.append(best_of(runs[engine], model, precision, engine, reference, duration))

    print()
    print(render(results))
    print()
    print(summary(results))
    out = cache / "results" / f"file_speed-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "audio": str(audio),
        "duration_s": duration,
        "threads": args.threads,
        "repeat": args.repeat,
        "batch": BATCH,
        "reference": reference,
    }
    out.write_text(json.dumps({"meta": meta, "results": results}, indent=1), encoding="utf-8")
    print(f"(transcripts and raw figures: {out})")
    return 0 if all("error" not in r for r in results) else 1


def measure(
    engines: list[str], folders: dict[str, str], model: str, precision: str, audio: Path, args
) -> dict[str, list[dict]]:
    """``args.repeat`` runs of each engine, each in a child process."""
    runs: dict[str, list[dict]] = {e: [] for e in engines}
    for rep in range(args.repeat):
        # Alternate the order so that drift in machine load does not favour one engine.
        for engine in engines if rep % 2 == 0 else engines[::-1]:
            print(
                f"running {engine} {model} {precision} (run {rep + 1}/{args.repeat}) ...",
                flush=True,
            )
            r = run_child(
                Path(__file__),
                ["--worker", engine, folders[engine], precision, str(audio), str(args.threads)],
                timeout=args.timeout,
            )
            print(f"  {describe_run(r)}", flush=True)
            runs[engine].append(r)
    return runs


def memory_main(args, models: list[str], precisions: list[str], cache: Path) -> int:
    """Peak RSS of our engines on 1 minute and on ``--minutes`` of the same kind of audio."""
    engines = [e for e in args.engines.split(",") if e.startswith("ours")] or ["ours-batched"]
    print(f"machine: {machine_line(args.threads)}", flush=True)
    rows = []
    for model in models:
        for precision in precisions:
            folders = prepare_models(model, precision, cache)
            for minutes in (1.0, args.minutes):
                audio, reference, duration = make_recording(cache, minutes)
                runs = measure(engines, folders, model, precision, audio, args)
                for engine in engines:
                    r = best_of(runs[engine], model, precision, engine, reference, duration)
                    rows.append((model, precision, engine, duration, r))
    table = []
    for model, precision, engine, duration, r in rows:
        if "error" in r:
            table.append([model, precision, engine, f"{duration / 60:.1f}", "failed", "", ""])
            continue
        table.append(
            [
                model,
                precision,
                engine,
                f"{duration / 60:.1f}",
                _fmt(r["load_rss_mb"], ".0f"),
                _fmt(r["peak_rss_mb"], ".0f"),
                _fmt(r["transcribe_s"], ".1f"),
            ]
        )
    print()
    header = [
        "model",
        "precision",
        "engine",
        "audio min",
        "RSS after load MiB",
        "peak RSS MiB",
        "transcribe s",
    ]
    print(markdown_table(header, table))
    return 0 if all("error" not in r for *_, r in rows) else 1


def describe_run(r: dict) -> str:
    if "error" in r:
        return f"failed: {r['error']}"
    line = f"load {r['load_s']:.2f} s, transcribe {r['transcribe_s']:.1f} s ({r['transcribe_cpu_s']:.0f} CPU-s)"
    if "system_busy_s" in r:
        others = max(0.0, r["system_busy_s"] - r["child_cpu_s"])
        line += f"; other processes {others:.0f} CPU-s, steal {r['steal_s']:.0f} s"
    return line


def best_of(
    runs: list[dict], model: str, precision: str, engine: str, reference: str, duration: float
) -> dict:
    """The fastest good run (transcripts are deterministic; timings are what varies)."""
    good = [r for r in runs if "error" not in r]
    if not good:
        return {**runs[-1], "model": model, "precision": precision, "engine": engine}
    best = dict(min(good, key=lambda r: r["transcribe_s"]))
    best.update(
        model=model,
        precision=precision,
        engine=engine,
        wer=wer(reference, best["text"]),
        contractions=contractions_kept(reference, best["text"]),
        rtf=best["transcribe_s"] / duration,
        peak_rss_mb=max(r["peak_rss_mb"] for r in good),
        all_transcribe_s=[r["transcribe_s"] for r in good],
        all_wer=[wer(reference, r["text"]) for r in good],
    )
    return best


def _fw_best(results: list[dict], model: str) -> dict | None:
    """faster-whisper's fastest run on ``model`` (any engine, any precision)."""
    fw = [
        r
        for r in results
        if r["model"] == model and r["engine"].startswith("faster") and "error" not in r
    ]
    return min(fw, key=lambda r: r["transcribe_s"]) if fw else None


def _ours_seq(results: list[dict], r: dict) -> dict | None:
    for o in results:
        if (
            o["engine"] == "ours"
            and o["model"] == r["model"]
            and o["precision"] == r["precision"]
            and "error" not in o
        ):
            return o
    return None


def render(results: list[dict]) -> str:
    header = [
        "model",
        "precision",
        "engine",
        "load s",
        "transcribe s",
        "CPU s",
        "RTF",
        "peak RSS MiB",
        "WER %",
        "contractions",
        "time / fw best",
        "speed-up vs ours seq",
    ]
    rows = []
    for r in results:
        if "error" in r:
            rows.append([r["model"], r["precision"], r["engine"], "failed", *[""] * 8])
            continue
        best = _fw_best(results, r["model"])
        seq = _ours_seq(results, r) if r["engine"] == "ours-batched" else None
        rows.append(
            [
                r["model"],
                r["precision"],
                r["engine"],
                _fmt(r["load_s"], ".2f"),
                _fmt(r["transcribe_s"], ".1f") + (" *" if disturbed(r) else ""),
                _fmt(r["transcribe_cpu_s"], ".0f"),
                _fmt(r["rtf"], ".3f"),
                _fmt(r["peak_rss_mb"], ".0f"),
                _fmt(100 * r["wer"], ".1f"),
                "{}/{}".format(*r["contractions"]),
                f"{r['transcribe_s'] / best['transcribe_s']:.2f}x" if best else "",
                f"{seq['transcribe_s'] / r['transcribe_s']:.2f}x" if seq else "",
            ]
        )
    table = markdown_table(header, rows)
    if any(disturbed(r) for r in results if "error" not in r):
        table += "\n* other processes used over 10 % of the CPUs even in the fastest run: rerun it"
    return table


def disturbed(r: dict) -> bool:
    """True when other processes (or the hypervisor) took > 10 % of the machine during the run."""
    if "system_busy_s" not in r:
        return False
    others = max(0.0, r["system_busy_s"] - r["child_cpu_s"]) + r["steal_s"]
    wall = r["load_s"] + r["transcribe_s"]
    return others > 0.1 * wall * (os.cpu_count() or 1)


def summary(results: list[dict]) -> str:
    """Per model: our best against faster-whisper's best (wall time, WER), and what batching
    buys over our sequential path at each precision."""
    ok = [r for r in results if "error" not in r]
    lines = []
    for model in dict.fromkeys(r["model"] for r in ok):
        fw = _fw_best(ok, model)
        ours = [r for r in ok if r["model"] == model and r["engine"].startswith("ours")]
        if fw and ours:
            best = min(ours, key=lambda r: r["transcribe_s"])
            # Our fastest configuration whose WER is within one point of faster-whisper's best.
            fair = [r for r in ours if r["wer"] <= fw["wer"] + 0.01]
            line = (
                f"{model}: our best {best['engine']} {best['precision']} "
                f"{best['transcribe_s']:.1f} s (WER {100 * best['wer']:.1f} %) vs faster-whisper's "
                f"best {fw['engine']} {fw['precision']} {fw['transcribe_s']:.1f} s "
                f"(WER {100 * fw['wer']:.1f} %): {best['transcribe_s'] / fw['transcribe_s']:.2f}x"
            )
            if fair:
                f = min(fair, key=lambda r: r["transcribe_s"])
                line += (
                    f"; within 1 WER point of it: {f['engine']} {f['precision']} "
                    f"{f['transcribe_s'] / fw['transcribe_s']:.2f}x"
                )
            else:
                line += "; none of ours is within 1 WER point of it"
            lines.append(line)
        for r in ours:
            seq = _ours_seq(ok, r) if r["engine"] == "ours-batched" else None
            if seq:
                lines.append(
                    f"{model} {r['precision']}: batched {seq['transcribe_s'] / r['transcribe_s']:.2f}x "
                    f"faster than our sequential; WER {100 * r['wer']:.1f} % vs "
                    f"{100 * seq['wer']:.1f} % ({100 * (r['wer'] - seq['wer']):+.1f} points)"
                )
    return "\n".join(lines) if lines else "summary: nothing to compare"


if __name__ == "__main__":
    sys.exit(main())
