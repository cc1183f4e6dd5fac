"""Where shardcook reads and writes: local paths, and URLs (`msc://PROFILE/path`,
`s3://bucket/path`, `gs://`, `az://`) read and written through NVIDIA's Multi-Storage Client.
`urls` is the one URL parser; every other module asks this package, never a string, whether a
location is a URL."""

from shardcook.storage.bucket import Remote, check_url, remote
from shardcook.storage.local import check_local_path
from shardcook.storage.messages import access_problem, credentials_of, describe_error
from shardcook.storage.rustreads import RustReads
from shardcook.storage.store import Listed, Store
from shardcook.storage.urls import SCHEMES, bad_segment, is_url, redact, segment_named, url_scheme

__all__ = ["SCHEMES", "Listed", "Remote", "RustReads", "Store", "access_problem", "bad_segment",
           "check_local_path", "check_url", "credentials_of", "describe_error", "is_url",
           "redact", "remote", "segment_named", "url_scheme"]
