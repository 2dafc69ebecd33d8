"""Settings: default model, device, language, vocabulary, where and how transcripts are exported
(the subtitle rules of SRT and VTT too), the DeskScribe server files may be transcribed on, the
language model that writes notes (built in, or a server), and watch folders; one tab each.

Values live in the same settings file as ``deskscribe config`` uses; they are written on a
worker thread when the user presses Save. The server's Test button asks the server on a worker
thread too (`service.remote.check_server`), as "Find servers on this computer" looks for
language-model servers (`llm.endpoint.discover`): the window never waits on the network.
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from urllib.parse import urlsplit

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QRadioButton,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from .. import settings
from ..errors import DeskScribeError
from ..service.remote import RemoteError, check_server, normalize_url
from ..transcript.export import FORMATS
from ..transcript.subtitles import SubtitleRules
from .context import DEVICE_CHOICES, AppContext
from .export_dialog import SubtitleRulesBox
from .file_options import FORMAT_LABELS
from .speakers_choice import SpeakersChoice
from .watch_folders import WatchFoldersBox
from .widgets import LanguageCombo, heading, muted
from .workers import run_in_worker


def _choices():
    """Installed model names and whether a GPU provider exists (worker thread)."""
    from ..models.store import list_models
    from ..whisper.runtime import CPU, available_providers

    return [m.name for m in list_models()], any(p != CPU for p in available_providers())


def _installed_llms() -> list[str]:
    """File names of the installed notes models (worker thread)."""
    from ..llm.store import installed_llms

    return [p.name for p in installed_llms()]


def _find_llm_servers(ports: dict[int, str] | None):
    """Language-model servers answering on this computer (worker thread)."""
    from ..llm.endpoint import discover

    return discover(ports=ports)


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")  # as service.language_model.chosen() says


def notes_url(text: str) -> str:
    """The notes server's address as it is saved: ``http(s)://host[:port]/path`` without the
    trailing slash; ``/v1`` added when no path is given (where Ollama, LM Studio, llama.cpp
    and vLLM serve the OpenAI API). ValueError with what to write."""
    url = text.strip().rstrip("/")
    if not url:
        raise ValueError("Give the server's address, e.g. http://127.0.0.1:11434/v1 (Ollama)")
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"{text.strip()!r} is not a server address; write it as http://127.0.0.1:11434/v1"
        )
    return url if parts.path else url + "/v1"


def _remote_host(url: str) -> str | None:
    """The host of ``url`` when it is not this computer (the transcript goes there)."""
    try:
        host = (urlsplit(url if "://" in url else "http://" + url).hostname or "").lower()
    except ValueError:
        return None
    return host if host and host not in LOOPBACK_HOSTS else None


def _vocabulary_checker(default_model: str | None):
    """A function that fits a vocabulary to the default model's prompt (worker thread)."""
    from ..service.models import pick_model
    from ..whisper.prompt import vocabulary_checker

    return vocabulary_checker(pick_model(None, default_model)[1])  # the model that will be used


class SettingsDialog(QDialog):
    def __init__(
        self,
        ctx: AppContext,
        parent: QWidget | None = None,
        *,
        llm_ports: dict[int, str] | None = None,
    ) -> None:
        """``llm_ports``: where "Find servers on this computer" looks ({port: name}; default:
        the ports Ollama, LM Studio, llama.cpp's server and vLLM listen on)."""
        super().__init__(parent)
        self.ctx = ctx
        self.llm_ports = llm_ports
        self.setWindowTitle("Settings")
        self.setMinimumWidth(600)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(20, 16, 20, 16)
        lay.addWidget(heading("Settings", 1.3))
        self.tabs = QTabWidget()
        general = QWidget()
        form = QFormLayout(general)

        self.model = QComboBox()
        self.model.addItem("Newest installed", None)
        self.model.setToolTip("Used by live sessions, and by files unless the queue says otherwise")
        form.addRow("Default model", self.model)
        self.device = QComboBox()
        for key, label in DEVICE_CHOICES.items():
            self.device.addItem(label, key)
        self.device.setCurrentIndex(max(0, self.device.findData(ctx.get("device", "auto"))))
        self.device.setToolTip("Automatic uses the GPU when ONNX Runtime has one, else the CPU")
        form.addRow("Run models on", self.device)
        self.language = LanguageCombo()
        self.language.restore(ctx)
        form.addRow("Language", self.language)
        self.vocabulary = QLineEdit(ctx.get("vocabulary") or "")
        self.vocabulary.setPlaceholderText("e.g. ComfyUI, Kubernetes, Dr. Okafor")
        self.vocabulary.setToolTip(
            "Names and jargon to spell as written, separated by commas; given to the model "
            "with every file and every live pass"
        )
        self.vocabulary_status = muted()
        self._plan_vocabulary = None  # set once the model's tokenizer is loaded (worker)
        self.vocabulary.textChanged.connect(self._show_vocabulary_fit)
        form.addRow("Vocabulary", self.vocabulary)
        form.addRow("", self.vocabulary_status)

        self.speakers = SpeakersChoice(ctx.get("speakers", "off"))
        form.addRow("Speakers in files", self.speakers)

        folder_row = QHBoxLayout()
        self.output_dir = QLineEdit(ctx.get("output_dir") or "")
        self.output_dir.setPlaceholderText("Next to each file")
        browse = QPushButton("Choose…")
        browse.clicked.connect(self._browse)
        folder_row.addWidget(self.output_dir, 1)
        folder_row.addWidget(browse)
        form.addRow("Save exports in", folder_row)
        formats_row = QGridLayout()
        chosen = set(ctx.get_list("output_formats", ["txt"]))
        self.formats: dict[str, QCheckBox] = {}
        for i, fmt in enumerate(FORMATS):
            box = QCheckBox(FORMAT_LABELS.get(fmt, fmt))
            box.setChecked(fmt in chosen)
            self.formats[fmt] = box
            formats_row.addWidget(box, i // 4, i % 4)
        form.addRow("Export as", formats_row)
        self.automatic = QCheckBox("Export each file automatically when it is done")
        self.automatic.setChecked(ctx.get_bool("export_automatically"))
        form.addRow("", self.automatic)
        self.subtitles = SubtitleRulesBox(settings.subtitle_rules())
        form.addRow(self.subtitles)
        form.addRow(muted("The light or dark look follows your operating system's setting."))
        self.watch_folders = WatchFoldersBox(ctx)
        self.tabs.addTab(general, "General")
        self.tabs.addTab(self._server_group(), "Server")
        self.notes_page = self._notes_group()
        self.tabs.addTab(self.notes_page, "Notes")
        self.tabs.addTab(self.watch_folders, "Watch folders")
        lay.addWidget(self.tabs, 1)

        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.save)
        buttons.rejected.connect(self.reject)
        self.save_btn = buttons.button(QDialogButtonBox.StandardButton.Save)
        lay.addWidget(buttons)
        run_in_worker(_choices, on_done=self._filled, on_error=lambda e: None)
        run_in_worker(_installed_llms, on_done=self._llms_filled, on_error=lambda e: None)
        run_in_worker(
            _vocabulary_checker,
            ctx.get("default_model"),
            on_done=self._checker_ready,
            on_error=lambda e: None,  # no model installed: nothing to check against yet
        )

    def _server_group(self) -> QWidget:
        ctx = self.ctx
        box = QWidget()
        form = QFormLayout(box)
        self.use_server = QCheckBox("Transcribe files on a DeskScribe server")
        self.use_server.setChecked(ctx.get_bool("use_server"))
        self.use_server.setToolTip(
            "Files you add are uploaded to the server and transcribed there (the transcripts "
            "stay in this computer's library); live sessions always run on this computer"
        )
        form.addRow(self.use_server)
        self.server_url = QLineEdit(ctx.get("server_url") or "")
        self.server_url.setPlaceholderText("http://HOST:8000, as `deskscribe serve` prints it")
        form.addRow("Address", self.server_url)
        self.server_key = QLineEdit(ctx.get("server_key") or "")
        self.server_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.server_key.setPlaceholderText("Only if the server asks for one")
        form.addRow("API key", self.server_key)
        row = QHBoxLayout()
        self.test_server = QPushButton("Test")
        self.test_server.setToolTip("Ask the server whether it answers and takes the key")
        self.test_server.clicked.connect(self.check_server)
        self.server_status = muted()
        self.server_status.setTextInteractionFlags(
            self.server_status.textInteractionFlags() | Qt.TextInteractionFlag.TextSelectableByMouse
        )
        row.addWidget(self.test_server)
        row.addWidget(self.server_status, 1)
        form.addRow("", row)
        self._test_serial = 0  # an answer for an address since edited is not shown
        self.server_url.textChanged.connect(self._server_edited)
        self.server_key.textChanged.connect(self._server_edited)
        self.test_server.setEnabled(bool(self.server_url.text().strip()))
        return box

    def _notes_group(self) -> QWidget:
        """Built in (an installed GGUF, or the largest) or a server (address, model, key),
        with "Find servers on this computer" and what leaves the computer said plainly."""
        ctx = self.ctx
        box = QWidget()
        lay = QVBoxLayout(box)
        lay.addWidget(
            muted("The language model that writes notes, answers Ask and translates transcripts.")
        )
        self.notes_builtin = QRadioButton("Built in (on this computer)")
        self.notes_server = QRadioButton("A server: Ollama, LM Studio, llama.cpp, vLLM or another")
        group = QButtonGroup(box)
        group.addButton(self.notes_builtin)
        group.addButton(self.notes_server)
        lay.addWidget(self.notes_builtin)
        builtin = QFormLayout()
        builtin.setContentsMargins(24, 0, 0, 0)
        self.notes_gguf = QComboBox()
        self.notes_gguf.addItem("Largest installed", "")
        current = ctx.get("notes_gguf") or ""
        if current:  # until the installed ones are listed (worker)
            self.notes_gguf.addItem(Path(current).stem, current)
            self.notes_gguf.setCurrentIndex(1)
        self.notes_gguf.setToolTip("Notes models are installed on the Models page (Notes tab)")
        builtin.addRow("Model", self.notes_gguf)
        self.notes_gguf_hint = muted("Notes models are installed on the Models page, Notes tab.")
        builtin.addRow("", self.notes_gguf_hint)
        lay.addLayout(builtin)

        lay.addWidget(self.notes_server)
        server = QFormLayout()
        server.setContentsMargins(24, 0, 0, 0)
        self.notes_url = QLineEdit(ctx.get("notes_url") or "")
        self.notes_url.setPlaceholderText("http://127.0.0.1:11434/v1 (Ollama)")
        server.addRow("Address", self.notes_url)
        self.notes_model = QLineEdit(ctx.get("notes_model") or "")
        self.notes_model.setPlaceholderText("the model to ask, e.g. llama3.2:3b")
        server.addRow("Model", self.notes_model)
        self.notes_key = QLineEdit(ctx.get("notes_key") or "")
        self.notes_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.notes_key.setPlaceholderText("Only if the server asks for one")
        server.addRow("API key", self.notes_key)
        self.notes_where = muted()
        self.notes_where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        server.addRow("", self.notes_where)
        find = QHBoxLayout()
        self.find_servers = QPushButton("Find servers on this computer")
        self.find_servers.setToolTip(
            "Ask the usual ports of this computer (Ollama 11434, LM Studio 1234, llama.cpp "
            "8080, vLLM 8000) which models they serve; nothing else is contacted"
        )
        self.find_servers.clicked.connect(self.find_llm_servers)
        self.servers_status = muted()
        find.addWidget(self.find_servers)
        find.addWidget(self.servers_status, 1)
        server.addRow("", find)
        self.servers = QListWidget()
        self.servers.setMaximumHeight(96)
        self.servers.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # llama.cpp: a path
        self.servers.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.servers.hide()
        self.servers.currentItemChanged.connect(self._server_picked)
        server.addRow("", self.servers)
        lay.addLayout(server)
        lay.addStretch(1)

        (self.notes_server if ctx.get("notes_url") else self.notes_builtin).setChecked(True)
        self._find_serial = 0
        self.notes_builtin.toggled.connect(lambda _on: self._notes_choice_changed())
        self.notes_url.textChanged.connect(lambda _t: self._notes_choice_changed())
        self.notes_model.textChanged.connect(lambda _t: self._notes_choice_changed())
        self._notes_choice_changed()
        return box

    def _notes_choice_changed(self) -> None:
        server = self.notes_server.isChecked()
        self.notes_gguf.setEnabled(not server)
        for w in (self.notes_url, self.notes_model, self.notes_key, self.find_servers,
                  self.servers):  # fmt: skip
            w.setEnabled(server)
        url = self.notes_url.text().strip()
        host = _remote_host(url) if url else None
        if not server or not url:
            self._show_notes_where("", True)
        elif host:
            self._show_notes_where(
                f"{host} is not this computer: transcripts are sent there whenever notes are "
                "written, a question is asked or a transcript is translated.",
                False,
            )
        else:
            self._show_notes_where("On this computer: transcripts stay here.", True)

    def _show_notes_where(self, text: str, ok: bool) -> None:
        self.notes_where.setText(text)
        self.notes_where.setStyleSheet("" if ok else "color: #c0392b")

    def find_llm_servers(self) -> None:
        """Ask this computer's usual ports on a worker; the servers found fill a list."""
        self._find_serial += 1
        serial = self._find_serial
        self.find_servers.setEnabled(False)
        self.servers_status.setText("Looking on this computer…")
        run_in_worker(
            _find_llm_servers, self.llm_ports,
            on_done=functools.partial(self._servers_found, serial),
            on_error=functools.partial(self._servers_found, serial), name="llm-discover",
        )  # fmt: skip

    def _servers_found(self, serial: int, found: object) -> None:
        if serial != self._find_serial:
            return
        with contextlib.suppress(RuntimeError):  # the dialog was closed meanwhile
            self.find_servers.setEnabled(self.notes_server.isChecked())
            self.servers.clear()
            if isinstance(found, BaseException):
                self.servers_status.setText(f"Could not look: {found}")
                return
            if not found:
                self.servers.hide()
                self.servers_status.setText(
                    "No server answers on this computer. Start Ollama or LM Studio (or type "
                    "a server's address above)."
                )
                return
            for endpoint in found:  # llm.endpoint.Endpoint
                item = QListWidgetItem(endpoint.label)
                item.setToolTip(endpoint.label)
                item.setData(Qt.ItemDataRole.UserRole, (endpoint.base_url, endpoint.model))
                self.servers.addItem(item)
            self.servers.show()
            n = len(found)
            self.servers_status.setText(f"{n} model{'s' if n > 1 else ''} found: pick one below.")

    def _server_picked(self, item: QListWidgetItem | None, _previous=None) -> None:
        if item is None:
            return
        base_url, model = item.data(Qt.ItemDataRole.UserRole)
        self.notes_url.setText(base_url)
        self.notes_model.setText(model)
        self.notes_key.clear()  # it answered without one; a key kept would go to it

    def _llms_filled(self, names: list[str]) -> None:
        with contextlib.suppress(RuntimeError):  # the dialog was closed meanwhile
            current = self.notes_gguf.currentData()
            keep = self.ctx.get("notes_gguf") or ""
            while self.notes_gguf.count() > 1:
                self.notes_gguf.removeItem(1)
            for name in names:
                self.notes_gguf.addItem(Path(name).stem, name)
            stems = {Path(n).stem for n in names}
            if keep and Path(keep).stem not in stems:
                self.notes_gguf.addItem(f"{Path(keep).stem} (not installed)", keep)
            found = [i for i in range(self.notes_gguf.count())
                     if Path(self.notes_gguf.itemData(i) or "").stem == Path(current).stem]  # fmt: skip
            self.notes_gguf.setCurrentIndex(found[0] if current and found else 0)
            if not names:
                self.notes_gguf_hint.setText(
                    "No notes model is installed: install one on the Models page (Notes tab), "
                    "or choose a server."
                )

    def _notes_values(self) -> dict:
        """notes_url (None: the built-in model), notes_model, notes_key, notes_gguf."""
        server = self.notes_server.isChecked()
        return {
            "notes_url": (self.notes_url.text().strip() or None) if server else None,
            "notes_model": self.notes_model.text().strip() or None,
            "notes_key": self.notes_key.text().strip() or None,
            "notes_gguf": self.notes_gguf.currentData() or None,
        }

    def _server_edited(self) -> None:
        self._test_serial += 1
        self.test_server.setEnabled(bool(self.server_url.text().strip()))
        self._show_server_status("", True)

    def check_server(self) -> None:
        """The Test button: ask the server on a worker thread; the answer shows beside it."""
        self._test_serial += 1
        serial = self._test_serial
        self.test_server.setEnabled(False)
        self._show_server_status("Testing…", True)
        run_in_worker(
            check_server, self.server_url.text(), self.server_key.text().strip() or None,
            on_done=functools.partial(self._tested, serial, True),
            on_error=functools.partial(self._tested, serial, False), name="server-test",
        )  # fmt: skip

    def _tested(self, serial: int, ok: bool, answer: object) -> None:
        if serial != self._test_serial:
            return
        if not ok and not isinstance(answer, DeskScribeError):
            answer = f"Unexpected error ({type(answer).__name__}: {answer})"
        with contextlib.suppress(RuntimeError):  # the dialog was closed meanwhile
            self.test_server.setEnabled(bool(self.server_url.text().strip()))
            self._show_server_status(str(answer), ok)

    def _show_server_status(self, text: str, ok: bool) -> None:
        self.server_status.setText(text)
        self.server_status.setStyleSheet("" if ok else "color: #c0392b")

    def _filled(self, found) -> None:
        names, has_gpu = found
        current = self.ctx.get("default_model")
        for name in names:
            self.model.addItem(name, name)
        if current and current not in names:
            self.model.addItem(f"{current} (not installed)", current)
        self.model.setCurrentIndex(max(0, self.model.findData(current)))
        gpu = self.device.findData("gpu")
        if not has_gpu:
            item = self.device.model().item(gpu)
            item.setEnabled(False)
            item.setToolTip(
                "No GPU provider in this ONNX Runtime (install deskscribe[cuda] or [directml])"
            )

    def _checker_ready(self, plan_vocabulary) -> None:
        self._plan_vocabulary = plan_vocabulary
        self._show_vocabulary_fit()

    def _show_vocabulary_fit(self) -> None:
        """Say, as the user types, which words do not fit Whisper's prompt."""
        if self._plan_vocabulary is None:
            return
        plan = self._plan_vocabulary(self.vocabulary.text())
        if plan.dropped:
            self.vocabulary_status.setText(f"Too long: {plan.note}")
        elif plan.kept:
            self.vocabulary_status.setText(f"{len(plan.kept)} words and names, all used")
        else:
            self.vocabulary_status.setText("")

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Save exported transcripts in",
                                                  self.output_dir.text())  # fmt: skip
        if folder:
            self.output_dir.setText(folder)

    def values(self) -> dict:
        formats = ",".join(f for f, box in self.formats.items() if box.isChecked())
        return {
            "default_model": self.model.currentData(),
            "device": self.device.currentData(),
            **self.language.settings_values(),  # language, languages
            "vocabulary": self.vocabulary.text().strip() or None,
            "speakers": self.speakers.value(),
            "output_dir": self.output_dir.text().strip() or None,
            "output_formats": formats or None,
            "export_automatically": self.automatic.isChecked(),
            "use_server": self.use_server.isChecked(),
            "server_url": self.server_url.text().strip() or None,
            "server_key": self.server_key.text().strip() or None,
            "watch_folders": self.watch_folders.value(),
            **self._notes_values(),
            **self._subtitle_values(),
        }

    def _subtitle_values(self) -> dict:
        """The subtitle rules as settings; a rule at its default is left unset (None)."""
        rules, default = self.subtitles.rules(), SubtitleRules()
        values = {
            key: getattr(rules, rule) if getattr(rules, rule) != getattr(default, rule) else None
            for key, rule in settings.SUBTITLE_NUMBERS.items()
        }
        values["subtitle_speaker_names"] = rules.speaker_names
        return values

    def save(self) -> None:
        values = self.values()
        if values["server_url"] or values["use_server"]:
            try:  # a typo is said here, not by the first file that fails
                values["server_url"] = normalize_url(values["server_url"] or "")
            except RemoteError as e:
                self._show_server_status(str(e), False)
                self.server_url.setFocus()
                return
        if self.notes_server.isChecked():
            problem = None
            try:
                values["notes_url"] = notes_url(values["notes_url"] or "")
            except ValueError as e:
                problem, field = str(e), self.notes_url
            if problem is None and not values["notes_model"]:
                problem = "Name the model to ask on that server (Find servers lists them)."
                field = self.notes_model
            if problem is not None:
                self.tabs.setCurrentWidget(self.notes_page)
                self._show_notes_where(problem, False)
                field.setFocus()
                return
        self.save_btn.setEnabled(False)

        def write() -> None:
            for key, value in values.items():
                if self.ctx.get(key) != value:
                    self.ctx.set(key, value)

        run_in_worker(write, on_done=self._saved, on_error=self._failed)

    def _saved(self, _result: object) -> None:
        self.ctx.status_message.emit("Settings saved")
        self.accept()

    def _failed(self, exc: BaseException) -> None:
        from PySide6.QtWidgets import QMessageBox

        self.save_btn.setEnabled(True)
        QMessageBox.warning(self, "Settings not saved", f"The settings could not be saved: {exc}")
