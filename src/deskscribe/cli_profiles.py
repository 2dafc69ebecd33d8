"""``deskscribe profiles``: voice profiles (a name and voice embeddings, never audio).

``profiles save TRANSCRIPT.json SPEAKER [--name NAME] [--audio FILE]`` learns a speaker's
voice from the recording the transcript was made from; later ``transcribe --speakers`` runs
(and the desktop app's file queue) give that voice the name. ``profiles list`` shows what is
saved, ``profiles delete NAME`` forgets one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profiles", help="voice profiles: known voices named in new transcripts")
    psub = p.add_subparsers(dest="profiles_command", required=True)
    psub.add_parser("list", help="list saved voice profiles")
    d = psub.add_parser("delete", help="forget a voice profile")
    d.add_argument("name")
    s = psub.add_parser("save", help="learn a speaker's voice from a transcript's recording")
    s.add_argument("transcript", type=Path, help="a transcript saved as JSON")
    s.add_argument("speaker", help="the speaker's id (S1) or name in that transcript")
    s.add_argument("--name", help="the profile's name (default: the speaker's name)")
    s.add_argument("--audio", type=Path, help="the recording, if not the transcript's source")
    s.add_argument("--speaker-model", help="speaker model to use (default: the installed one)")


def profiles(args: argparse.Namespace) -> int:
    from .speakers.profiles import ProfileError, delete_profile, list_profiles

    try:
        if args.profiles_command == "list":
            found = list_profiles()
            if not found:
                print("no voice profiles saved")
            for p in found:
                print(f"{p.name}\t{p.model or '-'}\t{len(p.embeddings)} sample(s)\t{p.updated}")
            return EXIT_OK
        if args.profiles_command == "delete":
            if delete_profile(args.name):
                print(f"deleted the voice profile {args.name!r}")
                return EXIT_OK
            _err(f"no voice profile named {args.name!r} (see: deskscribe profiles list)")
            return EXIT_FAILED
        return _save(args)
    except ProfileError as err:
        _err(str(err))
        return EXIT_FAILED


def _save(args: argparse.Namespace) -> int:
    from .audio.decode import MediaError, decode_audio
    from .models.store import ModelNotInstalledError
    from .service.models import ModelCache
    from .speakers.encoder import SpeakerModelError
    from .speakers.profiles import find_speaker, remember_voice
    from .transcript import Transcript

    try:
        transcript = Transcript.from_json(args.transcript.read_bytes())
    except OSError as err:
        _err(f"cannot read {args.transcript}: {err.strerror or err}")
        return EXIT_FAILED
    except ValueError as err:
        _err(f"{args.transcript} is not a DeskScribe JSON transcript: {err}")
        return EXIT_USAGE
    speaker = find_speaker(transcript, args.speaker)
    try:
        encoder = ModelCache().speaker_encoder("cpu", args.speaker_model)
    except (ModelNotInstalledError, SpeakerModelError) as err:
        _err(str(err))
        return EXIT_FAILED
    audio = None
    if args.audio is not None:
        try:
            audio = decode_audio(args.audio)
        except MediaError as err:
            _err(str(err))
            return EXIT_FAILED
    profile = remember_voice(transcript, speaker, encoder, name=args.name, audio=audio)
    print(f"saved the voice of {transcript.speaker_name(speaker)} as {profile.name!r}")
    return EXIT_OK


def _err(message: str) -> None:
    print(f"deskscribe: {message}", file=sys.stderr)
