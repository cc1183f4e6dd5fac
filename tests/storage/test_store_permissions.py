"""Wrong credentials and missing permissions against a store that enforces them (moto's server
checking every request against IAM users and their policies): each command says in one sentence
what is wrong and what to do, exit 2, never a traceback nor a secret, and nothing is written.
The bucket is read with the admin's key through boto3, not with the client under test."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from shardcook import ShardWriter

from tests.helpers.dataset import CliResult, cli, one_error_line, raw_parts
from tests.helpers.raw import make_folder, run_cli
from tests.helpers.s3server import WRONG_KEY, AuthS3Server, Store, make_auth_store

REFUSED = "the store refused the credentials of profile 'wrongkey' (InvalidAccessKeyId)"
NO_WRITE = "the credentials of profile 'reader' may not write there (AccessDenied)"


@dataclass
class Auth:
    store: Store
    server: AuthS3Server
    images: Path
    scratch: Path


@pytest.fixture(scope="module")
def auth_store(tmp_path_factory):
    """One enforcing server and bucket for the module, with profiles `admin`, `reader`,
    `nobody` and `wrongkey` (`make_auth_store`); `ds` holds two shards (not finalized), `in`
    images with captions and `chat` a JSONL, put there with the admin's key; MSC_CONFIG and the
    AWS variables are set meanwhile."""
    tmp = tmp_path_factory.mktemp("auth")
    server = AuthS3Server()
    try:
        store = make_auth_store(server, tmp / "cfg", "auth-bucket")
        images = make_folder(tmp / "images", 4, photos=2)
        store.upload_folder(images, "in")
        with ShardWriter(tmp / "ds", shard_size=2) as shards:
            for i in range(4):
                shards.write(f"{i:010d}", raw_parts(i))
        store.upload_folder(tmp / "ds", "ds")
        store.put("chat/a.jsonl", b'{"messages": [{"role": "user", "content": "hi"}]}\n')
        scratch = tmp / "scratch"
        scratch.mkdir()
        with pytest.MonkeyPatch.context() as env:
            for key, value in store.env.items():
                env.setenv(key, value)
            yield Auth(store, server, images, scratch)
    finally:
        server.stop()


def _bucket(auth: Auth) -> dict[str, bytes]:
    keys = auth.store.keys()
    return {k: auth.store.get(k) for k in keys}


def refused(auth: Auth, code: int, stdout: str, stderr: str, words: str) -> str:
    """The one line of stderr (exit 2, no traceback), an `error:` holding `words` and no
    secret; the scratch folder stays empty."""
    assert code == 2, stdout + stderr
    assert "Traceback" not in stdout + stderr
    assert len(stderr.splitlines()) == 1 and stderr.startswith("error: "), stderr
    assert words in stderr, stderr
    for secret in (WRONG_KEY[1], auth.server.admin[1], auth.server.reader[1],
                   auth.server.nobody[1]):
        assert secret not in stdout + stderr
    assert list(auth.scratch.iterdir()) == []
    return stderr.strip()


def refused_in_process(auth: Auth, r: CliResult, words: str) -> str:
    """`refused` for a command run in this process (where the client's log lines go to
    pytest, not stderr: `test_raw_...` checks stderr whole in a real process)."""
    one_error_line(r)
    return refused(auth, r.code, r.stdout, r.stderr, words)


@pytest.mark.parametrize(("profile", "words"), [
    ("wrongkey", f"{REFUSED}; check the access key and secret key in "),
    ("reader", f"{NO_WRITE}; use credentials allowed to list, write and delete objects there"),
])
def test_raw_into_a_bucket_it_may_not_write_is_refused_before_any_input_is_read(
        auth_store, tmp_path, profile, words):
    """A real process (its whole stderr is the one sentence); the input folder does not exist,
    so an output check that came after reading the input would say that instead."""
    before = _bucket(auth_store)
    r = run_cli("raw", "--input-dir", str(tmp_path / "never-read"), "--output-dir",
                f"msc://{profile}/x", "--scratch-dir", str(auth_store.scratch),
                "--image-size", "32", check=False)
    refused(auth_store, r.returncode, r.stdout, r.stderr,
            f"error: --output-dir 'msc://{profile}/x': {words}")
    assert _bucket(auth_store) == before


@pytest.mark.parametrize(("args", "what"), [
    (["--input-dir", "msc://wrongkey/in"], "The input folder 'msc://wrongkey/in'"),
    (["--source-type", "webdataset", "--input-path", "msc://wrongkey/in/*.tar"],
     "--input-path 'msc://wrongkey/in'"),
])
def test_an_input_read_with_a_wrong_key_is_one_sentence(auth_store, tmp_path, args, what):
    r = cli("raw", *args, "--output-dir", tmp_path / "out", "--image-size", "32")
    refused_in_process(auth_store, r, f"{what}: {REFUSED}")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["validate", "info"])
def test_a_dataset_read_with_a_wrong_key_is_one_sentence(auth_store, command):
    """Exit 2 for validate too, as STORAGE.md says of a bucket the profile's credentials cannot
    list and as for a profile that is not configured: the store was never read. A dataset
    missing from a bucket that can be read is validate's problem, exit 1, as locally."""
    r = cli(command, "msc://wrongkey/ds", "--scratch-dir", auth_store.scratch)
    refused_in_process(auth_store, r, f"The dataset 'msc://wrongkey/ds': {REFUSED}")


@pytest.mark.parametrize("args", [["validate", "msc://nobody/ds"],
                                  ["raw", "--input-dir", "msc://nobody/in", "--output-dir"]])
def test_credentials_without_read_permission_say_what_they_need(auth_store, tmp_path, args):
    r = cli(*args, *([tmp_path / "out"] if args[0] == "raw" else []), "--scratch-dir",
            auth_store.scratch)
    refused_in_process(auth_store, r, "'msc://nobody/")
    assert ("the credentials of profile 'nobody' may not read there (AccessDenied); use "
            "credentials allowed to list and read objects there (on S3: s3:ListBucket, "
            "s3:GetObject).") in r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("profile", ["wrongkey", "nobody"])
def test_a_chatml_jsonl_the_store_refuses_is_no_missing_file(auth_store, tmp_path, profile):
    """Opening one object is a HEAD, whose 403 cannot say which of key and rights is wrong."""
    r = cli("chatml", "--input", f"msc://{profile}/chat/a.jsonl", "--output-dir",
            tmp_path / "out")
    refused_in_process(auth_store, r, (
        f"The input 'msc://{profile}/chat/a.jsonl': the store refused access with the "
        f"credentials of profile '{profile}'; check the access key and secret key in "
        f"{auth_store.store.config}, and that they are allowed to list and read objects there"))
    assert not (tmp_path / "out").exists()


def test_an_s3_url_with_a_wrong_key_names_the_aws_variables(auth_store, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", WRONG_KEY[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRONG_KEY[1])
    r = cli("info", auth_store.store.s3_url("ds"), "--scratch-dir", auth_store.scratch)
    refused_in_process(auth_store, r, "the store refused the AWS credentials "
                                      "(InvalidAccessKeyId); check the access key and secret key "
                                      "(AWS_ACCESS_KEY_ID")


def test_finalize_without_write_permission_is_refused_before_indexing(auth_store):
    """The write probe comes before any shard is downloaded: the bucket stays as it was, byte
    for byte, and the same dataset then finalizes with the admin's key."""
    before = _bucket(auth_store)
    r = cli("finalize", "msc://reader/ds", "--encoding", "raw", "--scratch-dir",
            auth_store.scratch)
    refused_in_process(auth_store, r, f"The dataset 'msc://reader/ds': {NO_WRITE}")
    assert "indexed" not in r.stdout
    assert _bucket(auth_store) == before
    r = cli("finalize", "msc://admin/ds", "--encoding", "raw", "--scratch-dir",
            auth_store.scratch)
    assert r.code == 0, r.stdout + r.stderr
    keys = auth_store.store.keys()
    assert "ds/.nv-meta/.info.json" in keys
    assert not [k for k in keys if ".probe" in k]


def test_a_refusal_without_an_error_code_names_both_causes(auth_store):
    """A HEAD's 403 has no body to say whether the key or its rights were refused."""
    from shardcook.storage import access_problem, remote

    with pytest.raises(PermissionError) as e:
        remote("msc://wrongkey/ds", "t").exists("000000.tar")
    text = access_problem("--output-dir", "msc://wrongkey/ds", "write", e.value)
    assert text == (
        "--output-dir 'msc://wrongkey/ds': the store refused access with the credentials of "
        f"profile 'wrongkey'; check the access key and secret key in {auth_store.store.config}, "
        "and that they are allowed to list, write and delete objects there (on S3: "
        "s3:ListBucket, s3:PutObject, s3:DeleteObject).")


def test_a_write_the_credentials_may_not_make_is_said_as_the_stores_refusal(auth_store):
    """`Store.failure` of a bucket: the store's refusal, in the sentence the commands say."""
    from shardcook.storage import remote

    folder = remote("msc://reader/ds", "t")
    with pytest.raises(Exception) as e:
        folder.write_bytes(".shardcook/report.html", b"<html>")
    assert folder.failure("The report page", ".shardcook/report.html", "write", e.value) == (
        f"The report page 'msc://reader/ds/.shardcook/report.html': {NO_WRITE}; use credentials "
        "allowed to list, write and delete objects there (on S3: s3:ListBucket, s3:PutObject, "
        "s3:DeleteObject).")
    written = auth_store.store.keys("ds/.shardcook/")
    assert "ds/.shardcook/report.html" not in written


def test_a_cache_record_the_store_refuses_is_tried_again_then_stops_the_run(auth_store,
                                                                            monkeypatch, caplog):
    """The AutoModel cache's record is read under the store's retry policy: a bucket's refusal
    is tried `bucket.TRIES` times, then said in one sentence (a folder's unreadable record is
    damaged: tests/automodel/test_automodel_cache_stores.py)."""
    from shardcook.errors import ShardcookIOError
    from shardcook.jobs.encode.automodel_cache import recorded_cache
    from shardcook.storage import bucket, remote

    monkeypatch.setattr(bucket, "FIRST_BACKOFF_SECONDS", 0.01)
    with pytest.raises(ShardcookIOError) as e:
        recorded_cache(remote("msc://nobody/ds", "t"))
    assert str(e.value).startswith(
        "reading .shardcook/automodel_cache.json in msc://nobody/ds failed 3 times (")
    assert "Permission denied" in str(e.value) and "rerun the same command" in str(e.value)
    assert len([r for r in caplog.records if "trying again" in r.getMessage()]) == 2
