#!/usr/bin/env bash
# s3s-fs 0.14.1 (a compiled S3 server over a folder, from crates.io; newer versions need a newer
# Rust) for benches/object_storage.py, built into bench-out/s3s/bin, with four changes
# (s3s-fs.patch) that make it answer as S3 does where the Multi-Storage Client depends on it: its
# listings give each object's ETag (else MSC's list fails with KeyError 'ETag'), a HEAD or GET
# of a name that is a folder there is 404 (else 500, which fails `energon prepare`), each
# connection sends at once (TCP_NODELAY, as a real store's: else a response written as head and
# body waits now and then for the client's delayed ACK, 40 ms), and a GET's body is read from
# the file 256 KiB at a time, not 4 KiB (each read a blocking task: 5 ms of CPU a MiB, which on
# the clients' cores made every byte read cost more than the client's own work on it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$root/bench-out/s3s-src
rm -rf "$work"
mkdir -p "$work/fetch/src"
: > "$work/fetch/src/lib.rs"
cat > "$work/fetch/Cargo.toml" <<'TOML'
[package]
name = "fetch-s3s-fs"
version = "0.0.0"
edition = "2021"

[dependencies]
s3s-fs = "=0.14.1"
TOML
cargo fetch --manifest-path "$work/fetch/Cargo.toml"
src=$(cargo metadata --manifest-path "$work/fetch/Cargo.toml" --format-version 1 |
      python3 -c 'import json, sys; print(next(p["manifest_path"] for p in
                  json.load(sys.stdin)["packages"] if p["name"] == "s3s-fs")[:-len("/Cargo.toml")])')
cp -r "$src" "$work/s3s-fs"
patch -d "$work/s3s-fs" -p1 < "$root/benches/s3s-fs.patch"
cargo install --path "$work/s3s-fs" --features binary --root "$root/bench-out/s3s" --force \
    --target-dir "$root/bench-out/s3s-target"
