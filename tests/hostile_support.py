"""The hostile client's tools, for tests/test_server_hostile.py (short) and bench/hostile.py
(long): raw sockets from chosen loopback addresses, chunked uploads, slow-header and slow-body
floods, playlists, a container that lies about its length, a realtime client that never
reads, and what the server process used (from /proc). Loopback only."""

from __future__ import annotations

import contextlib
import re
import select
import socket
import struct
import threading
import time
from pathlib import Path

import httpx2 as httpx

BOUNDARY = "b0und"


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def written(pid: int) -> int:
    """Bytes the process has passed to write() so far (/proc/PID/io wchar)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError("no wchar")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of the process so far."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))


def multipart_head(fields: dict[str, str], filename: str) -> bytes:
    """A multipart form's fields and the start of its file part (the file's bytes follow,
    then ``multipart_tail()``)."""
    out = b""
    for name, value in fields.items():
        out += (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
                f"{value}\r\n").encode()  # fmt: skip
    return out + (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; '
                  f'filename="{filename}"\r\nContent-Type: application/octet-stream\r\n\r\n').encode()  # fmt: skip


def multipart_tail() -> bytes:
    return f"\r\n--{BOUNDARY}--\r\n".encode()


def playlist(path: Path, target: str, entries: int = 1, seconds: float = 10.0) -> Path:
    """An HLS playlist naming ``target`` (a path on the server) ``entries`` times."""
    lines = ["#EXTM3U", "#EXT-X-TARGETDURATION:10"]
    for _ in range(entries):
        lines += [f"#EXTINF:{seconds},", target]
    path.write_text("\n".join([*lines, "#EXT-X-ENDLIST", ""]))
    return path


def claims_one_second(path: Path) -> Path:
    """A Matroska file made to say, in its header, that it lasts 1 s."""
    data = bytearray(path.read_bytes())
    at = data.find(b"\x44\x89\x88")  # Duration (an 8-byte float, in ms)
    assert at > 0, "no Matroska duration"
    data[at + 3 : at + 11] = struct.pack(">d", 1000.0)
    path.write_bytes(bytes(data))
    return path


def chunked_upload(port: int, megabytes: int, key: str | None = None) -> bytes:
    """POST a chunked multipart upload of ``megabytes`` MB of zeros; the server's answer."""
    s = connect(port)
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    s.sendall((f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}"
               f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
               "Transfer-Encoding: chunked\r\n\r\n").encode())  # fmt: skip
    head = multipart_head({"model": "whisper-1"}, "big.wav")
    piece = bytes(1 << 20)
    try:
        s.sendall(b"%x\r\n%s\r\n" % (len(head), head))
        for _ in range(megabytes):
            s.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        s.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered and closed: read what it said
    s.settimeout(30)
    answer = b""
    with contextlib.suppress(ConnectionResetError, TimeoutError):
        while chunk := s.recv(65536):
            answer += chunk
    s.close()
    return answer


class SlowFlood:
    """``count`` sockets from ``sources`` (loopback addresses), half sending headers that
    never end, half a body that never comes, each then trickling a byte a second."""

    SLOW_BODY = (b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: multipart/form-data; boundary=x\r\n"
                 b"Content-Length: 1000000\r\n\r\n--x\r\n")  # fmt: skip
    SLOW_HEADERS = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "

    def __init__(self, port: int, count: int, sources: list[str]) -> None:
        self.sockets: list[socket.socket] = []
        self.refused = 0
        self._stop = threading.Event()
        for i in range(count):
            try:
                s = connect(port, sources[i % len(sources)])
                s.setblocking(False)
                s.send(self.SLOW_BODY if i % 2 else self.SLOW_HEADERS)
            except OSError:
                self.refused += 1
                continue
            self.sockets.append(s)
        threading.Thread(target=self._trickle, daemon=True).start()

    def _trickle(self) -> None:
        while not self._stop.wait(1.0):
            for s in self.sockets:
                with contextlib.suppress(OSError):
                    s.send(b"a")

    def still_open(self) -> int:
        self.sockets = [s for s in self.sockets if not _closed(s)]
        return len(self.sockets)

    def stop(self) -> None:
        self._stop.set()
        for s in self.sockets:
            s.close()


def _closed(s: socket.socket) -> bool:
    """Whether the server closed ``s`` (what it sent before is read and dropped)."""
    while True:
        try:
            data = s.recv(65536)
        except BlockingIOError:
            return False
        except OSError:
            return True
        if not data:
            return True


def silent_client(port: int, url: str, headers: dict, event: str, seconds: float = 8.0):
    """A realtime client that sends ``event`` over and over for up to ``seconds`` and reads
    nothing, on a socket with a tiny receive buffer (websockets' sans-I/O client); then it
    reads what came: (messages received, whether the server closed the connection: a close
    frame, EOF or a reset)."""
    from websockets.client import ClientProtocol
    from websockets.frames import Opcode
    from websockets.uri import parse_uri

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    proto = ClientProtocol(parse_uri(url))
    request = proto.connect()
    for name, value in headers.items():
        request.headers[name] = value
    proto.send_request(request)
    sock.sendall(b"".join(proto.data_to_send()))
    while proto.handshake_exc is None and not proto.events_received():
        proto.receive_data(sock.recv(65536))
    sock.setblocking(False)
    deadline, pending = time.monotonic() + seconds, b""
    while time.monotonic() < deadline:
        if not pending:
            proto.send_text(event.encode())
            pending = b"".join(proto.data_to_send())
        if not select.select([], [sock], [], 3.0)[1]:
            break  # the server stopped reading us
        try:
            pending = pending[sock.send(pending) :]
        except OSError:
            break
    sock.setblocking(True)
    sock.settimeout(15)
    received, closed = 0, False
    try:
        while not closed:
            data = sock.recv(1 << 20)
            proto.receive_data(data)
            for frame in proto.events_received():
                received += frame.opcode is Opcode.TEXT
            closed = not data or proto.close_rcvd is not None
    except ConnectionResetError:
        closed = True
    except TimeoutError:
        pass
    sock.close()
    return received, closed


def realtime_seconds(url: str, key: str | None) -> float:
    """The server's count of realtime audio it took (/metrics)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    metrics = httpx.get(url + "/metrics", timeout=10, headers=headers).text
    found = re.search(r'deskscribe_audio_seconds_total\{kind="realtime"\} (\S+)', metrics)
    return float(found[1]) if found else 0.0
