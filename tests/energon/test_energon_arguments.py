"""Wrong arguments and mismatched task encoders are refused in one sentence when the loader is
built, never by a traceback per sample from inside Energon; `batch_drop_last` follows the split."""

from __future__ import annotations

import shutil

import pytest
import shardcook
import yaml
from shardcook.energon import (
    EmptyLoaderError,
    EncodedDiffusionTaskEncoder,
    LoaderStateError,
    MegatronDataloaderWrapper,
    NotCheckpointableError,
    RawDiffusionTaskEncoder,
    SampleDecodeError,
    UnsafeSampleError,
    get_diffusion_loader,
)
from shardcook.errors import ConfigError, ShardcookError

from tests.helpers.energon import encoded_parts, make_encoded_dataset, make_raw_dataset
from tests.helpers.energon_bridge import make_bridge_dataset


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("args")
    return {"encoded": make_encoded_dataset(root / "enc", 6).path,
            "raw": make_raw_dataset(root / "raw", 6).path,
            "bridge": make_bridge_dataset(root / "bridge", 6).path}


def _blend(tmp_path, *paths) -> str:
    out = tmp_path / "blend.yaml"
    out.write_text(yaml.safe_dump({
        "__module__": "megatron.energon", "__class__": "MetadatasetV2",
        "splits": {"train": {"blend": [{"path": str(p), "weight": 1} for p in paths]}}}))
    return str(out)


def _loader(path, **kw):
    return get_diffusion_loader(path, batch_size=2, num_workers=0, **kw)


@pytest.mark.parametrize("layout", ["raw", "bridge"])
def test_resample_on_a_dataset_without_latents_to_resample_is_refused(datasets, layout):
    encoding = {"raw": "raw", "bridge": "bridge-flux"}[layout]
    with pytest.raises(ConfigError, match=rf"resample_latents=True resamples pre-encoded "
                                          rf"datasets, but .* has encoding '{encoding}'"):
        _loader(datasets[layout], resample_latents=True)


def test_resample_without_a_stored_posterior_is_refused_before_the_first_batch(datasets, capfd):
    with pytest.raises(ConfigError, match=r"resample_latents=True needs each sample's mean.pth "
                                          r"and logvar.pth, but the first sample of .*enc has "
                                          r"no mean.pth or logvar.pth; write the dataset with "
                                          r"`shardcook encode --latent-mode resample`"):
        _loader(datasets["encoded"], resample_latents=True)
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err


def test_resample_without_recorded_factors_asks_for_them(tmp_path):
    root = tmp_path / "post"
    with shardcook.ShardWriter(str(root), shard_size=4) as w:
        for i in range(4):
            parts = encoded_parts(f"{i:010d}", (8, 8), seed=i)
            parts["mean.pth"], parts["logvar.pth"] = parts["latents.pth"], parts["latents.pth"]
            w.write(f"{i:010d}", parts)  # meta.json without scaling_factor/shift_factor
    shardcook.finalize(root, encoding="preencoded", split=(1, 0, 0))
    with pytest.raises(ConfigError, match=r"needs the VAE's scaling_factor and shift_factor, "
                                          r"which the first sample of .* does not record in "
                                          r"meta.json; pass scaling_factor=, shift_factor= to "
                                          r"the task encoder"):
        _loader(root, resample_latents=True)
    te = EncodedDiffusionTaskEncoder(resample_latents=True, scaling_factor=1, shift_factor=0)
    with _loader(root, task_encoder=te) as loader:
        assert set(next(loader)) == {"latents", "prompt_embeds", "pooled_prompt_embeds"}


@pytest.mark.parametrize("task_encoder,layout,fits", [
    (EncodedDiffusionTaskEncoder, "raw", "RawDiffusionTaskEncoder"),
    (RawDiffusionTaskEncoder, "encoded", "EncodedDiffusionTaskEncoder"),
    (EncodedDiffusionTaskEncoder, "bridge", "BridgeFluxTaskEncoder"),
])
def test_a_task_encoder_of_another_layout_names_the_one_that_fits(datasets, capfd, task_encoder,
                                                                  layout, fits):
    with pytest.raises(ConfigError, match=rf"{task_encoder.__name__} cannot read .*: its encoding "
                                          rf"is '.*'; use shardcook.energon.{fits}, or leave "
                                          rf"task_encoder unset"):
        _loader(datasets[layout], task_encoder=task_encoder())
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err


def test_a_blend_member_the_task_encoder_cannot_read_is_named(datasets, tmp_path):
    blend = _blend(tmp_path, datasets["encoded"], datasets["bridge"])
    with pytest.raises(ConfigError, match=r"DiffusionTaskEncoder cannot read .*bridge \(in "
                                          r".*blend.yaml\): its encoding is 'bridge-flux'; use "
                                          r"shardcook.energon.BridgeFluxTaskEncoder"):
        _loader(blend)
    raw_only = _blend(tmp_path, datasets["raw"])
    with pytest.raises(ConfigError, match=r"resample_latents=True resamples pre-encoded datasets, "
                                          r"but .*blend.yaml holds none"):
        _loader(raw_only, resample_latents=True)


def test_a_dataset_recording_no_encoding_is_read_by_a_single_layout_encoder(datasets, tmp_path):
    """A dataset another tool prepared without `subflavors: {encoding: ...}` still loads with the
    task encoder of its layout; a blend of it says what is missing."""
    root = tmp_path / "noenc"
    shutil.copytree(datasets["encoded"], root)
    dataset_yaml = root / ".nv-meta" / "dataset.yaml"
    content = yaml.safe_load(dataset_yaml.read_text())
    del content["subflavors"]
    dataset_yaml.write_text(yaml.safe_dump(content))
    with _loader(root, task_encoder=EncodedDiffusionTaskEncoder()) as loader:
        assert "latents" in next(loader)
    with pytest.raises(ConfigError, match=r"DiffusionTaskEncoder cannot read .*noenc \(in .*\): "
                                          r"it records no encoding; use the task encoder of its "
                                          r"layout \(or record the layout with `shardcook "
                                          r"finalize --force --encoding ...`\)\.$"):
        _loader(_blend(tmp_path, root))


@pytest.mark.parametrize("kwargs,message", [
    ({"max_samples_per_sequence": 0},
     "max_samples_per_sequence must be a whole number of at least 1, or None \\(no limit\\)"),
    ({"shuffle_buffer_size": -1}, "shuffle_buffer_size must be a whole number of at least 0"),
    ({"task_encoder": "EncodedDiffusionTaskEncoder"},
     "task_encoder must be a megatron.energon.TaskEncoder .*, not 'EncodedDiffusionTaskEncoder'"),
    ({"task_encoder": EncodedDiffusionTaskEncoder}, "add the parentheses"),
    ({"worker_config": "wc"}, "worker_config must be a megatron.energon.WorkerConfig or None"),
    ({"repeat": "no"}, "repeat must be True or False, not 'no'"),
    ({"batch_drop_last": 1}, "batch_drop_last must be True or False, not 1"),
    ({"image_format": "png"}, "image_format must be 'tensor' or 'pil', not 'png'"),
    ({"checkpoint_every_sec": float("nan")},
     "checkpoint_every_sec must be a finite number of seconds, 0 or more, not nan"),
    ({"checkpoint_every_min_n_samples": 0}, "checkpoint_every_min_n_samples must be a whole"),
    ({"repeat": None}, "^repeat must be True or False, not None\\.$"),
    ({"split": 3}, "^split must be a split name such as 'train', not 3\\.$"),
    ({"task_encoder": RawDiffusionTaskEncoder},
     "^task_encoder must be a megatron.energon.TaskEncoder such as "
     "shardcook.energon.EncodedDiffusionTaskEncoder\\(\\), not .+ \\(pass an instance: "
     "add the parentheses\\)\\.$"),
    ({"resample_latents": True, "task_encoder": EncodedDiffusionTaskEncoder()},
     "with task_encoder= pass it there"),
])
def test_bad_loader_arguments_are_one_sentence(datasets, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        _loader(datasets["encoded"], **kwargs)


def test_each_declared_loader_argument_is_one_a_function_takes():
    """A rule is declared beside its argument's field (`energon.arguments`): none is left over
    when a function stops taking it."""
    import dataclasses
    import inspect

    from shardcook.energon import cookers
    from shardcook.energon.arguments import LoaderArguments

    taken = {name for f in (get_diffusion_loader, EncodedDiffusionTaskEncoder,
                            RawDiffusionTaskEncoder, cookers.cook_raw_images)
             for name in inspect.signature(f).parameters}
    assert {f.name for f in dataclasses.fields(LoaderArguments)} <= taken


@pytest.mark.parametrize("loader", [None, 5, "data/flux"])
def test_the_wrapper_refuses_what_it_cannot_cycle_when_built(loader):
    with pytest.raises(ConfigError, match="MegatronDataloaderWrapper needs a loader"):
        MegatronDataloaderWrapper(loader)


def test_batch_drop_last_defaults_to_full_train_batches_and_every_val_sample(tmp_path):
    root = tmp_path / "split"
    with shardcook.ShardWriter(str(root), shard_size=5) as w:
        for i in range(20):
            w.write(f"{i:010d}", encoded_parts(f"{i:010d}", (8, 8), seed=i))
    shardcook.finalize(root, encoding="preencoded", split=(1, 1, 0))  # 10 + 10 samples

    def sizes(split: str, **kw) -> list[int]:
        with get_diffusion_loader(root, batch_size=4, num_workers=0, split=split, repeat=False,
                                  **kw) as w:
            return [len(b.__key__) for b in w.loader]

    assert sizes("train") == [4, 4]
    assert sizes("val") == [4, 4, 2]
    assert sizes("train", batch_drop_last=False) == [4, 4, 2]
    assert sizes("val", batch_drop_last=True) == [4, 4]


@pytest.mark.parametrize("cls,kind", [
    (SampleDecodeError, "sample_decode"), (UnsafeSampleError, "unsafe_sample"),
    (EmptyLoaderError, "empty_loader"), (NotCheckpointableError, "not_checkpointable"),
    (LoaderStateError, "loader_state"),
])
def test_loader_errors_carry_a_kind(cls, kind):
    assert issubclass(cls, ShardcookError) and cls("x").kind == kind
