"""A real S3-compatible server (moto's, over HTTP on 127.0.0.1) and a Multi-Storage Client
profile that points at it: the whole client path (MSC, its S3 provider, boto3, HTTP) runs in the
tests; nothing of the client is patched."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

import yaml

ACCESS_KEY = "shardcook-test-key"
SECRET_KEY = "shardcook-test-secret-DO-NOT-PRINT"
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class S3Server:
    """moto's ThreadedMotoServer on a free port of 127.0.0.1."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()

    def stop(self) -> None:
        self._server.stop()

    def client(self):  # a boto3 client for what MSC has no call for: creating a bucket
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)


@dataclass
class Store:
    """One bucket of the server, an MSC profile `profile` on it, and the env that selects it."""

    server: S3Server
    bucket: str
    profile: str
    config: Path
    env: dict[str, str]

    def url(self, path: str = "") -> str:
        """`msc://PROFILE/path`."""
        return f"msc://{self.profile}/{path.lstrip('/')}".rstrip("/")

    def s3_url(self, path: str = "") -> str:
        return f"s3://{self.bucket}/{path.lstrip('/')}".rstrip("/")

    def keys(self, prefix: str = "") -> list[str]:
        """Every object key in the bucket under `prefix`, sorted (read with boto3, so a test
        does not check MSC with MSC)."""
        pages = self.server.client().get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", ()))

    def get(self, key: str) -> bytes:
        return self.server.client().get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def put(self, key: str, data: bytes) -> None:
        self.server.client().put_object(Bucket=self.bucket, Key=key, Body=data)

    def upload_folder(self, folder: Path, prefix: str) -> None:
        """Copies every file under `folder` to `prefix/...` (a dataset finalized locally, put in
        the bucket as `aws s3 sync` would)."""
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                self.put(f"{prefix.strip('/')}/{path.relative_to(folder).as_posix()}",
                         path.read_bytes())

    def download_folder(self, prefix: str, folder: Path) -> None:
        for key in self.keys(prefix.strip("/") + "/"):
            target = folder / key[len(prefix.strip("/")) + 1:]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self.get(key))


def make_store(server: S3Server, tmp: Path, bucket: str, profile: str) -> Store:
    """Creates `bucket` and an MSC config file naming profile `profile` on it."""
    server.client().create_bucket(Bucket=bucket)
    tmp.mkdir(parents=True, exist_ok=True)
    config = tmp / "msc_config.yaml"
    config.write_text(yaml.safe_dump({"profiles": {profile: {
        "storage_provider": {"type": "s3", "options": {
            "base_path": bucket, "endpoint_url": server.endpoint, "region_name": REGION}},
        "credentials_provider": {"type": "S3Credentials", "options": {
            "access_key": ACCESS_KEY, "secret_key": SECRET_KEY}},
    }}}))
    env = {
        "MSC_CONFIG": str(config),
        # s3:// URLs without a profile: the AWS variables MSC's S3 provider reads
        "AWS_ENDPOINT_URL": server.endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": REGION,
    }
    return Store(server, bucket, profile, config, env)


def subprocess_env(store: Store) -> dict[str, str]:
    return {**os.environ, **store.env}
