"""``deskscribe translate INPUT --to LANG``: the transcript in another language, segment by
segment, by a local language model (the options of ``deskscribe notes`` choose it), each
segment keeping its times, so that subtitles come out in that language. INPUT is a
transcript saved as JSON, or a recording (transcribed first).

JSON is the whole transcript, the original with the translation as a second track
(``translations``); every other format (srt, vtt, txt, …) is written in the target language
(``Transcript.translated``), with the original's times. Default: ``INPUT-stem.LANG.json``
next to INPUT (or in ``--output-dir``); ``-o FILE`` writes one file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .cli_notes import EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError, add_llm_args
from .cli_transcribe import add_subtitle_options


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "translate",
        help="translate a transcript into another language with a local language model",
    )
    p.add_argument("input", type=Path, help="a transcript saved as JSON, or a recording")
    p.add_argument("--to", required=True, metavar="LANG",
                   help="the language to translate into: a code (fr, de, pt-br) or a name "
                   "(French)")  # fmt: skip
    p.add_argument("--format",
                   help="comma-separated: json (the original with the translation as a second "
                   "track), srt, vtt, txt, md, csv, docx (in the target language); default: "
                   "json")  # fmt: skip
    p.add_argument("--output-dir", type=Path, help="write INPUT.LANG.FORMAT there "
                   "(default: next to INPUT)")  # fmt: skip
    p.add_argument("-o", "--output", type=Path, help="write one file here")
    add_llm_args(p)
    add_subtitle_options(p)
    p.add_argument("--quiet", action="store_true", help="no progress")


def translate(args: argparse.Namespace) -> int:
    from .cli_notes import llm_from_args, load_input
    from .cli_transcribe import parse_formats, subtitle_rules
    from .llm.endpoint import LLMError
    from .llm.translate import LanguageError
    from .service import translate as service
    from .transcript.export import FORMATS, export

    try:
        key, _ = service.target(args.to)
    except LanguageError as e:
        return _err(str(e))
    formats = parse_formats(args.format or "json")
    if formats is None:
        return EXIT_USAGE
    if not formats:
        return _err(f"give a format: any of {','.join(FORMATS)}")
    if args.output is not None:
        if len(formats) > 1:
            return _err("-o writes one file: give one --format, or --output-dir")
        suffix = args.output.suffix.lower().lstrip(".")
        if args.format is None and suffix in FORMATS:  # no --format: the file's suffix
            formats = [suffix]
    progress = None
    if not args.quiet:
        progress = lambda d, t: print(f"translate: {d} of {t} lines", file=sys.stderr)  # noqa: E731
    try:
        llm = llm_from_args(args)
        transcript = load_input(args.input)
        result = service.translate(transcript, args.to, llm=llm, progress=progress)
    except UsageError as e:
        return _err(str(e))
    except (LLMError, RuntimeError) as e:
        return _err(str(e), EXIT_FAILED)
    rules = subtitle_rules(args)
    stem = args.input.name.rsplit(".", 1)[0] if "." in args.input.name else args.input.name
    folder = args.output_dir if args.output_dir is not None else args.input.parent
    try:
        if args.output is None:
            folder.mkdir(parents=True, exist_ok=True)
        for fmt in formats:
            target_path = args.output or folder / f"{stem}.{key}.{fmt}"
            shown = result if fmt == "json" else result.translated(key)
            export(shown, target_path, fmt, overwrite=True, private=True, subtitles=rules)
            print(target_path)
    except OSError as e:
        return _err(f"could not write the translation: {e}", EXIT_FAILED)
    missing = len(service.untranslated(result, key))
    if missing:
        lines = "line was" if missing == 1 else "lines were"
        print(f"deskscribe translate: {missing} {lines} not translated (the model gave no "
              "translation); they keep the original text", file=sys.stderr)  # fmt: skip
    return EXIT_OK


def _err(message: str, code: int = EXIT_USAGE) -> int:
    print(f"deskscribe translate: {message}", file=sys.stderr)
    return code
