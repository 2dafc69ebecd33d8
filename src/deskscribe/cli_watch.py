"""``deskscribe watch DIR…``: transcribe every audio or video file that appears in a folder,
in the foreground, with the same service code as the window's watch folders
(``service.watch.FolderWatcher`` feeding a ``service.file_queue.FileQueue``). Ctrl-C or
SIGTERM stops it cleanly (exit 0): a file being transcribed stays unfinished and runs again
at the next start. Transcripts go next to each file (or ``--output-dir``) and into the app's
library.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from .cli_transcribe import EXIT_OK, EXIT_USAGE, add_job_options, parse_formats, subtitle_rules

POLL_SECONDS = 2.0


def _err(message: str) -> None:
    print(f"deskscribe: {message}", file=sys.stderr, flush=True)


def add_parser(sub: argparse._SubParsersAction) -> None:
    w = sub.add_parser(
        "watch",
        help="transcribe new audio and video files as they appear in folders",
        description="Watch folders and transcribe every new audio or video file once it is "
        "fully written (its size stops changing), once: restarts do not run a file again.",
    )
    w.add_argument("folders", nargs="+", type=Path, metavar="DIR")
    w.add_argument("--recursive", action="store_true", help="watch subfolders too")
    add_job_options(w)
    w.add_argument("--interval", type=float, default=POLL_SECONDS,
                   help="seconds between looks at the folders")  # fmt: skip
    w.add_argument("--settle", type=float, default=POLL_SECONDS,
                   help="a file joins once unchanged this long (a copy still running grows)")  # fmt: skip


def watch(args: argparse.Namespace) -> int:
    from .library import Library, LibraryError
    from .models.store import ModelNotInstalledError
    from .paths import data_dir
    from .service.file_queue import FileQueue, QueueChanged, Status
    from .service.files import local_runner
    from .service.models import ModelCache, pick_model
    from .service.watch import FolderWatcher, WatchFolder
    from .speakers.diarize import parse_speakers

    formats = parse_formats(args.format)
    if formats is None:
        return EXIT_USAGE
    missing = [str(f) for f in args.folders if not f.is_dir()]
    if missing:
        _err(f"not a folder: {', '.join(missing)}")
        return EXIT_USAGE
    try:
        if args.speakers:
            parse_speakers(args.speakers)
        model_name = pick_model(args.model)[0]
        library = Library()
    except (ValueError, ModelNotInstalledError, LibraryError) as err:
        _err(str(err))
        return EXIT_USAGE
    languages = tuple(c.strip().lower() for c in (args.languages or "").split(",") if c.strip())
    folders = [
        WatchFolder(f.resolve(), recursive=args.recursive, model=model_name,
                    language=args.language, speakers=args.speakers or "off", languages=languages,
                    formats=tuple(formats), output_dir=str(args.output_dir) if args.output_dir
                    else None, vocabulary=args.vocabulary, batched=args.batched,
                    subtitles=subtitle_rules(args))
        for f in args.folders
    ]  # fmt: skip
    models = ModelCache(threads=args.threads)
    queue = FileQueue(library, local=local_runner(models.model, models.speaker_encoder),
                      device=lambda: args.device)  # fmt: skip

    def report(event: QueueChanged) -> None:
        o = event.outcome
        if o is None:
            return
        entry = queue.entry(o.item_id)
        name = entry.path.name if entry else str(o.item_id)
        if o.status == "done":
            where = ", ".join(str(p) for p in o.exported) or "the library"
            print(f"{name}: done -> {where}", file=sys.stderr, flush=True)
        elif o.status != "running":
            _err(f"{name}: {o.status}" + (f": {o.error}" if o.error else ""))

    queue.subscribe(report)
    roots = [f.path for f in folders]
    unfinished = [i for i in library.unfinished_jobs()
                  if any(Path(i.source).is_relative_to(r) for r in roots)]  # fmt: skip
    queue.resume(unfinished)  # killed mid-file last time: that file again
    watcher = FolderWatcher(
        folders, lambda path, folder: queue.add([path], folder.options()),
        data_dir() / "watch-state.json", interval=args.interval, settle=args.settle,
    )  # fmt: skip
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}  # fmt: skip
    print(f"watching {', '.join(map(str, roots))} with {model_name}; Ctrl-C stops",
          file=sys.stderr, flush=True)  # fmt: skip
    queue.start()
    try:
        watcher.run(stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        running = [e for e in queue.entries() if e.status is Status.RUNNING]
        queue.shutdown()
        library.close()
        if running:
            print(f"stopped; {running[0].path.name} runs again at the next start",
                  file=sys.stderr, flush=True)  # fmt: skip
    return EXIT_OK
