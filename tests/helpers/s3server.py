"""A real S3-compatible server (moto's, over HTTP on 127.0.0.1) and a Multi-Storage Client
profile that points at it: the whole client path (MSC, its S3 provider, boto3, HTTP) runs in the
tests; nothing of the client is patched."""

from __future__ import annotations

import copy
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

    server: S3Server | AuthS3Server
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


def add_profile(store, name: str, **options: object) -> str:
    """A new MSC profile `name` like the store's with its storage options changed, in the
    store's config file; returns `msc://name`."""
    config = yaml.safe_load(store.config.read_text())
    profile = copy.deepcopy(config["profiles"][store.profile])
    profile["storage_provider"]["options"].update(options)
    config["profiles"][name] = profile
    store.config.write_text(yaml.safe_dump(config))
    return f"msc://{name}"


def subprocess_env(store: Store) -> dict[str, str]:
    return {**os.environ, **store.env}


class AuthS3Server:
    """moto's server in a subprocess that checks every request's credentials against IAM users
    and their policies (moto reads INITIAL_NO_AUTH_ACTION_COUNT once per process, so this cannot
    be the in-process `S3Server`). The first requests, unauthenticated, make an admin user; the
    rest (users, keys, policies, the bucket) go through the admin's key."""

    def __init__(self) -> None:
        import subprocess
        import sys
        import time
        import urllib.request

        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                # moto's own dashboard page: not an AWS action, so no unauthenticated one is spent
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1).close()
                break
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("moto's server did not start") from None
                time.sleep(0.1)
        iam = self._boto("iam", ACCESS_KEY, SECRET_KEY)
        self.admin = self._user(iam, "admin", ["s3:*", "iam:*"])
        iam = self._boto("iam", *self.admin)
        self.reader = self._user(iam, "reader", ["s3:GetObject", "s3:ListBucket"])
        self.nobody = self._user(iam, "nobody", [])

    def _boto(self, service: str, key: str, secret: str):
        import boto3

        return boto3.client(service, endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=key, aws_secret_access_key=secret)

    @staticmethod
    def _user(iam, name: str, actions: list[str]) -> tuple[str, str]:
        """Makes IAM user `name` allowed `actions` (none: nothing) on everything; returns its
        (key, secret)."""
        import json

        iam.create_user(UserName=name)
        if actions:
            policy = {"Version": "2012-10-17",
                      "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]}
            iam.put_user_policy(UserName=name, PolicyName=f"{name}-policy",
                                PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=name)["AccessKey"]
        return key["AccessKeyId"], key["SecretAccessKey"]

    def client(self):
        """boto3 on S3 with the admin's key (what tests read the bucket with)."""
        return self._boto("s3", *self.admin)

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(10)
        except Exception:  # noqa: BLE001 - it would not stop: make it
            self._process.kill()
            self._process.wait()


#: A secret that looks real but belongs to no key (the test asserts it is never printed).
WRONG_KEY = ("AKIAWRONGKEY00000000", "wrong-secret-DO-NOT-PRINT")


def make_auth_store(server: AuthS3Server, tmp: Path, bucket: str) -> Store:
    """Creates `bucket` (as admin) and an MSC config with profiles `admin` (every right),
    `reader` (s3:GetObject and s3:ListBucket), `nobody` (a key with no rights) and `wrongkey` (a
    key the server does not know).
    The AWS variables carry the admin's key (for `s3://` URLs)."""
    server.client().create_bucket(Bucket=bucket)
    tmp.mkdir(parents=True, exist_ok=True)
    config = tmp / "msc_config.yaml"

    def profile(key: tuple[str, str]) -> dict[str, object]:
        return {"storage_provider": {"type": "s3", "options": {
                    "base_path": bucket, "endpoint_url": server.endpoint, "region_name": REGION}},
                "credentials_provider": {"type": "S3Credentials", "options": {
                    "access_key": key[0], "secret_key": key[1]}}}

    config.write_text(yaml.safe_dump({"profiles": {
        "admin": profile(server.admin), "reader": profile(server.reader),
        "nobody": profile(server.nobody), "wrongkey": profile(WRONG_KEY)}}))
    env = {"MSC_CONFIG": str(config), "AWS_ENDPOINT_URL": server.endpoint,
           "AWS_ACCESS_KEY_ID": server.admin[0], "AWS_SECRET_ACCESS_KEY": server.admin[1],
           "AWS_DEFAULT_REGION": REGION}
    return Store(server, bucket, "admin", config, env)
