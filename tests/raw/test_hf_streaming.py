"""`--hf-streaming` reads a Hugging Face dataset's parquet files a row group at a time: the shards
are byte for byte the ones a loaded (non-streaming) run writes, no Arrow cache file is written,
two torchrun ranks together write every row once, and a resumed run redoes only what is missing.
There is no hub here: the dataset is a local parquet folder, which `datasets` resolves the way it
resolves a hub repository's files."""

from __future__ import annotations

import hashlib
import sys

import pytest

from tests.helpers.dataset import cli, one_error_line
from tests.helpers.raw import encode, generated, report, run_cli, shard_hashes

ROWS = 11


@pytest.fixture(scope="module")
def parquet(tmp_path_factory):
    """Two parquet files of row groups of 3 and 2 rows; row 4 has no image."""
    import datasets

    root = tmp_path_factory.mktemp("hf_streaming")
    features = datasets.Features({"image": datasets.Image(), "caption": datasets.Value("string")})
    rows = {"image": [None if i == 4 else {"bytes": encode(generated(i), "png"), "path": None}
                      for i in range(ROWS)],
            "caption": [f"row {i}" for i in range(ROWS)]}
    ds = datasets.Dataset.from_dict(rows, features=features)
    (root / "set" / "data").mkdir(parents=True)
    ds.select(range(7)).to_parquet(str(root / "set/data/train-00000-of-00002.parquet"),
                                   batch_size=3)
    ds.select(range(7, ROWS)).to_parquet(str(root / "set/data/train-00001-of-00002.parquet"),
                                         batch_size=2)
    return root


def _args(parquet, out, *extra):
    return ["raw", "--source-type", "huggingface", "--hf-dataset", str(parquet / "set"),
            "--output-dir", str(out), "--shard-size", "4", "--image-size", "32", "--quiet", *extra]


@pytest.fixture(scope="module")
def loaded(parquet):
    """The non-streaming run: its output and its datasets cache."""
    out, home = parquet / "loaded", parquet / "loaded_home"
    run_cli(*_args(parquet, out), env_extra={"HF_HOME": str(home)})
    return out, home


def test_streaming_writes_the_loaded_shards_without_an_arrow_cache(parquet, loaded, tmp_path):
    ref, ref_home = loaded
    out, home = tmp_path / "out", tmp_path / "home"
    run_cli(*_args(parquet, out, "--hf-streaming"), env_extra={"HF_HOME": str(home)})
    assert len(shard_hashes(ref)) == 6  # 3 shards and their .tar.idx
    assert shard_hashes(out) == shard_hashes(ref)
    assert report(out)["skipped"] == report(ref)["skipped"]
    assert [s["reason"] for s in report(out)["skipped"]] == ["missing_image"]
    assert list(ref_home.rglob("*.arrow"))  # loading converts the dataset to Arrow files
    assert list(home.rglob("*.arrow")) == []  # streaming does not


def test_two_ranks_stream_every_row_once(parquet, loaded, tmp_path):
    ref, _ = loaded
    out = tmp_path / "out"
    torchrun = (sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc_per_node=2")
    run_cli(*_args(parquet, out, "--hf-streaming"), prefix=torchrun,
            env_extra={"HF_HOME": str(tmp_path / "home")})
    assert shard_hashes(out) == shard_hashes(ref)
    assert report(out)["world_size"] == 2


def test_a_resumed_streaming_run_redoes_only_the_missing_unit(parquet, loaded, tmp_path):
    ref, _ = loaded
    out = tmp_path / "out"
    args = _args(parquet, out, "--hf-streaming", "--no-finalize")
    run_cli(*args)
    (out / ".shardcook" / "progress" / "000001.json").unlink()  # as if killed in unit 1
    (out / "000001.tar").unlink()
    run_cli(*args)
    assert report(out)["units"] == {"total": 3, "resumed": 2, "this_run": 1}
    tars = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("*.tar"))}
    assert tars == {k: v for k, v in shard_hashes(ref).items() if k.endswith(".tar")}


@pytest.mark.parametrize(("args", "words"), [
    (["--input-dir", "{root}", "--hf-streaming"], "--hf-streaming reads a Hugging Face dataset"),
    (["--source-type", "huggingface", "--hf-dataset", "{root}/saved", "--hf-streaming"],
     "is not stored as parquet; drop --hf-streaming"),
    (["--source-type", "huggingface", "--hf-dataset", "{root}/set", "--hf-split", "test",
      "--hf-streaming"], "has no split 'test' (it has train)"),
])
def test_streaming_what_cannot_stream_is_one_sentence(parquet, tmp_path, args, words):
    import datasets

    if not (parquet / "saved").exists():
        datasets.Dataset.from_dict({"image": [b"x"], "caption": ["c"]}).save_to_disk(
            str(parquet / "saved"))
    out = tmp_path / "out"
    r = cli("raw", *[a.format(root=parquet) for a in args], "--output-dir", out,
            "--image-size", "32", "--quiet")
    line = one_error_line(r)
    assert r.code == 2 and words in line, line
    assert not out.exists()


def _samples_but_source(out):
    """Every sample's parts, meta.json without its `source` (which names the dataset)."""
    import json

    from shardcook import read_shard

    found = []
    for shard in sorted(out.glob("*.tar")):
        for key, parts in read_shard(shard):
            meta = json.loads(parts.pop("meta.json"))
            meta.pop("source")
            found.append((shard.name, key, dict(parts), meta))
    return found


def test_data_files_in_a_bucket_give_the_local_shards(parquet, loaded, s3_store, tmp_path):
    """`--hf-dataset parquet --hf-data-files msc://...`: parquet files in object storage, read
    through MSC's own fsspec filesystem, loaded and streamed, give the local folder's samples;
    an s3:// data file and a missing object are one sentence each."""
    for f in sorted((parquet / "set" / "data").glob("*.parquet")):
        s3_store.put(f"hf/data/{f.name}", f.read_bytes())
    ref, _ = loaded
    want = _samples_but_source(ref)
    assert len(want) == ROWS - 1
    files = s3_store.url("hf/data/train-*.parquet")
    for extra in ((), ("--hf-streaming",)):
        out = tmp_path / f"out{len(extra)}"
        run_cli("raw", "--source-type", "huggingface", "--hf-dataset", "parquet",
                "--hf-data-files", files, "--output-dir", str(out), "--shard-size", "4",
                "--image-size", "32", "--quiet", *extra,
                env_extra={"HF_HOME": str(tmp_path / f"home{len(extra)}")})
        assert _samples_but_source(out) == want
        assert [s["reason"] for s in report(out)["skipped"]] == ["missing_image"]
    for bad, words in ((s3_store.s3_url("hf/data/train-00000-of-00002.parquet"),
                        "read through an MSC profile"),
                       (s3_store.url("hf/data/nope.parquet"), "does not exist")):
        r = cli("raw", "--source-type", "huggingface", "--hf-dataset", "parquet",
                "--hf-data-files", bad, "--output-dir", str(tmp_path / "bad"), "--hf-streaming")
        assert r.code == 2 and words in one_error_line(r)
        assert not (tmp_path / "bad").exists()
