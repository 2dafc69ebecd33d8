"""deskscribe.audio.recorder: real files, real processes (kill -9), a real full disk (tmpfs)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from deskscribe.audio.decode import decode_audio
from deskscribe.audio.recorder import (
    RecorderDiskFullError,
    RecorderError,
    SessionInUseError,
    SessionRecorder,
)
from deskscribe.audio.session_files import JOURNAL, TRANSCRIPT
from deskscribe.audio.sessions import (
    export_audio,
    find_interrupted,
    list_sessions,
    read_track,
    recover,
)

SR = 16000

# Shared with the child process: a deterministic signal, a function of the sample index only.
SIGNAL = """
import numpy as np

def signal(start, n, freq=440.0):
    i = np.arange(start, start + n, dtype=np.int64)
    noise = ((i * 2654435761) % 65536) / 65536.0 - 0.5
    return (0.5 * np.sin(2 * np.pi * freq * i / 16000) + 0.3 * noise).astype(np.float32)
"""
_ns: dict = {}
exec(SIGNAL, _ns)
signal = _ns["signal"]

CHILD = (
    SIGNAL
    + """
import sys, time
from pathlib import Path
from deskscribe.audio.recorder import SessionRecorder

rec = SessionRecorder(Path(sys.argv[1]), ("mic", "system"), chunk_seconds=1.0,
                      sync_seconds=0.5, meta={"title": "kill test"})
block, n, k, t0, saved = 1600, 0, 0, time.monotonic(), 0.0
while True:
    rec.write("mic", signal(n, block))
    rec.write("system", signal(n, block, 97.0))
    n += block
    print("W", rec.samples("mic"), rec.samples("system"), rec.synced_samples("mic"), flush=True)
    now = time.monotonic()
    if now - saved >= 0.5:
        rec.save_transcript({"n": k, "segments": [{"text": f"word {k}"}], "tentative": "..."})
        print("T", k, flush=True)
        k, saved = k + 1, now
    time.sleep(max(0.0, t0 + n / 16000 - time.monotonic()))  # real-time pace
"""
)


def q(x: np.ndarray) -> np.ndarray:
    """What the recorder stores: int16 quantisation, read back as float32."""
    return (np.clip(np.rint(x * 32768.0), -32768, 32767) / 32768.0).astype(np.float32)


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DESKSCRIBE_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def test_round_trip_uneven_blocks_several_flac_chunks(data_dir: Path) -> None:
    sig = signal(0, int(3.7 * SR))
    rng = np.random.default_rng(1)
    with SessionRecorder(chunk_seconds=1.0, meta={"title": "Draft", "model": "tiny"}) as rec:
        folder = rec.folder
        assert folder.parent == data_dir / "sessions"
        pos, checked_live = 0, False
        while pos < len(sig):
            n = int(rng.integers(1, 5000))
            rec.write("mic", sig[pos : pos + n])
            pos += n
            if pos > 2 * SR and rec.samples("mic") - n <= 2 * SR:
                rec.set_state("paused")
                rec.update_meta(title="Standup")
                np.testing.assert_array_equal(read_track(folder, "mic"), q(sig[:pos]))  # live
                (info,) = list_sessions()
                # held by this live recorder (same process): listed, not interrupted
                assert (info.state, info.interrupted, info.title) == ("paused", False, "Standup")
                assert find_interrupted() == []
                with pytest.raises(SessionInUseError, match="in use"):
                    recover(folder)
                rec.set_state("recording")
                checked_live = True
        assert checked_live and rec.samples("mic") == len(sig)
    assert sorted(p.name for p in folder.glob("mic-*")) == [f"mic-00000{i}.flac" for i in range(4)]
    journal = json.loads((folder / JOURNAL).read_text())
    assert journal["state"] == "stopped" and journal["tracks"] == ["mic"]
    assert [c["samples"] for c in journal["chunks"]["mic"]] == [SR, SR, SR, int(0.7 * SR)]
    out = read_track(folder, "mic")
    assert out.dtype == np.float32 and len(out) == len(sig)
    np.testing.assert_array_equal(out, q(sig))
    assert np.max(np.abs(out - sig)) <= 0.5 / 32768 + 1e-7
    (info,) = list_sessions()
    assert (info.state, info.interrupted, info.duration_s) == ("stopped", False, 3.7)
    with pytest.raises(RecorderError, match="stopped"):
        rec.write("mic", sig[:10])


def test_reading_a_growing_track_again_decodes_only_the_new_chunks(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live label revisions read the track recorded so far every few seconds; with a
    ``decoded`` dict kept between reads, the FLAC chunks finished before are not decoded
    again (at 20 minutes that was 0.5 s of every read), and what comes back is the same as a
    plain read: the open .pcm chunk's newest samples included, chunks finished since then
    decoded from their FLAC, a chunk rewritten since read anew, and a chunk that failed to
    decode once (a scanner holding it, a half-written copy) not kept as its silent stand-in."""
    from deskscribe.audio import session_files

    decodes: list[str] = []
    real_decode = session_files.decode_flac

    def counted(source, parts=None):
        if isinstance(source, (str, Path)):  # reads of chunk files (not the recorder's check)
            decodes.append(Path(source).name)
        return real_decode(source, parts)

    monkeypatch.setattr(session_files, "decode_flac", counted)
    sig = signal(0, int(4.5 * SR))
    decoded: dict = {}
    with SessionRecorder(chunk_seconds=1.0) as rec:
        folder = rec.folder
        rec.write("mic", sig[: int(2.5 * SR)])
        first = read_track(folder, "mic", decoded)
        np.testing.assert_array_equal(first, q(sig[: int(2.5 * SR)]))
        assert decodes == ["mic-000000.flac", "mic-000001.flac"]
        rec.write("mic", sig[int(2.5 * SR) :])
        decodes.clear()
        second = read_track(folder, "mic", decoded)
        np.testing.assert_array_equal(second, q(sig))
        assert decodes == ["mic-000002.flac", "mic-000003.flac"]  # the new ones only
    decodes.clear()
    np.testing.assert_array_equal(read_track(folder, "mic", decoded), q(sig))
    assert decodes == ["mic-000004.flac"]  # the last chunk, finished at close
    # A chunk file replaced with other samples is read anew.
    chunk = folder / "mic-000001.flac"
    original, stamp = chunk.read_bytes(), chunk.stat().st_mtime_ns
    chunk.unlink()
    session_files.encode_flac([np.zeros(SR // 2, np.int16)], chunk, SR)
    third = read_track(folder, "mic", decoded)
    np.testing.assert_array_equal(third, read_track(folder, "mic"))
    assert third.shape[0] == len(sig) - SR // 2 and not third[SR : SR + SR // 2].any()
    # A chunk that does not decode (to the length the journal has) is read as a plain read
    # reads it, and not kept: once it reads again (same name, size and time), its samples
    # come back.
    later = stamp + 10**9  # a key not seen before, the same for both states below
    chunk.write_bytes(b"\0" * len(original))
    os.utime(chunk, ns=(later, later))
    np.testing.assert_array_equal(read_track(folder, "mic", decoded), read_track(folder, "mic"))
    assert not [k for k in decoded if k[2] == later]
    chunk.write_bytes(original)
    os.utime(chunk, ns=(later, later))
    np.testing.assert_array_equal(read_track(folder, "mic", decoded), q(sig))


def _read_until(proc: subprocess.Popen, lines: list[str], pred) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"child ended early: {proc.stderr.read()}")
        lines.append(line.split())
        if pred(lines):
            return
    raise AssertionError("child too slow")


def test_kill_9_then_recover(tmp_path: Path, data_dir: Path) -> None:
    root = data_dir / "sessions"
    folder = root / "20240101-120000-abcdef"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[list[str]] = []
    try:
        _read_until(proc, lines, lambda ls: ls[-1][0] == "W" and int(ls[-1][3]) >= SR)
        # A live session in another process is listed but not interrupted.
        (info,) = list_sessions(root)
        assert (info.state, info.interrupted, info.title) == ("recording", False, "kill test")
        assert find_interrupted(root) == []
        _read_until(proc, lines, lambda ls: ls[-1][0] == "W" and int(ls[-1][1]) >= 2.5 * SR)
    finally:
        proc.kill()  # SIGKILL: no cleanup runs in the child
        rest, _ = proc.communicate(timeout=30)
    lines += [ln.split() for ln in rest.splitlines() if ln.strip()]
    writes = [ln for ln in lines if ln[0] == "W" and len(ln) == 4]
    mic_w, sys_w, mic_synced = (int(v) for v in writes[-1][1:])
    last_t = max(int(ln[1]) for ln in lines if ln[0] == "T" and len(ln) == 2)

    (info,) = find_interrupted(root)
    assert (info.folder, info.state, info.interrupted) == (folder, "interrupted", True)
    rec = recover(folder)
    mic, system = rec.tracks["mic"], rec.tracks["system"]
    # Everything fsync'd is there, and (the OS keeps a killed process's writes) everything
    # write() returned for; at most the one block written after the last print is extra.
    assert mic_synced <= mic_w <= len(mic) <= mic_w + 1600
    assert sys_w <= len(system) <= sys_w + 1600
    assert len(mic) - mic_synced <= (0.5 + 0.1 + 0.1) * SR
    np.testing.assert_array_equal(mic, q(signal(0, len(mic))))
    np.testing.assert_array_equal(system, q(signal(0, len(system), 97.0)))
    assert rec.duration_s == max(len(mic), len(system)) / SR
    assert rec.transcript == json.loads((folder / TRANSCRIPT).read_text())
    assert rec.transcript is not None and rec.transcript["n"] >= last_t
    assert rec.transcript["segments"][0]["text"] == f"word {rec.transcript['n']}"
    assert not list(folder.glob("*.pcm")) and list(folder.glob("mic-*.flac"))
    journal_bytes = (folder / JOURNAL).read_bytes()
    assert json.loads(journal_bytes)["state"] == "recovered"
    assert find_interrupted(root) == []

    again = recover(folder)  # idempotent
    np.testing.assert_array_equal(again.tracks["mic"], mic)
    np.testing.assert_array_equal(again.tracks["system"], system)
    assert again.transcript == rec.transcript
    assert (folder / JOURNAL).read_bytes() == journal_bytes
    np.testing.assert_array_equal(read_track(folder, "mic"), mic)


@pytest.fixture
def small_disk(tmp_path: Path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if shutil.which("mount") is None or os.name != "posix" or os.geteuid() != 0:
        pytest.skip("needs root and mount(8) to mount a 2 MB tmpfs as a full disk")
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if r.returncode:
        pytest.skip(f"mounting a tmpfs is not permitted here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_disk_full_stops_cleanly_and_keeps_audio(
    small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DESKSCRIBE_DATA_DIR", str(small_disk))
    rng = np.random.default_rng(0)
    sent: list[np.ndarray] = []
    rec = SessionRecorder(tracks=("mic", "system"), chunk_seconds=1.0)
    with pytest.raises(RecorderDiskFullError) as err:
        for _ in range(10_000):  # 2 MB of barely compressible noise fills in ~60 s of audio
            block = rng.uniform(-1, 1, 1600).astype(np.float32)
            rec.write("mic", block)
            rec.write("system", block * 0.5)
            rec.save_transcript({"n": len(sent)})
            sent.append(block)
    msg = str(err.value)
    assert "disk is full" in msg and str(rec.folder) in msg and "Free some space" in msg
    assert "everything up to 0:" in msg
    sig = np.concatenate(sent)
    kept = rec.samples("mic")
    assert len(sent) > 100 and len(sig) <= kept <= len(sig) + 1600
    # Later calls (e.g. from another thread) say why it stopped, not just that it did.
    with pytest.raises(RecorderDiskFullError, match="disk is full"):
        rec.write("mic", sent[0])
    rec.close()  # a no-op now
    journal = json.loads((rec.folder / JOURNAL).read_text())
    assert (journal["state"], journal["stop_reason"]) == ("stopped", "disk full")
    assert find_interrupted() == []
    mic = read_track(rec.folder, "mic")
    assert len(mic) == kept
    np.testing.assert_array_equal(mic[: len(sig)], q(sig))
    got = recover(rec.folder)  # at a full disk: leftovers that cannot become FLAC stay .pcm
    np.testing.assert_array_equal(got.tracks["mic"], mic)
    np.testing.assert_array_equal(got.tracks["system"][: len(sig)], q(sig * 0.5))
    assert got.transcript is not None and got.transcript["n"] >= len(sent) - 1


def test_pcm_cut_mid_sample_and_lost_journal(data_dir: Path) -> None:
    with SessionRecorder(chunk_seconds=1.0) as rec:
        rec.write("mic", signal(0, int(1.5 * SR)))
    folder = rec.folder
    # What a crash leaves: a raw chunk after the FLAC ones, its last sample half written.
    tail = q(signal(int(1.5 * SR), 1234))
    raw = np.rint(tail * 32768).astype("<i2").tobytes()
    (folder / "mic-000002.pcm").write_bytes(raw + b"\x7f")
    expected = np.concatenate([q(signal(0, int(1.5 * SR))), tail])
    np.testing.assert_array_equal(read_track(folder, "mic"), expected)
    (folder / JOURNAL).write_bytes(b'{"id": "garb')  # garbled journal
    (info,) = find_interrupted()
    assert info.interrupted and info.duration_s == len(expected) / SR
    got = recover(folder)
    np.testing.assert_array_equal(got.tracks["mic"], expected)
    assert got.transcript is None
    journal = json.loads((folder / JOURNAL).read_text())
    assert journal["state"] == "recovered" and journal["tracks"] == ["mic"]
    assert sorted(p.name for p in folder.glob("mic-*")) == [f"mic-00000{i}.flac" for i in range(3)]
    assert find_interrupted() == []
    with pytest.raises(RecorderError, match="not a DeskScribe recording"):
        recover(data_dir)


def test_export_audio_mixes_tracks_and_decodes_back(tmp_path: Path) -> None:
    mic, system = signal(0, int(2.3 * SR)), signal(0, int(1.7 * SR), 97.0)
    with SessionRecorder(tracks=("mic", "system"), chunk_seconds=1.0) as rec:
        rec.write("mic", mic)
        rec.write("system", system)
        rec.save_transcript({"segments": []})
    out = export_audio(rec.folder, tmp_path / "out" / "meeting.flac")
    mixed = decode_audio(out)
    assert len(mixed) == len(mic)
    # Averaged at one constant gain; the shorter track counts as silence after its end.
    want = (q(mic) + np.pad(q(system), (0, len(mic) - len(system)))) / 2
    assert np.max(np.abs(mixed - want)) <= 1 / 32768
    one = export_audio(rec.folder, tmp_path / "mic.flac", tracks=["mic"])
    np.testing.assert_array_equal(decode_audio(one), read_track(rec.folder, "mic"))
    assert not list((tmp_path / "out").glob(".*"))  # no temp file left behind
