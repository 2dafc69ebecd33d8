"""Ask: a question about the recordings, answered by a language model (the built-in one on
this computer, or the server set in Settings, named before each run) that cites the lines
its answer comes from.

``AskDialog(ctx, parent)`` asks across the library (``service.ask.ask_library``: the
transcripts the library ranks best for the question's words); ``AskDialog(ctx, parent,
sources=[(item_id, title, transcript)])`` asks about those transcripts only
(``service.ask.ask_sources``), e.g. the one the transcript view shows. The model runs on a
worker thread; its answer is shown as it streams, Cancel stops it. Each citation is a row
"title — 03:12 — line text": a click emits ``open_at(item_id, seconds)``, for the window to
open that recording there. An answer no line backs is shown as the model's guess.
"""

from __future__ import annotations

import json
import re

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ..llm.ask import Answer, Citation, NothingToAsk
from ..transcript.export import format_clock
from .widgets import muted
from .workers import run_in_worker

GUESS = "The model's guess: no line of your recordings backs it."
CITATION = Qt.ItemDataRole.UserRole  # a citation row's (item id, seconds)
_ANSWER = re.compile(r'"answer"\s*:\s*"((?:[^"\\]|\\.)*)')


def streamed_answer(raw: str) -> str:
    """The answer's text so far in a reply still streaming (``{"answer": "…``)."""
    found = _ANSWER.search(raw)
    if not found:
        return ""
    text = found.group(1)
    for cut in range(6):  # a half-written escape ("\\", "\\u00e") at the end
        try:
            return json.loads(f'"{text[: len(text) - cut] if cut else text}"')
        except ValueError:
            continue
    return text.replace('\\"', '"')


def citation_text(c: Citation) -> str:
    """How a citation's row reads: "title — 03:12 — line text"."""
    return f"{c.title} — {format_clock(c.start)} — {c.text}"


class AskDialog(QDialog):
    open_at = Signal(int, float)  # a citation clicked: its recording's item id, its start
    ended = Signal(str)  # "done", "cancelled", "nothing" or "failed", after an ask ends

    def __init__(self, ctx, parent: QWidget | None = None, sources: list | None = None) -> None:
        super().__init__(parent)
        self.ctx = ctx
        self.sources = list(sources) if sources is not None else None
        self.answer: Answer | None = None
        self.streamed = ""  # the model's reply so far, while it streams
        self._job = None
        about = ", ".join(title for _, title, _ in self.sources) if self.sources else ""
        self.setWindowTitle(f"Ask about {about}" if about else "Ask the library")
        self.resize(620, 460)

        self.question = QLineEdit()
        self.question.setPlaceholderText(
            "A question, in the words the recordings use (e.g. what was agreed about the budget?)"
        )
        self.question.returnPressed.connect(self.ask)
        self.ask_button = QPushButton("Ask")
        self.ask_button.setDefault(True)
        self.ask_button.clicked.connect(self.ask)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel)
        self.cancel_button.hide()
        top = QHBoxLayout()
        top.addWidget(self.question, 1)
        top.addWidget(self.ask_button)
        top.addWidget(self.cancel_button)

        self.status = muted(
            "Asks the transcripts that match the question best; the answer cites their lines."
            if self.sources is None
            else "The answer cites the lines it comes from."
        )
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.setTextVisible(False)
        self.progress.setMaximumHeight(8)
        self.progress.hide()
        self.guess = QLabel(GUESS)
        self.guess.setWordWrap(True)
        self.guess.setStyleSheet("font-weight: 600;")
        self.guess.hide()
        self.answer_label = QLabel()
        self.answer_label.setWordWrap(True)
        self.answer_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.answer_label.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.answer_label.setStyleSheet("font-size: 11pt;")
        self.cited_heading = muted("Lines it comes from (click one to go there):")
        self.cited_heading.hide()
        self.citations = QListWidget()
        self.citations.setWordWrap(True)
        self.citations.setCursor(Qt.CursorShape.PointingHandCursor)
        self.citations.itemClicked.connect(self._clicked)
        self.citations.itemActivated.connect(self._clicked)
        self.citations.hide()
        self.read = muted()
        close = QPushButton("Close")
        close.clicked.connect(self.reject)
        bottom = QHBoxLayout()
        bottom.addWidget(self.read, 1)
        bottom.addWidget(close)

        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.status)
        layout.addWidget(self.progress)
        layout.addWidget(self.guess)
        layout.addWidget(self.answer_label)
        layout.addWidget(self.cited_heading)
        layout.addWidget(self.citations, 1)
        layout.addStretch(0)
        layout.addLayout(bottom)

    # --- asking ----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._job is not None

    def ask(self) -> None:
        question = self.question.text().strip()
        if self.running or not question:
            return
        self.answer = None
        self.streamed = ""
        self._show_answer_text("")
        self.guess.hide()
        self.cited_heading.hide()
        self.citations.clear()
        self.citations.hide()
        self.read.clear()
        self.progress.show()
        self.status.setText("Starting the language model…")
        self.ask_button.setEnabled(False)
        self.cancel_button.show()
        self._job = run_in_worker(
            _ask, self.ctx.library, self.sources, question,
            on_done=self._done, on_error=self._failed, on_progress=self._progress, name="ask",
        )  # fmt: skip

    def cancel(self) -> None:
        if self._job is not None:
            self._job.cancel()
            self.status.setText("Cancelling…")

    def _progress(self, label: str, raw: str) -> None:
        self.status.setText(f"Asking {label}…")
        self.streamed = raw
        text = streamed_answer(raw)
        if text:
            self._show_answer_text(text)

    def _ended(self) -> None:
        self._job = None
        self.progress.hide()
        self.cancel_button.hide()
        self.ask_button.setEnabled(True)

    def _done(self, result) -> None:
        answer, label = result
        self._ended()
        self.show_answer(answer)
        dropped = f"; {answer.dropped} citations of lines it was not shown were left out"
        self.status.setText(f"Answered by {label}" + (dropped if answer.dropped else "") + ".")
        self.ended.emit("done")

    def _failed(self, exc: BaseException) -> None:
        from ..errors import Cancelled

        self._ended()
        if isinstance(exc, Cancelled):
            self.status.setText("Cancelled.")
            self.ended.emit("cancelled")
        elif isinstance(exc, NothingToAsk):
            self.status.setText(f"Nothing to ask: {exc}.")
            self.ended.emit("nothing")
        else:
            self.status.setText(f"No answer: {exc}")
            self.ended.emit("failed")

    # --- showing ---------------------------------------------------------------------------

    def _show_answer_text(self, text: str) -> None:
        self.answer_label.setText(text)
        self.answer_label.setVisible(bool(text))

    def show_answer(self, answer: Answer) -> None:
        """Show ``answer``: its text, the model's-guess mark where no line backs it, its
        citations as rows, and which recordings were read."""
        self.answer = answer
        self._show_answer_text(answer.text or "(the model gave no answer)")
        self.guess.setVisible(answer.unsupported)
        self.citations.clear()
        for c in answer.citations:
            row = QListWidgetItem(citation_text(c))
            row.setToolTip("Open the recording here" if c.item_id is not None else c.title)
            row.setData(CITATION, (c.item_id, float(c.start)))
            if c.item_id is not None:  # looks like the link it is
                row.setForeground(self.palette().link())
                font = row.font()
                font.setUnderline(True)
                row.setFont(font)
            self.citations.addItem(row)
        self.citations.setVisible(bool(answer.citations))
        self.cited_heading.setVisible(bool(answer.citations))
        if answer.sources:
            self.read.setText("Read: " + ", ".join(title for _, title in answer.sources))

    def _clicked(self, row: QListWidgetItem) -> None:
        item_id, seconds = row.data(CITATION)
        if item_id is not None:
            self.open_at.emit(int(item_id), float(seconds))

    def done(self, result: int) -> None:  # closing (Close, Esc, the window's ×) stops a run
        self.cancel()
        super().done(result)


def _ask(library, sources, question: str, progress, cancel):
    """On the worker: the answer to ``question`` (about ``sources``, or across ``library``
    when None) and the name of the model that gave it."""
    from ..service.ask import ask_library, ask_sources
    from ..service.language_model import LLMOptions, chosen

    choice = chosen()
    text: list[str] = []

    def streamed(piece: str) -> None:
        text.append(piece)
        progress(choice.label, "".join(text)[-20_000:])

    progress(choice.label, "")
    model = {"llm": LLMOptions(choice.endpoint, choice.gguf), "cancel": cancel,
             "on_text": streamed}  # fmt: skip
    if sources is not None:
        answer = ask_sources(sources, question, **model)
    else:
        answer = ask_library(library, question, **model)
    return answer, choice.label
