"""What a file from someone else (a server upload, a file dropped into a watched folder) may
be: the demuxers FFmpeg may open it with (`SAFE_DEMUXERS`, given to ``av.open`` as
`SAFE_OPTIONS` by ``decode``'s ``untrusted=True``), the message when it is something else,
and the file-name endings kept as a probing hint. ``transcode.py`` decodes such a file once.
"""

from __future__ import annotations

from pathlib import Path

from .media_errors import UnsupportedMediaError

# Demuxers an untrusted file may be opened with: containers that hold their own audio and
# never open another file or URL. Matched by FFmpeg against the demuxer it probed from the
# content ("mov" covers mp4/m4a/3gp, "matroska" webm). Not here, on purpose: hls, dash,
# concat, image2 and other playlists or sequences, and raw formats that need parameters.
SAFE_DEMUXERS = (
    "wav", "w64", "flac", "mp3", "ogg", "matroska", "webm", "mov", "mp4", "aac", "ac3",
    "eac3", "aiff", "caf", "amr", "amrnb", "amrwb", "asf", "avi", "mpeg", "mpegts", "flv",
    "au", "wv", "ape", "tta", "mpc", "mpc8", "dts", "truehd", "mlp", "voc", "rm", "xwma",
)  # fmt: skip
SAFE_OPTIONS = {"format_whitelist": ",".join(SAFE_DEMUXERS), "protocol_whitelist": "file"}

# File name endings worth keeping as FFmpeg's probing hint; any other name is stored without
# one (a client's ".m3u8" must not steer the probe: the content decides).
MEDIA_SUFFIXES = frozenset(
    [
        ".wav",
        ".wave",
        ".w64",
        ".flac",
        ".mp3",
        ".mp2",
        ".m4a",
        ".m4b",
        ".mp4",
        ".m4v",
        ".mov",
        ".3gp",
        ".3g2",
        ".aac",
        ".ac3",
        ".eac3",
        ".aif",
        ".aiff",
        ".caf",
        ".amr",
        ".wma",
        ".wmv",
        ".asf",
        ".avi",
        ".mpg",
        ".mpeg",
        ".ts",
        ".mts",
        ".m2ts",
        ".flv",
        ".au",
        ".wv",
        ".ape",
        ".tta",
        ".mpc",
        ".dts",
        ".ogg",
        ".oga",
        ".ogv",
        ".opus",
        ".spx",
        ".mkv",
        ".mka",
        ".webm",
        ".weba",
        ".voc",
        ".rm",
        ".ra",
    ]
)


def safe_suffix(filename: str | None) -> str:
    """The lower-case ending of ``filename`` when it is a media type, else ""."""
    suffix = Path(filename or "").suffix.lower()
    return suffix if suffix in MEDIA_SUFFIXES else ""


def not_safe(p: Path) -> UnsupportedMediaError:
    return UnsupportedMediaError(
        p,
        f"'{p.name}' is not an audio or video container DeskScribe reads from others: "
        "playlists (.m3u8, .m3u), concat lists and image sequences are refused, because they "
        "name other files. Send the recording itself (WAV, MP3, M4A, MP4, OGG, WebM, FLAC, …).",
    )


def looks_like_playlist(p: Path) -> bool:
    """Whether the file starts like a playlist (FFmpeg takes an HLS one for HLS only by its
    name, so a stored upload's fails as plain unreadable data: say what it is)."""
    try:
        with open(p, "rb") as fh:
            head = fh.read(256).lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    except OSError:
        return False
    return head.startswith((b"#extm3u", b"ffconcat", b"[playlist]", b"<?xml", b"<mpd", b"file "))
