"""Small MLCommons-style Arrow IPC stream files for the `ingest` and `preencoded_numpy` tests,
and an HTTP server on 127.0.0.1 that serves them with a manifest.

The schema is MLCommons's Flux.1 one: `__key__` (string), `t5_encodings`, `clip_encodings`,
`mean`, `logvar` (binary: the `.npy` bytes of a uint16 array holding bfloat16 bits) and, on the
validation split only, `timestep` (int64, 0-7). Values are small multiples of 1/8, which bf16
holds exactly, so every expected tensor is known in advance.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

#: Tiny shapes: T5 `[L, D]`, CLIP `[D]`, posterior `[C, H, W]`.
SHAPES = {"t5_encodings": (6, 8), "clip_encodings": (8,), "mean": (4, 2, 2), "logvar": (4, 2, 2)}
COLUMNS = tuple(SHAPES)


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 values that bf16 holds exactly, as their bf16 bits (uint16)."""
    bits = values.astype(np.float32).view(np.uint32)
    assert not (bits & 0xFFFF).any(), "not exact in bfloat16"
    return (bits >> 16).astype(np.uint16)


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def expected_values(file_index: int, row: int, column: str) -> np.ndarray:
    """The float32 values of one cell: distinct per file, row and column, exact in bf16."""
    n = int(np.prod(SHAPES[column]))
    base = (file_index * 1000 + row * 10 + COLUMNS.index(column)) % 64
    return ((np.arange(n, dtype=np.float32) % 16) - 8 + base / 8).reshape(SHAPES[column])


@dataclass
class ArrowSet:
    """Arrow files written for a test, and what each row holds."""

    folder: Path
    files: list[Path] = field(default_factory=list)
    #: key -> (file index, row, timestep or None)
    rows: dict[str, tuple[int, int, int | None]] = field(default_factory=dict)


def write_arrow(path: Path, file_index: int, rows: int, *, timesteps: bool,
                batch_rows: int = 3, key_prefix: str = "f", cells: dict[str, bytes] | None = None,
                ) -> dict[str, tuple[int, int, int | None]]:
    """One Arrow IPC stream file in MLCommons's schema, in record batches of `batch_rows`; keys
    are `{key_prefix}{file:03d}r{row:04d}` (one dataset's splits need distinct keys). `cells`
    replaces a column's value in every row (a crafted `.npy`)."""
    fields = [pa.field("__key__", pa.string())]
    fields += [pa.field(c, pa.binary()) for c in COLUMNS]
    if timesteps:
        fields.append(pa.field("timestep", pa.int64()))
    schema = pa.schema(fields)
    written: dict[str, tuple[int, int, int | None]] = {}
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        for start in range(0, rows, batch_rows):
            data: dict[str, list[object]] = {name: [] for name in schema.names}
            for row in range(start, min(rows, start + batch_rows)):
                key = f"{key_prefix}{file_index:03d}r{row:04d}"
                data["__key__"].append(key)
                for c in COLUMNS:
                    data[c].append((cells or {}).get(c) or npy_bytes(
                        bf16_bits(expected_values(file_index, row, c))))
                t = (file_index + row) % 8 if timesteps else None
                if timesteps:
                    data["timestep"].append(t)
                written[key] = (file_index, row, t)
            writer.write_batch(pa.record_batch([pa.array(data[n], type=schema.field(n).type)
                                                for n in schema.names], schema=schema))
    return written


def write_arrow_set(folder: Path, files: int, rows: int, *, timesteps: bool,
                    prefix: str = "part", key_prefix: str = "f") -> ArrowSet:
    folder.mkdir(parents=True, exist_ok=True)
    out = ArrowSet(folder)
    for i in range(files):
        path = folder / f"{prefix}-{i:05d}.arrow"
        out.rows.update(write_arrow(path, i, rows, timesteps=timesteps, key_prefix=key_prefix))
        out.files.append(path)
    return out


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes(), usedforsecurity=False).hexdigest()


class _Files(http.server.BaseHTTPRequestHandler):
    """Serves the files of `root`; `drop_once` names files whose first GET sends half the body
    and closes the connection; each response waits `delay_s` first (a slow network), or
    `delays[name]` for the files named there; `trickle` names files whose body is sent one byte
    every `trickle_s` seconds; `hang_once` names files whose first GET sends half the body and
    then nothing for a minute; with `auth` (`USER:PASSWORD`), a GET without those credentials
    is answered 401."""

    root: Path
    drop_once: set[str]
    requests: list[str]
    delay_s: float
    delays: dict[str, float]
    trickle: set[str]
    hang_once: set[str]
    auth: str | None
    trickle_s: float = 0.2

    def do_GET(self) -> None:
        name = self.path.lstrip("/")
        self.requests.append(name)
        if self.auth is not None and self.headers.get("Authorization") != (
                f"Basic {base64.b64encode(self.auth.encode()).decode()}"):
            self.send_error(401)
            return
        path = self.root / name
        if "/" in name or not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        time.sleep(self.delays.get(name, self.delay_s))
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if name in self.trickle:
            for i in range(len(data)):
                self.wfile.write(data[i:i + 1])
                self.wfile.flush()
                time.sleep(self.trickle_s)
            return
        hang = name in self.hang_once
        if name in self.drop_once or hang:
            self.drop_once.discard(name)
            self.hang_once.discard(name)
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            if hang:
                time.sleep(60)
            self.close_connection = True
            return
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serve(root: Path, drop_once: set[str] | None = None, delay_s: float = 0.0,
          delays: dict[str, float] | None = None,
          trickle: set[str] | None = None,
          hang_once: set[str] | None = None,
          auth: str | None = None) -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on 127.0.0.1 for `root`'s files: (base URL, list of requested names)."""
    requests: list[str] = []
    handler = type("Handler", (_Files,), {"root": root, "drop_once": set(drop_once or ()),
                                          "requests": requests, "delay_s": delay_s,
                                          "delays": dict(delays or {}),
                                          "trickle": set(trickle or ()),
                                          "hang_once": set(hang_once or ()),
                                          "auth": auth})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()


def write_manifest(root: Path, stem: str, files: list[Path], base_url: str,
                   wrong_md5: set[str] | None = None) -> str:
    """MLCommons's manifest pair in `root`: `STEM.uri` (the base URL) and `STEM.md5`; returns
    the `.uri` file's name. Files in `wrong_md5` are listed with a wrong sum."""
    lines = []
    for f in files:
        digest = "0" * 32 if f.name in (wrong_md5 or set()) else md5(f)
        lines.append(f"{digest}  {f.name}\n")
    (root / f"{stem}.md5").write_text("".join(lines))
    (root / f"{stem}.uri").write_text(base_url + "\n")
    return f"{stem}.uri"


@contextmanager
def silent_server() -> Iterator[tuple[str, list[socket.socket]]]:
    """A server on 127.0.0.1 that accepts connections and never answers: (its URL, the
    connections accepted so far)."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    finally:
        listener.close()
        for conn in accepted:
            conn.close()
