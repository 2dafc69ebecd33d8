"""``deskscribe transcribe``: files to transcripts in the terminal; and the options it shares
with ``deskscribe watch`` (``add_job_options``).

Exit codes: 0 all files succeeded, 1 at least one file failed, 2 bad usage or no model.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _err(message: str) -> None:
    print(f"deskscribe: {message}", file=sys.stderr)


def add_job_options(t: argparse.ArgumentParser) -> None:
    """What a file job is asked to do: shared by ``transcribe`` and ``watch``."""
    t.add_argument(
        "--model",
        help="model name in the store, or a built model folder (default: newest installed)",
    )
    t.add_argument(
        "--language", help="language code, e.g. en, de (default: detected for each part)"
    )
    t.add_argument(
        "--languages",
        metavar="CODES",
        help="detect only these languages, e.g. en,de (a file that switches between them)",
    )
    t.add_argument(
        "--format",
        default="txt",
        help="comma-separated: txt,srt,vtt,json,md,csv,docx,rttm (default: txt)",
    )
    t.add_argument("--output-dir", type=Path, help="where to write (default: next to each file)")
    t.add_argument(
        "--device", choices=["auto", "cpu", "cuda", "directml", "coreml"], default="auto"
    )
    t.add_argument("--threads", type=int, default=0, help="CPU threads (0: ONNX Runtime's choice)")
    t.add_argument(
        "--vocabulary",
        metavar="WORDS",
        help='names and jargon to spell as written, comma-separated: "ComfyUI, Kubernetes, '
        'Dr. Okafor" (in the prompt of every window, with --initial-prompt)',
    )
    t.add_argument(
        "--batched",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="batched path (default): find speech with the VAD and decode 30 s chunks several "
        "at a time, faster; --no-batched: the sequential path, window after window, each "
        "conditioned on the text before it",
    )
    t.add_argument(
        "--speakers",
        metavar="auto|N|MIN-MAX",
        help="label who speaks: auto (count found), a count such as 2, or a range such as 2-4",
    )
    add_subtitle_options(t)
    t.add_argument("--quiet", action="store_true", help="no progress bars")


def _rule(name: str):
    """An argparse type for the subtitle rule ``name``: its limits, said when broken."""
    from .transcript.subtitles import rule_value

    def convert(text: str) -> int | float:
        try:
            return rule_value(name, text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return convert


def add_subtitle_options(t: argparse.ArgumentParser) -> None:
    """How SRT and VTT exports lay out their cues (``transcript.subtitles.SubtitleRules``)."""
    g = t.add_argument_group(
        "subtitles (srt, vtt)",
        "Cues are cut at sentence ends, then pauses and punctuation, by word times (computed "
        "whenever srt or vtt is among the formats).",
    )
    g.add_argument("--max-line-chars", type=_rule("max_line_chars"), default=42, metavar="N",
                   help="characters per line, at most (default: 42)")  # fmt: skip
    g.add_argument("--max-lines", type=_rule("max_lines"), default=2, metavar="N",
                   help="lines per cue, at most (default: 2)")  # fmt: skip
    g.add_argument("--max-cue-seconds", type=_rule("max_cue_seconds"), default=7.0, metavar="S",
                   help="seconds a cue stays on screen, at most (default: 7)")  # fmt: skip
    g.add_argument("--min-cue-gap", type=_rule("min_cue_gap"), default=0.08, metavar="S",
                   help="seconds between two cues, at least (default: 0.08; 0: none)")  # fmt: skip
    g.add_argument("--speaker-names", action=argparse.BooleanOptionalAction, default=True,
                   help="the speaker's name before a cue where the speaker changes, when "
                   "speakers are labelled (default: on)")  # fmt: skip


def subtitle_rules(args: argparse.Namespace):
    """The ``SubtitleRules`` of the command's subtitle options."""
    from .transcript.subtitles import SubtitleRules

    return SubtitleRules(
        max_line_chars=args.max_line_chars, max_lines=args.max_lines,
        max_cue_seconds=args.max_cue_seconds, min_cue_gap=args.min_cue_gap,
        speaker_names=args.speaker_names,
    )  # fmt: skip


def add_parser(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("transcribe", help="transcribe audio or video files")
    t.add_argument("files", nargs="+", type=Path)
    add_job_options(t)
    t.add_argument("--task", choices=["transcribe", "translate"], default="transcribe")
    t.add_argument("--overwrite", action="store_true", help="replace existing output files")
    t.add_argument("--beam-size", type=int, default=5, help="1 for greedy decoding")
    t.add_argument(
        "--word-timestamps",
        action="store_true",
        help="time every word (JSON keeps them; on by itself with srt or vtt)",
    )
    t.add_argument("--initial-prompt", help="text that primes vocabulary and style")
    t.add_argument(
        "--batch-size", type=int, default=0, help="chunks per batch (0: chosen for the device)"
    )
    t.add_argument(
        "--condition-on-previous-text",
        action="store_true",
        help="prompt each window with the text before it (uses the sequential path)",
    )
    t.add_argument("--timestamps", action="store_true", help="put [hh:mm:ss] on each TXT line")
    t.add_argument(
        "--speaker-model",
        metavar="NAME|FOLDER",
        help="speaker model for --speakers (default: WeSpeaker if installed, else Resemblyzer)",
    )
    t.add_argument(
        "--channels",
        choices=["mix", "split"],
        default="mix",
        help="mix (default): one mix of all channels; split: transcribe each channel on its own "
        "and label its words by channel (Left, Right, …), for calls recorded with one party "
        "per channel",
    )
    t.add_argument(
        "--library",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also keep the transcripts in the app's library, as the window's file queue does "
        "(default: the `transcribe_library` setting, off)",
    )
    t.add_argument("--ray", metavar="ADDRESS",
                   help="spread the files over this Ray cluster (auto: the one on this machine)")  # fmt: skip


def parse_formats(text: str) -> list[str] | None:
    """The export formats of ``--format``; None after saying which are unknown."""
    from .transcript.export import FORMATS

    formats = list(dict.fromkeys(f.strip().lower() for f in text.split(",") if f.strip()))
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        _err(f"unknown format {', '.join(unknown)}; use any of: {','.join(FORMATS)}")
        return None
    return formats


def transcribe(args: argparse.Namespace) -> int:
    if args.ray:
        from .cli_cluster import transcribe_on_ray

        return transcribe_on_ray(args, subtitle_rules(args))
    from .service.files import plan_outputs

    formats = parse_formats(args.format)
    if formats is None:
        return EXIT_USAGE
    if args.channels == "split" and (args.speakers is not None or args.speaker_model is not None):
        _err("--channels split labels speakers by channel; leave out --speakers/--speaker-model")
        return EXIT_USAGE
    engine = _engine(args, formats)
    if engine is None:
        return EXIT_USAGE
    model, speakers, encoder, options = engine
    speakers = "channels" if args.channels == "split" else speakers or "off"
    library = _library(args)
    notes_shown = len(model.runtime.notes)
    failed = 0
    for path, targets, skipped in plan_outputs(args.files, args.output_dir, formats,
                                               args.overwrite):  # fmt: skip
        if skipped is not None:
            _err(skipped)
            failed += 1
            continue
        transcript = _one(args, path, model, options, speakers, encoder)
        if transcript is None or not _exported(args, path, transcript, formats, targets):
            failed += 1
            continue
        if library is not None:
            _keep(library, path, transcript, model.name, args.language, speakers)
    for note in model.runtime.notes[notes_shown:]:
        _err(note)
    if library is not None:
        library.close()
    return EXIT_FAILED if failed else EXIT_OK


def _engine(args: argparse.Namespace, formats: list[str]):
    """(model, speakers, encoder, TranscribeOptions) loaded and checked before any work;
    None after saying why it cannot be."""
    from .service.failures import describe_failure
    from .service.files import transcribe_options
    from .service.jobs import FileJob
    from .service.models import ModelCache
    from .whisper.prompt import plan_prompt
    from .whisper.transcribe import batching_fits, language_set

    models = ModelCache(threads=args.threads)
    speakers = encoder = None
    if args.speakers is not None or args.speaker_model is not None:
        setup = speaker_setup(args, models)
        if setup is None:
            return None
        speakers, encoder = setup
    try:
        model = models.model(args.model, args.device)
        languages = language_set(args.languages, model.tokenizer)
    except Exception as err:  # not installed, broken, a device or a language refused
        _err(describe_failure(err).text)
        return None
    for note in model.runtime.notes:
        _err(note)
    options = transcribe_options(FileJob(
        source=Path(), language=args.language, languages=languages, task=args.task,
        beam_size=args.beam_size if args.beam_size > 1 else None,
        word_timestamps=args.word_timestamps, initial_prompt=args.initial_prompt,
        vocabulary=args.vocabulary,
        condition_on_previous_text=True if args.condition_on_previous_text else None,
        batched=args.batched, batch_size=max(0, args.batch_size), exports=tuple(formats),
    ))  # fmt: skip
    vocabulary = plan_prompt(model.tokenizer, model.dims.n_text_ctx, args.vocabulary)
    if vocabulary.note:
        _err(vocabulary.note)
    unfit = batching_fits(options) if options.batched else None
    if not args.quiet:
        path_used = "batched" if options.batched and unfit is None else "sequential"
        print(f"model {model.name} ({model.variant}) on {model.runtime.label}, {path_used} path"
              + (f" ({unfit})" if unfit else ""), file=sys.stderr)  # fmt: skip
    return model, speakers, encoder, options


def _one(args, path: Path, model, options, speakers, encoder):
    """The transcript of one file, or None after saying why it failed (the batch goes on)."""
    from .cli_progress import bar_progress, file_bar
    from .service.failures import describe_failure
    from .service.files import transcribe_media

    notes: list[str] = []
    try:
        with file_bar(path.name, args.quiet) as bar:
            transcript = transcribe_media(
                model, path, options,
                speakers=speakers, encoder=encoder, progress=bar_progress(bar), cancel=threading.Event(),
                notes=notes, warn=_err,
            )  # fmt: skip
    except Exception as err:  # one file fails alone
        text = describe_failure(err).text
        _err(text if str(path) in text else f"{path}: {text}")
        return None
    for note in notes:
        _err(note)
    return transcript


def _exported(args, path: Path, transcript, formats: list[str], targets: list[Path]) -> bool:
    """Write the exports; on failure keep the work in ``rescued/`` and say where."""
    from .library.rescue import rescue_note
    from .transcript.export import ExportExistsError, export

    rules = subtitle_rules(args)
    try:
        targets[0].parent.mkdir(parents=True, exist_ok=True)
        for fmt, target in zip(formats, targets, strict=True):
            export(transcript, target, fmt, overwrite=args.overwrite, timestamps=args.timestamps,
                   subtitles=rules)  # fmt: skip
            if not args.quiet:
                print(target, file=sys.stderr)
    except (ExportExistsError, OSError, ValueError) as err:
        _err(f"{path}: " + rescue_note(transcript, path, f"the export failed ({err})"))
        return False
    return True


def _library(args: argparse.Namespace):
    """The app's library when the transcripts go there too (``--library``, or the
    ``transcribe_library`` setting); None otherwise, or when it cannot be opened (said)."""
    from . import settings
    from .library import Library, LibraryError

    wanted = (
        args.library if args.library is not None else settings.flag("transcribe_library", False)
    )
    if not wanted:
        return None
    try:
        return Library()
    except LibraryError as err:
        _err(f"{err} (the transcripts are written, but not kept in the library)")
        return None


def _keep(library, path: Path, transcript, model: str, language, speakers) -> None:
    """The finished file in the library, as the window's queue would have it."""
    from .library import LibraryError
    from .service.queue import job_options

    try:
        item = library.add_file(path, job_options(model, language, speakers))
        library.save_transcript(item, transcript)
        library.update(item, status="done", progress=1.0, duration=transcript.duration)
    except (LibraryError, OSError) as err:
        _err(f"{path}: not kept in the library ({err})")


def speaker_setup(args: argparse.Namespace, models):
    """(the speakers option, the speaker encoder) for --speakers, loaded now so that a missing
    model is said before any work; None after saying why it cannot be. A speaker model that is
    there but unusable (corrupt, of an unknown kind) is named, and the files are transcribed
    without speaker labels: (None, None)."""
    from .models.store import ModelNotInstalledError
    from .speakers.diarize import parse_speakers
    from .speakers.encoder import SpeakerModelError
    from .whisper.runtime import DeviceError

    try:
        speakers = args.speakers or "auto"
        parse_speakers(speakers)
        encoder = models.speaker_encoder(args.device, getattr(args, "speaker_model", None))
    except SpeakerModelError as err:
        _err(f"{err}\nspeaker labels are off: the transcripts are written without them")
        return None, None
    except (ValueError, ModelNotInstalledError, DeviceError) as err:
        _err(str(err))
        return None
    if not args.quiet:
        print(f"speakers: {encoder.name} ({encoder.kind})", file=sys.stderr)
    return speakers, encoder
