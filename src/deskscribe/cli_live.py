"""``deskscribe live`` and ``deskscribe sessions``: live transcription from the terminal.

``live`` prints each committed line as it is finished (and, on a terminal, the words still being
decided, dimmed, on the line below). Ctrl-C, SIGTERM and SIGHUP stop cleanly: the last words
are committed and the session folder holds the audio of every track and the transcript. ``sessions`` lists past
sessions and recovers one that was interrupted (crash, power cut, kill -9).
"""

from __future__ import annotations

import argparse
import queue
import signal
import sys
import time
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_parsers(sub: argparse._SubParsersAction) -> None:
    lv = sub.add_parser("live", help="transcribe the microphone, system audio, or both, live")
    lv.add_argument(
        "--source",
        choices=["mic", "system", "both"],
        default="mic",
        help="mic, system (what this computer plays) or both (a meeting: you and the others)",
    )
    lv.add_argument(
        "--device",
        help="input device for --source mic/system: part of its name, or its number in --list-devices",
    )
    lv.add_argument("--mic", help="microphone for --source both (default: the system default)")
    lv.add_argument("--system", help="system-audio source for --source both")
    lv.add_argument("--list-devices", action="store_true", help="list input devices and exit")
    lv.add_argument("--model", help="model name in the store or a model folder")
    lv.add_argument("--language", help="language code (default: detected for each utterance)")
    lv.add_argument("--languages", metavar="CODES", help="detect only these, e.g. en,de")
    lv.add_argument(
        "--vocabulary",
        metavar="WORDS",
        help='names and jargon to spell as written, comma-separated: "ComfyUI, Kubernetes"',
    )
    lv.add_argument(
        "--compute",
        choices=["auto", "cpu", "cuda", "directml", "coreml"],
        default="auto",
        help="where the model runs",
    )
    lv.add_argument("--threads", type=int, default=0)
    lv.add_argument(
        "--speakers",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="label speakers by voice as they speak (default: when a speaker model is installed)",
    )
    lv.add_argument("--speaker-model", help="speaker model name in the store or a folder")
    lv.add_argument(
        "--people",
        metavar="N|MIN-MAX",
        default="",
        help="how many people speak, when you know it (you included): the label revisions "
        "and the pass at Stop look for that many voices (default: detected)",
    )
    lv.add_argument("--duration", type=float, help="stop by itself after this many seconds")
    lv.add_argument(
        "--stats",
        action="store_true",
        help="print how the engine keeps up once a second (decode times, lag, lost input, "
        "CPU, memory) on stderr",
    )
    lv.add_argument("--title", help="a name for the session")
    lv.add_argument("--format", help="also export the transcript at the end: txt,srt,...")
    lv.add_argument("--output-dir", type=Path, help="where --format files go (default: cwd)")

    ss = sub.add_parser("sessions", help="list live sessions, recover an interrupted one")
    ssub = ss.add_subparsers(dest="sessions_command", required=True)
    ssub.add_parser("list", help="all sessions, newest first")
    rc = ssub.add_parser(
        "recover", help="recover a session's audio and text (after a crash or kill)"
    )
    rc.add_argument("session", help="session id (see `sessions list`) or 'latest'")
    rc.add_argument(
        "--transcribe", action="store_true", help="transcribe the recovered audio again, fully"
    )
    rc.add_argument("--model", help="model for --transcribe")
    rc.add_argument("--format", default="txt", help="formats to export (default: txt)")
    rc.add_argument("--output-dir", type=Path, help="default: the session folder")


def _err(message: str) -> None:
    print(f"deskscribe: {message}", file=sys.stderr)


def _stamp(seconds: float) -> str:
    s = int(seconds)
    return (
        f"{s // 3600:d}:{s // 60 % 60:02d}:{s % 60:02d}"
        if s >= 3600
        else f"{s // 60:02d}:{s % 60:02d}"
    )


def _line(seg) -> str:
    from .transcript.model import default_speaker_name

    who = f"{default_speaker_name(seg.speaker)}: " if seg.speaker else ""
    return f"[{_stamp(seg.start)}] {who}{seg.text}"


def _device(kind: str, wanted: str | None):
    from .audio.devices import default_device, find_device

    return find_device(kind, wanted) if wanted else default_device(kind)


def live(args: argparse.Namespace) -> int:
    from .audio.devices import CaptureDeviceError, list_devices
    from .audio.sessions import find_interrupted
    from .service.failures import describe_failure
    from .service.live import LiveOptions
    from .service.live.opening import open_live_session
    from .service.models import ModelCache
    from .service.speakers import participants_options
    from .whisper.languages import parse_languages
    from .whisper.streaming import StreamingOptions

    try:
        if args.list_devices:
            for kind in ("mic", "system"):
                print(f"{kind}:")
                for number, d in enumerate(list_devices(kind)):
                    print(f"  [{number}] {d.name}")
            return EXIT_OK
        source = args.source
        mic = system = None
        if source in ("mic", "both"):
            mic = _device("mic", args.mic or (args.device if source == "mic" else None))
        if source in ("system", "both"):
            system = _device("system", args.system or (args.device if source == "system" else None))
    except CaptureDeviceError as err:
        _err(str(err))
        return EXIT_USAGE
    models = ModelCache(threads=args.threads)
    for info in find_interrupted():
        _err(
            f"an interrupted session from {info.created:%Y-%m-%d %H:%M} was found; "
            f"recover it with: deskscribe sessions recover {info.id}"
        )
    asked = args.speakers or args.speaker_model is not None
    try:
        languages = parse_languages(args.languages)
        participants_options(args.people)  # a clear message before any model loads
    except ValueError as err:
        _err(str(err))
        return EXIT_USAGE
    try:
        options = LiveOptions(
            source=source, mic=mic, system=system,
            streaming=StreamingOptions(language=args.language, languages=languages,
                                       vocabulary=args.vocabulary),
            title=args.title, participants=args.people,
        )  # fmt: skip
        opened = open_live_session(
            models, options, model=args.model, device=args.compute,
            speaker_model=args.speaker_model,
            speakers="off" if args.speakers is False else "required" if asked else "if installed",
        )  # fmt: skip
    except Exception as err:  # no model, a broken one, a language it lacks, a speaker model
        _err(describe_failure(err).text)
        return EXIT_USAGE
    session = opened.session
    if opened.speaker_problem:
        _err(opened.speaker_problem)
    encoder = opened.encoder
    if encoder is not None:
        print(f"speakers: {encoder.name} ({encoder.kind})", file=sys.stderr)
    elif args.speakers is not False:
        print("speakers: off (no speaker model installed; "
              "`deskscribe models install-speaker-starter` installs one)", file=sys.stderr)  # fmt: skip
    if session.transcriber.vocabulary_note:
        _err(session.transcriber.vocabulary_note)
    tty = sys.stdout.isatty()

    def on_stop_signal(signum: int, frame: object) -> None:
        if session.state == "stopping":
            raise KeyboardInterrupt  # a second Ctrl-C: leave now (the audio is on disk)
        if signum == getattr(signal, "SIGHUP", None):
            _detach_from_terminal()
        print("\nstopping…", file=sys.stderr)
        session.stop()

    # Ctrl-C, logout (SIGHUP), `kill` and service managers (SIGTERM) all stop the same way:
    # the last words committed, the session "stopped", exit 0.
    stop_signals = [signal.SIGINT, signal.SIGTERM]
    if hasattr(signal, "SIGHUP"):  # not on Windows
        stop_signals.append(signal.SIGHUP)
    previous = {sig: signal.signal(sig, on_stop_signal) for sig in stop_signals}
    try:
        return _run(session, args, tty)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _detach_from_terminal() -> None:
    """After a hangup the terminal is gone and writing to it fails: send what is still
    printed to the null device (output to files and pipes goes on as before)."""
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            if stream.isatty():
                with open(os.devnull, "w") as null:
                    os.dup2(null.fileno(), stream.fileno())
        except (OSError, ValueError):
            pass


def _run(session, args: argparse.Namespace, tty: bool) -> int:
    from .service.live import Adapted, HealthReport, Problem, Started, Stopped, TextUpdate

    session.start()
    began = time.monotonic()
    stopped: Stopped | None = None
    failed = False
    while stopped is None:
        try:
            event = session.events.get(timeout=0.2)
        except queue.Empty:
            event = None
        if args.duration and time.monotonic() - began >= args.duration:
            session.stop()
        if isinstance(event, Started):
            print(
                f"recording {', '.join(event.tracks)} with {event.model} on {event.device}; "
                "Ctrl-C stops",
                file=sys.stderr,
            )
        elif isinstance(event, TextUpdate):
            _show(event, tty)
        elif isinstance(event, HealthReport):
            if getattr(args, "stats", False):
                print(f"stats: {event.health.line()}", file=sys.stderr, flush=True)
        elif isinstance(event, Adapted):
            verb = "less live work" if event.down else "more live work again"
            _err(f"{verb}: {event.level} ({event.reason})")
        elif isinstance(event, Problem):
            failed = failed or event.fatal
            _err(event.message)
        elif isinstance(event, Stopped):
            stopped = event
    if tty:
        print("\r\033[K", end="")
    if stopped.folder is not None:
        print(f"session saved in {stopped.folder}", file=sys.stderr)
        _add_to_library(stopped, args.title)
    if args.format and stopped.transcript.segments:
        _export(stopped.transcript, args.format, args.output_dir or Path.cwd(), "live")
    return EXIT_FAILED if failed else EXIT_OK


def _add_to_library(stopped, title: str | None) -> None:
    """The session shows in the app's library like one recorded there. If the library cannot
    take it now, the app offers the session at its next start (it lists every session folder
    no library item holds)."""
    from .library.db import Library, LibraryError
    from .service.live.opening import archive_session

    try:
        library = Library()
        try:
            archive_session(library, stopped.folder, stopped.transcript, title=title)
        finally:
            library.close()
    except (LibraryError, OSError) as err:
        _err(f"not added to the library ({err}); the app offers it at its next start")


def _show(event, tty: bool) -> None:
    for seg in event.segments:
        if seg.id != event.open_id:
            if tty:
                print("\r\033[K", end="")
            print(_line(seg), flush=True)
    if tty:
        growing = next((s.text for s in event.segments if s.id == event.open_id), "")
        tentative = "".join(w.text for w in event.tentative).strip()
        tail = f"{growing} \033[2m{tentative}\033[0m" if tentative else growing
        print(f"\r\033[K… {tail[-150:]}", end="", flush=True)


def _export(transcript, formats: str, out_dir: Path, stem: str) -> list[Path]:
    """Write ``stem.<fmt>`` files; an existing file is never replaced (``stem (2).<fmt>``):
    in a session folder, ``transcript.json`` is the autosaved text itself."""
    from .fsutil import unique_path
    from .transcript.export import FORMATS, export

    written = []
    out_dir.mkdir(parents=True, exist_ok=True)
    for fmt in [f.strip() for f in formats.split(",") if f.strip()]:
        if fmt not in FORMATS:
            _err(f"unknown format {fmt}; use any of: {','.join(FORMATS)}")
            continue
        target = unique_path(out_dir / f"{stem}.{fmt}")
        export(transcript, target, fmt, overwrite=False)
        print(target, file=sys.stderr)
        written.append(target)
    return written


def sessions(args: argparse.Namespace) -> int:
    from .audio.recorder import RecorderError
    from .audio.sessions import list_sessions

    if args.sessions_command == "list":
        infos = list_sessions()
        if not infos:
            print("no sessions yet", file=sys.stderr)
        for i in infos:
            mark = "  INTERRUPTED: deskscribe sessions recover " + i.id if i.interrupted else ""
            title = f"  {i.title}" if i.title else ""
            print(
                f"{i.id}  {i.created:%Y-%m-%d %H:%M}  {_stamp(i.duration_s)}  {i.state}{title}{mark}"
            )
        return EXIT_OK
    try:
        return _recover(args, list_sessions())
    except RecorderError as err:
        _err(str(err))
        return EXIT_FAILED


def _recover(args: argparse.Namespace, infos: list) -> int:
    from .audio.sessions import export_audio, recover
    from .fsutil import unique_path
    from .transcript import Transcript

    match = infos[:1] if args.session == "latest" else [i for i in infos if i.id == args.session]
    if not match:
        _err(f"no session {args.session!r}; see `deskscribe sessions list`")
        return EXIT_USAGE
    found = recover(match[0].folder)
    out_dir = args.output_dir or found.folder
    audio = export_audio(found.folder, unique_path(out_dir / "audio.flac"))
    print(f"audio: {audio} ({_stamp(found.duration_s)})", file=sys.stderr)
    if found.transcript:
        saved = Transcript.from_dict(found.transcript)
        _export(saved, args.format, out_dir, "transcript")
        tentative = found.transcript.get("tentative")
        if tentative:
            print(f"words not yet committed when it stopped: {tentative}", file=sys.stderr)
    else:
        print("no transcript was saved yet", file=sys.stderr)
    if args.transcribe:
        return _retranscribe(args, audio, out_dir)
    return EXIT_OK


def _retranscribe(args: argparse.Namespace, audio: Path, out_dir: Path) -> int:
    from . import settings
    from .models.store import ModelNotInstalledError
    from .service.files import transcribe_media, transcribe_options
    from .service.jobs import FileJob
    from .service.models import ModelCache
    from .whisper.model import ModelNotBuiltError

    try:
        model = ModelCache().model(args.model)
    except (ModelNotInstalledError, ModelNotBuiltError) as err:
        _err(str(err))
        return EXIT_USAGE
    job = FileJob(audio, vocabulary=settings.get("vocabulary") or None)
    transcript = transcribe_media(model, audio, transcribe_options(job))
    _export(transcript, args.format, out_dir, "transcript.full")
    return EXIT_OK
