"""One running app: ``deskscribe FILE…`` (and the file manager's "Open with DeskScribe") while
the window is open hands the files to it and exits; the window comes to the front with them
queued. Through a local socket (QLocalServer: a Unix socket, a named pipe on Windows), named
for this user and data folder, and open to this user only.
"""

from __future__ import annotations

import getpass
import hashlib
import json
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

from ..paths import data_dir

TIMEOUT_MS = 3000
MAX_MESSAGE = 1 << 20  # a million characters of paths is more than any drop


def server_name() -> str:
    """The socket's name: one per user and data folder (a test's app is not the user's)."""
    try:
        user = getpass.getuser()
    except Exception:  # no user name in the environment
        user = "user"
    folder = hashlib.sha256(str(data_dir().resolve()).encode()).hexdigest()[:12]
    return f"deskscribe-{hashlib.sha256(user.encode()).hexdigest()[:8]}-{folder}"


def hand_over(paths: list[str | Path]) -> bool:
    """Give ``paths`` to the app already running (it comes to the front); False when none
    answers. Needs a QCoreApplication."""
    socket = QLocalSocket()
    socket.connectToServer(server_name())
    if not socket.waitForConnected(TIMEOUT_MS):
        return False
    message = json.dumps({"open": [str(Path(p).resolve()) for p in paths]}) + "\n"
    socket.write(message.encode("utf-8"))
    if not socket.waitForBytesWritten(TIMEOUT_MS) or not socket.waitForReadyRead(TIMEOUT_MS):
        return False
    answer = bytes(socket.readAll().data())
    socket.disconnectFromServer()
    return answer.startswith(b"ok")


class InstanceServer(QObject):
    """Listens for other ``deskscribe`` starts; ``opened(paths)`` on the UI thread."""

    opened = Signal(list)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.server = QLocalServer(self)
        self.server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        name = server_name()
        if not self.server.listen(name):
            QLocalServer.removeServer(name)  # left by an app that crashed
            self.server.listen(name)
        self.server.newConnection.connect(self._connection)
        self._buffers: dict[QLocalSocket, bytes] = {}

    @property
    def listening(self) -> bool:
        return self.server.isListening()

    def _connection(self) -> None:
        while (socket := self.server.nextPendingConnection()) is not None:
            self._buffers[socket] = b""
            socket.readyRead.connect(lambda s=socket: self._read(s))
            socket.disconnected.connect(lambda s=socket: self._drop(s))

    def _read(self, socket: QLocalSocket) -> None:
        data = self._buffers.get(socket, b"") + bytes(socket.readAll().data())
        if len(data) > MAX_MESSAGE:
            socket.abort()
            return
        self._buffers[socket] = data
        if not data.endswith(b"\n"):
            return
        try:
            paths = [str(p) for p in json.loads(data.decode("utf-8")).get("open", [])]
        except (ValueError, AttributeError, TypeError):
            socket.write(b"bad\n")
            return
        socket.write(b"ok\n")
        socket.flush()
        self.opened.emit(paths)

    def _drop(self, socket: QLocalSocket) -> None:
        self._buffers.pop(socket, None)
        socket.deleteLater()

    def close(self) -> None:
        self.server.close()
