"""A password in an ingest URL (`http://user:PASSWORD@host/`, in a manifest URL or a `.uri`
file's base URL) is used for the downloads and shown as `***` everywhere else: in no file of
the output folder (manifest.json, report.json, the HTML report) and in no line printed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.mlperf import npy_bytes, serve, write_arrow_set, write_manifest

PASSWORD = "Sup3r-s3cret-pw"
AUTH = f"reader:{PASSWORD}"


def _shardcook(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardcook", *args],
                          check=False, capture_output=True, text=True, timeout=300)


def _no_password(result: subprocess.CompletedProcess[str], *folders: Path) -> None:
    """The password is in no line `result` printed and in no file under `folders` (hidden ones
    too: .shardcook/, .nv-meta/)."""
    printed = result.stdout + result.stderr
    assert PASSWORD not in printed, printed
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file():
                assert PASSWORD.encode() not in path.read_bytes(), path


def test_a_password_in_the_urls_is_used_but_never_written_nor_printed(tmp_path):
    served = tmp_path / "served"
    val = write_arrow_set(served, 3, 2, timesteps=True, key_prefix="v")
    (served / "state.json").write_text("{}")  # skipped: recorded with its source
    (served / "t5_empty.npy").write_bytes(npy_bytes(np.zeros((4, 8), np.uint16)))
    cut, gone = val.files[0].name, val.files[2].name
    out, config = tmp_path / "out", tmp_path / "mlperf.yaml"
    # the server answers 401 without the password: what is converted was fetched with it
    with serve(served, drop_once={cut}, auth=AUTH) as (base, requests):
        secret = base.replace("http://", f"http://{AUTH}@")
        write_manifest(served, "coco", [*val.files, served / "state.json"], secret)
        write_manifest(served, "empty", [served / "t5_empty.npy"], secret)
        (served / gone).unlink()  # listed, but answered 404: a failed file with its source
        (served / "t5_empty.npy").unlink()
        config.write_text(  # the user's own file, outside the output folder
            f"datasets:\n  - {{split_name: val, manifest_url: '{secret}/coco.uri'}}\n"
            f"empty_encodings: {{manifest_url: '{secret}/empty.uri'}}\n"
            f"output: {{output_dir: {out}}}\n")
        run = _shardcook("ingest", "--config", str(config))
        missing = _shardcook("ingest", "--manifest-url", f"{secret}/missing.uri",
                             "--output-dir", str(tmp_path / "missing"))
    assert run.returncode == 1, run.stderr
    assert requests.count(cut) == 2  # cut once, then fetched whole with the password
    assert sorted(p.name for p in (out / "val").glob("*.tar")) == [
        "val-shard-000000.tar", "val-shard-000001.tar"]
    redacted = base.replace("http://", "http://reader:***@")
    report = json.loads((out / ".shardcook" / "report.json").read_text())
    assert sorted((f["file"], f["source"]) for f in report["failed"]) == [
        (gone, f"{redacted}/{gone}"), ("t5_empty.npy", f"{redacted}/t5_empty.npy")]
    assert [s["source"] for s in report["skipped"]] == [f"{redacted}/state.json"]
    assert f"{redacted}/{cut}: " in run.stderr  # the retry's warning
    page = _shardcook("report", str(out), "--out", str(out / ".shardcook" / "report.html"))
    assert page.returncode == 0, page.stderr
    assert redacted in (out / ".shardcook" / "report.html").read_text()
    _no_password(run, out)
    _no_password(page, out)

    assert missing.returncode == 2
    assert missing.stderr.startswith(f"error: cannot read {redacted}/missing.uri (HTTP Error 404")
    _no_password(missing, tmp_path / "missing")


def test_a_later_command_for_another_split_cannot_download_what_needs_the_password(tmp_path):
    """The recorded source of a file left to do has no password: a command naming only another
    split says so for that file, and the command naming its split again downloads it."""
    served = tmp_path / "served"
    train = write_arrow_set(served, 2, 2, timesteps=False)
    val = write_arrow_set(tmp_path / "coco", 1, 2, timesteps=True, key_prefix="v")
    out = tmp_path / "out"
    late = train.files[1]
    with serve(served, auth=AUTH) as (base, _):
        secret = base.replace("http://", f"http://{AUTH}@")
        url = f"{secret}/{write_manifest(served, 'm', train.files, secret)}"
        kept = late.read_bytes()
        late.unlink()  # not there yet: the first command fails it
        first = _shardcook("ingest", "--manifest-url", url, "--output-dir", str(out))
        late.write_bytes(kept)
        other = _shardcook("ingest", str(val.folder), "--split-part", "val", "--output-dir",
                           str(out))
        report = json.loads((out / ".shardcook" / "report.json").read_text())
        again = _shardcook("ingest", "--manifest-url", url, "--output-dir", str(out))
    assert first.returncode == 1, first.stderr
    assert other.returncode == 1, other.stderr
    assert [(f["file"], f["stage"]) for f in report["failed"]] == [(late.name, "download")]
    assert "recorded without its password; name the train split's inputs again" in (
        report["failed"][0]["reason"])
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in (out / "train").glob("*.tar")) == [
        "train-shard-000000.tar", "train-shard-000001.tar"]
    for result in (first, other, again):
        _no_password(result, out)


@pytest.mark.parametrize(("url", "words"), [
    (f"ftp://{AUTH}@127.0.0.1/m.uri", "manifest_url is 'ftp://reader:***@127.0.0.1/m.uri', not "
                                      "an http(s) address"),
    (f"http://{AUTH}@127.0.0.1/m.txt", "manifest_url 'http://reader:***@127.0.0.1/m.txt' must "
                                       "end in .uri or .md5")])
def test_a_refused_manifest_url_is_quoted_without_its_password(tmp_path, url, words):
    refused = _shardcook("ingest", "--manifest-url", url, "--output-dir", str(tmp_path / "out"))
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"error: {words}"), refused.stderr
    _no_password(refused)
    assert not (tmp_path / "out").exists()
