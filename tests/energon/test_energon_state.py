"""The loader's checkpoint state with the real Energon loader: it is Energon's own state (what
Megatron-LM and Energon's guide save, load and restore), loads with torch.load's default
`weights_only=True`, is only read by a restore, and a state of another dataset (by content, not
name or index.uuid), worker count or data-parallel size is refused on every restore path;
shardcook's older checkpoints still restore."""

from __future__ import annotations

import hashlib
import json
import pickle
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile

import pytest
import shardcook
import torch
from megatron.energon.savable_loader import SavableDataLoaderState
from shardcook.dataset.metadata import read_split_yaml
from shardcook.energon import LoaderState, LoaderStateError, get_diffusion_loader, write_blend

from tests.helpers.energon import make_encoded_dataset

K, M = 3, 4


def _build(path, num_workers=0, **ranks):
    return get_diffusion_loader(path, batch_size=2, num_workers=num_workers,
                                shuffle_buffer_size=4, max_samples_per_sequence=2,
                                checkpoint_every_min_n_samples=2, **ranks)


def _keys(batches):
    return [b.__key__ for b in batches]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Two datasets in folders of the same name, with the same shard names and sample counts but
    other samples."""
    root = tmp_path_factory.mktemp("state")
    return (make_encoded_dataset(root / "dA" / "data", 16, shard_size=4).path,
            make_encoded_dataset(root / "dB" / "data", 16, shard_size=4,
                                 latent_shapes=((8, 16),)).path)


def _saved(path, num_workers=0, **ranks):
    """The state after K batches and the M batches an uninterrupted run draws next."""
    with _build(path, num_workers, **ranks) as w:
        for _ in range(K):
            next(w)
        state = w.save_state()
        return state, _keys(next(w) for _ in range(M))


def test_state_is_energons_own_and_restores_as_megatron_restores_it(data, tmp_path):
    """Megatron-LM's multimodal data provider: `torch.load(path, map_location="cpu")` and the
    loader's `restore_state_rank` (here the Energon loader itself)."""
    state, expected = _saved(data[0])
    assert type(state) is SavableDataLoaderState
    torch.save({"dataloader_state_dict": state}, tmp_path / "train_dataloader_dprank000.pt")
    loaded = torch.load(tmp_path / "train_dataloader_dprank000.pt", map_location="cpu")
    with _build(data[0]) as fresh:
        fresh.loader.restore_state_rank(loaded["dataloader_state_dict"])
        assert _keys(next(fresh) for _ in range(M)) == expected
    with _build(data[0]) as fresh:  # teeth: without the state the data starts elsewhere
        assert _keys(next(fresh) for _ in range(M)) != expected


def test_a_new_process_loads_the_state_with_weights_only(data, tmp_path):
    """Importing shardcook.energon is enough for a plain `torch.load` (Energon's guide)."""
    state, _ = _saved(data[0], num_workers=2)
    torch.save(state, tmp_path / "state.pth")
    code = textwrap.dedent(f"""
        import torch, shardcook.energon
        state = torch.load({str(tmp_path / "state.pth")!r})
        print(type(state).__name__, state.shardcook_dataset["split"], len(state.worker_states))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["SavableDataLoaderState", "train", "2"]


def _restore_paths(w):
    """Every way a training loop hands a state to a loader built by get_diffusion_loader."""
    return {
        "wrapper.restore_state": lambda s: w.restore_state(s),
        "wrapper.restore_state_rank": lambda s: w.restore_state_rank(s),
        "loader.restore_state_rank": lambda s: w.loader.restore_state_rank(s),
        "wrapper.restore_state_global": lambda s: w.restore_state_global([s]),
        "loader.restore_state_global": lambda s: w.loader.restore_state_global([s]),
    }


PATHS = ["wrapper.restore_state", "wrapper.restore_state_rank", "loader.restore_state_rank",
         "wrapper.restore_state_global", "loader.restore_state_global"]


@pytest.mark.parametrize("restore_with", PATHS)
def test_state_of_a_same_named_dataset_is_refused_on_every_path(data, restore_with):
    state, _ = _saved(data[0])
    with pytest.raises(LoaderStateError, match=r"saved on data split 'train' \(index \w+\) "
                       r"but the loader reads data split 'train' \(index \w+\); restore it "
                       "into a loader of the same dataset and split"):
        _restore_paths(_build(data[1]))[restore_with](state)


def test_state_of_a_blend_of_another_same_named_dataset_is_refused(data):
    """Two blends whose files are byte for byte the same (`path: data`, relative) but name
    different datasets."""
    blends = [write_blend(d.parent / "mix.yaml", [f"{d}=1"], force=True) for d in data]
    assert blends[0].read_bytes() == blends[1].read_bytes()
    state, _ = _saved(blends[0])
    with (_build(blends[1]) as other,
          pytest.raises(LoaderStateError, match=r"saved on mix.yaml split 'train' \(index \w+\) "
                        r"but the loader reads mix.yaml split 'train'")):
        other.restore_state(state)
    with _build(blends[0]) as same:
        same.restore_state(state)


def test_a_copy_of_the_dataset_elsewhere_restores(data, tmp_path):
    """Identity is the content, not the folder's name or path."""
    copy = tmp_path / "moved" / "renamed"
    shutil.copytree(data[0], copy)
    state, expected = _saved(data[0])
    with _build(copy) as moved:
        moved.restore_state(state)
        assert _keys(next(moved) for _ in range(M)) == expected


@pytest.mark.parametrize("restore_with", PATHS)
def test_state_of_another_worker_count_is_refused_on_every_path(data, restore_with):
    state, _ = _saved(data[0], num_workers=0)
    with pytest.raises(LoaderStateError, match="saved with num_workers=0 but the loader has "
                       "num_workers=2; build it with num_workers=0 to restore"):
        _restore_paths(_build(data[0], num_workers=2))[restore_with](state)


def _old_dataset_id(path) -> str:
    """What shardcook's `LoaderState.dataset_id` held before states became Energon's own."""
    digest = hashlib.sha256()
    for name in (".info.json", "split.yaml"):
        digest.update((path / ".nv-meta" / name).read_bytes())
    return f"{path.name} split 'train' (index {digest.hexdigest()[:12]})"


@pytest.mark.parametrize("restore_with", ["wrapper.restore_state", "loader.restore_state_rank"])
def test_old_loader_state_checkpoints_still_restore(data, tmp_path, restore_with):
    with _build(data[0]) as w:
        for _ in range(K):
            next(w)
        bare = w.loader.save_state_rank()
        delattr(bare, "shardcook_dataset")  # as Energon saved it then
        expected = _keys(next(w) for _ in range(M))
    torch.save({"dataloader": LoaderState(bare, _old_dataset_id(data[0]), 0)}, tmp_path / "c.pt")
    old = torch.load(tmp_path / "c.pt")["dataloader"]
    with _build(data[0]) as fresh:
        _restore_paths(fresh)[restore_with](old)
        assert _keys(next(fresh) for _ in range(M)) == expected
    foreign = LoaderState(bare, "data split 'train' (index 000000000000)", 0)
    with (_build(data[0]) as other,
          pytest.raises(LoaderStateError, match=r"saved on data split 'train' \(index 0+\)")):
        _restore_paths(other)[restore_with](foreign)


def test_old_loader_state_keeps_the_name_old_checkpoints_hold(tmp_path):
    # checkpoints written before the class moved to energon/state.py name it in wrapper.py
    torch.save({"dataloader": LoaderState(None, "ds", 0)}, tmp_path / "c.pt")
    with zipfile.ZipFile(tmp_path / "c.pt") as z:
        pickled = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
    assert b"shardcook.energon.wrapper\nLoaderState\n" in pickled
    assert torch.load(tmp_path / "c.pt")["dataloader"] == LoaderState(None, "ds", 0)


def test_a_dataset_id_that_is_no_identity_is_refused_at_once():
    from shardcook.energon import MegatronDataloaderWrapper

    with pytest.raises(TypeError, match=re.escape("dataset_id must be what shardcook.energon.state."
                                                  "dataset_identity() returns, not a str")):
        MegatronDataloaderWrapper([1, 2], dataset_id="ds split 'train'")


@pytest.mark.parametrize("restore_with", PATHS)
def test_restoring_leaves_the_state_as_saved(data, restore_with):
    """Two loaders restored from one state object both read on where the saved one was."""
    state, expected = _saved(data[0])
    before = pickle.dumps(state)
    for _ in range(2):
        with _build(data[0]) as fresh:
            _restore_paths(fresh)[restore_with](state)
            assert _keys(next(fresh) for _ in range(M)) == expected
        assert pickle.dumps(state) == before


def _finalize_again(path):
    """`finalize --force` over the shards as they are; returns the old and new index.uuid."""
    uuid = path / ".nv-meta" / "index.uuid"
    old = uuid.read_text()
    shardcook.finalize(path, force=True)
    assert uuid.read_text() != old
    return old, uuid.read_text()


@pytest.mark.parametrize("restore_with", PATHS)
def test_a_state_restores_after_finalize_force_on_the_same_shards(data, tmp_path, restore_with):
    copy = tmp_path / "data"
    shutil.copytree(data[0], copy)
    state, expected = _saved(copy)
    _finalize_again(copy)
    with _build(copy) as fresh:
        _restore_paths(fresh)[restore_with](state)
        assert _keys(next(fresh) for _ in range(M)) == expected


def test_a_state_is_refused_once_the_shards_changed(data, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(data[0], copy)
    state, _ = _saved(copy)
    for name in ("000003.tar", "000003.tar.idx"):
        (copy / name).unlink()
    _finalize_again(copy)
    with (_build(copy) as fresh,
          pytest.raises(LoaderStateError, match=r"saved on data split 'train' \(index \w+\) but "
                        r"the loader reads data split 'train' \(index \w+\)")):
        fresh.restore_state(state)


def _uuid_digest(path) -> str:
    """The digest states saved before the identity left out index.uuid hold."""
    meta = path / ".nv-meta"
    counts = json.loads((meta / ".info.json").read_text())["shard_counts"]
    split = read_split_yaml(path)
    content = {"index_uuid": (meta / "index.uuid").read_text().strip(),
               "shard_counts": sorted(counts.items()),
               "split_parts": sorted(split.parts.items()), "exclude": sorted(split.exclude)}
    digest = hashlib.sha256(b"train\0" + json.dumps(content, sort_keys=True).encode())
    return digest.hexdigest()


def test_a_state_tagged_with_the_index_uuid_restores_until_the_next_finalize(data, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(data[0], copy)
    state, expected = _saved(copy)
    state.shardcook_dataset["digest"] = _uuid_digest(copy)
    with _build(copy) as fresh:
        fresh.restore_state(state)
        assert _keys(next(fresh) for _ in range(M)) == expected
    _finalize_again(copy)
    with _build(copy) as fresh, pytest.raises(LoaderStateError, match="restore it into a loader "
                                              "of the same dataset and split"):
        fresh.restore_state(state)


def _global_paths(w):
    """The restore paths, each given what a training loop stores for this rank or all ranks."""
    return {
        "wrapper.restore_state": lambda states: w.restore_state(states[0]),
        "wrapper.restore_state_rank": lambda states: w.restore_state_rank(states[0]),
        "loader.restore_state_rank": lambda states: w.loader.restore_state_rank(states[0]),
        "wrapper.restore_state_global": lambda states: w.restore_state_global(states),
        "loader.restore_state_global": lambda states: w.loader.restore_state_global(states),
    }


@pytest.mark.parametrize("restore_with", PATHS)
def test_a_state_of_another_data_parallel_size_is_refused_on_every_path(data, restore_with):
    """Two ranks saved, one restores: rank 1's position would be dropped without a word."""
    saved = [_saved(data[0], rank=r, world_size=2) for r in (0, 1)]
    states = [state for state, _ in saved]
    with (_build(data[0], rank=0, world_size=1) as one,
          pytest.raises(LoaderStateError, match=r"^This loader state was saved at data-parallel "
                        r"size 2 but the loader reads at data-parallel size 1; Energon cannot "
                        r"redistribute a loader state, so resume at data-parallel size 2")):
        _global_paths(one)[restore_with](states)
    with _build(data[0], rank=1, world_size=2) as two:  # teeth: the same size restores
        _global_paths(two)[restore_with](states if "global" in restore_with else states[1:])
        assert _keys(next(two) for _ in range(M)) == saved[1][1]
