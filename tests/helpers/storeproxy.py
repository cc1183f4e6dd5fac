"""A model of a store over a network: an asyncio TCP proxy, in a process of its own, between a
client and an S3 server on 127.0.0.1 that holds each response's first byte back `latency`
seconds (time to first byte), a new connection `connect` seconds, and paces each connection at
`bandwidth` bytes a second each way, as a store 10-50 ms away behind a capped link would. It
counts what passes: requests by method, ranged GETs, connections, and the bytes each way
(HTTP included).

    python -m tests.helpers.storeproxy UPSTREAM_PORT [--latency S] [--connect S] [--bandwidth B]

prints its port and its control port on its first line; with `--log FILE` it writes each
request line there as it passes (and its Range), after the time.monotonic() it passed at (the
same clock in every process on the machine); a line `stats` sent to the control
port answers with the counts as one JSON line (and the proxy's own CPU seconds), `reset` sets
them to zero. `StoreProxy` starts one and reads it.

It reads HTTP/1.1 both ways (lengths, chunks, HEAD's empty body, 100 Continue) to know where
each request and response starts; it forwards every byte unchanged."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Counts:
    requests: dict[str, int] = field(default_factory=dict)
    ranged_gets: int = 0
    connections: int = 0
    downloaded: int = 0
    uploaded: int = 0

    def as_dict(self) -> dict[str, object]:
        return {"requests": sum(self.requests.values()), "by_method": dict(self.requests),
                "ranged_gets": self.ranged_gets, "connections": self.connections,
                "downloaded": self.downloaded, "uploaded": self.uploaded,
                "cpu_seconds": time.process_time()}


class _Message:
    """Where one direction of an HTTP/1.1 connection is: in a head, or in a body of known or
    chunked length; `feed` takes the next bytes and returns the heads that completed in them."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.body_left = 0  # bytes of a sized body still to pass
        self.chunked = False
        self.chunk_line = bytearray()  # a chunk-size line being read
        self.in_trailer = False
        self.until_eof = False  # a response that ends when the connection does

    def at_start(self) -> bool:
        return not (self.head or self.body_left or self.chunked or self.until_eof)

    def feed(self, data: bytes, body_of) -> list[bytes]:
        """The heads completed in `data`; `body_of(head)` says the body that follows one:
        ("length", n), ("chunked", 0) or ("eof", 0)."""
        heads = []
        view = memoryview(data)
        while view:
            if self.until_eof:
                return heads
            if self.body_left:
                step = min(self.body_left, len(view))
                self.body_left -= step
                view = view[step:]
                continue
            if self.chunked:
                view = self._chunk(view)
                continue
            start = max(0, len(self.head) - 3)
            self.head += view
            end = self.head.find(b"\r\n\r\n", start)
            if end < 0:
                return heads
            view = view[len(view) - (len(self.head) - end - 4):]
            del self.head[end + 4:]
            head = bytes(self.head)
            self.head = bytearray()
            kind, n = body_of(head)
            heads.append(head)
            if kind == "length":
                self.body_left = n
            elif kind == "chunked":
                self.chunked = True
            elif kind == "eof":
                self.until_eof = True
        return heads

    def _chunk(self, view: memoryview) -> memoryview:
        """Reads chunk-size lines and skips chunk data (`body_left` holds the data and CRLF)."""
        at = bytes(view).find(b"\n")
        if at < 0:
            self.chunk_line += view
            return view[len(view):]
        line = bytes(self.chunk_line + view[:at + 1]).strip()
        self.chunk_line = bytearray()
        view = view[at + 1:]
        if self.in_trailer:
            if not line:
                self.chunked = self.in_trailer = False
            return view
        size = int(line.split(b";")[0], 16)
        if size == 0:
            self.in_trailer = True
        else:
            self.body_left = size + 2
        return view


def _headers(head: bytes) -> tuple[str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    fields = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name:
            fields[name.strip().lower()] = value.strip()
    return lines[0], fields


def _sized(fields: dict[str, str]) -> tuple[str, int] | None:
    if "chunked" in fields.get("transfer-encoding", "").lower():
        return ("chunked", 0)
    if "content-length" in fields:
        return ("length", int(fields["content-length"]))
    return None


class _Link:
    """One direction's pacing: `bandwidth` bytes a second. A sleep that overran is made up
    for by the next bytes (up to `_CREDIT` seconds' worth), so the rate holds on average."""

    _CREDIT = 0.005

    def __init__(self, bandwidth: float) -> None:
        self.bandwidth = bandwidth
        self.free_at = 0.0

    async def pace(self, size: int) -> None:
        if self.bandwidth <= 0:
            return
        now = time.monotonic()
        self.free_at = max(self.free_at, now - self._CREDIT) + size / self.bandwidth
        if self.free_at > now:
            await asyncio.sleep(self.free_at - now)


class Proxy:
    def __init__(self, upstream: int, latency: float, connect: float, bandwidth: float,
                 log: str | None = None) -> None:
        self.upstream = upstream
        self.log = open(log, "a", buffering=1) if log else None  # noqa: SIM115 - open for life
        self.latency = latency
        self.connect = connect
        self.bandwidth = bandwidth
        self.counts = Counts()

    async def serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.counts.connections += 1
        if self.connect > 0:
            await asyncio.sleep(self.connect)
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            client_w.close()
            return
        methods: deque[str] = deque()  # the requests awaiting their responses, in order
        up = asyncio.create_task(self._requests(client_r, server_w, methods))
        down = asyncio.create_task(self._responses(server_r, client_w, methods))
        await asyncio.wait((up, down), return_when=asyncio.FIRST_COMPLETED)
        for task in (up, down):
            task.cancel()
        for writer in (client_w, server_w):
            writer.close()

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        methods: deque[str]) -> None:
        link, message = _Link(self.bandwidth), _Message()

        def body_of(head: bytes) -> tuple[str, int]:
            line, fields = _headers(head)
            method = line.split(" ", 1)[0]
            self.counts.requests[method] = self.counts.requests.get(method, 0) + 1
            if method == "GET" and "range" in fields:
                self.counts.ranged_gets += 1
            methods.append(method)
            if self.log:
                ranged = f" {fields['range']}" if "range" in fields else ""
                self.log.write(f"{time.monotonic():.3f} {line}{ranged}\n")
            return _sized(fields) or ("length", 0)

        while data := await reader.read(1 << 16):
            message.feed(data, body_of)
            self.counts.uploaded += len(data)
            await link.pace(len(data))
            writer.write(data)
            await writer.drain()

    async def _responses(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         methods: deque[str]) -> None:
        link, message = _Link(self.bandwidth), _Message()

        def body_of(head: bytes) -> tuple[str, int]:
            line, fields = _headers(head)
            status = int(line.split(" ")[1])
            if status < 200:  # 100 Continue: the final response is still to come
                return ("length", 0)
            method = methods.popleft() if methods else "GET"
            if method == "HEAD" or status in (204, 304):
                return ("length", 0)
            return _sized(fields) or ("eof", 0)

        while data := await reader.read(1 << 18):
            if message.at_start() and self.latency > 0:
                await asyncio.sleep(self.latency)  # the first byte of a response, held back
            message.feed(data, body_of)
            self.counts.downloaded += len(data)
            await link.pace(len(data))
            writer.write(data)
            await writer.drain()

    async def control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            if line.strip() == b"reset":
                self.counts = Counts()
            writer.write(json.dumps(self.counts.as_dict()).encode() + b"\n")
            await writer.drain()
        writer.close()


async def _main(args: argparse.Namespace) -> None:
    proxy = Proxy(args.upstream, args.latency, args.connect, args.bandwidth, args.log)
    server = await asyncio.start_server(proxy.serve, "127.0.0.1", 0, limit=1 << 20)
    control = await asyncio.start_server(proxy.control, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    control_port = control.sockets[0].getsockname()[1]
    print(f"{port} {control_port}", flush=True)
    async with server, control:
        await asyncio.gather(server.serve_forever(), control.serve_forever())


class StoreProxy:
    """The proxy in a process of its own in front of the S3 server on `upstream_port`."""

    def __init__(self, upstream_port: int, *, latency: float = 0.0, connect: float = 0.0,
                 bandwidth: float = 0.0) -> None:
        self.latency, self.connect, self.bandwidth = latency, connect, bandwidth
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.storeproxy", str(upstream_port),
             "--latency", str(latency), "--connect", str(connect), "--bandwidth", str(bandwidth)],
            stdout=subprocess.PIPE, text=True, cwd=_ROOT,
            env={**os.environ, "PYTHONPATH": str(_ROOT)})
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError("the store proxy did not start")
        self.port, self._control_port = (int(n) for n in line.split())
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.pid = self._process.pid

    def _ask(self, what: str) -> dict[str, object]:
        import socket

        with socket.create_connection(("127.0.0.1", self._control_port)) as s:
            s.sendall(what.encode() + b"\n")
            return dict(json.loads(s.makefile().readline()))

    def stats(self) -> dict[str, object]:
        """Requests (`requests`, `by_method`, `ranged_gets`), `connections`, bytes
        `downloaded` (server to client) and `uploaded`, and the proxy's `cpu_seconds`."""
        return self._ask("stats")

    def reset(self) -> None:
        self._ask("reset")

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("upstream", type=int)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds to first byte")
    parser.add_argument("--connect", type=float, default=0.0, help="seconds per new connection")
    parser.add_argument("--bandwidth", type=float, default=0.0,
                        help="bytes a second per connection each way (0: unlimited)")
    parser.add_argument("--log", help="a file to write each request line to")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(parser.parse_args()))
