"""``deskscribe notes TRANSCRIPT.json``: a summary, decisions and action items from a local
language model, each point citing the times it comes from (Markdown, or ``--json``).

The model: ``--url`` and ``--model`` (any OpenAI-compatible server: Ollama's
``http://127.0.0.1:11434/v1``, LM Studio, llama.cpp's server; a key from the environment
variable ``--api-key-env`` names), else ``--gguf FILE``, else the notes model installed in the
model store (``deskscribe models install-starter --which llm``). ``--find`` lists the local
servers that answer on this computer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("notes", help="meeting notes from a transcript, by a local language model")
    p.add_argument("transcript", type=Path, nargs="?", help="a transcript saved as JSON")
    p.add_argument("--url", help="an OpenAI-compatible server, e.g. http://127.0.0.1:11434/v1")
    p.add_argument("--model", help="the model to ask on that server")
    p.add_argument("--api-key-env", metavar="VAR", help="environment variable holding its key")
    p.add_argument("--gguf", type=Path, help="a GGUF chat model run by the built-in llama.cpp")
    p.add_argument("--language", help="the notes' language (default: the transcript's)")
    p.add_argument("--threads", type=int, help="CPU threads for the built-in model")
    p.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    p.add_argument("-o", "--output", type=Path, help="write the notes to this file")
    p.add_argument("--find", action="store_true", help="list local LLM servers and exit")


def notes(args: argparse.Namespace) -> int:
    from .llm.endpoint import Endpoint, LLMError, discover
    from .llm.notes import render_markdown
    from .service.notes import make_notes
    from .transcript import Transcript

    if args.find:
        found = discover()
        for e in found:
            print(f"{e.base_url}\t{e.model}\t{e.label}")
        if not found:
            print("no LLM server answers on this computer (Ollama, LM Studio, llama.cpp, vLLM)")
        return EXIT_OK
    if args.transcript is None:
        return _err("give a transcript saved as JSON (deskscribe transcribe --format json)")
    if bool(args.url) != bool(args.model):
        return _err("--url and --model go together (see: deskscribe notes --find)")
    try:
        transcript = Transcript.from_dict(json.loads(args.transcript.read_text("utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as err:
        return _err(f"{args.transcript} is not a DeskScribe transcript in JSON ({err})",
                    EXIT_FAILED)  # fmt: skip
    endpoint = None
    if args.url:
        key = os.environ.get(args.api_key_env, "") if args.api_key_env else ""
        if args.api_key_env and not key:
            return _err(f"the environment variable {args.api_key_env} is empty or unset")
        endpoint = Endpoint(args.url.rstrip("/"), args.model, api_key=key, label=args.url)
    try:
        result = make_notes(transcript, endpoint=endpoint, gguf=args.gguf,
                            language=args.language, threads=args.threads,
                            progress=lambda d, t: print(f"notes: part {d} of {t}",
                                                        file=sys.stderr))  # fmt: skip
    except LLMError as err:
        return _err(str(err), EXIT_FAILED)
    text = (json.dumps(result.to_dict(), indent=2, ensure_ascii=False) + "\n"
            if args.json else render_markdown(result, transcript))  # fmt: skip
    if args.output:
        from .fsutil import write_atomic

        write_atomic(args.output, text)  # private, as transcripts are; never half-written
        print(args.output)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def _err(message: str, code: int = EXIT_USAGE) -> int:
    print(f"deskscribe notes: {message}", file=sys.stderr)
    return code
