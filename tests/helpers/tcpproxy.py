"""A TCP proxy on 127.0.0.1 in front of the test S3 server, for the real client, nothing of it
patched: it may forward from client to server at a limited rate (a slow store: slow uploads), or
drop the connection of a request `drop` picks before the server sees it (a store that stops
answering some reads). It counts the bytes the server sent (`downloaded`): what a client read
from the store, HTTP and all.

It forwards each piece at once (TCP_NODELAY both ways, and on Linux TCP_QUICKACK towards the
server, re-armed before each read): a server that writes a response's head and body separately
without TCP_NODELAY, as s3s-fs's binary does, would otherwise wait for a delayed ACK (40 ms)
on some requests, a stall no real store has."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable

from tests.helpers.s3server import free_port


class TcpProxy:
    """Forwards 127.0.0.1:`port` to `upstream_port`: uploads at most `bytes_per_second` (None:
    as fast as they come); a piece from the client whose first line `drop` is true of (a request
    line, `GET /bucket/key HTTP/1.1`) closes its connection instead of reaching the server."""

    def __init__(self, upstream_port: int, bytes_per_second: int | None = None,
                 drop: Callable[[bytes], bool] | None = None) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._upstream = upstream_port
        self._rate = bytes_per_second
        self._drop = drop
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._stopped = threading.Event()
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        #: Bytes sent from the server to the client so far.
        self.downloaded = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def stop(self) -> None:
        """Stops accepting: a new connection is refused (the store has gone away)."""
        self._stopped.set()
        self._listener.close()

    def cut(self) -> None:
        """Stops, and breaks every open connection mid-request."""
        self.stop()
        for s in list(self._open):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self._upstream))
            self._open.update((client, server))
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        quick_ack = None if up else getattr(socket, "TCP_QUICKACK", None)
        # small pieces up, for the rate; large ones down, so a streamed object costs few calls
        buffer = memoryview(bytearray(16384 if up else 1 << 18))
        try:
            dst.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:
                if quick_ack is not None:
                    src.setsockopt(socket.IPPROTO_TCP, quick_ack, 1)
                size = src.recv_into(buffer)
                if not size:
                    break
                if up and self._drop is not None and self._drop(
                        bytes(buffer[:size]).split(b"\r\n", 1)[0]):
                    break
                if up and self._rate is not None:
                    time.sleep(size / self._rate)
                elif not up:
                    with self._lock:
                        self.downloaded += size
                dst.sendall(buffer[:size])
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
                self._open.discard(s)
