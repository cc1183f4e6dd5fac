"""Option values that cannot work end before any work with one sentence and exit 2 (nothing
written); --workers beyond the machine is capped with one line."""

from __future__ import annotations

import io
import tarfile

import pytest

from tests.helpers.raw import encode, generated, make_folder, report, run_cli


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("bounds")
    src = make_folder(root / "in", 3, photos=0)
    wds = root / "wds"
    wds.mkdir()
    for name in ("a", "b"):
        with tarfile.open(wds / f"{name}.tar", "w") as tar:
            for part, data in (("jpg", encode(generated(1), "jpg")), ("txt", b"a caption")):
                info = tarfile.TarInfo(f"{name}0.{part}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return root, src, wds


def _expect_exit_2(args: list[str], message: str, out) -> None:
    r = run_cli(*args, check=False)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert message in r.stderr, r.stderr
    assert not out.exists()


@pytest.mark.parametrize("extra, message", [
    (["--image-size", "100000"], "--image-size must be at most 16383"),
    (["--max-size", "20000", "--resize-mode", "variable"], "--max-size must be at most 16383"),
    (["--workers", "0"], "--workers must be at least 1"),
])
def test_raw_bounds(tmp_path, inputs, extra, message):
    _, src, _ = inputs
    out = tmp_path / "out"
    _expect_exit_2(["raw", "--input-dir", str(src), "--output-dir", str(out), *extra], message,
                   out)


def test_input_dir_naming_a_file(tmp_path, inputs):
    _, src, _ = inputs
    photo = next((src / "images").iterdir())
    out = tmp_path / "out"
    _expect_exit_2(["raw", "--input-dir", str(photo), "--output-dir", str(out)],
                   "is a file, not a folder", out)


@pytest.mark.parametrize("pattern, message", [
    ("{a,b", "cannot be brace-expanded"),
    ("{a,b,c}.tar", "names '{wds}/c.tar', which does not exist"),
    ("x{0..99999999}.tar", "more than the 10,000 allowed"),
])
def test_webdataset_patterns(tmp_path, inputs, pattern, message):
    _, _, wds = inputs
    out = tmp_path / "out"
    _expect_exit_2(["raw", "--source-type", "webdataset", "--input-path", f"{wds}/{pattern}",
                    "--output-dir", str(out)], message.format(wds=wds), out)


def test_webdataset_brace_pattern_with_every_tar_present(tmp_path, inputs):
    _, _, wds = inputs
    out = tmp_path / "out"
    run_cli("raw", "--source-type", "webdataset", "--input-path", f"{wds}/{{a,b}}.tar",
            "--output-dir", str(out), "--image-size", "32", "--quiet")
    assert report(out)["num_written"] == 2


def test_workers_are_capped_with_one_line(tmp_path, inputs):
    import os

    _, src, _ = inputs
    out = tmp_path / "out"
    r = run_cli("raw", "--input-dir", str(src), "--output-dir", str(out), "--workers", "5000",
                "--image-size", "32", "--quiet")
    limit = 4 * (os.cpu_count() or 1)
    assert f"--workers 5000 is more than 4 per core; using {limit} threads." in r.stderr
    assert report(out)["num_written"] == 3


@pytest.mark.parametrize("extra, message", [
    (["--device", "tpu:0"], "--device must be cpu, cuda or cuda:N, not 'tpu:0'"),
    (["--device", "cuda:x"], "--device must be cpu, cuda or cuda:N, not 'cuda:x'"),
    (["--t5-max-length", "100000"], "--t5-max-length must be between 1 and 512"),
])
def test_encode_bounds(tmp_path, inputs, extra, message):
    _, src, _ = inputs
    out = tmp_path / "out"
    _expect_exit_2(["encode", "--input-dir", str(src), "--output-dir", str(out),
                    "--model-path", str(tmp_path / "no-model"), "--image-size", "32", *extra],
                   message, out)


@pytest.mark.parametrize("name, message", [
    ("sheet.jpg", "must name a .png file"),
    ("missing/sheet.png", "does not exist"),
    ("folder.png", "is a folder"),
])
def test_preview_out(tmp_path, inputs, name, message):
    _, src, _ = inputs
    ds = tmp_path / "ds"
    run_cli("raw", "--input-dir", str(src), "--output-dir", str(ds), "--image-size", "32",
            "--quiet")
    (tmp_path / "folder.png").mkdir()
    target = tmp_path / name
    r = run_cli("preview", str(ds), "--out", str(target), check=False)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "missing").exists() and not (tmp_path / "sheet.jpg").exists()
