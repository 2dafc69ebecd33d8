"""The Notes tab of the transcript view: meeting notes written by a language model (the
built-in one on this computer, or the server set in Settings, named before each run), shown
as they stream, cancellable at any time, kept with the transcript, editable and copyable.

Every time in the notes is a link: a click moves the player there and selects the line. The
model runs on a worker thread (``service.notes.make_notes``); the UI only shows what it
sends. Notes are saved with the transcript through the view's autosave, like an edit.
"""

from __future__ import annotations

import copy

from PySide6.QtCore import QUrl, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from ..transcript.export import (
    format_clock,
    md_escape,
    notes_credit,
    notes_markdown,
    notes_sections,
)
from .widgets import muted
from .workers import run_in_worker

TEMPLATES = ("meeting", "interview", "lecture", "one-to-one")


def notes_view_markdown(notes: dict) -> str:
    """The notes as the tab shows them: Markdown whose times are ``seek:`` links."""
    edited = notes.get("edited")
    if isinstance(edited, str) and edited.strip():
        return edited
    summary, sections = notes_sections(notes)
    out = ["## Summary", "", md_escape(summary) or "_(no summary)_", ""]
    for heading, lines in sections:
        if not lines:
            continue
        out += [f"## {heading}", ""]
        for text, times in lines:
            links = ", ".join(f"[{format_clock(t)}](seek:{t:.3f})" for t in times)
            out.append(f"- {md_escape(text)}" + (f" ({links})" if links else ""))
        out.append("")
    out.append(f"_{md_escape(notes_credit(notes))}_")
    return "\n".join(out)


class NotesPanel(QWidget):
    finished = Signal(str)  # "done", "cancelled" or "failed", after a run ends

    def __init__(self, view, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = view
        self._job = None
        self._item_id: int | None = None  # the item the running job writes notes for

        self.template = QComboBox()
        self.template.addItems(TEMPLATES)
        self.template.setToolTip("What the notes look for (your own: notes-templates/NAME.txt)")
        self.write_button = QPushButton("Write notes")
        self.write_button.clicked.connect(self.write)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel)
        self.cancel_button.hide()
        self.edit_button = QPushButton("Edit")
        self.edit_button.setCheckable(True)
        self.edit_button.toggled.connect(self._edit)
        self.copy_button = QPushButton("Copy")
        self.copy_button.clicked.connect(self.copy)
        top = QHBoxLayout()
        top.addWidget(QLabel("Template:"))
        top.addWidget(self.template)
        top.addWidget(self.write_button)
        top.addWidget(self.cancel_button)
        top.addStretch(1)
        top.addWidget(self.edit_button)
        top.addWidget(self.copy_button)

        self.status = muted()
        self.progress = QProgressBar()
        self.progress.setTextVisible(False)
        self.progress.setMaximumHeight(8)
        self.progress.hide()
        self.stream = QPlainTextEdit()
        self.stream.setReadOnly(True)
        self.stream.setPlaceholderText("The model's words appear here as it writes.")
        self.stream.hide()
        self.browser = QTextBrowser()
        self.browser.setOpenLinks(False)
        self.browser.anchorClicked.connect(self._link)
        self.editor = QPlainTextEdit()
        self.editor.hide()

        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.status)
        layout.addWidget(self.progress)
        layout.addWidget(self.stream, 1)
        layout.addWidget(self.browser, 3)
        layout.addWidget(self.editor, 3)
        self.show_notes()

    # --- showing ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._job is not None

    def show_notes(self) -> None:
        """Show the notes of the transcript the view holds (a new item cancels a run)."""
        if self.running and self._item_id != self.view.item_id:
            self.cancel()
        if self.edit_button.isChecked():
            self.edit_button.setChecked(False)
        notes = self.view.transcript.notes if self.view.item_id is not None else None
        has = bool(notes)
        self.edit_button.setEnabled(has)
        self.copy_button.setEnabled(has)
        self.write_button.setEnabled(self.view.item_id is not None and not self.running)
        self.write_button.setText("Write again" if has else "Write notes")
        if has:
            self.browser.setMarkdown(notes_view_markdown(notes))
        else:
            self.browser.setMarkdown(
                "_No notes yet._ **Write notes** asks a language model for a summary, key "
                "points, decisions, action items and chapters, each with the times it comes "
                "from. Check them against the recording: a small model makes mistakes."
            )

    def _link(self, url: QUrl) -> None:
        if url.scheme() != "seek":
            return
        try:
            seconds = float(url.path())
        except ValueError:
            return
        self.view.go_to(seconds)

    # --- writing ---------------------------------------------------------------------------

    def write(self) -> None:
        if self.running or self.view.item_id is None:
            return
        self._item_id = self.view.item_id
        self.stream.clear()
        self.stream.show()
        self.progress.setRange(0, 0)
        self.progress.show()
        self.status.setText("Starting the language model…")
        self.write_button.setEnabled(False)
        self.cancel_button.show()
        self._job = run_in_worker(
            _write, self.view.snapshot(), self.template.currentText(),
            on_done=self._done, on_error=self._failed, on_progress=self._progress,
            name="notes",
        )  # fmt: skip

    def cancel(self) -> None:
        if self._job is not None:
            self._job.cancel()
            self.status.setText("Cancelling…")

    def _progress(self, label: str, done: int, total: int, text: str) -> None:
        if total:
            self.progress.setRange(0, total)
            self.progress.setValue(done)
        part = f", part {min(done + 1, total)} of {total}" if total > 1 else ""
        self.status.setText(f"Writing with {label}{part}…")
        if text != self.stream.toPlainText():
            self.stream.setPlainText(text)
            bar = self.stream.verticalScrollBar()
            bar.setValue(bar.maximum())

    def _ended(self) -> None:
        self._job = None
        self.progress.hide()
        self.stream.hide()
        self.cancel_button.hide()

    def _done(self, result) -> None:
        data, label = result
        self._ended()
        if self._item_id == self.view.item_id:
            self.view.set_notes(data)
        self.show_notes()
        dropped = data.get("dropped_citations", 0) + len(data.get("unsupported", []))
        check = f"; {dropped} citations that did not check out were left out" if dropped else ""
        self.status.setText(f"Written by {label}{check}.")
        self.finished.emit("done")

    def _failed(self, exc: BaseException) -> None:
        from ..errors import Cancelled

        cancelled = isinstance(exc, Cancelled)
        self._ended()
        self.show_notes()
        self.status.setText(
            "Cancelled: the notes you had are kept." if cancelled else f"No notes: {exc}"
        )
        self.finished.emit("cancelled" if cancelled else "failed")

    # --- editing and copying ---------------------------------------------------------------

    def _edit(self, on: bool) -> None:
        notes = self.view.transcript.notes
        if on and notes:
            self.editor.setPlainText(notes_markdown(notes).split("\n", 2)[2].strip())
            self.browser.hide()
            self.editor.show()
            self.edit_button.setText("Done")
            self.editor.setFocus()
            return
        self.edit_button.setText("Edit")
        self.editor.hide()
        self.browser.show()
        if notes and self.editor.toPlainText().strip():
            text = self.editor.toPlainText()
            if text.strip() != notes_markdown(notes).split("\n", 2)[2].strip():
                changed = copy.deepcopy(notes)
                changed["edited"] = text
                self.view.set_notes(changed)
            self.show_notes()

    def copy(self) -> None:
        notes = self.view.transcript.notes
        if notes:
            QGuiApplication.clipboard().setText(notes_markdown(notes))
            self.status.setText("The notes are copied (Markdown).")


def _write(transcript, template: str, progress, cancel):
    """On the worker: the notes of ``transcript`` and the name of the model that wrote them."""
    from ..service.language_model import LLMOptions, chosen
    from ..service.notes import make_notes

    choice = chosen()
    text: list[str] = []
    state = [0, 0]

    def parts(done: int, total: int) -> None:
        state[:] = [done, total]
        progress(choice.label, done, total, "".join(text))

    def streamed(piece: str) -> None:
        text.append(piece)
        progress(choice.label, state[0], state[1], "".join(text)[-20_000:])

    progress(choice.label, 0, 0, "")
    notes = make_notes(transcript, llm=LLMOptions(choice.endpoint, choice.gguf),
                       template=template, progress=parts, on_text=streamed,
                       cancel=cancel)  # fmt: skip
    return notes.to_dict(transcript), choice.label
