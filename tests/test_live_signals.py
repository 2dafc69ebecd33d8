"""`deskscribe live` stopped by the system (SIGTERM: `kill`, a service manager; SIGHUP: logout)
stops exactly as on Ctrl-C: exit 0, the session "stopped", the words being spoken committed.

Real capture: speech played into a private PulseAudio null sink, recorded from its monitor by a
real `deskscribe live` process with the tiny.en model (asked for by its name without variant).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from conftest import espeak, load, normalize, run_cli
from conversations import write_wav
from deskscribe.audio.sessions import list_sessions
from test_live import data_dir, gap  # noqa: F401 (fixture)

LONG = (
    "We still need someone to review the speaker labelling changes before Thursday, and after "
    "that the release notes, the installer builds and the documentation for the new features."
)


def _lines(stream, into: list[str]) -> threading.Thread:
    def read() -> None:
        for line in stream:
            into.append(line)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def _saved_text(data_dir) -> tuple[str, str]:  # noqa: F811
    """(committed text, tentative text) of the session's autosaved transcript."""
    for path in (data_dir / "sessions").glob("*/transcript.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):  # being replaced right now
            continue
        return " ".join(s["text"] for s in data["segments"]), data.get("tentative", "")
    return "", ""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_live_stops_cleanly_on_sigterm_and_sighup(
    pulse,
    tiny_fp32,
    data_dir,  # noqa: F811 (the fixture from test_live)
    speech_dir,
    tmp_path,
    signum,
):
    store = tmp_path / "store"
    store.mkdir()
    (store / "tiny.en-fp32").symlink_to(tiny_fp32, target_is_directory=True)
    sink = f"live_sig{int(signum)}"
    monitor = pulse.add_null_sink(sink)
    speech = load(espeak(LONG, speech_dir / "live-long.wav"))
    wav = write_wav(tmp_path / "long.wav", np.concatenate([gap(0.3), speech, gap(0.5)]))
    env = {**os.environ, "DESKSCRIBE_DATA_DIR": str(data_dir), "DESKSCRIBE_MODELS_DIR": str(store)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "deskscribe", "live", "--source", "system", "--device", monitor,
         "--model", "tiny.en", "--no-speakers"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    out: list[str] = []
    player = None
    try:
        err = []
        while not (err and err[-1].startswith("recording")):
            err.append(proc.stderr.readline())
            assert err[-1], "".join(err)  # the process ended before recording
        assert "tiny.en-fp32" in err[-1]  # "tiny.en" found the installed variant
        reader = _lines(proc.stdout, out)
        player = pulse.play(wav, sink)
        # Signal while the sentence is being spoken: as soon as the autosaved transcript holds
        # committed words of it that no printed line has yet (its line still open). Waiting
        # for one given word instead lost the race on a loaded machine: a transcriber behind
        # real time commits and closes the line in one pass.
        deadline = time.monotonic() + 60
        before, pending = ("", ""), []
        sentence = normalize(LONG).split()
        while time.monotonic() < deadline and player.poll() is None:
            before = _saved_text(data_dir)
            said = [w for w in normalize(before[0]).split() if w in sentence]
            shown = set(normalize(" ".join(out)).split())
            pending = [w for w in said if w not in shown]
            if pending:
                break
            time.sleep(0.05)
        assert player.poll() is None, f"the speech ended before it was seen: {before}"
        assert pending, (before, out)  # heard words not printed yet: the case under test
        proc.send_signal(signum)
        rest, err_rest = proc.communicate(timeout=120)
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        if player is not None and player.poll() is None:
            player.kill()
    assert proc.returncode == 0, "".join(err) + err_rest
    assert "Traceback" not in err_rest and "stopping" in err_rest, err_rest
    printed = normalize(" ".join(out) + rest)
    # What had been committed when the signal came is printed: the open line is closed, not
    # lost (tentative words, guesses at a word still being spoken, may still change).
    heard = [w for w in normalize(before[0]).split() if w in normalize(LONG).split()]
    missing = [w for w in heard if w not in printed.split()]
    assert heard and not missing, (missing, before, printed)
    [session] = list_sessions()
    assert session.state == "stopped" and not session.interrupted
    saved = json.loads((session.folder / "transcript.json").read_text())
    final = normalize(" ".join(s["text"] for s in saved["segments"]))
    assert all(w in final.split() for w in heard) and not saved.get("tentative"), saved
    listed = run_cli(["sessions", "list"], store=store, DESKSCRIBE_DATA_DIR=str(data_dir))
    assert "stopped" in listed.stdout and "INTERRUPTED" not in listed.stdout, listed.stdout
