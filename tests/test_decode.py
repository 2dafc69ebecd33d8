"""deskscribe.audio.decode on real files written by PyAV (see tests/media.py)."""

from __future__ import annotations

import logging
import os
import tracemalloc
import wave
from pathlib import Path

import av
import numpy as np
import pytest

from deskscribe.audio.decode import (
    SAMPLE_RATE,
    EmptyMediaError,
    MediaChangedError,
    MediaError,
    MediaNotFoundError,
    MediaTooLongError,
    NoAudioStreamError,
    UnsupportedMediaError,
    decode_audio,
    decode_blocks,
    probe,
)
from media import pick_encoder, tone, write_media
from skips import other_os

LEAD = 0.5  # seconds of silence before the tones, to check the timeline is not shifted
TONE_S = 2.0
VIDEO = ("libx264", "h264", "mpeg4")

# id, file name, audio encoders (first available wins), video encoders or None, rate, channels
FORMATS = [
    ("wav", "a.wav", ("pcm_s16le",), None, 44100, 2),
    ("wav-f32-96k", "a.wav", ("pcm_f32le",), None, 96000, 2),
    ("wav-8k-mono", "a.wav", ("pcm_s16le",), None, 8000, 1),
    ("flac", "a.flac", ("flac",), None, 48000, 2),
    ("mp3", "a.mp3", ("libmp3lame",), None, 44100, 2),
    ("m4a-aac", "a.m4a", ("aac", "libfdk_aac"), None, 48000, 2),
    # FFmpeg's own vorbis encoder only does stereo.
    ("ogg-vorbis", "a.ogg", ("libvorbis", "vorbis"), None, 44100, 2),
    ("ogg-opus", "a.opus", ("libopus", "opus"), None, 48000, 2),
    ("webm-opus", "a.webm", ("libopus", "opus"), None, 48000, 1),
    ("webm-vp8-opus", "v.webm", ("libopus", "opus"), ("libvpx", "libvpx-vp9"), 48000, 2),
    ("mp4-video-aac", "v.mp4", ("aac", "libfdk_aac"), VIDEO, 44100, 2),
    ("mkv-video-aac", "v.mkv", ("aac", "libfdk_aac"), VIDEO, 48000, 2),
    ("mkv-flac", "a.mkv", ("flac",), None, 22050, 1),
    ("mov-video-aac", "v.mov", ("aac", "libfdk_aac"), VIDEO, 48000, 1),
]


def source(rate: int, channels: int) -> np.ndarray:
    """LEAD s of silence, then 440 Hz (dominant) + 1000 Hz at a quarter of its amplitude."""
    sig = tone(TONE_S, rate, channels, freqs=(440.0, 1000.0), amplitude=0.5)
    return np.concatenate([np.zeros((channels, round(LEAD * rate)), np.float32), sig], axis=1)


def rms_db(x: np.ndarray) -> float:
    return 20 * np.log10(np.sqrt(np.mean(np.square(x, dtype=np.float64))))


def spectrum(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mag = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return np.fft.rfftfreq(len(x), 1 / SAMPLE_RATE), mag


def make(tmp_path: Path, name: str, codecs: tuple[str, ...], video, rate: int, ch: int) -> Path:
    codec = pick_encoder(*codecs)
    vcodec = pick_encoder(*video) if video else None
    return write_media(tmp_path / name, source(rate, ch), rate, codec, video=vcodec)


@pytest.mark.parametrize(("name", "codecs", "video", "rate", "ch"), [f[1:] for f in FORMATS],
                         ids=[f[0] for f in FORMATS])  # fmt: skip
def test_formats_decode_to_16k_mono(tmp_path, caplog, name, codecs, video, rate, ch):
    path = make(tmp_path, name, codecs, video, rate, ch)
    caplog.set_level(logging.WARNING, logger="deskscribe.audio.decode")
    total = LEAD + TONE_S

    info = probe(path)
    assert info.sample_rate == rate
    assert info.channels == ch
    assert info.has_video == bool(video)
    assert info.duration is not None
    assert info.duration == pytest.approx(total, abs=0.1)

    x = decode_audio(path)
    assert x.dtype == np.float32
    assert x.ndim == 1
    assert len(x) / SAMPLE_RATE == pytest.approx(total, abs=0.1)
    assert np.all(np.abs(x) <= 1.0)

    # Timeline: the tone starts where it did in the source (codec delay is removed).
    onset = np.argmax(np.abs(x) > 0.1) / SAMPLE_RATE
    assert onset == pytest.approx(LEAD, abs=0.03)

    body = x[round((LEAD + 0.1) * SAMPLE_RATE) : round((LEAD + TONE_S - 0.1) * SAMPLE_RATE)]
    freqs, mag = spectrum(body)
    assert freqs[np.argmax(mag)] == pytest.approx(440.0, abs=2.0)
    # The second tone survives the resampler at about its level (a quarter: -12 dB).
    at = lambda f: mag[np.argmin(np.abs(freqs - f))]  # noqa: E731
    assert 0.15 < at(1000.0) / at(440.0) < 0.35

    # Same level as the source: a downmix of identical channels neither adds nor loses gain.
    ref = source(rate, 1)[0]
    ref_body = ref[round((LEAD + 0.1) * rate) : round((LEAD + TONE_S - 0.1) * rate)]
    assert rms_db(body) == pytest.approx(rms_db(ref_body), abs=1.5)
    assert not caplog.records, "a healthy file must decode without warnings (no false gaps)"

    # Every one of these is a container an upload or a watched folder may be: the untrusted
    # path opens it by content (a misleading name does not matter) and decodes the same.
    disguised = path.rename(path.with_name("upload.bin"))
    assert probe(disguised, untrusted=True).channels == ch
    assert np.array_equal(decode_audio_untrusted(disguised), x)


def decode_audio_untrusted(path: Path) -> np.ndarray:
    with decode_blocks(path, 600.0, untrusted=True) as blocks:
        return np.concatenate(list(blocks))


def test_stereo_downmix_is_average_of_channels(tmp_path):
    rate = 48000
    left = tone(1.0, rate, 1, freqs=(440.0,), amplitude=0.8)[0]
    path = write_media(tmp_path / "lr.wav", np.stack([left, np.zeros_like(left)]), rate)
    x = decode_audio(path)
    assert np.max(np.abs(x)) == pytest.approx(0.4, abs=0.02)


def test_blocks_concatenate_to_whole_file(tmp_path):
    path = write_media(tmp_path / "b.flac", tone(7.3, 44100, 2), 44100, "flac")
    whole = decode_audio(path)
    with decode_blocks(path, block_seconds=2.0) as blocks:
        assert blocks.info.duration == pytest.approx(7.3, abs=0.01)
        parts = list(blocks)
    assert [len(p) for p in parts[:-1]] == [2 * SAMPLE_RATE] * 3
    assert 0 < len(parts[-1]) <= 2 * SAMPLE_RATE
    assert all(p.dtype == np.float32 and p.ndim == 1 for p in parts)
    np.testing.assert_array_equal(np.concatenate(parts), whole)
    assert len(whole) == pytest.approx(7.3 * SAMPLE_RATE, abs=2)


def test_fractional_block_size(tmp_path):
    path = write_media(tmp_path / "f.wav", tone(1.0, 16000), 16000)
    sizes = [len(b) for b in decode_blocks(path, block_seconds=0.3)]
    assert sizes == [4800, 4800, 4800, 1600]


def test_long_file_memory_is_bounded(tmp_path):
    """Ten minutes decoded in 5 s blocks never holds much more than one block."""
    rate, minutes = 8000, 10
    path = tmp_path / "long.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        minute = (tone(60.0, rate)[0] * 32767).astype("<i2").tobytes()
        for _ in range(minutes):
            w.writeframes(minute)
    block_bytes = 5 * SAMPLE_RATE * 4
    tracemalloc.start()
    try:
        n = 0
        for block in decode_blocks(path, block_seconds=5.0):
            n += len(block)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n == minutes * 60 * SAMPLE_RATE
    whole_bytes = n * 4  # 38 MB if it were all decoded at once
    assert peak < 6 * block_bytes, f"peak {peak / 1e6:.1f} MB for {whole_bytes / 1e6:.0f} MB"


def _open_fds_for(path: Path) -> list[str]:
    fd_dir = Path("/proc/self/fd")
    out = []
    for fd in os.listdir(fd_dir):
        try:
            if os.readlink(fd_dir / fd) == str(path):
                out.append(fd)
        except OSError:
            pass
    return out


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason=other_os("Linux", "needs /proc"))
def test_file_is_closed_after_use(tmp_path):
    path = write_media(tmp_path / "c.wav", tone(3.0, 16000), 16000)
    blocks = decode_blocks(path, block_seconds=1.0)
    next(blocks)
    assert _open_fds_for(path)
    blocks.close()  # abandoned half way
    assert not _open_fds_for(path)
    list(decode_blocks(path, block_seconds=1.0))  # run to the end
    assert not _open_fds_for(path)
    decode_blocks(path).close()  # never iterated
    assert not _open_fds_for(path)
    probe(path)
    assert not _open_fds_for(path)
    novideo = write_media(tmp_path / "v.mp4", None, codec=None, video="mpeg4", seconds=1.0)
    with pytest.raises(NoAudioStreamError):
        decode_blocks(novideo)
    assert not _open_fds_for(novideo)


# --- input a user can get wrong -------------------------------------------------------------


def _aac_mp4(tmp_path: Path, name: str = "movie.mp4") -> Path:
    return write_media(tmp_path / name, source(44100, 2), 44100, "aac", video="mpeg4")


def test_missing_file(tmp_path):
    path = tmp_path / "gone.mp3"
    for call in (probe, decode_blocks, decode_audio):
        with pytest.raises(MediaNotFoundError) as err:
            call(path)
        assert "gone.mp3" in str(err.value)
        assert err.value.path == path


def test_directory(tmp_path):
    folder = tmp_path / "recordings.wav"
    folder.mkdir()
    with pytest.raises(MediaNotFoundError, match=r"recordings\.wav"):
        decode_blocks(folder)


def test_text_file_renamed_mp3(tmp_path):
    path = tmp_path / "notes.mp3"
    path.write_text("Meeting notes\nnot audio at all\n" * 100)
    with pytest.raises(UnsupportedMediaError, match=r"notes\.mp3") as err:
        decode_blocks(path)
    assert isinstance(err.value, MediaError)
    with pytest.raises(UnsupportedMediaError, match=r"notes\.mp3"):
        probe(path)


def test_truncated_mp4_without_moov(tmp_path):
    full = _aac_mp4(tmp_path)
    data = full.read_bytes()
    assert data.find(b"moov") > 8000, "expected the moov atom at the end (no faststart)"
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[:8000])
    with pytest.raises(UnsupportedMediaError, match=r"cut\.mp4"):
        decode_blocks(cut)


def test_zero_length_file(tmp_path):
    path = tmp_path / "empty.m4a"
    path.touch()
    with pytest.raises(EmptyMediaError, match=r"empty\.m4a"):
        decode_blocks(path)


def test_wav_with_no_samples(tmp_path):
    path = tmp_path / "nothing.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
    assert probe(path).sample_rate == 16000
    blocks = decode_blocks(path)  # opens fine; there is just nothing inside
    with pytest.raises(EmptyMediaError, match=r"nothing\.wav"):
        next(blocks)
    with pytest.raises(EmptyMediaError):
        decode_audio(path)


@pytest.mark.parametrize("name", ["screen.mp4", "screen.mkv"])
def test_video_without_audio(tmp_path, name):
    path = write_media(tmp_path / name, None, codec=None, video=pick_encoder(*VIDEO), seconds=1)
    with pytest.raises(NoAudioStreamError, match=name.replace(".", r"\.")):
        decode_blocks(path)
    with pytest.raises(NoAudioStreamError):
        probe(path)


# --- damaged files: keep the readable part ---------------------------------------------------


def test_truncated_mp3_keeps_readable_part(tmp_path, caplog):
    path = write_media(tmp_path / "t.mp3", source(44100, 2), 44100, "libmp3lame")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with caplog.at_level(logging.WARNING, logger="deskscribe.audio.decode"):
        x = decode_audio(path)
    assert 0.8 < len(x) / SAMPLE_RATE < 1.7
    assert any("ends after" in r.getMessage() for r in caplog.records)
    freqs, mag = spectrum(x[round((LEAD + 0.1) * SAMPLE_RATE) :])
    assert freqs[np.argmax(mag)] == pytest.approx(440.0, abs=3.0)


def _punch_hole(path: Path) -> Path:
    data = bytearray(path.read_bytes())
    start, end = int(len(data) * 0.45), int(len(data) * 0.6)
    data[start:end] = b"\x17" * (end - start)
    path.write_bytes(bytes(data))
    return path


def test_hole_in_the_middle_keeps_timeline(tmp_path, caplog):
    """MP4 indexes every packet: bad ones are skipped and their time filled with silence."""
    path = _punch_hole(write_media(tmp_path / "hole.m4a", source(44100, 2), 44100, "aac"))
    with caplog.at_level(logging.WARNING, logger="deskscribe.audio.decode"):
        x = decode_audio(path)
    assert len(x) / SAMPLE_RATE == pytest.approx(LEAD + TONE_S, abs=0.1)
    assert any("hole.m4a" in r.getMessage() for r in caplog.records)
    # The audio after the hole is still there, at its own time.
    tail = x[
        round((LEAD + TONE_S - 0.4) * SAMPLE_RATE) : round((LEAD + TONE_S - 0.1) * SAMPLE_RATE)
    ]
    freqs, mag = spectrum(tail)
    assert freqs[np.argmax(mag)] == pytest.approx(440.0, abs=5.0)


def test_hole_ffmpeg_cannot_resync_after_keeps_the_start(tmp_path, caplog):
    """In a one-cluster MKV FFmpeg's demuxer stops at the damage: we keep what came before."""
    path = _punch_hole(write_media(tmp_path / "hole.mkv", source(44100, 2), 44100, "aac"))
    with caplog.at_level(logging.WARNING, logger="deskscribe.audio.decode"):
        x = decode_audio(path)
    assert LEAD + 0.3 < len(x) / SAMPLE_RATE <= LEAD + TONE_S + 0.1
    assert any("hole.mkv" in r.getMessage() for r in caplog.records)


def _overwrite_mdat(path: Path, fraction: float) -> Path:
    """Overwrite the first `fraction` of an MP4's media data (the index, moov, stays intact)."""
    data = bytearray(path.read_bytes())
    start, end = data.find(b"mdat") + 4, data.find(b"moov") - 4
    assert 0 < start < end, "expected mdat before moov"
    end = start + int((end - start) * fraction)
    data[start:end] = b"\x17" * (end - start)
    path.write_bytes(bytes(data))
    return path


def test_damaged_start_keeps_timeline(tmp_path):
    path = write_media(tmp_path / "start.m4a", source(44100, 2), 44100, "aac")
    x = decode_audio(_overwrite_mdat(path, 0.5))
    assert len(x) / SAMPLE_RATE == pytest.approx(LEAD + TONE_S, abs=0.1)
    onset = np.argmax(np.abs(x) > 0.1) / SAMPLE_RATE
    assert LEAD + 0.5 < onset < LEAD + TONE_S - 0.3  # silence where the damage was, then the tone


def test_nothing_decodable_is_unsupported(tmp_path):
    path = write_media(tmp_path / "garbage.m4a", source(44100, 2), 44100, "aac")
    blocks = decode_blocks(_overwrite_mdat(path, 1.0))  # the headers are fine
    with pytest.raises(UnsupportedMediaError, match=r"garbage\.m4a"):
        list(blocks)


class _FailingContainer:
    """Wraps an input container so that reading stops with an FFmpeg error after `n` packets."""

    def __init__(self, container, n: int) -> None:
        self._c, self._n = container, n

    def demux(self, *args):
        for i, packet in enumerate(self._c.demux(*args)):
            if i == self._n:
                raise av.error.InvalidDataError(1094995529, "Invalid data found")
            yield packet

    def close(self) -> None:
        self._c.close()


def test_read_error_mid_file_keeps_decoded_audio(tmp_path, caplog):
    path = write_media(tmp_path / "r.wav", tone(3.0, 16000), 16000)
    blocks = decode_blocks(path, block_seconds=1.0)
    blocks._container = _FailingContainer(blocks._container, 10)
    with caplog.at_level(logging.WARNING, logger="deskscribe.audio.decode"):
        x = np.concatenate(list(blocks))
    assert 0 < len(x) < 3 * SAMPLE_RATE
    assert any("damaged after" in r.getMessage() for r in caplog.records)


def test_read_error_before_any_audio_is_unsupported(tmp_path):
    path = write_media(tmp_path / "r0.wav", tone(1.0, 16000), 16000)
    blocks = decode_blocks(path)
    blocks._container = _FailingContainer(blocks._container, 0)
    with pytest.raises(UnsupportedMediaError, match=r"r0\.wav"):
        list(blocks)


def test_bad_block_size(tmp_path):
    path = write_media(tmp_path / "x.wav", tone(0.1, 16000), 16000)
    with pytest.raises(ValueError):
        decode_blocks(path, block_seconds=0)


# --- untrusted files: only real media, limits on what is decoded --------------------------


def _playlist(path: Path, target: str) -> Path:
    path.write_text(f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10.0,\n{target}\n"
                    "#EXT-X-ENDLIST\n")  # fmt: skip
    return path


@pytest.mark.parametrize("how", ["absolute", "relative"])
def test_a_playlist_cannot_make_the_untrusted_decoder_read_another_file(tmp_path, how):
    """An uploaded HLS playlist naming a file elsewhere on the machine: FFmpeg's defaults
    follow it (the attack), the untrusted path refuses the playlist itself."""
    (tmp_path / "private").mkdir()
    secret = write_media(tmp_path / "private" / "secret.flac", tone(2.0, 16000), 16000, "flac")
    uploads = tmp_path / "server" / "uploads"
    uploads.mkdir(parents=True)
    target = str(secret) if how == "absolute" else "../../private/secret.flac"
    playlist = _playlist(uploads / "upload.m3u8", target)
    assert len(decode_audio(playlist)) == 2 * SAMPLE_RATE  # FFmpeg's defaults: followed
    with pytest.raises(UnsupportedMediaError, match="playlists") as err:
        decode_blocks(playlist, untrusted=True)
    assert "secret" not in str(err.value)
    with pytest.raises(UnsupportedMediaError, match="playlists"):
        probe(playlist, untrusted=True)
    # Without the name (how uploads are stored) FFmpeg does not take it for HLS at all.
    with pytest.raises(UnsupportedMediaError):
        decode_blocks(playlist.rename(uploads / "upload"), untrusted=True)


def test_concat_lists_and_image_sequences_are_refused_when_untrusted(tmp_path):
    wav = write_media(tmp_path / "a.wav", tone(1.0, 16000), 16000)
    concat = tmp_path / "list.txt"
    concat.write_text(f"ffconcat version 1.0\nfile '{wav.name}'\n")
    assert len(decode_audio(concat)) == SAMPLE_RATE  # followed with FFmpeg's defaults
    with pytest.raises(UnsupportedMediaError, match="playlists"):
        decode_blocks(concat, untrusted=True)
    text = tmp_path / "notes.wav"
    text.write_text("not audio\n" * 50)
    with pytest.raises(UnsupportedMediaError):
        decode_blocks(text, untrusted=True)


def _claims_one_second(path: Path) -> Path:
    """A Matroska file whose header says 1 s while its blocks hold 5 s."""
    data = bytearray(path.read_bytes())
    at = data.find(b"\x44\x89\x88")  # Duration, an 8-byte float, in TimecodeScale units (ms)
    assert at > 0
    import struct

    data[at + 3 : at + 11] = struct.pack(">d", 1000.0)
    path.write_bytes(bytes(data))
    return path


def test_limits_are_measured_on_the_decoded_audio_not_the_containers_claim(tmp_path):
    path = _claims_one_second(write_media(tmp_path / "long.mkv", tone(5.0, 16000), 16000, "flac"))
    assert probe(path, untrusted=True).duration == pytest.approx(1.0, abs=0.05)
    with pytest.raises(MediaTooLongError, match=r"more than 2\.0 s") as err:
        list(decode_blocks(path, 0.5, untrusted=True, max_seconds=2.0))
    assert 2.0 < err.value.seconds <= 2.6  # decoding stopped at the limit, not at the end
    x = np.concatenate(list(decode_blocks(path, 1.0, untrusted=True, max_seconds=10.0)))
    assert len(x) == 5 * SAMPLE_RATE


@pytest.mark.parametrize("change", ["truncated", "appended"])
def test_a_file_changed_while_it_is_read_is_an_error_not_a_short_transcript(tmp_path, change):
    path = write_media(tmp_path / "growing.wav", tone(6.0, 16000), 16000)
    blocks = decode_blocks(path, block_seconds=1.0)
    next(blocks)
    data = path.read_bytes()
    if change == "truncated":
        path.write_bytes(data[: len(data) // 3])
    else:
        with open(path, "ab") as fh:
            fh.write(b"\0" * 64000)
    with pytest.raises(MediaChangedError, match="changed while it was being read"):
        list(blocks)
    assert len(decode_audio(path)) > 0  # read again once it is still: fine


def test_transcode_writes_our_own_private_wav(tmp_path):
    from deskscribe.audio.transcode import transcode
    from deskscribe.audio.untrusted import safe_suffix

    src = write_media(tmp_path / "in.m4a", source(44100, 2), 44100, pick_encoder("aac"))
    dst = tmp_path / "out.wav"
    seconds = transcode(src, dst, max_seconds=60)
    assert seconds == pytest.approx(LEAD + TONE_S, abs=0.1)
    assert probe(dst).codec == "pcm_s16le" and probe(dst).sample_rate == SAMPLE_RATE
    assert np.abs(decode_audio(dst) - decode_audio(src)).max() < 1e-4
    if os.name == "posix":
        assert dst.stat().st_mode & 0o777 == 0o600
    playlist = _playlist(tmp_path / "p.m3u8", str(src))
    with pytest.raises(UnsupportedMediaError):
        transcode(playlist, tmp_path / "refused.wav", max_seconds=60)
    assert not (tmp_path / "refused.wav").exists()
    with pytest.raises(MediaTooLongError):
        transcode(src, tmp_path / "long.wav", max_seconds=1.0)
    assert not (tmp_path / "long.wav").exists()
    assert safe_suffix("talk.MP3") == ".mp3" and safe_suffix("x.m3u8") == safe_suffix(None) == ""
