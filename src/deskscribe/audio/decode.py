"""Any audio/video file FFmpeg can read → 16 kHz mono float32, streamed in blocks.

With ``keep_channels`` the channels are kept apart instead (blocks of shape
``[channels, samples]``), for transcribing each channel of a call recording on its own.

`decode_blocks` is what the file queue uses: it opens and checks the file at once (so a bad
file fails before any work is queued behind it) and then yields blocks of about
`block_seconds`, holding about one block in memory, so a three-hour recording costs the same
memory as a short clip. `decode_audio` joins the blocks for
short clips and tests. `probe` reads only the headers.

``untrusted=True`` is for files that come from someone else (server uploads, watched
folders): only the audio/video containers in `SAFE_DEMUXERS` are opened, chosen by content,
never a playlist, concat list or image sequence (those make FFmpeg open other files by the
names inside them: an uploaded ``.m3u8`` naming ``/home/you/call.m4a`` would be transcribed),
and ``max_seconds`` stops decoding at a limit measured on the decoded audio, not on the
duration the container claims. A file the user picked on their own computer keeps FFmpeg's
defaults.

Every failure a user can act on is a `MediaError` subclass whose message names the file and
says what to do; anything else coming out of this module is a bug.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import av
import numpy as np

from ..audio_format import SAMPLE_RATE
from .media_errors import (
    EmptyMediaError,
    MediaChangedError,
    MediaError,
    MediaNotFoundError,
    MediaTooLongError,
    NoAudioStreamError,
    StrPath,
    UnsupportedMediaError,
)
from .untrusted import SAFE_DEMUXERS, SAFE_OPTIONS, looks_like_playlist, not_safe

log = logging.getLogger(__name__)

_GAP_TOLERANCE_S = 0.05  # timestamp jitter below this is not a hole in the audio
_MAX_GAP_FILL_S = 600.0  # a bigger jump is a timestamp reset, not missing audio
# Scale the downmix so its coefficients sum to 1: stereo becomes (L + R) / 2 and 5.1 cannot clip.
_DOWNMIX = {"rematrix_maxval": "1.0"}


class MediaInfo(NamedTuple):
    path: Path
    duration: float | None  # seconds; None when the container does not say
    sample_rate: int  # of the source audio track
    channels: int
    codec: str  # FFmpeg decoder name, e.g. "aac", "mp3float", "opus"
    has_video: bool  # a real video track (cover art pictures do not count)


def _open(
    path: StrPath, untrusted: bool = False
) -> tuple[av.container.InputContainer, av.audio.AudioStream]:
    """Open `path` and find its first audio stream; the caller must close the container.
    ``untrusted``: only `SAFE_DEMUXERS` (see the module's docstring)."""
    p = Path(path)
    name = p.name or str(p)
    if p.is_dir():
        raise MediaNotFoundError(
            p, f"'{p}' is a folder, not a file. Choose an audio or video file."
        )
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        raise MediaNotFoundError(
            p, f"'{p}' does not exist. It may have been moved, renamed or deleted; add it again."
        ) from None
    except OSError as e:
        raise MediaError(p, f"Cannot read '{name}': {e.strerror or e}. Check the file.") from None
    if size == 0:
        raise EmptyMediaError(
            p, f"'{name}' is empty (0 bytes). The recording or copy may have failed."
        )
    options = dict(SAFE_OPTIONS) if untrusted else None
    try:
        container = av.open(str(p), mode="r", metadata_errors="ignore", options=options)
    except PermissionError:
        raise MediaError(
            p, f"DeskScribe is not allowed to read '{name}'. Check the file's permissions."
        ) from None
    except (av.FFmpegError, OSError, UnicodeDecodeError) as e:
        if untrusted and (isinstance(e, av.ArgumentError) or looks_like_playlist(p)):
            raise not_safe(p) from None  # ArgumentError: "Format not on whitelist"
        raise UnsupportedMediaError(
            p,
            f"'{name}' is not an audio or video file DeskScribe can read, or it is damaged or "
            f"incomplete ({_reason(e)}). Try opening it in a media player, or convert it to WAV, "
            "MP3 or MP4.",
        ) from None
    try:
        if untrusted and not set(container.format.name.split(",")) & set(SAFE_DEMUXERS):
            raise not_safe(p)  # FFmpeg checked this already; a second lock costs nothing
        streams = container.streams.audio
        if not streams:
            raise NoAudioStreamError(
                p,
                f"'{name}' has no audio track, so there is nothing to transcribe. "
                "Check that the recording captured sound, or choose the file that has it.",
            )
        # The first audio track this FFmpeg build has a decoder for.
        stream = next((s for s in streams if s.codec_context is not None), streams[0])
        try:
            if stream.codec_context is None:
                raise ValueError("no decoder for it in this build")
            stream.codec_context.open(strict=False)  # fail now on a codec we cannot decode
        except (av.FFmpegError, ValueError) as e:
            raise UnsupportedMediaError(
                p,
                f"The audio in '{name}' uses a format DeskScribe cannot decode ({_reason(e)}). "
                "Convert it to WAV, MP3 or M4A and try again.",
            ) from None
    except BaseException:
        container.close()
        raise
    return container, stream


def _reason(e: BaseException) -> str:
    msg = getattr(e, "strerror", None) or str(e) or type(e).__name__
    return str(msg).rstrip(".")


def _info(
    path: StrPath, container: av.container.InputContainer, stream: av.audio.AudioStream
) -> MediaInfo:
    duration: float | None = None
    if stream.duration is not None and stream.time_base is not None:
        duration = float(stream.duration * stream.time_base)
    elif container.duration is not None:
        duration = container.duration / av.time_base
    cc = stream.codec_context
    has_video = any(
        not (v.disposition & av.stream.Disposition.attached_pic) for v in container.streams.video
    )
    return MediaInfo(Path(path), duration, cc.sample_rate, cc.channels, cc.name, has_video)


def probe(path: StrPath, *, untrusted: bool = False) -> MediaInfo:
    """Read the headers of `path` (nothing is decoded). Raises the `MediaError`s above.
    The duration is what the container says: for an untrusted file, a claim (the decoded
    length is checked by `decode_blocks`' ``max_seconds``)."""
    container, stream = _open(path, untrusted)
    with container:
        return _info(path, container, stream)


class AudioBlocks(Iterator[np.ndarray]):
    """Iterator of 16 kHz mono float32 blocks (``[channels, n]`` ones with ``keep_channels``);
    what `decode_blocks` returns.

    Holds the open file: it is closed when iteration ends, fails, or on `close()` (also usable as
    a context manager, and done on garbage collection as a last resort).
    """

    def __init__(
        self,
        path: StrPath,
        block_seconds: float,
        keep_channels: bool = False,
        untrusted: bool = False,
        max_seconds: float | None = None,
    ) -> None:
        if not block_seconds > 0:
            raise ValueError(f"block_seconds must be positive, got {block_seconds}")
        self.path = Path(path)
        self._block = max(1, round(block_seconds * SAMPLE_RATE))
        self._keep_channels = keep_channels
        self._max_samples = None if max_seconds is None else round(max_seconds * SAMPLE_RATE)
        self._stat = _identity(self.path)
        self._container, self._stream = _open(path, untrusted)
        try:
            self.info = _info(path, self._container, self._stream)
        except BaseException:
            self._container.close()
            raise
        self._gen = self._run()

    def __next__(self) -> np.ndarray:
        return next(self._gen)

    def close(self) -> None:
        self._gen.close()
        self._container.close()

    def __enter__(self) -> AudioBlocks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def _run(self) -> Iterator[np.ndarray]:
        try:
            yield from self._blocks(self._limited(self._samples()))
        finally:
            self._container.close()
        if self._stat is not None and _identity(self.path) != self._stat:
            # Truncated, rewritten or still being written: what was read is not the file.
            raise MediaChangedError(
                self.path,
                f"'{self.path.name}' changed while it was being read (it may still be copying "
                "or recording), so its transcript would be incomplete. Transcribe it again "
                "once the file is complete.",
            )

    def _limited(self, chunks: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
        """Stop at ``max_seconds`` of decoded audio, whatever the container claimed."""
        limit = self._max_samples
        if limit is None:
            yield from chunks
            return
        seen = 0
        for chunk in chunks:
            seen += chunk.shape[-1]
            if seen > limit:
                got, most = seen / SAMPLE_RATE, limit / SAMPLE_RATE
                raise MediaTooLongError(
                    self.path,
                    f"'{self.path.name}' holds more than {_minutes(most)} of audio, the "
                    f"limit here (decoding stopped at {_minutes(got)}). Split it, or shorten it.",
                    got,
                    most,
                )
            yield chunk

    def _blocks(self, chunks: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
        pending: list[np.ndarray] = []
        count = 0
        for chunk in chunks:  # samples on the last axis (channels first, if kept)
            pending.append(chunk)
            count += chunk.shape[-1]
            while count >= self._block:
                joined = np.concatenate(pending, axis=-1)
                yield joined[..., : self._block]
                rest = joined[..., self._block :]
                pending, count = ([rest] if rest.shape[-1] else []), rest.shape[-1]
        if count:
            yield np.concatenate(pending, axis=-1)

    def _samples(self) -> Iterator[np.ndarray]:
        """Decoded, resampled chunks of any length, holes in the timeline filled with silence."""
        name = self.path.name
        resampler: av.AudioResampler | None = None
        setup: tuple[str, str, int] | None = None
        emitted = 0  # output samples so far
        bad_packets = 0
        cut_short = False
        origin: float | None = None  # source time where the audio track starts
        expected = 0.0  # source time where the next frame should start, relative to origin

        keep = self._keep_channels
        # Kept channels: the track's own layout throughout (a frame in another layout is
        # remixed to it), planar, so each row of ``to_ndarray()`` is one channel.
        layout = self._stream.codec_context.layout if keep else "mono"

        def convert(frame: av.AudioFrame | None) -> Iterator[np.ndarray]:
            assert resampler is not None
            for out in resampler.resample(frame):
                if out is not None and out.samples:  # passthrough flush returns [None]
                    data = out.to_ndarray() if keep else out.to_ndarray().reshape(-1)
                    yield np.clip(data, -1.0, 1.0).astype(np.float32)

        packets = self._container.demux(self._stream)
        while True:
            try:
                packet = next(packets)
            except StopIteration:
                break
            except (av.FFmpegError, OSError) as e:
                # The container itself cannot be read past this point: keep what we have.
                if not emitted:
                    raise self._damaged(e) from None
                msg = "'%s' is damaged after %.1f s (%s); keeping the readable part"
                log.warning(msg, name, emitted / SAMPLE_RATE, _reason(e))
                cut_short = True
                break
            if origin is None and packet.pts is not None and packet.time_base is not None:
                # From the first packet, decodable or not, so damage at the start is a gap too.
                origin = float(packet.pts * packet.time_base)
            try:
                frames = packet.decode()
            except (av.FFmpegError, ValueError) as e:
                # One undecodable packet: skip it, the timestamps below keep the timeline right.
                bad_packets += 1
                if bad_packets == 1:
                    log.warning("'%s': skipping undecodable audio (%s)", name, _reason(e))
                continue
            for frame in frames:
                if not frame.samples:
                    continue
                key = (frame.format.name, frame.layout.name, frame.sample_rate)
                start = float(frame.time) if frame.time is not None else None
                gap = 0.0
                if start is not None:
                    if origin is None:
                        origin = start - expected
                    gap = start - origin - expected
                    if not _GAP_TOLERANCE_S < gap < _MAX_GAP_FILL_S:
                        gap = 0.0
                if key != setup or gap:
                    if resampler is not None:
                        for chunk in convert(None):  # flush: no tail is lost
                            emitted += chunk.shape[-1]
                            yield chunk
                    if keep:
                        resampler = av.AudioResampler(
                            format="fltp", layout=layout, rate=SAMPLE_RATE
                        )
                    else:
                        resampler = av.AudioResampler(
                            format="flt", layout="mono", rate=SAMPLE_RATE, options=_DOWNMIX
                        )
                    setup = key
                if gap:
                    msg = "'%s': %.2f s missing at %.1f s, filled with silence"
                    log.warning(msg, name, gap, emitted / SAMPLE_RATE)
                    n = round(gap * SAMPLE_RATE)
                    silence = np.zeros((self.info.channels, n) if keep else n, np.float32)
                    emitted += n
                    yield silence
                    expected += gap
                expected += frame.samples / frame.sample_rate
                for chunk in convert(frame):
                    emitted += chunk.shape[-1]
                    yield chunk
        if resampler is not None:
            for chunk in convert(None):
                emitted += chunk.shape[-1]
                yield chunk
        if bad_packets > 1:
            log.warning("'%s': %d undecodable audio packets skipped", name, bad_packets)
        got, total = emitted / SAMPLE_RATE, self.info.duration or 0.0
        if emitted and not cut_short and got < total - max(1.0, 0.02 * total):
            # A truncated file, or damage FFmpeg's demuxer could not resync after.
            log.warning(
                "'%s' ends after %.1f s of %.1f s; the rest is unreadable", name, got, total
            )
        if not emitted:
            if bad_packets:
                raise self._damaged(None)
            raise EmptyMediaError(
                self.path,
                f"'{name}' contains no audio samples. The recording may have failed "
                "or stopped before any sound was captured.",
            )

    def _damaged(self, e: BaseException | None) -> UnsupportedMediaError:
        why = f" ({_reason(e)})" if e is not None else ""
        return UnsupportedMediaError(
            self.path,
            f"The audio in '{self.path.name}' could not be decoded{why}; the file is "
            "damaged or incomplete. Try opening it in a media player, or re-export it.",
        )


def _identity(path: Path) -> tuple[int, int] | None:
    """(size, mtime in ns): what says a file was not changed while it was read."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"


def decode_blocks(
    path: StrPath,
    block_seconds: float = 30.0,
    *,
    keep_channels: bool = False,
    untrusted: bool = False,
    max_seconds: float | None = None,
) -> AudioBlocks:
    """Stream `path` as 16 kHz mono float32 blocks (values in [-1, 1]) of `block_seconds` each.

    Every block has exactly round(block_seconds * 16000) samples except the last, which is
    shorter. The first audio track (that this FFmpeg can decode) is used; FFmpeg's resampler
    converts the rate and downmixes with coefficients summing to 1 (stereo: (L + R) / 2; 5.1
    weights the centre, where dialogue is, most), and is flushed at the end so no tail is lost.
    With `keep_channels` nothing is downmixed: each block is a `[channels, samples]` array in
    the track's channel order (`info.channels` rows; e.g. left, right).

    The file is opened and checked now: `MediaNotFoundError`, `EmptyMediaError` (0 bytes),
    `UnsupportedMediaError` and `NoAudioStreamError` are raised by this call. A file whose audio
    track holds nothing raises `EmptyMediaError` during iteration, and `UnsupportedMediaError`
    if none of it can be decoded.

    Damage in the middle of a file does not raise, by choice: users would rather have a
    transcript of the readable part than none. Undecodable packets are skipped and the missing
    time is filled with silence (from the timestamps, so later text keeps its true time); if the
    container cannot be read any further, iteration stops early. Both are logged as warnings.
    A file that changes while it is read (truncated, or still being copied) raises
    `MediaChangedError` at the end instead: that transcript would be silently incomplete.

    ``untrusted`` opens only `SAFE_DEMUXERS`; ``max_seconds`` raises `MediaTooLongError` as
    soon as more audio than that has been decoded.
    """
    return AudioBlocks(path, block_seconds, keep_channels, untrusted, max_seconds)


def decode_audio(path: StrPath) -> np.ndarray:
    """The whole of `path` as one 16 kHz mono float32 array (for short clips and tests)."""
    with decode_blocks(path, block_seconds=600.0) as blocks:
        parts = list(blocks)
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)
