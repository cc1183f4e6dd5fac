"""What the report page says (read from its HTML, no browser): the latent check against the
layout's normalisation, duplicates, single values, a dataset in a bucket, `--report-html` after a
run, where `report` writes its page (into the dataset, as runs do), and the command's
refusals."""

from __future__ import annotations

import json
import re

import pytest
import torch
from shardcook.htmlreport import make_report
from shardcook.layouts.mlperf import FLUX_SCALING_FACTOR, FLUX_SHIFT_FACTOR

from tests.helpers.dataset import cli, one_error_line, pth, raw_parts, write_dataset
from tests.helpers.raw import make_folder


def _counts(page: str) -> dict[str, int]:
    return {k: int(v.replace(",", "")) for k, v in
            re.findall(r'data-count="([^"]+)">([0-9,]+)<', page)}


def _latent_parts(mean: float, std: float):
    def parts(i: int) -> dict[str, bytes]:
        g = torch.Generator().manual_seed(i)
        latent = torch.randn(16, 8, 8, generator=g) * std + mean
        return {"latents.pth": pth(latent.to(torch.bfloat16)),
                "prompt_embeds.pth": pth(torch.zeros(8, 32, dtype=torch.bfloat16)),
                "pooled_prompt_embeds.pth": pth(torch.zeros(24, dtype=torch.bfloat16)),
                "caption.txt": f"caption {i}".encode()}
    return parts


@pytest.mark.parametrize(("mean", "std", "warning"), [
    (0.0, 1.0, None),  # scaled as the layout says
    # stored unscaled in a layout of scaled latents: the scale left out
    (FLUX_SHIFT_FACTOR, 1 / FLUX_SCALING_FACTOR, "scaling factor is probably left out"),
    (0.0, FLUX_SCALING_FACTOR, "scaling factor is probably left out or applied twice"),
    (1.5, 1.0, "shift factor is probably wrong"),
])
def test_latents_against_the_normalisation(tmp_path, mean, std, warning):
    d = write_dataset(tmp_path / "enc", _latent_parts(mean, std), n_shards=3, per_shard=4,
                      encoding="preencoded")
    page = make_report(d, samples=4)
    warnings = re.findall(r'data-warning="latents">warning: ([^<]*)<', page)
    assert "Latent statistics" in page
    if warning is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and warning in warnings[0]


def test_duplicates_skips_and_counts(tmp_path):
    def parts(i: int) -> dict[str, bytes]:
        return raw_parts(i % 5)  # every picture and caption twice or more

    d = write_dataset(tmp_path / "raw", parts, n_shards=3, per_shard=4)
    page = make_report(d, samples=6)
    counts = _counts(page)
    assert counts["duplicate-pictures"] == counts["duplicate-captions"] == 12 - 5
    assert (counts["samples"], counts["shards"], counts["compared"]) == (12, 3, 12)
    assert "data-scope" not in page  # every sample compared: nothing to qualify


def test_duplicates_among_the_samples_read_of_more(tmp_path):
    kinds = [raw_parts(i) for i in range(3)]
    d = write_dataset(tmp_path / "raw", lambda i: kinds[i % 3], n_shards=6, per_shard=100)
    page = make_report(d, samples=4)
    counts = _counts(page)
    assert (counts["samples"], counts["compared"]) == (600, 512)
    assert counts["duplicate-pictures"] == counts["duplicate-captions"] == 512 - 3
    assert "Among the" in page and "samples read of 600, compared with one another" in page
    scope = re.findall(r'<p data-scope="duplicates">(.*?)</p>', page)
    assert len(scope) == 1 and "512 of 600" in scope[0] and "never every sample" in scope[0]


def test_a_dataset_in_a_bucket(tmp_path, s3_store, caplog):
    d = write_dataset(tmp_path / "raw", n_shards=3, per_shard=4)
    s3_store.upload_folder(d, "data/raw")
    (tmp_path / "scratch").mkdir()
    caplog.set_level("INFO", logger="werkzeug")
    page = make_report(s3_store.url("data/raw"), samples=5, scratch_dir=tmp_path / "scratch")
    # moto's log: a shard is only ever read in ranges (206), never whole (200)
    shard_gets = re.findall(r'"GET \S+\.tar HTTP/1\.1" (\d+)', caplog.text)
    assert shard_gets and set(shard_gets) == {"206"}
    assert _counts(page) == _counts(make_report(d, samples=5))
    assert page.count('<details class="card">') == 5
    assert 'data-validate="whole"' in page
    assert list((tmp_path / "scratch").iterdir()) == []  # the view's scratch folder is gone


def test_report_html_after_a_raw_run(tmp_path):
    src = make_folder(tmp_path / "in", 6)
    out = tmp_path / "out"
    r = cli("raw", "--input-dir", src, "--output-dir", out, "--shard-size", "2",
            "--image-size", "32", "--report-html", "--quiet")
    assert r.code == 0, r.stderr
    page = (out / ".shardcook" / "report.html").read_text()
    report = json.loads((out / ".shardcook" / "report.json").read_text())
    assert _counts(page)["samples"] == report["num_written"] == 6
    assert "Time per stage" in page and "finalize" in page
    assert page.count('<details class="card">') == 6


def test_report_html_after_a_raw_run_into_a_bucket(tmp_path, s3_store):
    src = make_folder(tmp_path / "in", 4)
    r = cli("raw", "--input-dir", src, "--output-dir", s3_store.url("data/set"), "--shard-size",
            "2", "--image-size", "32", "--report-html", "--quiet", "--scratch-dir", tmp_path)
    assert r.code == 0, r.stderr
    page = s3_store.get("data/set/.shardcook/report.html").decode()
    assert _counts(page)["samples"] == 4 and 'data-validate="whole"' in page


def test_report_writes_into_the_dataset_where_runs_do(tmp_path, monkeypatch):
    d = write_dataset(tmp_path / "raw")
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    r = cli("report", d)
    assert r.code == 0, r.stderr
    page = d / ".shardcook" / "report.html"
    assert r.stdout.strip() == f"wrote {page}"
    assert _counts(page.read_text())["samples"] == 4
    assert list(here.iterdir()) == []  # nothing in the working folder
    out = tmp_path / "elsewhere.html"
    assert cli("report", d, "--out", out).code == 0 and out.is_file()


def test_report_writes_into_a_bucket_dataset(tmp_path, s3_store):
    d = write_dataset(tmp_path / "raw", n_shards=2, per_shard=3)
    s3_store.upload_folder(d, "data/raw")
    r = cli("report", s3_store.url("data/raw"), "--scratch-dir", tmp_path)
    assert r.code == 0, r.stderr
    assert r.stdout.strip() == f"wrote {s3_store.url('data/raw/.shardcook/report.html')}"
    page = s3_store.get("data/raw/.shardcook/report.html").decode()
    assert _counts(page)["samples"] == 6


def test_report_on_a_bucket_it_may_only_read_says_to_give_out(tmp_path, monkeypatch):
    import uuid

    import yaml

    from tests.helpers.s3server import AuthS3Server, make_auth_store

    server = AuthS3Server()  # moto checking each request against IAM policies
    try:
        store = make_auth_store(server, tmp_path / "cfg", "report-bucket")
        store.upload_folder(write_dataset(tmp_path / "raw"), "ds")
        # a profile name of its own: MSC keeps one client per name for the life of a process
        reader = f"reader{uuid.uuid4().hex[:8]}"
        config = yaml.safe_load(store.config.read_text())
        config["profiles"] = {reader: config["profiles"]["reader"]}
        store.config.write_text(yaml.safe_dump(config))
        for key, value in store.env.items():
            monkeypatch.setenv(key, value)
        r = cli("report", f"msc://{reader}/ds", "--scratch-dir", tmp_path)
        assert r.code == 2
        said = one_error_line(r)
        assert "may not write there (AccessDenied)" in said
        assert said.endswith("give --out FILE.html to write the page elsewhere.")
        out = tmp_path / "page.html"
        r = cli("report", f"msc://{reader}/ds", "--out", out, "--scratch-dir", tmp_path)
        assert r.code == 0 and _counts(out.read_text())["samples"] == 4
    finally:
        server.stop()


def test_report_that_cannot_write_into_the_dataset_says_so(tmp_path):
    d = write_dataset(tmp_path / "raw")
    (d / ".shardcook" / "report.html").mkdir()  # in the page's way
    r = cli("report", d)
    assert r.code == 2
    said = one_error_line(r)
    assert f"cannot write {d / '.shardcook' / 'report.html'}" in said
    assert "give --out FILE.html to write the page elsewhere" in said


def test_refusals(tmp_path):
    d = write_dataset(tmp_path / "raw")
    unfinalized = tmp_path / "bare"
    unfinalized.mkdir()
    for args, says in [
        ((unfinalized,), "run `shardcook finalize"),
        ((d, "--out", tmp_path / "page.png"), "must name an .html file"),
        ((d, "--samples", "0"), "--samples must be between 1"),
        ((d, "--split-part", "val2"), "has no val2 split"),
    ]:
        r = cli("report", *args)
        assert r.code == 2
        assert says in one_error_line(r)
    src = make_folder(tmp_path / "in", 2)
    r = cli("raw", "--input-dir", src, "--output-dir", tmp_path / "o", "--report-html",
            "--no-finalize")
    assert r.code == 2 and "--report-html shows a finalized dataset" in one_error_line(r)


def test_a_shard_cut_short(tmp_path):
    d = write_dataset(tmp_path / "raw", n_shards=2, per_shard=3)
    shard = d / "000001.tar"
    shard.write_bytes(shard.read_bytes()[:1024])  # the first sample's headers, no more
    page = make_report(d, samples=6)
    problems = re.findall(r"<p class=\"warn\" data-problem>([^<]*)<", page)
    assert any("000001.tar: the shard is 1,024 bytes" in p and "cut short" in p
               for p in problems), problems
    assert page.count("unreadable:") == 3  # its samples' cards say why


def test_a_single_value_is_said_not_drawn(tmp_path):
    def parts(i: int) -> dict[str, bytes]:  # every picture 64x48; captions of 1 to 12 words
        return {**raw_parts(i), "txt": " ".join(["word"] * (i + 1)).encode()}

    d = write_dataset(tmp_path / "raw", parts, n_shards=3, per_shard=4)
    page = make_report(d, samples=4)
    said = dict(re.findall(r'data-single="([^"]+)"><b>[^<]*</b>: ([^<]*)<', page))
    assert said == {"width": "64 pixels for all 12 samples",
                    "height": "48 pixels for all 12 samples",
                    "aspect ratio": "1.333 width / height for all 12 samples",
                    "samples per shard": "4 samples for all 3 shards"}
    assert 'alt="width"' not in page and 'alt="samples per shard"' not in page
    assert 'alt="caption length"' in page  # values that differ are still drawn
