"""`shardcook encode --layout automodel` side by side with NeMo AutoModel's own preprocessing tool
(`tools/diffusion/preprocessing_multiprocess.py`) on the same inputs with the same random-weight
models of the real classes, on the CPU, per family: its `image` command (one image at a time: PIL
decode, bucket, resize and crop, VAE, text encoders, torch.save, metadata shards) for FLUX.1,
FLUX.2 and Qwen-Image on photos, and its `video` command for Wan 2.1/2.2, HunyuanVideo-1.5 and
LTX-2 on generated clips (benches/automodel_video_vs_tool.py: its models, clips and commands).

    python benches/automodel_vs_tool.py [--families flux flux2 qwen_image wan wan2.2
                                         hunyuanvideo-1.5 ltx2] [--n 64 photos, 8 clips]
                                        [--width 4] [--repeats 1]

AutoModel's side. Its tool cannot run on a CPU: `preprocess_dataset` raises "No GPUs available"
when `torch.cuda.device_count()` is 0, and each worker starts with `torch.cuda.set_device`. So the
bench runs, as a process of its own, the tool file itself (vendored with its imports re-pointed in
tests/vendored/automodel/preprocessing_multiprocess.py) on one device, "cpu": the parts of
`preprocess_dataset` for a local folder (`_get_media_files`, `_load_all_captions`), the body of
`_init_worker` without its `torch.cuda.set_device` (the processor's own `load_models`, the bucket
calculator), the tool's `_process_image` on every image in turn as `_process_shard_on_gpu`'s loop
calls it, then `_save_metadata_shards`. Left out: the one-worker spawn Pool the tool starts for one
GPU (one more interpreter start on its side).

shardcook's side: `python -m shardcook encode --layout automodel --model-type F --device cpu` with
its default batching and workers. Both: the default pixel budget (256 x 256), bf16 as AutoModel
loads the models, torch's default threads. Each side runs as a fresh process on n photos and on
2n (the n plus n more): the whole-process rate at 2n, and the steady-state rate
n / (time(2n) - time(n)), in which start-up and loading cancel out. Both caches must hold the
same files under the same names with the same metadata entries and the same keys, dtypes and
shapes; the bench prints how many files are also equal bit for bit (FLUX.1 and Qwen-Image sample
their latents, the tool from an unseeded generator, and batched bf16 kernels may round
differently from one-image ones, so that count is reported, not required). The default
families are the image ones.

Models: the tiny builders' folders (shardcook.encoders.tiny for FLUX.1 and Qwen-Image,
tests/helpers/tiny_flux2.py for FLUX.2), then widened --width times (VAE channels, text encoder
hidden sizes) with fresh seeded weights of the same classes, so encoding, not start-up, dominates.
Photos: benches/raw_vs_peers.py's 1-4 MP JPEG/PNG/WebP photos, aspect 0.6-1.6 (several buckets),
captions in one `<prefix>_internvl.json`. Work files go under bench-out/automodel_vs_tool
(git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import automodel_video_vs_tool as videos
from widened_models import rebuild_diffusers, rebuild_transformers

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench-out" / "automodel_vs_tool"
MAX_PIXELS = 256 * 256

#: AutoModel's side, in its own process: the tool's own functions, on the CPU.
TOOL_DRIVER = """
import importlib, logging, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tqdm import tqdm
from tests.vendored.automodel import preprocessing_multiprocess as tool
family, model, image_dir, out, max_pixels = sys.argv[2:7]
max_pixels = int(max_pixels)
# what the tool's `from tools.diffusion.processors import ...` does: register the processor
importlib.import_module(f"tests.vendored.automodel.processors.{family}")
logging.basicConfig(level=logging.INFO)
# preprocess_dataset for a local folder, on one device
out = Path(out)
out.mkdir(parents=True, exist_ok=True)
processor = tool.ProcessorRegistry.get(family)
image_files = tool._get_media_files(Path(image_dir), tool.IMAGE_EXTENSIONS)
caption_cache = tool._load_all_captions(image_files, "internvl", verbose=True)
# _init_worker, less torch.cuda.set_device
tool._worker_device = "cpu"
tool._worker_processor = tool.ProcessorRegistry.get(family)
tool._worker_models = tool._worker_processor.load_models(model, "cpu")
tool._worker_calculator = tool.MultiTierBucketCalculator(quantization=64, max_pixels=max_pixels)
# _process_shard_on_gpu's loop
results = []
for image_path in tqdm(image_files, desc="cpu"):
    caption = caption_cache.get(image_path.name)
    result = tool._process_image((str(image_path), str(out), False, caption))
    if result:
        results.append(result)
tool._save_metadata_shards(results, out, family, model, processor.model_type, 10000,
                           {"caption_field": "internvl", "max_pixels": max_pixels})
"""


# ---- models -------------------------------------------------------------------------------


def flux_models(root: Path, width: int) -> Path:
    """FLUX.1: tiny AutoencoderKL, CLIPTextModel and T5EncoderModel, each `width` times wider, in
    the folder FluxPipeline.from_pretrained reads (AutoModel's `load_models`; no transformer)."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler
    from shardcook.encoders.tiny import build_tiny_flux
    from transformers import CLIPTextModel, T5EncoderModel

    build_tiny_flux(root)
    rebuild_diffusers(root / "vae", AutoencoderKL,
                       block_out_channels=[c * width for c in (8, 8, 16, 16)])

    def clip(c: Any) -> None:
        c.hidden_size, c.intermediate_size = 24 * width, 48 * width
        c.projection_dim = 24 * width

    def t5(c: Any) -> None:
        c.d_model, c.d_ff, c.d_kv = 32 * width, 64 * width, 8 * width

    rebuild_transformers(root / "text_encoder", CLIPTextModel, clip)
    rebuild_transformers(root / "text_encoder_2", T5EncoderModel, t5)
    FlowMatchEulerDiscreteScheduler(shift=3.0).save_pretrained(root / "scheduler")
    index = json.loads((root / "model_index.json").read_text())
    index.update({
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "CLIPTextModel"],
        "text_encoder_2": ["transformers", "T5EncoderModel"],
        "tokenizer": ["transformers", "CLIPTokenizer"],
        "tokenizer_2": ["transformers", "T5TokenizerFast"],
        "transformer": ["diffusers", "FluxTransformer2DModel"],
        "vae": ["diffusers", "AutoencoderKL"]})
    (root / "model_index.json").write_text(json.dumps(index, indent=2))
    return root


def flux2_models(root: Path, width: int) -> Path:
    """FLUX.2: tiny AutoencoderKLFlux2 and Mistral3 (32 layers), `width` times wider."""
    from diffusers import AutoencoderKLFlux2
    from transformers import Mistral3ForConditionalGeneration

    from tests.helpers.tiny_flux2 import build_tiny_flux2

    build_tiny_flux2(root)
    rebuild_diffusers(root / "vae", AutoencoderKLFlux2,
                       block_out_channels=[c * width for c in (8, 8, 16, 16)])

    def mistral(c: Any) -> None:
        t = c.text_config
        t.hidden_size, t.intermediate_size = 16 * width, 32 * width
        t.num_attention_heads, t.num_key_value_heads = 2 * width, width

    rebuild_transformers(root / "text_encoder", Mistral3ForConditionalGeneration, mistral)
    return root


def qwen_image_models(root: Path, width: int) -> Path:
    """Qwen-Image: tiny AutoencoderKLQwenImage and Qwen2.5-VL, `width` times wider (the heads
    keep their size of 16, which Qwen2.5-VL's rotary sections fill)."""
    from diffusers.models.autoencoders.autoencoder_kl_qwenimage import AutoencoderKLQwenImage
    from shardcook.encoders.tiny import build_tiny_qwen_image
    from transformers import Qwen2_5_VLForConditionalGeneration

    build_tiny_qwen_image(root)
    rebuild_diffusers(root / "vae", AutoencoderKLQwenImage, base_dim=8 * width)

    def qwen(c: Any) -> None:
        t = c.text_config
        t.hidden_size, t.intermediate_size = 32 * width, 64 * width
        t.num_attention_heads, t.num_key_value_heads = 2 * width, width
        c.vision_config.out_hidden_size = 32 * width

    rebuild_transformers(root / "text_encoder", Qwen2_5_VLForConditionalGeneration, qwen)
    return root


FAMILIES = {"flux": flux_models, "flux2": flux2_models, "qwen_image": qwen_image_models}
#: family: keys whose shapes shardcook deliberately does not copy (their dtypes still compared).
LOOSE_SHAPES: dict[str, tuple[str, ...]] = {}


def models(family: str, root: Path, width: int) -> Path:
    return FAMILIES[family](root, width)


# ---- inputs -------------------------------------------------------------------------------


def make_inputs(folder: Path, n: int) -> dict:
    """n photos `photos_sample<i>.<ext>` with their captions in `photos_internvl.json` (the
    JSONL AutoModel's tool reads, and shardcook's layout with it)."""
    from raw_vs_peers import make_photos

    info = make_photos(folder, n)
    lines = []
    for caption_file in sorted(folder.glob("*.txt")):
        photo = next(p for p in folder.glob(caption_file.stem + ".*") if p.suffix != ".txt")
        name = f"photos_sample{photo.name}"
        photo.rename(folder / name)
        lines.append(json.dumps({"file_name": name, "internvl": caption_file.read_text()}))
        caption_file.unlink()
    (folder / "photos_internvl.json").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return info


def first_inputs(src: Path, n: int, dest: Path) -> Path:
    """dest: hard links to the first n photos of src, with their captions' lines."""
    dest.mkdir(parents=True)
    lines = (src / "photos_internvl.json").read_text().splitlines()[:n]
    for line in lines:
        os.link(src / json.loads(line)["file_name"], dest / json.loads(line)["file_name"])
    (dest / "photos_internvl.json").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dest


def describe(info: dict, count: int) -> str:
    return (f"{count} photos of {info['mp_min']}-{info['mp_max']} MP (mean {info['mp_mean']}, "
            f"{info['formats']}), buckets of <= {MAX_PIXELS} px, bf16")


# ---- commands -----------------------------------------------------------------------------


def shardcook_cmd(family: str, model: Path, src: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "shardcook", "encode", "--layout", "automodel", "--model-type",
            family, "--model-path", str(model), "--input-dir", str(src), "--output-dir",
            str(out), "--device", "cpu", "--overwrite", "--quiet"]


def tool_cmd(family: str, model: Path, src: Path, out: Path) -> list[str]:
    return [sys.executable, "-c", TOOL_DRIVER, str(ROOT), family, str(model), str(src),
            str(out), str(MAX_PIXELS)]


# ---- runs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Media:
    """A kind of input the bench runs: its families, models, inputs and the two commands
    (`family, model folder, input folder, cache folder` to a command line)."""

    unit: str
    default_n: int
    families: Collection[str]
    models: Callable[[str, Path, int], Path]
    make_inputs: Callable[[Path, int], dict]
    first_inputs: Callable[[Path, int, Path], Path]
    describe: Callable[[dict, int], str]
    shardcook_cmd: Callable[[str, Path, Path, Path], list[str]]
    tool_cmd: Callable[[str, Path, Path, Path], list[str]]
    loose_shapes: Mapping[str, tuple[str, ...]]


def media(module: Any, unit: str, default_n: int) -> Media:
    """The Media of a module defining FAMILIES and the functions Media names."""
    return Media(unit, default_n, sorted(module.FAMILIES), module.models, module.make_inputs,
                 module.first_inputs, module.describe, module.shardcook_cmd, module.tool_cmd,
                 module.LOOSE_SHAPES)


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd[:6])} failed ({done.returncode}): {done.stderr[-2000:]}")
    return time.perf_counter() - t0


def cache_files(out: Path) -> list[str]:
    """The cache's files: `<bucket>/<hash>.pt` (images) or `.meta` (videos)."""
    return sorted(str(p.relative_to(out)) for p in out.glob("*x*/*")
                  if p.suffix in (".pt", ".meta"))


def entries(out: Path) -> list[dict]:
    """The metadata shards' entries, cache files relative to the cache."""
    rows = []
    for shard in sorted(out.glob("metadata_shard_*.json")):
        for row in json.loads(shard.read_text()):
            rows.append({**row, "cache_file": str(Path(row["cache_file"]).relative_to(out))})
    return rows


def compare_caches(ours: Path, theirs: Path, loose: tuple[str, ...] = ()) -> tuple[int, int]:
    """Asserts both caches hold the same files, entries, keys, dtypes and shapes (of the keys
    in `loose`, only the number of dimensions); returns (files equal bit for bit, files)."""
    import torch

    names = cache_files(theirs)
    assert cache_files(ours) == names, "the caches hold different files"
    key = "cache_file"
    assert sorted(entries(ours), key=lambda e: e[key]) == sorted(entries(theirs),
                                                                key=lambda e: e[key])
    equal = 0
    for name in names:
        a = torch.load(ours / name, weights_only=True)
        b = torch.load(theirs / name, weights_only=True)
        assert list(b) == [k for k in a if k in b], name  # shardcook may add keys (Qwen's mask)
        same = True
        for k, v in b.items():
            if isinstance(v, torch.Tensor):
                shapes = (a[k].dim(), v.dim()) if k in loose else (a[k].shape, v.shape)
                assert a[k].dtype == v.dtype and shapes[0] == shapes[1], (name, k)
                same = same and a[k].shape == v.shape and torch.equal(a[k], v)
            else:
                assert a[k] == v, (name, k)
        equal += same
    return equal, len(names)


def bench_family(kind: Media, family: str, width: int, repeats: int,
                 src: dict[int, Path]) -> dict:
    model = kind.models(family, WORK / f"{family}-x{width}-DEMO-WEIGHTS", width)
    sizes = sorted(src)
    names = ("shardcook encode", "AutoModel's tool")
    times: dict[tuple[str, int], list[float]] = {(k, n): [] for k in names for n in sizes}
    equal = (0, 0)
    for r in range(repeats):  # alternate, so background load hits both alike
        for n in sizes:
            outs = {name: WORK / f"{family}-{i}-{r}-{n}" for i, name in enumerate(names)}
            times[names[1], n].append(timed(kind.tool_cmd(family, model, src[n],
                                                          outs[names[1]])))
            times[names[0], n].append(timed(kind.shardcook_cmd(family, model, src[n],
                                                               outs[names[0]])))
            for out in outs.values():
                assert len(cache_files(out)) == n, f"{out.name}: skipped {kind.unit}"
            if r == 0 and n == sizes[-1]:
                equal = compare_caches(outs[names[0]], outs[names[1]],
                                       kind.loose_shapes.get(family, ()))
            for out in outs.values():
                shutil.rmtree(out)
    rates = {}
    for name in names:
        t_n, t_2n = (statistics.median(times[name, n]) for n in sizes)
        # on a loaded machine the larger run can finish sooner: no steady state then
        steady = sizes[0] / (t_2n - t_n) if t_2n > t_n else float("nan")
        rates[name] = (t_n, t_2n, sizes[1] / t_2n, steady)
    return {"rates": rates, "equal": equal, "loose": kind.loose_shapes.get(family, ())}


def report(family: str, unit: str, sizes: tuple[int, int], result: dict) -> None:
    rates = result["rates"]
    print(f"{family}:")
    for name, (t_n, t_2n, whole, steady) in rates.items():
        print(f"  {name:<17} {sizes[0]} {unit} {t_n:6.2f} s, {sizes[1]} {unit} {t_2n:6.2f} "
              f"s: whole run {whole:6.2f} {unit}/s, steady state {steady:6.2f} {unit}/s")
    (a, b) = (rates["shardcook encode"], rates["AutoModel's tool"])
    equal, files = result["equal"]
    steady = f"{a[3] / b[3]:.2f}x" if a[3] == a[3] and b[3] == b[3] else "n/a"
    loose = f" (not the shapes of {', '.join(result['loose'])})" if result["loose"] else ""
    print(f"  ratio: whole run {a[2] / b[2]:.2f}x, steady state {steady}; "
          f"same {files} file names, entries, keys, dtypes and shapes{loose}; {equal} of "
          f"{files} files equal bit for bit")


def main() -> None:
    sys.path.insert(0, str(ROOT / "benches"))
    sys.path.insert(0, str(ROOT))  # tests.helpers: FLUX.2's builder, the clips' frames

    kinds = (media(sys.modules[__name__], "photos", 64), media(videos, "clips", 8))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", nargs="+", default=sorted(FAMILIES),
                    choices=[f for kind in kinds for f in kind.families])
    ap.add_argument("--n", type=int, default=None,
                    help="inputs of the smaller run, the other 2n (default: 64 photos, 8 clips)")
    ap.add_argument("--width", type=int, default=4,
                    help="how many times wider than the tests' tiny models")
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    if WORK.exists():
        shutil.rmtree(WORK)
    for kind in kinds:
        families = [f for f in args.families if f in kind.families]
        if not families:
            continue
        n = args.n or kind.default_n
        sizes = (n, 2 * n)
        src = {sizes[1]: WORK / f"{kind.unit}-{sizes[1]}"}
        info = kind.make_inputs(src[sizes[1]], sizes[1])
        src[sizes[0]] = kind.first_inputs(src[sizes[1]], sizes[0], WORK / f"{kind.unit}-{n}")
        print(f"{kind.describe(info, sizes[1])}, models {args.width}x the tests' tiny ones, "
              f"CPU ({os.cpu_count()} cores); medians of {args.repeats} run(s), each a fresh "
              "process (start-up, loading, encoding, writing)")
        for family in families:
            report(family, kind.unit, sizes,
                   bench_family(kind, family, args.width, args.repeats, src))


if __name__ == "__main__":
    main()
