"""What a refused connection says: a password in a profile's `endpoint_url`
(`http://user:SECRET@host`) never reaches stdout or stderr, and an `s3://` URL without AWS
credentials names the AWS variables, not a profile it does not have."""

from __future__ import annotations

import pytest
import yaml
from shardcook.storage import describe_error, redact

from tests.helpers.dataset import cli, one_error_line
from tests.helpers.raw import make_folder, run_cli
from tests.helpers.s3server import REGION, free_port

SECRET = "endpoint-SECRET-do-not-print"


@pytest.mark.parametrize(("text", "shown"), [
    (f'Could not connect to the endpoint URL: "http://user:{SECRET}@127.0.0.1:9/b?x"',
     'Could not connect to the endpoint URL: "http://user:***@127.0.0.1:9/b?x"'),
    (f"https://{SECRET}@host/x", "https://***@host/x"),
    (f"http://user:pa@{SECRET}@host/x, http://host/p@q", "http://user:***@host/x, http://host/p@q"),
    ("msc://profile/a@b", "msc://profile/a@b"),
])
def test_redact_hides_the_user_part_of_every_url(text, shown):
    assert redact(text) == shown


def test_describe_error_redacts_before_it_shortens():
    error = RuntimeError(f"{'x' * 150} http://user:{SECRET}@host:9/{'y' * 100}")
    assert SECRET not in describe_error(error) and "user:***@host:9/" in describe_error(error)


@pytest.fixture
def endpoint_with_secret(tmp_path, monkeypatch):
    """MSC_CONFIG with profile `sec`, whose endpoint_url holds a password and leads to a port
    nothing listens on."""
    config = tmp_path / "msc.yaml"
    config.write_text(yaml.safe_dump({"profiles": {"sec": {
        "storage_provider": {"type": "s3", "options": {
            "base_path": "bucket", "region_name": REGION,
            "endpoint_url": f"http://user:{SECRET}@127.0.0.1:{free_port()}"}},
        "credentials_provider": {"type": "S3Credentials", "options": {
            "access_key": "key", "secret_key": "secret"}}}}}))
    monkeypatch.setenv("MSC_CONFIG", str(config))
    return make_folder(tmp_path / "images", 2, photos=1)


def test_a_refused_connection_never_prints_the_endpoint_password(endpoint_with_secret,
                                                                 tmp_path):
    images = endpoint_with_secret
    for args in (["raw", "--input-dir", images, "--output-dir", "msc://sec/out"],
                 ["raw", "--input-dir", "msc://sec/in", "--output-dir", tmp_path / "out"],
                 ["validate", "msc://sec/ds"],
                 ["finalize", "msc://sec/ds", "--encoding", "raw"]):
        r = run_cli(*map(str, args), check=False)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert SECRET not in r.stdout + r.stderr, args
        assert "Traceback" not in r.stderr and "user:***@127.0.0.1" in r.stderr, r.stderr


@pytest.fixture
def no_aws_credentials(s3_store, tmp_path, monkeypatch):
    """The store's server and a fresh bucket, with no AWS credentials anywhere: no variables,
    no credentials or config file, no instance metadata."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return s3_store


def test_an_s3_url_without_credentials_names_the_aws_variables(no_aws_credentials, tmp_path):
    store = no_aws_credentials
    images = make_folder(tmp_path / "images", 2, photos=1)
    for args in (["raw", "--input-dir", images, "--output-dir", store.s3_url("out")],
                 ["raw", "--input-dir", store.s3_url("in"), "--output-dir", tmp_path / "out"],
                 ["validate", store.s3_url("ds")]):
        r = cli(*args)
        assert r.code == 2, (args, r.stdout, r.stderr)
        line = one_error_line(r)
        assert "no AWS credentials were found for this s3:// URL; set AWS_ACCESS_KEY_ID and " \
               "AWS_SECRET_ACCESS_KEY" in line, line
        assert "profile's" not in line and "profile '" not in line, line
    assert store.keys() == []


def test_a_profile_without_credentials_says_where_to_give_them(no_aws_credentials, tmp_path):
    store = no_aws_credentials
    config = yaml.safe_load(store.config.read_text())
    del config["profiles"][store.profile]["credentials_provider"]
    store.config.write_text(yaml.safe_dump(config))
    r = cli("validate", store.url("ds"))
    assert r.code == 2
    assert one_error_line(r) == (
        f"error: The dataset {store.url('ds')!r}: profile {store.profile!r} names no credentials "
        "and none were found in the AWS variables or files; give the profile a "
        f"credentials_provider in {store.config}.")
