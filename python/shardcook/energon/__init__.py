"""The Energon side of shardcook: what a Megatron training loop imports to read our datasets.

Importing this package imports torch and megatron-energon.

Example:
    >>> from shardcook.energon import get_diffusion_loader
    >>> train_iter = get_diffusion_loader("data/flux", batch_size=8)
    >>> batch = next(train_iter)     # DiffusionBatch: latents [8, 16, 128, 128], ...
    >>> batch = {k: v.cuda(non_blocking=True) for k, v in batch.items()}  # its tensors
"""

from shardcook.dataset.check.verdict import validate_energon_dataset
from shardcook.energon.blend import BlendEntry, parse_blend_entry, write_blend
from shardcook.energon.cookers import (
    cook_bridge_crude,
    cook_bridge_flux,
    cook_parts,
    cook_preencoded_diffusion,
    cook_raw_images,
    load_pickled_tensors,
    load_tensor,
)
from shardcook.energon.decoder import SafeSampleDecoder
from shardcook.energon.errors import (
    EmptyLoaderError,
    LoaderStateError,
    NotCheckpointableError,
    SampleDecodeError,
    UnsafeSampleError,
)
from shardcook.energon.loader import dataset_encoding, get_diffusion_loader, task_encoder_for
from shardcook.energon.mlperf import cook_preencoded_numpy_diffusion, load_numpy_tensor
from shardcook.energon.samples import (
    DiffusionBatch,
    DiffusionSample,
    PartsSample,
    RawImageBatch,
    RawImageSample,
)
from shardcook.energon.task_encoders import (
    BridgeFluxTaskEncoder,
    DiffusionTaskEncoder,
    EncodedDiffusionTaskEncoder,
    PartsTaskEncoder,
    RawDiffusionTaskEncoder,
    UnsafeSampleRefused,
)
from shardcook.energon.wrapper import EnergonDataloader, LoaderState, MegatronDataloaderWrapper

__all__ = [
    "BlendEntry",
    "BridgeFluxTaskEncoder",
    "DiffusionBatch",
    "DiffusionSample",
    "DiffusionTaskEncoder",
    "EmptyLoaderError",
    "EncodedDiffusionTaskEncoder",
    "EnergonDataloader",
    "LoaderState",
    "LoaderStateError",
    "MegatronDataloaderWrapper",
    "NotCheckpointableError",
    "PartsSample",
    "PartsTaskEncoder",
    "RawDiffusionTaskEncoder",
    "RawImageBatch",
    "RawImageSample",
    "SafeSampleDecoder",
    "SampleDecodeError",
    "UnsafeSampleError",
    "UnsafeSampleRefused",
    "cook_bridge_crude",
    "cook_bridge_flux",
    "cook_parts",
    "cook_preencoded_diffusion",
    "cook_preencoded_numpy_diffusion",
    "cook_raw_images",
    "dataset_encoding",
    "get_diffusion_loader",
    "load_numpy_tensor",
    "load_pickled_tensors",
    "load_tensor",
    "parse_blend_entry",
    "task_encoder_for",
    "validate_energon_dataset",
    "write_blend",
]
