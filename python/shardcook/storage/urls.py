"""The one parser of locations given as text: a URL (`msc://PROFILE/path`, `s3://bucket/path`,
`gs://`, `az://`, or any `scheme://` shardcook refuses) or not, its scheme, its segments, and the
redaction of credentials in any text that quotes one. Nothing here opens a client."""

from __future__ import annotations

import os
import re

#: The schemes MSC resolves: its own profiles, and the stores it reaches without a profile.
SCHEMES = ("msc", "s3", "gs", "az")

#: `scheme://` anywhere, or `scheme:/` at the start: what `pathlib.Path` makes of a URL
#: (`Path("s3://b/x")` is `s3:/b/x`), so a URL that went through a Path is still caught.
_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*):/|(?P<inner>[A-Za-z][A-Za-z0-9+.-]*)://")


def url_scheme(value: object) -> str | None:
    """The scheme of `value` when it is a URL (also one a `pathlib.Path` has mangled), else
    None."""
    if not isinstance(value, (str, os.PathLike)):
        return None
    text = os.fspath(value)
    if not isinstance(text, str):
        return None
    match = _URL.search(text)
    if match is None:
        return None
    return (match.group("scheme") or match.group("inner")).lower()


def is_url(value: object) -> bool:
    """True when `value` names a location by URL rather than a local path."""
    return url_scheme(value) is not None


def as_text(value: object) -> str:
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else str(value)
    return text if isinstance(text, str) else repr(text)


#: `scheme://userinfo@`: the user (and password) part of a URL, up to the last `@` before the
#: host's end (a password may hold `@`).
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s\"']*)@")


def redact(text: str) -> str:
    """`text` with the password of every `scheme://user:password@host` in it shown as `***`
    (`user:***@`), and a user part without a password (which may be a token) as `***@`: for
    every message that quotes a URL, an endpoint or what the client said about one."""
    def hide(match: re.Match[str]) -> str:
        user, colon, _ = match["userinfo"].partition(":")
        return f"{match['scheme']}{user + ':' if colon else ''}***@"

    return _USERINFO.sub(hide, text)


def bad_segment(path: str) -> str | None:
    """The first segment of the `/`-separated `path` that is empty, `.` or `..` (a leading `/`
    is an empty one), or None when every segment is a name. Such a path names one object in a
    store, which keeps keys as they are, and another place to anything that normalizes paths
    (Energon, a local file system)."""
    return next((part for part in path.split("/") if part in ("", ".", "..")), None)


def segment_named(segment: str) -> str:
    """`bad_segment`'s answer in words: "a '..' segment", "an empty segment (//)"."""
    return f"a {segment!r} segment" if segment else "an empty segment (//)"


def profile_of(url: str) -> str | None:
    """The MSC profile an `msc://` URL names; None for other URLs."""
    return url[len("msc://"):].split("/", 1)[0] if url.startswith("msc://") else None


def config_file() -> str:
    """The file MSC reads its profiles from."""
    return os.environ.get("MSC_CONFIG") or "~/.msc_config.yaml"


