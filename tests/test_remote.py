"""The desktop app as a client of a DeskScribe server: the real window's file queue (offscreen)
sending real recordings to a real ``deskscribe serve`` (its own process, model store and API
key) and getting the transcripts back; cancel, a wrong key, a server nobody runs (and the offer
to transcribe on this computer instead), a server killed and restarted mid-job, the Settings
dialog's Test button, and where the key is kept."""

from __future__ import annotations

import http.server
import os
import signal
import stat
import threading
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest

pytest.register_assert_rewrite("files_support")
pytest_plugins = ["files_support"]  # fixtures: ctx, window

import httpx2 as httpx  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import QLineEdit  # noqa: E402

from conftest import EVAL, load, normalize, wer  # noqa: E402
from deskscribe import settings  # noqa: E402
from deskscribe.gui.settings_dialog import SettingsDialog  # noqa: E402
from deskscribe.gui.workers import active_workers  # noqa: E402
from deskscribe.server.config import new_key  # noqa: E402
from deskscribe.service.jobs import FileJob  # noqa: E402
from deskscribe.service.remote import (  # noqa: E402
    NotADeskScribeServer,
    ServerKeyError,
    ServerUnreachable,
    check_server,
    remote_runner,
)
from files_support import run_queue, status_cell  # noqa: E402
from gui_support import UiLag  # noqa: E402
from media import write_media  # noqa: E402
from server_support import free_port, make_store, restart, serve  # noqa: E402

JFK = EVAL / "jfk.flac"
ASK_NOT = "ask not what your country can do for you"


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_fp32):
    """One server for the module, with an API key (as on a team's network)."""
    root = tmp_path_factory.mktemp("server")
    store = make_store(root, {"tiny.en-fp32": tiny_fp32})
    key = new_key(root / "keys.txt")
    served = serve(store, root / "data", "--api-key-file", str(root / "keys.txt"))
    yield served, key
    served.stop()


@pytest.fixture(scope="module")
def long_flac(tmp_path_factory):
    """jfk.flac 16 times with pauses (about 3 minutes): long enough to see progress and to
    cancel half way."""
    jfk = load(JFK)
    gap = np.zeros(8000, np.float32)
    audio = np.concatenate([x for _ in range(16) for x in (jfk, gap)])
    path = tmp_path_factory.mktemp("long") / "jfk-16.flac"
    return write_media(path, audio[None, :], rate=16000, codec="flac")


def use_server(ctx, url: str, key: str | None) -> None:
    ctx.set("server_url", url)
    ctx.set("server_key", key)
    ctx.set("use_server", True)


def server_jobs(served, key: str) -> list[dict]:
    answer = httpx.get(served.url + "/v1/jobs", headers={"Authorization": f"Bearer {key}"})
    answer.raise_for_status()
    return answer.json()["data"]


# --------------------------------------------------------------------------- the file queue


def test_a_file_is_transcribed_on_the_server(qtbot, window, ctx, server):
    served, key = server
    _win, files, _view, _lib = window
    use_server(ctx, served.url, key)
    assert not files.where.isHidden() and served.url in files.where.text()
    lag = UiLag(lambda: files.queue.rows[0].progress_text if files.queue.rows else "")
    lag.start()
    rows = run_queue(qtbot, files, [JFK], target=_win)
    lag.stop()
    row = rows["jfk.flac"]
    assert row.status == "done", row.error
    assert status_cell(files, "jfk.flac") == "Done"
    transcript = ctx.library.load_transcript(row.item_id)
    assert ASK_NOT in normalize(transcript.text), transcript.text
    # The server's model did it (this computer has "tiny.en"; the server "tiny.en-fp32"), and
    # this computer's engine never started.
    assert transcript.model == "tiny.en-fp32" and transcript.source.endswith("jfk.flac")
    assert files.engine._proc is None
    assert row.duration == pytest.approx(11.0, abs=0.2)
    # The server forgot the file and its transcript once the app had it.
    assert server_jobs(served, key) == []
    assert files.server_banner.isHidden()
    lag.check()


def test_progress_and_cancel_on_the_server(qtbot, window, ctx, server, long_flac):
    served, key = server
    _win, files, _view, _lib = window
    use_server(ctx, served.url, key)
    seen: list[float] = []

    def sample() -> None:
        row = files.queue.rows[0] if files.queue.rows else None
        if row is not None and row.status == "running" and row.progress > 0:
            seen.append(row.progress)

    lag = UiLag(on_tick=sample)
    lag.start()
    files.add_paths([long_flac])
    qtbot.waitUntil(lambda: len(set(seen)) >= 2, timeout=180_000)  # it moves, as it goes
    lag.stop()
    assert 0 < seen[0] < seen[-1] < 1, seen
    row = files.queue.rows[0]
    files.select(row.item_id)
    t0 = time.monotonic()
    with qtbot.waitSignal(files.queue_finished, timeout=30_000):
        qtbot.mouseClick(files.cancel_button, Qt.MouseButton.LeftButton)
    assert time.monotonic() - t0 < 5
    row = files.queue.row(row.item_id)  # (rows are redrawn from the queue: read it again)
    assert row.status == "cancelled" and status_cell(files, "jfk-16.flac").startswith("Cancelled")
    assert ctx.library.get(row.item_id).status == "cancelled"
    # Cancelled on the server too: its job stopped there, not transcribed for nobody.
    jobs = server_jobs(served, key)
    assert [j["status"] for j in jobs if j["filename"] == "jfk-16.flac"] == ["cancelled"]
    lag.check()


def test_a_wrong_key_fails_the_file_with_what_to_do(qtbot, window, ctx, server):
    served, _key = server
    _win, files, _view, _lib = window
    use_server(ctx, served.url, "ds-not-the-key")
    row = run_queue(qtbot, files, [JFK])["jfk.flac"]
    assert row.status == "failed"
    assert row.error == (
        f"The DeskScribe server at {served.url} did not accept the API key: check the key in "
        "Settings."
    )
    assert status_cell(files, "jfk.flac") == f"Failed: {row.error}"
    assert not files.server_banner.isHidden()
    assert ctx.library.get(row.item_id).status == "failed"


def test_an_unreachable_server_fails_the_file_and_offers_this_computer(qtbot, window, ctx):
    _win, files, _view, _lib = window
    url = f"http://127.0.0.1:{free_port()}"  # nobody listens there
    use_server(ctx, url, None)
    row = run_queue(qtbot, files, [JFK], target=_win)["jfk.flac"]
    assert row.status == "failed"
    assert row.error.startswith(f"The DeskScribe server at {url} cannot be reached: ")
    assert row.error.endswith("Check the address in Settings, or transcribe on this computer.")
    assert "connection refused" in row.error.lower()
    files.select(row.item_id)  # the whole reason below the table
    assert not files.details.isHidden() and row.error in files.details.text()
    banner = files.server_banner
    assert not banner.isHidden() and "“jfk.flac” could not be transcribed" in banner.text.text()
    assert banner.action.text() == "Transcribe on this computer"
    with qtbot.waitSignal(files.queue_finished, timeout=180_000):
        qtbot.mouseClick(banner.action, Qt.MouseButton.LeftButton)
    row = files.queue.row(row.item_id)
    assert row.status == "done", row.error
    assert banner.isHidden()
    transcript = ctx.library.load_transcript(row.item_id)
    assert ASK_NOT in normalize(transcript.text)
    assert files.engine._proc is not None  # this computer's engine did it
    assert ctx.get_bool("use_server")  # the setting stays: the next file goes to the server
    assert files.server() is not None and row.item_id not in files.file_queue._run_here


# --------------------------------------------------------------------------- the runner


def test_the_server_killed_and_restarted_mid_job(tmp_path, tiny_fp32, long_flac):
    """The server dies mid-job (kill -9) and comes back on the same address: the job, stored
    on the server, runs again there and the runner keeps polling until it has the result."""
    store = make_store(tmp_path, {"tiny.en-fp32": tiny_fp32})
    served = serve(store, tmp_path / "data")
    try:
        run = remote_runner(served.url, None, poll_s=0.2, away_grace_s=120)
        seen: list[float] = []
        out: dict = {}
        worker = threading.Thread(
            target=lambda: out.update(result=run(FileJob(long_flac, model="tiny.en"),
                                                 progress=lambda d, t, s="": seen.append(d / t))),
        )  # fmt: skip
        worker.start()
        deadline = time.monotonic() + 120
        while not seen and time.monotonic() < deadline:
            time.sleep(0.05)
        assert seen, "no progress from the server"
        served.signal(signal.SIGKILL)
        served.wait(30)
        time.sleep(1.0)  # away a moment: the runner meets a refused connection
        served = restart(served)
        worker.join(300)
        assert not worker.is_alive()
        result = out["result"]
        assert result.status == "done", result.error
        words = (EVAL / "jfk.txt").read_text(encoding="utf-8").strip()
        assert wer(" ".join([words] * 16), result.transcript.text) <= 0.25, result.transcript.text
        assert result.duration == pytest.approx(16 * 11.5, abs=2)
    finally:
        served.stop()


def test_the_runner_never_raises(tmp_path):
    """Whatever fails ends in a failed result with a message: no address, a missing file."""
    run = remote_runner("", None)
    result = run(FileJob(JFK))
    assert result.status == "failed" and "Enter the DeskScribe server's address" in result.error
    url = f"http://127.0.0.1:{free_port()}"
    result = remote_runner(url, None)(FileJob(tmp_path / "gone.flac"))
    assert result.status == "failed" and "gone.flac no longer exists" in result.error
    cancel = threading.Event()
    cancel.set()
    assert remote_runner(url, None)(FileJob(JFK), cancel=cancel).status == "cancelled"
    # Stopped because the app quits: unfinished, so the next start offers it again.
    quitting = remote_runner(url, None, quitting=lambda: True)(FileJob(JFK), cancel=cancel)
    assert quitting.status == "running"


def test_a_file_over_the_servers_limit_is_refused_before_it_is_sent(tmp_path, tiny_fp32):
    """The server tells its limits in /health: a file over its job limit fails at once with
    the sizes and what to do (and so is offered to this computer), instead of an upload the
    server cuts off, which the client would see as a lost connection. The audio API's limit
    (OpenAI's 25 MB) is not the job API's: long recordings are what jobs are for."""
    call = EVAL / "two-speakers.wav"  # about 1 MB
    store = make_store(tmp_path, {"tiny.en-fp32": tiny_fp32})
    served = serve(store, tmp_path / "data", "--max-upload-mb", "0.25",
                   "--max-job-upload-mb", "0.5")  # fmt: skip
    try:
        limits = httpx.get(served.url + "/health").json()["limits"]
        assert limits["max_upload_mb"] == 0.25 and limits["max_job_upload_mb"] == 0.5
        result = remote_runner(served.url, None)(FileJob(call))
        assert result.status == "failed", result
        assert "two-speakers.wav is 1 MB" in result.error and "at most 0.5 MB" in result.error
        assert "Transcribe it on this computer" in result.error
        small = tmp_path / "jfk-short.flac"
        write_media(small, load(JFK)[None, : 16000 * 4], rate=16000, codec="flac")
        r = httpx.post(served.url + "/v1/audio/transcriptions", data={"model": "whisper-1"},
                       files={"file": ("call.wav", call.read_bytes())})  # fmt: skip
        assert r.status_code == 413 and "the job API" in r.json()["error"]["message"], r.text
        done = remote_runner(served.url, None, poll_s=0.2)(FileJob(small, model="tiny.en"))
        assert done.status == "done", done
    finally:
        served.stop()


# --------------------------------------------------------------------------- Settings


def test_check_server_says_what_is_wrong(server):
    served, key = server
    answer = check_server(served.url, key)
    assert answer == f"Connected to the DeskScribe server at {served.url}: 1 model (tiny.en-fp32)."
    # The base URL OpenAI clients take, or no scheme: the same server.
    assert check_server(f"127.0.0.1:{served.port}/v1/", key) == answer
    with pytest.raises(ServerKeyError, match="did not accept the API key"):
        check_server(served.url, "ds-wrong")
    with pytest.raises(ServerKeyError, match="needs an API key: enter the key"):
        check_server(served.url, None)
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerUnreachable, match="cannot be reached: connection refused"):
        check_server(url, key)


def test_check_server_knows_another_web_server():
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"<html><body>router admin</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        with pytest.raises(NotADeskScribeServer, match="answered, but it is not a DeskScribe"):
            check_server(url, None)
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_settings_dialog_tests_the_server_and_keeps_the_key_private(qtbot, ctx, server):
    served, key = server
    dialog = SettingsDialog(ctx)
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.server_key.echoMode() == QLineEdit.EchoMode.Password
    assert not dialog.test_server.isEnabled()  # nothing to test yet
    # The dialog's own start-up work first (the vocabulary check loads a tokenizer, which holds
    # the GIL a moment): what is measured below is the Test button alone.
    qtbot.waitUntil(lambda: not active_workers(), timeout=60_000)
    lag = UiLag(lambda: dialog.server_status.text())
    lag.start()
    for url, secret, expected in (
        (served.url, key, "Connected to the DeskScribe server"),
        (served.url, "ds-wrong", "did not accept the API key"),
        (f"http://127.0.0.1:{free_port()}", key, "cannot be reached"),
    ):
        dialog.server_url.setText(url)
        dialog.server_key.setText(secret)
        qtbot.mouseClick(dialog.test_server, Qt.MouseButton.LeftButton)
        assert dialog.server_status.text() == "Testing…"  # the answer comes from a worker
        qtbot.waitUntil(lambda e=expected: e in dialog.server_status.text(), timeout=30_000)
        assert dialog.test_server.isEnabled()
    lag.stop()
    lag.check()
    assert "tiny.en-fp32" not in dialog.server_status.text()
    assert dialog.server_status.styleSheet()  # a failure shows in red

    # Saved: a typo is refused at Save, a good address kept in its plain form.
    dialog.use_server.setChecked(True)
    dialog.server_url.setText("http://")
    qtbot.mouseClick(dialog.save_btn, Qt.MouseButton.LeftButton)
    assert dialog.isVisible() and "not a server address" in dialog.server_status.text()
    dialog.server_url.setText(f"127.0.0.1:{served.port}/v1")
    dialog.server_key.setText(key)
    with qtbot.waitSignal(dialog.accepted, timeout=30_000):
        qtbot.mouseClick(dialog.save_btn, Qt.MouseButton.LeftButton)
    now = settings.current()
    assert now.use_server is True and now.server_url == served.url and now.server_key == key
    # The key is a secret: the settings file (and its folder) are this user's only.
    path = settings.settings_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert "server_key" in settings.SECRETS
