"""MegatronDataloaderWrapper and get_diffusion_loader with the real Energon loader: cycling,
save/restore, ranks, and the malicious-pickle shard."""

from __future__ import annotations

import warnings
from collections import Counter

import pytest
import shardcook
import torch
from megatron.energon import SampleDecoder, WorkerConfig, reraise_exception
from megatron.energon.errors import FatalSampleError
from shardcook.energon import (
    EmptyLoaderError,
    EnergonDataloader,
    LoaderStateError,
    MegatronDataloaderWrapper,
    NotCheckpointableError,
    UnsafeSampleError,
    UnsafeSampleRefused,
    cook_preencoded_diffusion,
    get_diffusion_loader,
)

from tests.helpers.energon import (
    encoded_parts,
    evil_plain_pickle,
    evil_torch_save,
    make_encoded_dataset,
    prepare,
)


@pytest.fixture(scope="module")
def encoded(tmp_path_factory):
    # 3 shards of 8, 8 and 4 samples, two latent shapes.
    return make_encoded_dataset(tmp_path_factory.mktemp("enc") / "ds", 20,
                                latent_shapes=[(8, 8), (6, 10)])


def _same_batches(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.__key__ == y.__key__
        assert torch.equal(x.latents, y.latents)
        assert torch.equal(x.prompt_embeds, y.prompt_embeds)
        assert torch.equal(x.pooled_prompt_embeds, y.pooled_prompt_embeds)
        assert x.captions == y.captions


# --- the wrapper on its own -------------------------------------------------------------------


def test_wrapper_cycles_a_list_and_counts_passes():
    w = MegatronDataloaderWrapper([1, 2, 3])
    assert [next(w) for _ in range(7)] == [1, 2, 3, 1, 2, 3, 1]
    assert w.passes_completed == 2
    assert iter(w) is w and len(w) == 3


def test_wrapper_cycles_a_torch_dataloader():
    loader = torch.utils.data.DataLoader(list(range(5)), batch_size=2)
    w = MegatronDataloaderWrapper(loader)
    got = [next(w).tolist() for _ in range(4)]
    assert got == [[0, 1], [2, 3], [4], [0, 1]]
    # Checkpointing is optional (as in Primus): nothing to save is None, restoring None a no-op.
    assert w.save_state() is None
    w.restore_state(None)
    assert next(w).tolist() == [2, 3]


def test_real_state_into_a_plain_dataloader_is_refused(encoded):
    with get_diffusion_loader(encoded.path, batch_size=4, num_workers=0) as energon:
        state = energon.save_state()
    w = MegatronDataloaderWrapper(torch.utils.data.DataLoader(list(range(5)), batch_size=2))
    with pytest.raises(NotCheckpointableError, match="get_savable_loader"):
        w.restore_state(state)


def test_wrapper_on_empty_loader_raises_instead_of_spinning():
    w = MegatronDataloaderWrapper([])
    with pytest.raises(EmptyLoaderError, match="no batch in a whole pass"):
        next(w)
    w = MegatronDataloaderWrapper(torch.utils.data.DataLoader([], batch_size=2))
    with pytest.raises(EmptyLoaderError):
        next(w)


def test_wrapper_on_exhausted_generator_says_it_cannot_restart():
    w = MegatronDataloaderWrapper(x for x in [1, 2])
    assert [next(w), next(w)] == [1, 2]
    with pytest.raises(EmptyLoaderError, match="one-shot iterator"):
        next(w)


def test_closed_wrapper_refuses_to_continue():
    with MegatronDataloaderWrapper([1, 2]) as w:
        assert next(w) == 1
    with pytest.raises(RuntimeError, match="closed"):
        next(w)


def test_energon_dataloader_alias_warns():
    with pytest.warns(DeprecationWarning, match="MegatronDataloaderWrapper"):
        w = EnergonDataloader([1])
    assert isinstance(w, MegatronDataloaderWrapper) and next(w) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        MegatronDataloaderWrapper([1])


# --- with Energon -----------------------------------------------------------------------------


def _keys_of_pass(w: MegatronDataloaderWrapper, pass_index: int) -> list[str]:
    """Draws batches until the wrapper enters pass `pass_index + 1`; returns the keys of pass
    `pass_index`. The batch that opens the next pass is kept as the next pass's first batch."""
    keys = list(getattr(w, "_pending", []))
    while True:
        b = next(w)
        if w.passes_completed > pass_index:
            w._pending = b.__key__  # type: ignore[attr-defined]
            return keys
        keys.extend(b.__key__)


def test_cycling_past_an_epoch_sees_every_sample_each_pass(encoded):
    w = get_diffusion_loader(encoded.path, batch_size=3, num_workers=0, repeat=False,
                             shuffle_buffer_size=6, max_samples_per_sequence=2,
                             batch_drop_last=False)
    first = _keys_of_pass(w, 0)
    second = _keys_of_pass(w, 1)
    assert sorted(first) == encoded.keys
    assert sorted(second) == encoded.keys
    assert w.passes_completed == 2


def test_repeating_training_loader_never_stops(encoded):
    w = get_diffusion_loader(encoded.path, batch_size=4, num_workers=0)
    keys = Counter(k for _ in range(15) for k in next(w).__key__)
    assert sum(keys.values()) == 60  # 3 epochs' worth, no StopIteration, no partial batches
    assert set(keys) == set(encoded.keys)
    assert w.passes_completed == 0  # Energon repeats inside the loader


def test_two_ranks_together_see_every_sample_once_per_epoch(encoded):
    per_rank = []
    for rank in (0, 1):
        w = get_diffusion_loader(encoded.path, batch_size=3, num_workers=0, repeat=False,
                                 rank=rank, world_size=2, batch_drop_last=False)
        assert w.loader.worker_config.rank == rank
        per_rank.append([_keys_of_pass(w, 0), _keys_of_pass(w, 1)])
    for epoch in (0, 1):
        keys0, keys1 = per_rank[0][epoch], per_rank[1][epoch]
        assert keys0 and keys1
        assert not set(keys0) & set(keys1)
        counts = Counter(keys0 + keys1)
        assert sorted(counts) == encoded.keys and set(counts.values()) == {1}


def test_rank_and_world_size_come_from_torch_distributed(encoded):
    """An initialised process group (torch's in-process "fake" backend, rank 1 of 2) sets the
    rank; explicit arguments still win."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    def keys(**kw):
        w = get_diffusion_loader(encoded.path, batch_size=4, num_workers=0, repeat=False,
                                 shuffle_buffer_size=None, batch_drop_last=False, **kw)
        return w.loader.worker_config, sorted(k for b in w.loader for k in b.__key__)

    dist.init_process_group("fake", rank=1, world_size=2, store=FakeStore())
    try:
        config, from_dist = keys()
        _, explicit_0 = keys(rank=0, world_size=2)
    finally:
        dist.destroy_process_group()
    assert (config.rank, config.world_size) == (1, 2)
    assert from_dist == keys(rank=1, world_size=2)[1]
    assert sorted(from_dist + explicit_0) == encoded.keys


def test_rank_and_world_size_must_come_together(encoded):
    from shardcook.errors import ConfigError

    with pytest.raises(ConfigError, match="both rank and world_size"):
        get_diffusion_loader(encoded.path, batch_size=2, num_workers=0, rank=1)
    with pytest.raises(ConfigError, match="rank must be in"):
        get_diffusion_loader(encoded.path, batch_size=2, num_workers=0, rank=2, world_size=2)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_save_restore_continues_with_identical_batches(encoded, num_workers):
    k, m = 7, 8  # k batches cross an epoch boundary (20 samples, batch 4)

    def build():
        return get_diffusion_loader(encoded.path, batch_size=4, num_workers=num_workers,
                                    shuffle_buffer_size=6, max_samples_per_sequence=3,
                                    checkpoint_every_min_n_samples=2)

    with build() as first:
        for _ in range(k):
            next(first)
        state = first.save_state()
        expected = [next(first) for _ in range(m)]

    with build() as restored:
        restored.restore_state(state)
        got = [next(restored) for _ in range(m)]
    _same_batches(got, expected)

    if num_workers:
        return
    # Control: a fresh loader without the state starts elsewhere, so the check above has teeth.
    with build() as fresh:
        assert [next(fresh).__key__ for _ in range(m)] != [b.__key__ for b in expected]


def test_restore_after_drawing_is_refused(encoded):
    w = get_diffusion_loader(encoded.path, batch_size=4, num_workers=0)
    state = w.save_state()
    next(w)
    with pytest.raises(RuntimeError, match="before the first batch"):
        w.restore_state(state)


# --- the malicious pickle ---------------------------------------------------------------------


@pytest.fixture()
def evil_dataset(tmp_path):
    """Six good samples and two whose .pth parts would create `pwned_*` files if unpickled."""
    root = tmp_path / "evil"
    targets = [tmp_path / "pwned_zip", tmp_path / "pwned_plain"]
    with shardcook.ShardWriter(str(root), shard_size=4) as w:
        for i in range(8):
            key = f"{i:010d}"
            parts = encoded_parts(key, (4, 4), seed=i)
            if i == 2:
                parts["latents.pth"] = evil_torch_save(targets[0])
            if i == 5:
                parts["prompt_embeds.pth"] = evil_plain_pickle(targets[1])
            w.write(key, parts)
    prepare(root, "preencoded")
    return root, targets


def test_payload_is_live_under_energons_default_decoder(tmp_path):
    """Control: the same bytes do run code through webdataset's decoder (what we avoid)."""
    target = tmp_path / "control"
    SampleDecoder()({"__key__": "k", "latents.pth": evil_torch_save(target)})
    assert target.exists()


def test_malicious_pickle_is_refused_by_the_cooker(evil_dataset, tmp_path):
    _, targets = evil_dataset
    parts = encoded_parts("0000000002", (4, 4), seed=2)
    parts["latents.pth"] = evil_torch_save(targets[0])
    crude = {"__key__": "0000000002", "__restore_key__": (), "__sources__": (), **parts}
    with pytest.raises(UnsafeSampleError, match=r"'0000000002'.*'latents\.pth'.*io\.open"):
        cook_preencoded_diffusion(crude)
    assert not targets[0].exists()


def test_malicious_shard_runs_no_code_and_names_the_key(evil_dataset):
    root, targets = evil_dataset
    strict = WorkerConfig(rank=0, world_size=1, num_workers=0,
                          global_error_handler=reraise_exception)
    w = get_diffusion_loader(root, batch_size=2, num_workers=0, repeat=False,
                             shuffle_buffer_size=None, max_samples_per_sequence=None,
                             worker_config=strict)
    with pytest.raises(FatalSampleError, match=r"sample '00000000(02|05)': part"):
        for _ in range(10):
            next(w)
    assert not any(t.exists() for t in targets)


@pytest.mark.parametrize("evil", [[2], [0, 1, 2, 3]])
def test_a_malicious_sample_stops_the_loader_once(tmp_path, capfd, evil):
    """Energon's default handler logs a failing sample with its traceback and retries up to 100
    failures in a row (about 4,800 lines for 4 malicious samples); a refused part is a
    FatalSampleError instead, raised once, naming the sample and the part."""
    root, target = tmp_path / "evil", tmp_path / "pwned"
    with shardcook.ShardWriter(str(root), shard_size=4) as w:
        for i in range(4):
            parts = encoded_parts(f"{i:010d}", (4, 4), seed=i)
            if i in evil:
                parts["latents.pth"] = evil_torch_save(target)
            w.write(f"{i:010d}", parts)
    shardcook.finalize(root, encoding="preencoded", split=(1, 0, 0), validate=False)
    w = get_diffusion_loader(root, batch_size=2, num_workers=0, shuffle_buffer_size=None,
                             max_samples_per_sequence=None)
    capfd.readouterr()
    with pytest.raises(FatalSampleError) as e:
        for _ in range(10):
            next(w)
    refused = e.value.__context__
    assert isinstance(refused, UnsafeSampleRefused) and isinstance(refused, UnsafeSampleError)
    first = f"{evil[0]:010d}"
    assert str(refused) == (f"sample '{first}': part 'latents.pth' is not plain tensor data "
                            "and was refused without running it (torch.load "
                            "weights_only=True: Unsupported global: GLOBAL io.open)")
    assert str(e.value).endswith(str(refused) + ".")
    out = capfd.readouterr()
    assert "Traceback" not in out.out + out.err and "failed" not in out.out + out.err, out
    assert not target.exists()


def test_validation_split_reads_in_order_and_cycles(tmp_path):
    root = tmp_path / "splits"
    with shardcook.ShardWriter(str(root), shard_size=5) as w:
        for i in range(20):
            w.write(f"{i:010d}", encoded_parts(f"{i:010d}", (4, 4), seed=i))
    shardcook.finalize(root, encoding="preencoded", split=(0.5, 0.5, 0))
    w = get_diffusion_loader(root, batch_size=4, num_workers=0, split="val")
    first = [k for b in w.loader for k in b.__key__]
    assert first == [f"{i:010d}" for i in range(10, 20)]
    again = [k for _ in range(3) for k in next(w).__key__]
    assert again == first
    assert next(w).__key__ == first[:4] and w.passes_completed == 1


# --- bad states and arguments: typed errors that say what to do -------------------------------


@pytest.mark.parametrize("junk", ["junk", {}, [], 42])
def test_restoring_something_that_is_no_state_is_refused(encoded, junk):
    with (get_diffusion_loader(encoded.path, batch_size=4, num_workers=0) as w,
          pytest.raises(LoaderStateError, match="needs what save_state\\(\\) returned")):
        w.restore_state(junk)


def test_state_of_another_num_workers_is_refused(encoded):
    with get_diffusion_loader(encoded.path, batch_size=4, num_workers=0) as w:
        next(w)
        state = w.save_state()
    with (get_diffusion_loader(encoded.path, batch_size=4, num_workers=2) as other,
          pytest.raises(LoaderStateError, match="num_workers=0 but the loader has "
                                                "num_workers=2; build it with num_workers=0")):
        other.restore_state(state)


def test_state_of_another_dataset_is_refused(encoded, tmp_path):
    other_ds = make_encoded_dataset(tmp_path / "other", 12)
    with get_diffusion_loader(encoded.path, batch_size=4, num_workers=0) as w:
        next(w)
        state = w.save_state()
    with (get_diffusion_loader(other_ds.path, batch_size=4, num_workers=0) as other,
          pytest.raises(LoaderStateError, match=r"saved on ds split 'train'.*reads other")):
        other.restore_state(state)
    # the same dataset and split restores (the check is not simply "always refuse")
    with get_diffusion_loader(encoded.path, batch_size=4, num_workers=0) as same:
        same.restore_state(state)


@pytest.mark.parametrize("kwargs, message", [
    ({"split": "bogus"}, "split 'bogus' is not in .*; it has train, val, test"),
    ({"batch_size": 0}, "batch_size must be a whole number of at least 1, not 0"),
    ({"batch_size": -3}, "batch_size must be a whole number of at least 1, not -3"),
    ({"batch_size": 2.5}, "batch_size must be a whole number of at least 1, not 2.5"),
    ({"num_workers": -1}, "num_workers must be a whole number of 0 or more, not -1"),
])
def test_bad_loader_arguments_are_config_errors(encoded, kwargs, message):
    from shardcook.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        get_diffusion_loader(encoded.path, **{"batch_size": 4, **kwargs})


def _tagged_info_yaml(root):
    """An `.info.yaml` (Energon before 7.0) whose counts a YAML tag turns into a list."""
    (root / ".nv-meta" / ".info.json").unlink()
    (root / ".nv-meta" / ".info.yaml").write_text(
        "energon_version: '6'\nshard_counts: !!omap [000000.tar: 8, 000001.tar: 8, "
        "000002.tar: 4]\n")
    return ".info.yaml: 'shard_counts' must map shard names to sample counts, not a list"


def _tagged_dataset_yaml(root):
    """A dataset.yaml whose subflavors a YAML tag turns into a list."""
    path = root / ".nv-meta" / "dataset.yaml"
    path.write_text(path.read_text().replace("subflavors:\n  encoding: preencoded",
                                             "subflavors: !!omap [encoding: preencoded]"))
    return "dataset.yaml: 'subflavors' must be a mapping, not a list"


@pytest.mark.parametrize("damage", [_tagged_info_yaml, _tagged_dataset_yaml])
@pytest.mark.parametrize("read_as", ["dataset", "blend"])
def test_a_yaml_tag_in_the_metadata_is_one_sentence_naming_the_file(encoded, tmp_path, damage,
                                                                    read_as):
    """As validate says it, also with the task encoder given (so the loader reads no
    dataset.yaml to pick one) and through a blend, instead of Energon's JsonValueError."""
    import shutil

    from shardcook.energon import EncodedDiffusionTaskEncoder, write_blend
    from shardcook.errors import DatasetError

    root = tmp_path / "ds"
    shutil.copytree(encoded.path, root)
    path = root if read_as == "dataset" else write_blend(tmp_path / "mix.yaml", [f"{root}=1"])
    said = damage(root)
    assert any(said in problem for problem in shardcook.validate(root).problems)
    with pytest.raises(DatasetError, match=rf"^{root}/\.nv-meta/{said}; run `shardcook finalize "
                       rf"--force {root}`$"):
        get_diffusion_loader(path, batch_size=4, num_workers=0,
                             task_encoder=EncodedDiffusionTaskEncoder())
