"""The patterns of Primus's Energon integration guide (task encoders with class-level `decoder` and
`cookers`, the multi-cooker task encoder, the wrapper around a loader, the training loop's dict
access) and of its data preprocessing guide (programmatic validation), re-typed here with only the
import path changed from `primus.backends.megatron.data...` to `shardcook`, run through the real
Energon loader on shardcook datasets."""

from __future__ import annotations

import io
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from megatron.energon import (
    Cooker,
    DefaultTaskEncoder,
    SampleDecoder,
    WorkerConfig,
    get_loader,
    get_train_dataset,
)
from PIL import Image
from shardcook import validate, validate_energon_dataset
from shardcook.energon import (
    DiffusionSample,
    MegatronDataloaderWrapper,
    cook_preencoded_diffusion,
    cook_raw_images,
)

from tests.helpers.energon import (
    encoded_parts,
    make_encoded_dataset,
    make_raw_dataset,
    tensor_bytes,
)

warnings.filterwarnings("ignore", message=".*pin_memory.*")


@pytest.fixture(scope="module")
def encoded(tmp_path_factory):
    return make_encoded_dataset(tmp_path_factory.mktemp("guide") / "encoded", 8)


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    return make_raw_dataset(tmp_path_factory.mktemp("guide") / "raw", 8)


def _energon_loader(path: Path, task_encoder: Any) -> Any:
    """The guide's `energon_loader = get_loader(...)`, filled in."""
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    dataset = get_train_dataset(str(path), batch_size=4, shuffle_buffer_size=None,
                                max_samples_per_sequence=None, worker_config=wc,
                                task_encoder=task_encoder)
    return get_loader(dataset)


# --- "EncodedDiffusionTaskEncoder": the pil decoder on, the cooker filtered by subflavor ------


class GuideEncodedTaskEncoder(DefaultTaskEncoder[DiffusionSample, DiffusionSample, dict, dict]):
    decoder = SampleDecoder(image_decode="pil")
    cookers = [  # noqa: RUF012 - as users write it
        Cooker(cook_preencoded_diffusion, has_subflavors={"encoding": "preencoded"}),
    ]

    def __init__(self, worker_config: WorkerConfig | None = None):
        super().__init__()
        self.worker_config = worker_config

    def batch(self, samples: list[DiffusionSample]) -> dict[str, torch.Tensor]:
        return {name: torch.stack([getattr(s, name) for s in samples])
                for name in ("latents", "prompt_embeds", "pooled_prompt_embeds")}


def test_guides_encoded_task_encoder_with_the_default_decoder(encoded):
    dataloader = MegatronDataloaderWrapper(_energon_loader(encoded.path, GuideEncodedTaskEncoder()))
    for step, batch in enumerate(dataloader):  # the guide's training loop
        latents = batch["latents"]
        assert latents.shape == (4, 16, 8, 8) and latents.dtype == torch.bfloat16
        assert batch["prompt_embeds"].shape[0] == batch["pooled_prompt_embeds"].shape[0] == 4
        if step == 2:  # past the end of the 8 samples: the wrapper cycles
            break
    stored = encoded_parts(encoded.keys[0], (8, 8), seed=0)["latents.pth"]
    expected = torch.load(io.BytesIO(stored), weights_only=True)
    first = next(iter(_energon_loader(encoded.path, GuideEncodedTaskEncoder())))
    assert any(torch.equal(expected, t) for t in first["latents"])


# --- "RawDiffusionTaskEncoder": samples read as s['images'] and s['txt'] ----------------------


class GuideRawTaskEncoder(DefaultTaskEncoder):
    decoder = SampleDecoder(image_decode="pil")
    cookers = [  # noqa: RUF012 - as users write it
        Cooker(cook_raw_images, has_subflavors={"encoding": "raw"}),
    ]

    def __init__(self, worker_config: WorkerConfig | None = None):
        super().__init__()
        self.worker_config = worker_config

    def batch(self, samples: list[dict]) -> dict[str, Any]:
        return {"images": [s["images"] for s in samples], "txt": [s["txt"] for s in samples]}


def test_guides_raw_task_encoder_gets_pil_images_and_captions(raw):
    dataloader = MegatronDataloaderWrapper(_energon_loader(raw.path, GuideRawTaskEncoder()))
    batch = next(dataloader)
    images, captions = batch["images"], batch["txt"]
    assert len(images) == 4 and all(isinstance(im, Image.Image) for im in images)
    assert {im.mode for im in images} == {"RGB"} and {im.size for im in images} == {(48, 32)}
    assert all(c.startswith("caption of ") for c in captions)


class GuideKeyedRawTaskEncoder(GuideRawTaskEncoder):
    """The raw task encoder, with the sample keys `basic_sample_keys` forwarded (the guide's
    "always forward `__key__`, `__restore_key__`, `__subflavors__`")."""

    def batch(self, samples: list[dict]) -> dict[str, Any]:
        return {**super().batch(samples), "keys": [s["__key__"] for s in samples],
                "mapped": [set(s) for s in samples]}


def test_raw_samples_hold_the_keys_of_primuss_cooker(raw):
    """Primus's `cook_raw_images` returns `{**basic_sample_keys(sample), "images", "txt"}`."""
    batch = next(iter(_energon_loader(raw.path, GuideKeyedRawTaskEncoder())))
    assert len(batch["keys"]) == 4 and set(batch["keys"]) <= set(raw.keys)
    basic = {"__key__", "__restore_key__", "__subflavors__", "__sources__"}
    assert all(keys == basic | {"images", "txt"} for keys in batch["mapped"])


def test_encoded_samples_carry_energons_sample_keys_as_primuss_do(encoded):
    """Primus's `cook_preencoded_diffusion` returns its DiffusionSample dataclass, which carries
    the basic sample keys as fields."""
    class Keyed(GuideEncodedTaskEncoder):
        def batch(self, samples: list[DiffusionSample]) -> dict[str, Any]:
            return {"keys": [s.__key__ for s in samples],
                    "restore": [s.__restore_key__ for s in samples],
                    "subflavors": [s.__subflavors__ for s in samples]}

    batch = next(iter(_energon_loader(encoded.path, Keyed())))
    assert set(batch["keys"]) <= set(encoded.keys) and all(batch["restore"])
    assert all(sub["encoding"] == "preencoded" for sub in batch["subflavors"])


# --- "Multiple cookers in one TaskEncoder": DefaultTaskEncoder's defaults, nothing else -------


class MultiFormatTaskEncoder(DefaultTaskEncoder[DiffusionSample, DiffusionSample, dict, dict]):
    cookers = [  # noqa: RUF012 - as users write it
        Cooker(cook_preencoded_diffusion, has_subflavors={"encoding": "preencoded"}),
        Cooker(cook_raw_images, has_subflavors={"encoding": "raw"}),
    ]


@pytest.mark.parametrize("layout", ["encoded", "raw"])
def test_guides_multi_cooker_task_encoder_with_energons_defaults(request, layout):
    built = request.getfixturevalue(layout)
    batch = next(iter(_energon_loader(built.path, MultiFormatTaskEncoder())))
    if layout == "encoded":
        assert batch.latents.shape == (4, 16, 8, 8)
    else:  # the default decoder makes float RGB tensors, kept as it made them
        assert batch.image.shape == (4, 3, 32, 48) and batch.image.dtype == torch.float32
    assert len(batch.__key__) == 4


# --- the wrapper around a PyTorch DataLoader ------------------------------------------------


def test_guides_wrapper_around_a_pytorch_dataloader():
    pytorch_loader = torch.utils.data.DataLoader(list(range(6)), batch_size=4)
    wrapper = MegatronDataloaderWrapper(pytorch_loader)
    assert [next(wrapper).tolist() for _ in range(3)] == [[0, 1, 2, 3], [4, 5], [0, 1, 2, 3]]
    assert wrapper.save_state() is None  # nothing to checkpoint, as Primus's wrapper says


# --- programmatic validation -------------------------------------------------------------------


def test_guides_programmatic_validation(encoded, raw, tmp_path):
    ok = validate_energon_dataset(str(encoded.path), encoding="preencoded")
    assert ok is True
    assert validate_energon_dataset(raw.path) is True  # the dataset's own encoding by default
    assert validate_energon_dataset(raw.path, encoding="preencoded") is False
    assert validate_energon_dataset(tmp_path / "missing", encoding="preencoded") is False


def test_a_report_is_falsy_exactly_when_there_are_problems(encoded, tmp_path):
    assert validate(encoded.path) and validate(encoded.path).ok
    missing = validate(tmp_path / "missing")
    assert not missing and missing.problems
    broken = tmp_path / "broken"
    shutil.copytree(encoded.path, broken)
    (broken / "000000.tar").write_bytes(tensor_bytes(torch.zeros(1)))
    assert not validate(broken)
