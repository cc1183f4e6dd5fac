"""Bad metadata and bad arguments for finalize, validate, info and preview: each case gives a true
verdict, or one sentence naming the file (exit 1 for a damaged dataset, 2 for bad usage), never a
traceback; `finalize --force` repairs any damaged `.nv-meta`; what finalize was asked is kept."""

from __future__ import annotations

import json
import shutil
import sqlite3
import time

import pytest
import yaml
from shardcook import ConfigError, ShardWriter, finalize, validate
from shardcook.braces import MAX_EXPANSIONS, expand_braces
from shardcook.layouts import LAYOUTS

from tests.helpers.chatml import small_chatml_run
from tests.helpers.dataset import (
    cli,
    one_error_line,
    preencoded_parts,
    pth,
    raw_parts,
    write_dataset,
)
from tests.helpers.raw import make_folder, run_cli

META = ".nv-meta"
#: The known encodings, as the refusals list them.
KNOWN = ", ".join(sorted(layout.encoding for layout in LAYOUTS.values()))


@pytest.fixture
def ds(tmp_path):
    return write_dataset(tmp_path / "ds", split=(0.5, 0.5, 0))


# ---- damaged metadata: one line naming the file, in every command ------------------------------

DAMAGE = {
    "dataset.yaml a list": (f"{META}/dataset.yaml", "- 1\n- 2\n", "must be a mapping, not a list"),
    "dataset.yaml subflavors a list": (f"{META}/dataset.yaml",
                                       "__class__: CrudeWebdataset\nsubflavors: [1, 2]\n",
                                       "'subflavors' must be a mapping"),
    "dataset.yaml not YAML": (f"{META}/dataset.yaml", "a: [", "is not valid YAML"),
    "split.yaml split_parts 5": (f"{META}/split.yaml", "split_parts: 5\n",
                                 "'split_parts' must map split names"),
    "split.yaml a list": (f"{META}/split.yaml", "[1]\n", "must be a mapping, not a list"),
    "split.yaml huge brace": (f"{META}/split.yaml", "split_parts:\n  train: ['{0..99999999}']\n",
                              "expands to 100,000,000 names"),
    "info counts strings": (f"{META}/.info.json", '{"shard_counts": {"000000.tar": "2"}}',
                            "the count of 000000.tar must be a whole number"),
    "info counts negative": (f"{META}/.info.json", '{"shard_counts": {"000000.tar": -1}}',
                             "must be a whole number from 0"),
    "info counts 1e20": (f"{META}/.info.json", '{"shard_counts": {"000000.tar": 1e20}}',
                         "must be a whole number from 0"),
    "info counts huge": (f"{META}/.info.json",
                         '{"shard_counts": {"000000.tar": 99999999999999999999}}',
                         "must be a whole number from 0"),
    "info counts a list": (f"{META}/.info.json", '{"shard_counts": [1, 2]}',
                           "'shard_counts' must map shard names"),
    "info not JSON": (f"{META}/.info.json", "\x00\xff garbage", "is not"),
}


def damage(d, name):
    rel, text, _ = DAMAGE[name]
    (d / rel).write_text(text)
    return DAMAGE[name][2]


@pytest.mark.parametrize("name", list(DAMAGE))
def test_damaged_metadata_is_one_line_in_every_command(ds, tmp_path, name):
    needle = damage(ds, name)
    rel = DAMAGE[name][0]
    r = cli("validate", ds)
    assert r.code == 1 and r.escaped is None
    problems = [line for line in r.stdout.splitlines() if line.startswith("problem:")]
    assert len(problems) == 1 and needle in problems[0] and rel in problems[0], r.stdout
    report = json.loads(cli("validate", ds, "--json").stdout)
    assert not report["ok"] and needle in report["problems"][0]
    for args in (("info", ds), ("info", ds, "--json")):
        r = cli(*args)
        assert r.code == 2 and needle in one_error_line(r) and rel in one_error_line(r)
    if rel.endswith("dataset.yaml"):  # preview reads only dataset.yaml (and the manifest)
        r = cli("preview", ds, "--out", tmp_path / "p.png")
        assert r.code == 2 and needle in one_error_line(r)
    # the repair validate suggests works
    assert "finalize --force" in problems[0]
    r = cli("finalize", "--force", ds, "--encoding", "raw")
    assert r.code == 0, r.stdout + r.stderr
    assert validate(ds).ok


@pytest.mark.parametrize(("text", "why"), [
    ('["not", "a", "manifest"]', " must be a JSON object, not a list"),
    ('{"shards": ', " is not valid JSON (Expecting value: line 1 column 12 (char 11))"),
    ('{"shards": [1]}', ": 'shards' must map shard names to sample counts"),
])
def test_a_damaged_manifest_is_one_problem_with_the_repair_that_works(ds, text, why):
    manifest = ds / ".shardcook" / "manifest.json"
    manifest.write_text(text)
    assert validate(ds).problems == [
        f"{manifest}{why}; restore it from a copy, or delete it: it records the run that wrote "
        "the dataset (its options and shard counts), which Energon does not read"]
    manifest.unlink()
    assert validate(ds).ok


def test_nv_meta_replaced_by_a_file(ds):
    shutil.rmtree(ds / META)
    (ds / META).write_text("oops")
    assert validate(ds).problems == [
        f"{ds}/{META} is a file, not a folder; run `shardcook finalize --force {ds}` to rebuild it"]
    r = cli("info", ds)
    assert r.code == 2 and "is a file, not a folder" in one_error_line(r)
    r = cli("finalize", ds)
    assert r.code == 2 and "is a file, not a folder" in one_error_line(r)
    r = cli("finalize", "--force", ds, "--encoding", "raw")
    assert r.code == 0 and validate(ds).ok


@pytest.mark.parametrize("what", ["missing", "garbage", "a folder"])
def test_finalize_force_repairs_each_metadata_file(ds, what):
    for name in ("dataset.yaml", "split.yaml", ".info.json", "index.sqlite", "index.uuid"):
        path = ds / META / name
        path.unlink()
        if what == "garbage":
            path.write_bytes(b"\x00\x01garbage\xff")
        elif what == "a folder":
            path.mkdir()
    assert not validate(ds).ok
    finalize(ds, force=True)  # the encoding: as finalize.json recorded it
    assert validate(ds).ok
    assert yaml.safe_load((ds / META / "dataset.yaml").read_text())["subflavors"] == {
        "encoding": "raw"}


def test_validate_rejects_an_unknown_encoding(ds):
    r = cli("validate", ds, "--encoding", "bogus")
    assert r.code == 2
    assert one_error_line(r) == (
        f"error: --encoding names the unknown encoding 'bogus'; use one of {KNOWN}")
    r = cli("finalize", "--force", ds, "--encoding", "bogus")
    assert r.code == 2 and "--encoding names the unknown encoding 'bogus'" in one_error_line(r)
    content = yaml.safe_load((ds / META / "dataset.yaml").read_text())
    content["subflavors"]["encoding"] = "bogus"
    (ds / META / "dataset.yaml").write_text(yaml.safe_dump(content))
    assert validate(ds).problems == [
        f"{META}/dataset.yaml names the unknown encoding 'bogus'; use one of {KNOWN}"]


# ---- index.sqlite ------------------------------------------------------------------------------


def test_garbage_or_missing_sqlite_is_a_problem(ds):
    sqlite_path = ds / META / "index.sqlite"
    sqlite_path.write_bytes(b"garbage" * 100)
    assert any("index.sqlite is not a readable SQLite index" in p for p in validate(ds).problems)
    sqlite_path.unlink()
    assert validate(ds).problems == [
        f"{META}/index.sqlite is missing; run `shardcook finalize --force {ds}`"]


def test_sqlite_rows_must_match_info_json(ds):
    with sqlite3.connect(ds / META / "index.sqlite") as db:
        db.execute("DELETE FROM samples WHERE tar_file_id = 1 AND sample_index = 0")
    assert validate(ds).problems == [
        (f"{META}/index.sqlite holds 1 samples of 000001.tar but .info.json says 2; run "
        f"`shardcook finalize --force {ds}`")]
    with sqlite3.connect(ds / META / "index.sqlite") as db:
        db.execute("DROP TABLE sample_parts")
    assert validate(ds).problems == [
        (f"{META}/index.sqlite lacks Energon's table(s) sample_parts; run "
        f"`shardcook finalize --force {ds}`")]


def test_no_sqlite_recorded_is_not_a_problem(tmp_path):
    d = write_dataset(tmp_path / "ds", sqlite=False)
    assert not (d / META / "index.sqlite").exists()
    assert json.loads((d / ".shardcook" / "finalize.json").read_text())["sqlite"] is False
    assert validate(d).ok


# ---- --deep: every part decoded ----------------------------------------------------------------


def bad_raw(how):
    def parts(i):
        p = raw_parts(i)
        if i == 3:
            if how == "jpg not an image":
                p["jpg"] = b"\xff\xd8 this is not a JPEG"
            elif how == "meta.json broken":
                p["meta.json"] = b'{"size": [1, '
            elif how == "txt not UTF-8":
                p["txt"] = b"caf\xe9"
        return p
    return parts


@pytest.mark.parametrize("how, expected", [
    ("jpg not an image", "000001.tar: sample 0000000003 part jpg is not a decodable image"),
    ("meta.json broken", "000001.tar: sample 0000000003 part meta.json is not valid JSON"),
    ("txt not UTF-8", "000001.tar: sample 0000000003 part txt is not UTF-8 text (byte 3)"),
])
def test_deep_decodes_every_raw_part(tmp_path, how, expected):
    d = write_dataset(tmp_path / "ds", bad_raw(how))  # one sample per split passes
    assert validate(d).ok
    problems = validate(d, deep=True).problems
    assert len(problems) == 1 and problems[0].startswith(expected), problems
    r = cli("validate", d, "--deep")
    assert r.code == 1 and f"problem: {expected}" in r.stdout


@pytest.mark.parametrize("how, expected", [
    ("caption not UTF-8", "part caption.txt is not UTF-8 text (byte 0)"),
    ("latent 2-D", "part latents.pth has shape [16, 4], not [C, H/8, W/8]"),
    ("latent wrong size", "part latents.pth is 4x5 but meta.json's size 32x32 needs 4x4"),
    ("mixed dtypes", "the tensor parts mix dtypes bfloat16, float32"),
    ("posterior of another shape", ("part logvar.pth has shape [16, 2, 2] but latents.pth has "
                                   "[16, 4, 4]")),
])
def test_deep_checks_preencoded_parts_and_shapes(tmp_path, how, expected):
    import torch

    def parts(i):
        p = preencoded_parts(i)
        if i == 1:
            if how == "caption not UTF-8":
                p["caption.txt"] = b"\xff\xfe"
            elif how == "latent 2-D":
                p["latents.pth"] = pth(torch.zeros(16, 4, dtype=torch.bfloat16))
            elif how == "latent wrong size":
                p["latents.pth"] = pth(torch.zeros(16, 4, 5, dtype=torch.bfloat16))
            elif how == "mixed dtypes":
                p["pooled_prompt_embeds.pth"] = pth(torch.zeros(24))
            elif how == "posterior of another shape":
                p["mean.pth"] = pth(torch.zeros(16, 4, 4))
                p["logvar.pth"] = pth(torch.zeros(16, 2, 2))
        return p

    d = write_dataset(tmp_path / "ds", parts, encoding="preencoded")
    assert validate(d, deep=True).problems == [f"000000.tar: sample 0000000001 {expected}"]


def test_deep_checks_tensor_shapes_against_the_manifest(tmp_path):
    d = write_dataset(tmp_path / "ds", preencoded_parts, encoding="preencoded")
    (d / ".shardcook" / "manifest.json").write_text(json.dumps(
        {"encoding": "preencoded", "latent_channels": 4, "t5_max_length": 8}))
    problems = validate(d, deep=True).problems
    assert len(problems) == 4 and all(
        p.endswith("part latents.pth has 16 channels but the manifest says 4") for p in problems)


def chatml_dataset(d, conversation: bytes, jpgs: bytes | None = None):
    import pickle

    from tests.helpers.raw import encode, generated

    with ShardWriter(d, shard_size=2, prefix="train-shard-") as w:
        for i in range(2):
            parts = {"conversation.json": conversation if i == 1 else b"[]"}
            if jpgs is not None and i == 1:
                parts["jpgs"] = jpgs
            else:
                parts["jpgs"] = pickle.dumps([encode(generated(i, (16, 16)))])
            w.write(f"train-{i:06d}", parts)
    fields = {"imgs": "jpgs", "conversation": "conversation.json"}
    finalize(d, encoding="chatml", split_parts={"train": "train-shard-.*"}, field_map=fields,
             sample_type="megatron.bridge.data.energon.task_encoder_utils:ChatMLWebdataset",
             subflavors={}, validate=False)
    return d


def test_deep_checks_chatml_conversation_and_image_list(tmp_path):
    import pickle

    d = chatml_dataset(tmp_path / "a", b"[{broken")
    assert validate(d, deep=True).problems == [
        ("train-shard-000000.tar: sample train-000001 part conversation.json is not valid JSON "
        "(Expecting property name enclosed in double quotes: line 1 column 3 (char 2))")]
    d = chatml_dataset(tmp_path / "b", b"[]", pickle.dumps([b"not an image"]))
    problems = validate(d, deep=True).problems
    assert len(problems) == 1 and problems[0].startswith(
        "train-shard-000000.tar: sample train-000001 image 0 of part jpgs is not a decodable image")
    d = chatml_dataset(tmp_path / "c", b"[]", pickle.dumps({"a": 1}))
    assert validate(d, deep=True).problems == [
        "train-shard-000000.tar: sample train-000001 part jpgs: "
        "the jpgs part is not a list of bytes"]


# ---- duplicates --------------------------------------------------------------------------------


def test_a_sample_holding_a_part_twice_is_a_problem(tmp_path):
    from tests.helpers.shards import tarfile_shard

    d = tmp_path / "ds"
    members = []
    for i in range(2):
        p = raw_parts(i)
        members += [(f"{i:010d}.{name}", data) for name, data in p.items()]
    members.insert(1, ("0000000000.jpg", raw_parts(5)["jpg"]))
    tarfile_shard(d / "000000.tar", members)
    finalize(d, encoding="raw", validate=False)
    assert validate(d).problems == [
        "000000.tar: sample #0 holds the part jpg twice; Energon keeps only one of them"]
    finalize(d, force=True, sqlite=False, validate=False)  # without index.sqlite: --deep finds it
    assert validate(d).ok
    assert validate(d, deep=True).problems == [
        "000000.tar: sample 0000000000 holds the part jpg twice; Energon keeps only one of them"]


def test_a_shard_in_two_split_parts_is_a_warning(tmp_path):
    # finalize refuses such splits; `energon prepare` (interactive) can write them
    d = write_dataset(tmp_path / "ds")
    split_yaml = d / META / "split.yaml"
    split_yaml.write_text(split_yaml.read_text().replace("  val: []", "  val:\n  - 000001.tar"))
    report = validate(d)
    assert report.ok and report.warnings == [
        "shard 000001.tar is in both the train and the val split; its samples are read by both"]


# ---- what finalize was asked is recorded and kept ----------------------------------------------


def test_exclusions_and_split_are_recorded_as_lists_and_kept(tmp_path):
    d = tmp_path / "ds"
    write_dataset(d, n_shards=3, split="0.5,0.5,0", exclude=["000001"])
    record = json.loads((d / ".shardcook" / "finalize.json").read_text())
    assert record["exclude"] == ["000001"] and record["split"] == [0.5, 0.5, 0.0]
    assert yaml.safe_load((d / META / "split.yaml").read_text())["exclude"] == ["000001.tar"]
    before = (d / META / "split.yaml").read_text()
    r = cli("finalize", "--force", d)  # no arguments: keeps the exclusion and the split
    assert r.code == 0, r.stderr
    assert (d / META / "split.yaml").read_text() == before
    assert "000001.tar" not in json.loads((d / META / ".info.json").read_text())["shard_counts"]
    # losing .shardcook/: split.yaml still knows, so validate gives no undoing advice ...
    shutil.rmtree(d / ".shardcook")
    report = validate(d)
    assert report.ok, report.problems
    # ... and a re-finalize still keeps both (split.yaml cannot tell an empty split was asked)
    assert cli("finalize", "--force", d).code == 0
    after = yaml.safe_load((d / META / "split.yaml").read_text())
    assert after == {"split_parts": {"train": ["000000.tar"], "val": ["000002.tar"]},
                     "exclude": ["000001.tar"]}


def test_a_damaged_finalize_record_falls_back_to_split_yaml(tmp_path):
    d = write_dataset(tmp_path / "ds", n_shards=3, exclude=["000001"])
    (d / ".shardcook" / "finalize.json").write_text("[1, 2]")
    assert validate(d).problems == [
        f"{d}/.shardcook/finalize.json must be a JSON object, not a list"]
    r = cli("finalize", "--force", d)
    assert r.code == 0, r.stderr
    assert list(json.loads((d / META / ".info.json").read_text())["shard_counts"]) == [
        "000000.tar", "000002.tar"]
    assert validate(d).ok


def test_refinalizing_chatml_without_split_parts_keeps_val_in_val(tmp_path):
    out = small_chatml_run(tmp_path)
    before = yaml.safe_load((out / META / "split.yaml").read_text())["split_parts"]
    assert before["val"], before
    r = cli("finalize", "--force", out)
    assert r.code == 0, r.stderr
    assert yaml.safe_load((out / META / "split.yaml").read_text())["split_parts"] == before


def test_finalize_without_any_record_of_the_encoding_asks_for_it(ds):
    shutil.rmtree(ds / META)
    shutil.rmtree(ds / ".shardcook", ignore_errors=True)
    for idx in ds.glob("*.idx"):
        idx.unlink()
    r = cli("finalize", ds)
    assert r.code == 2
    assert one_error_line(r) == (
        f"error: {ds} has no dataset.yaml or manifest naming its encoding, and its samples look "
        "like the raw layout; pass --encoding raw (or encoding=) to say which")
    assert not (ds / META).exists() and not list(ds.glob("*.idx"))
    assert cli("finalize", ds, "--encoding", "raw").code == 0
    assert yaml.safe_load((ds / META / "dataset.yaml").read_text())["subflavors"] == {
        "encoding": "raw"}


# ---- refusals before anything is written -------------------------------------------------------


def nothing_written(d):
    return not list(d.glob("*.idx")) and not (d / META).exists()


def test_a_folder_named_like_a_shard_is_refused(tmp_path):
    d = tmp_path / "ds"
    with ShardWriter(d, shard_size=2) as w:
        w.write("0000000000", raw_parts(0))
    (d / "x.tar").mkdir()
    r = cli("finalize", d, "--encoding", "raw")
    assert r.code == 2 and one_error_line(r) == (
        f"error: {d / 'x.tar'} is a folder, not a shard, yet its name makes Energon read it as "
        "one; remove it or rename it (or leave it out with --exclude)")
    assert nothing_written(d)
    assert cli("finalize", d, "--encoding", "raw", "--exclude", "^x").code == 0


def test_a_shard_name_with_braces_is_refused(tmp_path):
    d = tmp_path / "ds"
    with ShardWriter(d, shard_size=2) as w:
        w.write("0000000000", raw_parts(0))
    (d / "000000.tar").rename(d / "c{1,2}.tar")
    r = cli("finalize", d, "--encoding", "raw")
    assert r.code == 2 and "shard 'c{1,2}.tar' has a brace" in one_error_line(r)
    assert nothing_written(d)


def test_exclude_as_a_string_is_a_config_error(tmp_path):
    d = tmp_path / "ds"
    with ShardWriter(d, shard_size=2) as w:
        w.write("0000000000", raw_parts(0))
    with pytest.raises(ConfigError, match=r"exclude must be a list of patterns, not '000001'"):
        finalize(d, encoding="raw", exclude="000001")
    assert nothing_written(d)


BAD_SPLITS = ["0,1,0", "0,0,1", "inf,0,0", "1e400,0,0", "1,-1,0", "0,0,0", "nan,1,1"]


@pytest.mark.parametrize("split", BAD_SPLITS)
def test_bad_split_is_one_sentence_in_finalize(tmp_path, split):
    d = tmp_path / "ds"
    with ShardWriter(d, shard_size=1) as w:
        for i in range(3):
            w.write(f"{i:010d}", raw_parts(i))
    r = cli("finalize", d, "--encoding", "raw", "--split", split)
    assert r.code == 2 and one_error_line(r).startswith(f"error: invalid split '{split}'")
    assert nothing_written(d)


@pytest.mark.parametrize("split", ["0,1,0", "inf,0,0", "1e400,0,0"])
def test_bad_split_is_one_sentence_in_raw(tmp_path, split):
    make_folder(tmp_path / "in", 2)
    out = tmp_path / "out"
    r = run_cli("raw", "--input-dir", str(tmp_path / "in"), "--output-dir", str(out),
                "--split", split, check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith("error: --split: invalid split")
    assert not out.exists()


def test_huge_brace_expansion_is_refused_at_once(tmp_path):
    d = tmp_path / "ds"
    with ShardWriter(d, shard_size=2) as w:
        w.write("0000000000", raw_parts(0))
    start = time.perf_counter()
    r = cli("finalize", d, "--encoding", "raw", "--split-parts", "train:{0..99999999}")
    assert time.perf_counter() - start < 20
    assert r.code == 2 and one_error_line(r) == (
        "error: split pattern '{0..99999999}': the pattern '{0..99999999}' expands to "
        "100,000,000 names, more than the 10,000 allowed; use a regular expression or a shorter "
        "range")
    assert nothing_written(d)


def test_brace_expansion_limit_and_errors():
    assert len(expand_braces(f"{{1..{MAX_EXPANSIONS}}}")) == MAX_EXPANSIONS
    with pytest.raises(ConfigError, match="expands to 10,001 names"):
        expand_braces(f"{{0..{MAX_EXPANSIONS}}}")
    with pytest.raises(ConfigError, match=r"expands to 10,000,000 names"):
        expand_braces("{0..99}{0..99}{a..j}{0..9}{0..9}")
    with pytest.raises(ConfigError, match="cannot be brace-expanded"):
        expand_braces("wds/{a,b.tar")
    assert expand_braces("wds/{a,b}-{0..1}.tar") == [
        "wds/a-0.tar", "wds/a-1.tar", "wds/b-0.tar", "wds/b-1.tar"]
