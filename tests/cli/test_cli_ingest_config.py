"""`ingest --config`'s `empty_encodings.output_subdir` names one plain folder inside the output
folder for the empty prompt's encodings: one inside shardcook's or Energon's own folders, or one
that climbs out, is refused in one sentence before anything is written; an unknown key or a
section that is no mapping is refused in the same sentence as in every other --config."""

from __future__ import annotations

import pytest

from tests.helpers.dataset import cli, one_error_line


@pytest.mark.parametrize("subdir", ["train/.shardcook", ".shardcook", ".nv-meta",
                                    "empty/.nv-meta/x", ".", "a/../b", "a//b", "/abs/empty",
                                    ""])
def test_an_empty_encodings_folder_outside_the_output_or_in_its_records_is_refused(
        tmp_path, subdir):
    arrow = tmp_path / "part.arrow"
    arrow.write_bytes(b"")
    config = tmp_path / "ingest.yaml"
    config.write_text("empty_encodings:\n  manifest_url: http://127.0.0.1:9/empty.uri\n"
                      f"  output_subdir: '{subdir}'\n")
    out = tmp_path / "out"
    r = cli("ingest", "--config", config, "--output-dir", out, "--split-part", "train", arrow)
    assert r.code == 2
    assert one_error_line(r) == (
        f"error: empty_encodings.output_subdir {subdir!r} must be one plain folder name inside "
        "the output folder, not hidden nor a split's: more than the lowercase letters a split "
        "is named by (empty_encodings, not empty)")
    assert not out.exists()


@pytest.mark.parametrize(("command", "text", "sentence"), [
    ("ingest", "pipeline:\n  max_worker: 2\n",
     "Unknown config key `pipeline.max_worker` in {p!r}; `pipeline` takes max_workers, "
     "prefetch_depth, max_files, stall_timeout_s."),
    ("raw", "output:\n  shard_sise: 2\n", "Unknown config key `output.shard_sise` in {p!r}; "),
    ("ingest", "pipelines: {}\n", "Unknown config section `pipelines` in {p!r}; the sections "
     "are datasets, empty_encodings, output, pipeline."),
    ("raw", "imagez: {}\n", "Unknown config section `imagez` in {p!r}; the sections are "),
    ("ingest", "pipeline: [1]\n", "Config section `pipeline` must be a mapping of options."),
    ("raw", "image: [1]\n", "Config section `image` must be a mapping of options."),
    ("ingest", "- 1\n", "Config file {p!r} must be a mapping of sections, not a list or value."),
    ("raw", "- 1\n", "Config file {p!r} must be a mapping of sections, not a list or value."),
])
def test_ingest_and_raw_configs_are_refused_in_the_same_sentences(tmp_path, command, text,
                                                                   sentence):
    """One reader refuses every --config: ingest's Primus-style keys as raw's sections."""
    config = tmp_path / "c.yaml"
    config.write_text(text)
    out = tmp_path / "out"
    inputs = [tmp_path] if command == "ingest" else ["--input-dir", tmp_path]
    r = cli(command, "--config", config, "--output-dir", out, *inputs)
    assert r.code == 2
    assert one_error_line(r).startswith("error: " + sentence.format(p=str(config)))
    assert not out.exists()
