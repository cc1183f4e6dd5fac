"""What `--config` may name: a YAML file whose mappings repeat no key; a folder, a FIFO, a device
or a duplicate key is one sentence and exit 2, before anything is written."""

from __future__ import annotations

import os

import pytest
from shardcook.config import load_yaml
from shardcook.errors import ConfigError

from tests.helpers.bounded import run_bounded
from tests.helpers.dataset import cli, one_error_line

TWO_IMAGE_SECTIONS = """\
source:
  input_dir: in
image:
  image_size: 64
output:
  output_dir: out
image:
  image_size: 512
"""


def test_a_duplicate_section_is_refused_naming_it_and_its_line(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(TWO_IMAGE_SECTIONS)
    with pytest.raises(ConfigError, match=r"duplicate key 'image' \(first at line 3\) at line 7"):
        load_yaml(config)
    r = cli("raw", "--config", config, "--print-config")
    assert r.code == 2 and "duplicate key 'image'" in one_error_line(r)


def test_a_duplicate_option_inside_a_section_is_refused(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("image:\n  image_size: 64\n  image_quality: 90\n  image_size: 32\n")
    with pytest.raises(ConfigError, match=r"duplicate key 'image_size'.* at line 4"):
        load_yaml(config)


def test_a_merge_key_may_be_overridden(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("source: &src {input_dir: a, max_samples: 3}\n"
                      "output: {output_dir: o}\nimage: {image_size: 64}\n")
    assert load_yaml(config)["source"] == {"input_dir": "a", "max_samples": 3}


@pytest.mark.parametrize("kind", ["folder", "fifo", "device"])
def test_a_config_that_is_not_a_regular_file_says_what_it_is(tmp_path, kind):
    path = {"folder": tmp_path, "device": "/dev/zero"}.get(kind, tmp_path / "fifo.yaml")
    if kind == "fifo":
        os.mkfifo(path)
    what = {"folder": "a folder", "fifo": "a FIFO", "device": "a device"}[kind]
    # in a bounded child: reading the FIFO would wait forever, /dev/zero until memory runs out
    r = run_bounded(f"from shardcook.cli import app; app(['raw', '--config', {str(path)!r}, "
                    "'--print-config'])")
    assert r.returncode == 2, r.stderr
    assert what in r.stderr and "does not exist" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error:"), r.stderr
