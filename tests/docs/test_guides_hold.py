"""What the README and the guides tell a newcomer holds: the install paragraph gives its size and
time and the CPU-only torch route, the same as INSTALL.md's; the demo's folder is ignored by git;
CHATML.md's MedPix command line runs on a dataset with MedPix's columns and splits; and
PRIMUS.md's `validate` row and its `--variable-size` sizes are what the commands do."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.helpers.dataset import cli
from tests.helpers.raw import encode, generated

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CPU_TORCH = re.compile(r"pip install torch --index-url (https?://[^\s`]+)")


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_the_install_says_its_size_and_time_and_the_cpu_route_as_install_md_does():
    readme, install = _text(ROOT / "README.md"), _text(DOCS / "INSTALL.md")
    for page in (readme, install):
        assert "a few minutes" not in page
    before_command = readme[:readme.index("```bash\npython3 -m venv .venv && . .venv/bin/activate "
                                          "&& pip install . && shardcook demo")].rstrip()
    paragraph = before_command[before_command.rindex("\n\n"):]  # the one above the command
    assert "12.5 minutes" in paragraph and "6.2 GB" in paragraph and "126 wheels" in paragraph
    assert set(CPU_TORCH.findall(readme)) == {"https://download.pytorch.org/whl/cpu"}
    assert set(CPU_TORCH.findall(install)) == set(CPU_TORCH.findall(readme))  # they agree


def test_git_ignores_the_folder_the_readme_demo_writes():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    r = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q",
                        "shardcook-demo/raw/000000.tar"], check=False)
    assert r.returncode == 0, "shardcook-demo/ is not in .gitignore"


def _command(page: Path, start: str) -> list[str]:
    """The words of the command line in `page` that starts with `start` (continuations
    joined, a trailing comment dropped)."""
    text = _text(page)
    line = text[text.index(start):].split("\n")
    joined = line[0]
    for more in line[1:]:
        if not joined.endswith("\\"):
            break
        joined = joined[:-1] + more
    return shlex.split(joined.partition("  #")[0])


def test_the_medpix_line_runs_on_medpixs_columns_and_splits(tmp_path):
    """MedPix (adishourya/MEDPIX-ClinQA, -ShortQA) has one split, train, and its image column is
    `image_id`."""
    import datasets

    n = 5
    features = datasets.Features({"image_id": datasets.Image(), "case_id": datasets.Value("string"),
                                  "question": datasets.Value("string"),
                                  "answer": datasets.Value("string"),
                                  "mode": datasets.Value("string")})
    rows = {"image_id": [{"bytes": encode(generated(i, (40, 56)), "png"), "path": None}
                         for i in range(n)],
            "case_id": [f"case{i}" for i in range(n)],
            "question": [f"What does scan {i} show?" for i in range(n)],
            "answer": [f"Finding {i}." for i in range(n)], "mode": ["CT"] * n}
    medpix = tmp_path / "medpix"
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows, features=features)}
                         ).save_to_disk(str(medpix))
    words = _command(DOCS / "CHATML.md", "shardcook chatml --hf-dataset ./medpix")
    out = tmp_path / "out"
    args = [str(medpix) if w == "./medpix" else str(out) if w == "out/" else w
            for w in words[1:]]
    r = cli(*args, "--quiet")
    assert r.code == 0, r.stdout + r.stderr
    recorded = json.loads((out / ".shardcook" / "manifest.json").read_text())
    assert recorded["num_samples"] == n  # every row, train (the val rows past them: none)


def test_primus_md_validate_row_and_variable_sizes_hold(tmp_path):
    from PIL import Image

    page = _text(DOCS / "PRIMUS.md")
    assert ("`python -m primus.backends.megatron.data.diffusion.preprocessing.validate /path "
            "--encoding raw` | `shardcook validate /path --encoding raw`") in page
    assert "1000x740 at `--max-size 512` is 512x368 here, 512x384 in Primus" in page
    src = tmp_path / "in"
    src.mkdir()
    Image.new("RGB", (1000, 740), (90, 120, 200)).save(src / "a.jpg")
    (src / "a.txt").write_text("a blue picture")
    out = tmp_path / "out"
    r = cli("data", "diffusion-raw", "--input-dir", src, "--output-dir", out, "--variable-size",
            "--max-size", "512", "--quiet")
    assert r.code == 0, r.stdout + r.stderr
    (shard,) = out.glob("*.tar")
    with tarfile.open(shard) as tar:
        meta = json.loads(tar.extractfile(next(m for m in tar if m.name.endswith("meta.json")))
                          .read())
    assert meta["size"] == [368, 512]  # [h, w]: floored to 16, where Primus rounds to 384
    r = cli("validate", out, "--encoding", "raw")
    assert r.code == 0 and "ok: the dataset is whole" in r.stdout, r.stdout + r.stderr
