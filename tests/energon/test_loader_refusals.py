"""What the loader and the cookers refuse is one sentence saying what they take: a JSONL
dataset, a path that does not exist (or a URL with nothing under it), a cooker given no
sample."""

from __future__ import annotations

import pytest
import shardcook
from shardcook.energon import (
    cook_bridge_crude,
    cook_bridge_flux,
    cook_parts,
    cook_preencoded_diffusion,
    cook_preencoded_numpy_diffusion,
    cook_raw_images,
    dataset_encoding,
    get_diffusion_loader,
    task_encoder_for,
)
from shardcook.errors import ConfigError, DatasetError


def _loaders(path):
    return [lambda: get_diffusion_loader(path, batch_size=1, num_workers=0),
            lambda: task_encoder_for(path), lambda: dataset_encoding(path)]


def test_a_jsonl_dataset_is_refused_saying_what_the_loader_takes(tmp_path):
    records = tmp_path / "chat.jsonl"
    records.write_text('{"a": 1}\n')
    shardcook.finalize(records)
    for load in _loaders(records):
        with pytest.raises(ConfigError) as e:
            load()
        assert str(e.value) == (
            f"{records} is a JSONL dataset, which no shardcook task encoder reads; the loader "
            "takes a dataset folder of tar shards finalized by `shardcook finalize`, or a "
            "metadataset .yaml such as `shardcook blend` writes.")


@pytest.mark.parametrize("where", ["folder", "bucket"])
def test_a_path_that_does_not_exist_is_named_so(tmp_path, s3_store, where):
    """A URL with no object under it is refused as a missing folder is."""
    s3_store.put("other/x", b"x")  # the bucket is there, the dataset is not
    missing = tmp_path / "nonexistent" if where == "folder" else s3_store.url("nonexistent")
    for load in _loaders(missing):
        with pytest.raises(DatasetError) as e:
            load()
        assert str(e.value) == (f"{missing} does not exist; give a dataset folder (finalized by "
                                "`shardcook finalize`) or a metadataset .yaml.")


@pytest.mark.parametrize("cook", [cook_preencoded_diffusion, cook_raw_images, cook_parts,
                                  cook_bridge_crude, cook_bridge_flux,
                                  cook_preencoded_numpy_diffusion])
@pytest.mark.parametrize(("given", "named"), [(None, "None"), (["latents.pth"], "a list")])
def test_a_cooker_given_no_sample_says_what_it_takes(cook, given, named):
    with pytest.raises(ConfigError) as e:
        cook(given)
    assert str(e.value) == (
        f"{cook.__name__} takes a crude sample, a dict of the sample's parts by name (bytes, or "
        f"what Energon's decoder made of them) with Energon's __key__, not {named}.")
