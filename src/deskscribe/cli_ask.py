"""``deskscribe ask "QUESTION" [INPUT ...] [--library]``: a question answered by a local
language model from transcripts (JSON exports, or recordings transcribed first) or from the
library's best matches, with the lines the answer comes from and their times. The model is
chosen as for ``deskscribe notes`` (``--llm``, ``--model``, …)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .cli_notes import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    add_llm_args,
    llm_from_args,
    load_input,
)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ask", help="ask a question about transcripts; a local language model answers and "
        "cites the lines it comes from",
    )  # fmt: skip
    p.add_argument("question", help="what you want to know (in any language, quoted)")
    p.add_argument("inputs", type=Path, nargs="*", metavar="INPUT",
                   help="transcripts saved as JSON, or recordings")  # fmt: skip
    p.add_argument("--library", action="store_true",
                   help="ask across the library (the transcripts that match best)")  # fmt: skip
    p.add_argument("--limit", type=int, default=5,
                   help="how many library transcripts to read (default: 5)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="the answer and citations as JSON")
    add_llm_args(p)


def ask(args: argparse.Namespace) -> int:
    from .errors import DeskScribeError
    from .llm.ask import check_question
    from .service.ask import ask_library, ask_sources

    if not args.inputs and not args.library:
        return _err("give the transcripts to ask about (JSON exports or recordings), or "
                    "--library to ask across the library")  # fmt: skip
    if args.inputs and args.library:
        return _err("ask about the transcripts given or across the --library, not both")
    if not 1 <= args.limit <= 50:
        return _err("--limit is a number of transcripts from 1 to 50")
    try:
        question = check_question(args.question)
    except DeskScribeError as e:
        return _err(str(e))
    try:
        llm = llm_from_args(args)
        if args.library:
            from .library.db import Library

            answer = ask_library(Library(), question, limit=args.limit, llm=llm)
        else:
            sources = [(None, path.name, load_input(path)) for path in args.inputs]
            answer = ask_sources(sources, question, llm=llm)
    except UsageError as e:
        return _err(str(e))
    except (DeskScribeError, RuntimeError) as e:
        return _err(str(e), EXIT_FAILED)
    if args.json:
        sys.stdout.write(json.dumps(answer.to_dict(), indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(render(answer))
    return EXIT_OK


def render(answer) -> str:
    """The answer, then each citation as ``title  HH:MM:SS  "line text"``."""
    from .transcript.export import format_timestamp

    out = [answer.text or "(no answer)"]
    if answer.unsupported:
        out.append("(no line of the transcripts backs this answer: it is the model's guess, "
                   "check it before you rely on it)")  # fmt: skip
    if answer.citations:
        out.append("")
        for c in answer.citations:
            out.append(f'{c.title}  {format_timestamp(c.start)[:-4]}  "{c.text}"')
    return "\n".join(out) + "\n"


def _err(message: str, code: int = EXIT_USAGE) -> int:
    print(f"deskscribe ask: {message}", file=sys.stderr)
    return code
