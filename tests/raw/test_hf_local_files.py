"""Local Hugging Face inputs that do not exist: a missing --hf-data-files entry or --hf-dataset
folder is named in one sentence (exit 2, nothing written), never ignored or taken for a hub id."""

from __future__ import annotations

import pytest

from tests.helpers.dataset import cli, one_error_line
from tests.helpers.raw import encode, generated


@pytest.fixture(scope="module")
def parquet(tmp_path_factory):
    import datasets

    root = tmp_path_factory.mktemp("hf_local")
    data = datasets.Dataset.from_dict({"image": [encode(generated(i)) for i in range(2)],
                                       "caption": ["a", "b"]})
    data.to_parquet(str(root / "d.parquet"))
    data.save_to_disk(str(root / "saved"))
    return root


@pytest.mark.parametrize(("args", "needle"), [
    (["--hf-dataset", "{root}/d.parquet", "--hf-data-files", "nonexist.parquet"],
     "is a data file itself"),
    (["--hf-dataset", "parquet", "--hf-data-files", "{root}/nonexist.parquet"],
     "--hf-data-files '{root}/nonexist.parquet' does not exist"),
    (["--hf-dataset", "{root}/saved", "--hf-data-files", "nonexist.arrow"],
     "--hf-data-files 'nonexist.arrow' does not exist in '{root}/saved'"),
    (["--hf-dataset", "./missing_folder"], "--hf-dataset './missing_folder' does not exist"),
    (["--hf-dataset", "{root}/missing/folder"], "does not exist"),
])
def test_a_missing_local_input_is_named(parquet, tmp_path, args, needle):
    out = tmp_path / "out"
    args = [a.format(root=parquet) for a in args]
    r = cli("raw", "--source-type", "huggingface", *args, "--output-dir", out,
            "--image-size", "32", "--quiet")
    line = one_error_line(r)
    assert r.code == 2 and needle.format(root=parquet) in line, line
    assert not out.exists()


def test_existing_local_data_files_are_read(parquet, tmp_path):
    out = tmp_path / "out"
    r = cli("raw", "--source-type", "huggingface", "--hf-dataset", "parquet", "--hf-data-files",
            parquet / "d.parquet", "--output-dir", out, "--image-size", "32", "--quiet")
    assert r.code == 0, r.stderr
    assert (out / ".nv-meta" / "split.yaml").is_file()
