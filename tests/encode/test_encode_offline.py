"""`encode` with a model on the Hugging Face hub, on a machine that cannot reach it: one
sentence saying so and how to give a local folder, at once (no retries, no warnings), never the
"gated model" advice; and with a hub that answers but refuses, that advice still. Each runs
`python -m shardcook` in its own process with an empty cache: the hub client reads HF_ENDPOINT
when it is imported."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from tests.helpers.raw import make_folder, run_cli
from tests.helpers.s3server import free_port


def _encode(tmp_path, **env: str) -> str:
    """The error line of `encode` with the default model and `env` (exit 2, nothing written),
    and nothing else on stderr: no warning, no retry, no hub client's line per request."""
    src = make_folder(tmp_path / "in", 1, photos=1)
    env = {"HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_OFFLINE": "", "HF_TOKEN": "", **env}
    r = run_cli("encode", "--input-dir", str(src), "--output-dir", str(tmp_path / "out"),
                "--device", "cpu", env_extra=env, check=False)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    *above, said = r.stderr.strip().splitlines()
    assert said.startswith("error: "), r.stderr
    assert above == [], r.stderr
    assert not (tmp_path / "out").exists()
    return said


def test_a_hub_that_cannot_be_reached_is_said_with_the_local_way(tmp_path):
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    said = _encode(tmp_path, HF_ENDPOINT=endpoint)
    assert (f"the Hugging Face hub ({endpoint}) cannot be reached (" in said
            and "Connection refused" in said)
    assert "'black-forest-labs/FLUX.1-dev' is not in the local cache" in said
    assert "give its folder with --model-path DIR" in said
    assert "gated" not in said and "licence" not in said


def test_hf_hub_offline_is_said_with_the_local_way(tmp_path):
    said = _encode(tmp_path, HF_HUB_OFFLINE="1")
    assert "HF_HUB_OFFLINE is set and it is not in the local cache" in said
    assert "give a local folder with --model-path" in said
    assert "gated" not in said


@pytest.fixture
def refusing_hub() -> Iterator[str]:
    """A hub that answers every request with 401 (a gated or private model, no token)."""
    class Refuse(http.server.BaseHTTPRequestHandler):
        def _refuse(self) -> None:
            body = b'{"error": "Repository not found"}'
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_HEAD = _refuse

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_hub_that_refuses_gets_the_licence_and_token_advice(tmp_path, refusing_hub):
    said = _encode(tmp_path, HF_ENDPOINT=refusing_hub)
    assert "Could not download the vae encoder from the hub repo" in said
    assert "accept its licence" in said and "--hf-token-file" in said
    assert "cannot be reached" not in said
