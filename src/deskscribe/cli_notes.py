"""``deskscribe notes INPUT``: a summary, key points, decisions, action items and chapters
from a local language model, each point citing the times it comes from (Markdown and/or
JSON). INPUT is a transcript saved as JSON, or a media file (transcribed first).

The model (the same options serve ``ask`` and ``translate``): ``--llm URL`` (any
OpenAI-compatible server: Ollama's ``http://127.0.0.1:11434/v1``, LM Studio, llama.cpp's
server; ``--model`` when it offers several; a key from the environment variable
``--api-key-env`` names), ``--llm FILE.gguf`` (run by the built-in llama.cpp), else the
notes model installed in the model store (``deskscribe models install-starter --which llm``).
``--find`` lists the local servers that answer on this computer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from .errors import DeskScribeError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
NOTES_FORMATS = ("md", "json")


class UsageError(DeskScribeError):
    """The command was given options that do not go together; the message says what to do."""


def add_llm_args(p: argparse.ArgumentParser) -> None:
    """The options that choose the language model (notes, ask, translate)."""
    p.add_argument("--llm", metavar="URL|FILE",
                   help="an OpenAI-compatible server (http://127.0.0.1:11434/v1 for Ollama) "
                   "or a GGUF chat model file (default: the model installed for notes)")  # fmt: skip
    p.add_argument("--model", help="the model to ask on that server (when it offers several)")
    p.add_argument("--api-key-env", metavar="VAR", help="environment variable holding its key")
    p.add_argument("--threads", type=int, help="CPU threads for the built-in model")
    p.add_argument("--context", type=int, help="the model's context in tokens")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("notes", help="meeting notes from a transcript, by a local language model")
    p.add_argument("input", type=Path, nargs="?",
                   help="a transcript saved as JSON, or a recording")  # fmt: skip
    add_llm_args(p)
    p.add_argument("--template", default="meeting",
                   help="meeting, interview, lecture, one-to-one, or your own")  # fmt: skip
    p.add_argument("--language", help="the notes' language (default: the transcript's)")
    p.add_argument("--format", default=None, help="md, json or md,json (default: md)")
    p.add_argument("--output-dir", type=Path, help="write INPUT.notes.md/.json there")
    p.add_argument("-o", "--output", type=Path, help="write the notes to this file")
    p.add_argument("--json", action="store_true", help="JSON instead of Markdown")
    p.add_argument("--find", action="store_true", help="list local LLM servers and exit")


def llm_from_args(args: argparse.Namespace):
    """The model the options name (a server, a GGUF file, or neither: the store's), and
    ``--threads``/``--context``; UsageError with a message."""
    from .llm.endpoint import Endpoint, list_models
    from .service.language_model import LLMOptions

    more = {"threads": args.threads, "context": args.context}

    choice = args.llm or ""
    key = ""
    if args.api_key_env:
        key = os.environ.get(args.api_key_env, "")
        if not key:
            raise UsageError(f"the environment variable {args.api_key_env} is empty or unset")
    if choice.startswith(("http://", "https://")):
        base = choice.rstrip("/")
        model = args.model
        if not model:
            offered = list_models(base, key, timeout=3.0)
            if len(offered) != 1:
                raise UsageError(
                    f"{base} offers {len(offered) or 'no'} models"
                    + (f" ({', '.join(offered[:8])})" if offered else "")
                    + ": name one with --model"
                    + ("" if offered else ", or check the server runs")
                )
            model = offered[0]
        return LLMOptions(Endpoint(base, model, api_key=key, label=base), **more)
    return LLMOptions(gguf=Path(choice) if choice else None, **more)


def load_input(path: Path) -> object:
    """The transcript in ``path``: a JSON transcript, or a recording transcribed first (with
    ``deskscribe transcribe``'s defaults)."""
    from .transcript import Transcript

    if not path.exists():
        raise UsageError(f"{path} does not exist")
    if path.suffix.lower() != ".json":
        import subprocess

        with tempfile.TemporaryDirectory(prefix="deskscribe-") as tmp:
            print(f"transcribing {path.name} first…", file=sys.stderr)
            # The installed app's executable is DeskScribe itself; from source, python -m.
            me = [sys.executable] if getattr(sys, "frozen", False) else [sys.executable, "-m",
                                                                          "deskscribe"]  # fmt: skip
            done = subprocess.run([*me, "transcribe", str(path),
                                   "--format", "json", "--output-dir", tmp, "--no-library",
                                   "--quiet"], check=False)  # fmt: skip
            made = sorted(Path(tmp).glob("*.json"))
            if done.returncode != 0 or not made:
                raise RuntimeError(f"{path} could not be transcribed (see above)")
            return Transcript.from_json(made[0].read_bytes())
    try:
        return Transcript.from_json(path.read_bytes())
    except (OSError, ValueError) as e:
        raise RuntimeError(f"{path} is not a DeskScribe transcript in JSON ({e})") from e


def notes(args: argparse.Namespace) -> int:
    from .fsutil import write_atomic
    from .llm.endpoint import LLMError, discover
    from .service.notes import make_notes
    from .transcript.export import notes_markdown

    if args.find:
        found = discover()
        for e in found:
            print(f"{e.base_url}\t{e.model}\t{e.label}")
        if not found:
            print("no LLM server answers on this computer (Ollama, LM Studio, llama.cpp, vLLM)")
        return EXIT_OK
    if args.input is None:
        return _err("give a transcript saved as JSON, or a recording")
    formats = ["json"] if args.json else ["md"]
    if args.format:
        formats = [f.strip().lower() for f in args.format.split(",") if f.strip()]
        bad = [f for f in formats if f not in NOTES_FORMATS]
        if bad or not formats:
            return _err(f"notes are written as md or json, not {', '.join(bad) or 'nothing'}")
    if args.output and len(formats) > 1:
        return _err("-o writes one file: give one --format, or --output-dir")
    try:
        llm = llm_from_args(args)
        transcript = load_input(args.input)
        result = make_notes(
            transcript, llm=llm, template=args.template, language=args.language,
            progress=lambda d, t: print(f"notes: part {d} of {t}", file=sys.stderr),
        )  # fmt: skip
    except UsageError as e:
        return _err(str(e))
    except (LLMError, RuntimeError) as e:
        return _err(str(e), EXIT_FAILED)
    data = result.to_dict(transcript)
    texts = {"md": notes_markdown(data),
             "json": json.dumps(data, indent=2, ensure_ascii=False) + "\n"}  # fmt: skip
    if args.output:
        write_atomic(args.output, texts[formats[0]])  # private, as transcripts are
        print(args.output)
    elif args.output_dir:
        args.output_dir.mkdir(parents=True, exist_ok=True)
        stem = args.input.name.rsplit(".", 1)[0]
        for fmt in formats:
            target = args.output_dir / f"{stem}.notes.{fmt}"
            write_atomic(target, texts[fmt])
            print(target)
    else:
        for fmt in formats:
            sys.stdout.write(texts[fmt])
    return EXIT_OK


def _err(message: str, code: int = EXIT_USAGE) -> int:
    print(f"deskscribe notes: {message}", file=sys.stderr)
    return code
