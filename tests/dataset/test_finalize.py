"""finalize and build_index: each refusal is one clear sentence and leaves nothing written;
dataset.yaml keeps what a user had."""

from __future__ import annotations

import json
import logging
import re

import pytest
import yaml
from shardcook import ConfigError, DatasetError, build_index, finalize

from tests.helpers.dataset import raw_parts
from tests.helpers.shards import write_shards


def nothing_written(d):
    return not list(d.glob("*.idx")) and not (d / ".nv-meta" / ".info.json").exists()


def test_no_shards(tmp_path):
    with pytest.raises(DatasetError, match=re.escape("no .tar shards found")):
        build_index(tmp_path)


@pytest.mark.parametrize("ratio", ["1,2", "a,b,c", "1,-1,0", "0,0,0", (1, 0)])
def test_bad_ratio_is_refused_where_energon_exits_0(tmp_path, ratio):
    write_shards(tmp_path, 2, 2)
    with pytest.raises(ConfigError, match="three non-negative numbers with a positive sum"):
        build_index(tmp_path, split=ratio)
    assert nothing_written(tmp_path)


def test_pattern_that_matches_nothing(tmp_path):
    write_shards(tmp_path, 2, 2)
    with pytest.raises(ConfigError, match="matches none of the 2 shards"):
        build_index(tmp_path, split_parts={"train": "0000.*", "val": "val-.*"})
    assert nothing_written(tmp_path)


def test_invalid_regex(tmp_path):
    write_shards(tmp_path, 1, 2)
    with pytest.raises(ConfigError, match="not a valid regular expression"):
        build_index(tmp_path, split_parts={"train": "(unclosed"})


def test_empty_train_split_says_how_many_shards_it_needs(tmp_path):
    write_shards(tmp_path, 1, 4)
    with pytest.raises(ConfigError, match=r"need at least 2 shards.*smaller shards"):
        build_index(tmp_path, split=(0.8, 0.1, 0.1))
    assert nothing_written(tmp_path)


def test_empty_val_split_is_a_warning(tmp_path, caplog):
    write_shards(tmp_path, 2, 2)
    with caplog.at_level(logging.WARNING):
        result = build_index(tmp_path, split=(0.8, 0.1, 0.1))
    assert result.splits["val"] == [] and "val split is empty" in caplog.text


def test_refuses_an_indexed_folder_unless_forced(tmp_path):
    write_shards(tmp_path, 2, 2)
    build_index(tmp_path)
    with pytest.raises(DatasetError, match=r"already indexed.*force"):
        build_index(tmp_path)
    assert build_index(tmp_path, force=True).num_samples == 4


def test_exclude_leaves_shards_out_and_validate_knows(tmp_path):
    write_shards(tmp_path, 3, 2)
    result = finalize(tmp_path, exclude=["000001"])
    assert list(result.index.shard_counts) == ["000000.tar", "000002.tar"]
    assert result.validation.ok, result.validation.problems


def test_dataset_yaml_for_our_encodings_keeps_user_subflavors(tmp_path):
    write_shards(tmp_path, 1, 2, parts=raw_parts)  # validate decodes the first image
    meta = tmp_path / ".nv-meta"
    meta.mkdir()
    (meta / "dataset.yaml").write_text(
        "__module__: megatron.energon\n__class__: CrudeWebdataset\nsubflavors:\n  source: laion\n"
    )
    finalize(tmp_path, encoding="raw")
    assert yaml.safe_load((meta / "dataset.yaml").read_text()) == {
        "__module__": "megatron.energon",
        "__class__": "CrudeWebdataset",
        "subflavors": {"source": "laion", "encoding": "raw"},
    }


def test_encoding_comes_from_the_manifest(tmp_path):
    write_shards(tmp_path, 1, 2, parts=raw_parts)
    (tmp_path / ".shardcook" / "manifest.json").write_text(json.dumps({"encoding": "raw"}))
    result = finalize(tmp_path)
    assert result.dataset_yaml["subflavors"] == {"encoding": "raw"}


def test_finalize_fails_when_samples_lack_their_encodings_parts(tmp_path):
    write_shards(tmp_path, 1, 2)  # txt + json only
    with pytest.raises(ConfigError, match=r"do not fit the preencoded encoding .*lacks "
                       r"latents.pth, prompt_embeds.pth, pooled_prompt_embeds.pth.*nothing was"):
        finalize(tmp_path, encoding="preencoded")
    assert nothing_written(tmp_path)


def test_sample_type_and_field_map(tmp_path):
    write_shards(tmp_path, 1, 2)
    result = finalize(
        tmp_path,
        sample_type="CaptioningSample",
        field_map={"image": "jpg", "caption": "txt"},
        validate=False,
    )
    # a Sample class goes under `sample_type`, as `energon prepare --sample-type` writes it
    assert result.dataset_yaml == {
        "sample_type": {"__module__": "megatron.energon", "__class__": "CaptioningSample"},
        "field_map": {"image": "jpg", "caption": "txt"}}


def test_empty_shard_is_refused(tmp_path):
    import tarfile

    write_shards(tmp_path, 1, 2)
    tarfile.open(tmp_path / "000001.tar", "w").close()
    with pytest.raises(DatasetError, match=re.escape("000001.tar holds no samples")):
        build_index(tmp_path)
    assert nothing_written(tmp_path)
