"""`shardcook.ShardWriter` refuses, in one sentence naming the value, what would break later: a
prefix finalize would refuse, a URL as its folder, a key or part name that is not a str."""

from __future__ import annotations

import pytest
from shardcook import ShardWriter, finalize
from shardcook.errors import ConfigError, InvalidNameError

from tests.helpers.dataset import raw_parts


@pytest.mark.parametrize("prefix", ["a{1,2}", "b}", "c\\d-", "{x"])
def test_a_prefix_finalize_would_refuse_is_refused_at_construction(tmp_path, prefix):
    out = tmp_path / "out"
    with pytest.raises(InvalidNameError, match="brace or a backslash"):
        ShardWriter(out, prefix=prefix)
    assert not out.exists()


def test_an_accepted_prefix_finalizes(tmp_path):
    with ShardWriter(tmp_path, prefix="train-a.b_c", shard_size=1) as w:
        for i in range(2):
            w.write(f"{i:010d}", raw_parts(i))
    assert finalize(tmp_path, encoding="raw").index.num_samples == 2


@pytest.mark.parametrize(("key", "parts", "message"), [
    (5, {"txt": b"x"}, "sample key 5 must be a str, not int."),
    (b"k", {"txt": b"x"}, "sample key b'k' must be a str, not bytes."),
    ("k", {5: b"x"}, "part name 5 of sample 'k' must be a str, not int."),
    ("k", [(b"txt", b"x")], "part name b'txt' of sample 'k' must be a str, not bytes."),
    ("k", 5, "the parts of sample 'k' must map part names to bytes, not int."),
    ("k", "txt", "the parts of sample 'k' must map part names to bytes, not str."),
])
def test_write_names_a_key_or_part_of_the_wrong_type(tmp_path, key, parts, message):
    with ShardWriter(tmp_path / "out") as w:
        with pytest.raises(ConfigError) as caught:
            w.write(key, parts)
        assert str(caught.value) == message
        w.write("0000000000", raw_parts(0))  # the writer still works
    assert [s.samples for s in w.close()] == [1]


@pytest.mark.parametrize("url", ["msc://profile/x", "s3://bucket/x"])
def test_a_url_as_the_folder_is_refused(tmp_path, monkeypatch, url):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"is a URL .*local paths only"):
        ShardWriter(url)
    assert list(tmp_path.iterdir()) == []
