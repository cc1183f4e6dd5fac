"""A `.`, `..` or empty segment in a URL (`msc://p/sub/../zz2`, `msc://p/./x`, `msc://p//x`):
the store keeps it literally in the object names while Energon, through the Multi-Storage Client,
resolves it to another folder, so shardcook would write or check objects that training never
reads. Every URL shardcook takes (a run's input and output, the dataset commands, the loader,
blend entries) refuses it in one sentence before anything is read or written."""

from __future__ import annotations

import hashlib

import pytest
from shardcook.errors import ConfigError
from shardcook.storage import check_url

from tests.helpers.dataset import cli, one_error_line, write_dataset
from tests.helpers.raw import make_folder

BAD_PATHS = ["sub/../zz2", "./x", "../escape", "x/..", "/x", "x/.", "x//y", "x/../"]
REFUSED = "segment"


def bucket_hashes(store) -> dict[str, str]:
    """sha256 of every object in the bucket, by key."""
    client, keys = store.server.client(), store.keys()
    return {key: hashlib.sha256(client.get_object(Bucket=store.bucket, Key=key)["Body"].read())
            .hexdigest() for key in keys}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("segments") / "ds")


@pytest.fixture
def seeded(s3_store, dataset):
    """A finalized raw dataset at `zz2/`, `x/` and `escape/`: where Energon would go."""
    for prefix in ("zz2", "x", "escape"):
        s3_store.upload_folder(dataset, prefix)
    return s3_store


@pytest.mark.parametrize("path", BAD_PATHS)
@pytest.mark.parametrize("scheme", ["msc", "s3"])
def test_check_url_refuses_the_segment_in_one_sentence(s3_store, scheme, path):
    url = (s3_store.url if scheme == "msc" else s3_store.s3_url)("") + "/" + path
    with pytest.raises(ConfigError, match=REFUSED) as e:
        check_url(url, "--output-dir")
    assert "\n" not in str(e.value) and url in str(e.value)


@pytest.mark.parametrize("path", ["x", "x/", "a/b.c/d..e", "{000..009}.tar"])
def test_names_with_dots_and_one_trailing_slash_pass(s3_store, path):
    assert check_url(f"{s3_store.url()}/{path}", "--output-dir")


def commands(url: str, tmp_path) -> list[list[object]]:
    images = make_folder(tmp_path / "images", 3, photos=1)
    return [
        ["raw", "--input-dir", images, "--output-dir", url, "--image-size", "32"],
        ["raw", "--input-dir", url, "--output-dir", tmp_path / "out", "--image-size", "32"],
        ["validate", url],
        ["finalize", url, "--encoding", "raw", "--force"],
        ["info", url],
        ["blend", tmp_path / "mix.yaml", f"{url}=1"],
    ]


@pytest.mark.parametrize("path", BAD_PATHS)
def test_every_command_refuses_it_and_the_bucket_is_untouched(seeded, tmp_path, path):
    url = f"{seeded.url()}/{path}"
    before = bucket_hashes(seeded)
    for args in commands(url, tmp_path):
        r = cli(*args)
        assert r.code == 2, (args, r.stdout, r.stderr)
        line = one_error_line(r)
        assert REFUSED in line and url in line, (args, line)
        assert bucket_hashes(seeded) == before, args
    assert not (tmp_path / "out").exists() and not (tmp_path / "mix.yaml").exists()


@pytest.mark.parametrize("path", ["sub/../zz2", "x/.."])
def test_the_loader_refuses_it(seeded, path):
    from shardcook.energon import get_diffusion_loader

    before = bucket_hashes(seeded)
    with pytest.raises(ConfigError, match=REFUSED):
        get_diffusion_loader(f"{seeded.url()}/{path}", batch_size=1, num_workers=0)
    assert bucket_hashes(seeded) == before


@pytest.mark.parametrize("name", ["sub//000000.tar", "sub/../000000.tar", "./000000.tar"])
def test_a_bucket_dataset_holding_such_an_object_name_is_refused(seeded, name):
    """A view of the dataset would put `sub//000000.tar` at `sub/000000.tar` on disk."""
    seeded.put(f"x/{name}", seeded.get("x/000000.tar"))
    before = bucket_hashes(seeded)
    said = f"{seeded.url('x')} holds an object named {name!r}, which is no file name inside"
    r = cli("validate", seeded.url("x"))
    assert r.code == 1 and f"problem: {said}" in r.stdout, r.stdout + r.stderr
    r = cli("finalize", seeded.url("x"), "--force")
    assert r.code == 2 and said in one_error_line(r)
    assert bucket_hashes(seeded) == before
