"""Resume: SIGKILL mid-run then the same command gives byte-identical shards; a different config
is refused (naming the options) unless --overwrite."""

from __future__ import annotations

import os

import numpy as np

from tests.helpers.raw import encode, killed_after, photo, report, run_cli, shard_hashes

UNITS = 20


def _big_inputs(root):
    """40 real photos (about 0.3-2 MP, flipped and rotated variants), captions next to them."""
    root.mkdir()
    for i in range(2 * UNITS):
        arr = photo(i)
        if i % 3 == 1:
            arr = np.ascontiguousarray(np.rot90(arr))
        if arr.shape[0] * arr.shape[1] < 600_000:
            arr = np.kron(arr, np.ones((2, 2, 1), np.uint8))
        (root / f"{i:03d}.jpg").write_bytes(encode(arr, "jpg"))
        (root / f"{i:03d}.txt").write_text(f"photo {i}")
    return root


def _args(src, out, *extra):
    # no finalize: these tests are about the shards (finalize is covered by the other tests)
    return ["raw", "--input-dir", str(src), "--output-dir", str(out), "--shard-size", "2",
            "--image-size", "256", "--workers", "1", "--quiet", "--no-finalize", *extra]


def test_sigkill_then_resume_is_byte_identical(tmp_path):
    src = _big_inputs(tmp_path / "in")
    ref, out = tmp_path / "ref", tmp_path / "out"
    run_cli(*_args(src, ref))
    assert len(list(ref.glob("*.tar"))) == UNITS

    done = killed_after(_args(src, out), out, 3)
    assert 3 <= len(done) < UNITS, f"killed after {len(done)} of {UNITS} units"
    assert not (out / ".nv-meta").exists()
    # every shard with a final name is complete; simulate the worst moment for one unit too:
    # its shard was renamed but its marker never written
    done[-1].unlink()

    r = run_cli(*_args(src, out))
    assert r.returncode == 0
    rep = report(out)
    assert rep["units"]["resumed"] == len(done) - 1
    assert rep["units"]["this_run"] == UNITS - len(done) + 1
    assert rep["num_written"] == 2 * UNITS
    assert shard_hashes(out) == shard_hashes(ref)
    assert not list((out / ".shardcook" / "tmp").iterdir())

    # running again finds everything done and changes nothing
    run_cli(*_args(src, out))
    assert report(out)["units"] == {"total": UNITS, "resumed": UNITS, "this_run": 0}
    assert shard_hashes(out) == shard_hashes(ref)


def test_different_config_is_refused_unless_overwrite(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for i in range(5):
        (src / f"{i}.jpg").write_bytes(encode(photo(i), "jpg"))
        (src / f"{i}.txt").write_text(f"c{i}")
    out = tmp_path / "out"
    run_cli(*_args(src, out))
    before = shard_hashes(out)

    r = run_cli(*_args(src, out, "--image-quality", "70", "--image-size", "128"), check=False)
    assert r.returncode == 2
    assert "image_size: 256 -> 128" in r.stderr and "image_quality: 95 -> 70" in r.stderr
    assert "--overwrite" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert shard_hashes(out) == before

    # runtime-only options (workers, quiet, finalize) do not count as a different config
    run_cli(*_args(src, out, "--workers", "2"))
    assert report(out)["units"]["resumed"] == 3

    # a changed input set is a different run too
    (src / "5.jpg").write_bytes(encode(photo(5), "jpg"))
    (src / "5.txt").write_text("c5")
    r = run_cli(*_args(src, out), check=False)
    assert r.returncode == 2 and "number of inputs: 5 -> 6" in r.stderr

    run_cli(*_args(src, out, "--image-quality", "70", "--image-size", "128", "--overwrite"))
    after = shard_hashes(out)
    assert set(after) == {f"00000{i}.tar" for i in range(3)}
    assert after["000000.tar"] != before["000000.tar"]
    assert report(out)["units"]["resumed"] == 0
    assert os.path.isfile(out / ".shardcook" / "manifest.json")
