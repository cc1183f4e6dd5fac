"""`Location`: a place shardcook reads or writes, parsed once into one value: a local path, or a
folder in object storage whose client is resolved (Megatron-Energon's `EPath` is the model: one
path type over the Multi-Storage Client). The config parses its options into locations when it
is resolved (`locate`), and every layer above asks the value, never the string, which it is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from shardcook.errors import ConfigError
from shardcook.storage.bucket import Remote, remote
from shardcook.storage.local import check_local_path
from shardcook.storage.urls import as_text, redact, url_scheme

__all__ = ["Location", "locate"]


@dataclass(frozen=True, repr=False)
class Location:
    """A local path (`remote` is None) or the URL of a folder in object storage (`remote`, its
    client resolved). `str()` is how messages and records name it: the path, or the URL; and
    `repr()` quotes that, as a sentence's `{location!r}` quotes a path."""

    text: str
    remote: Remote | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return repr(self.text)

    @property
    def path(self) -> Path:
        """The local path (ValueError for a URL: ask `remote` first)."""
        if self.remote is not None:
            raise ValueError(f"{self.text} is in object storage, not a local path")
        return Path(self.text)

    def split(self) -> tuple[Location, str]:
        """The folder this location is in, and its name there ("" for a bucket's or
        profile's root, which is in no folder)."""
        if self.remote is None:
            parent, name = os.path.split(self.text)
            return Location(parent or "."), name
        above = self.remote.parent()
        if above is None:
            return self, ""
        return Location(above.url, above), self.remote.name


def locate(value: object, what: str, *, urls: bool = True,
           msc_only: str | None = None) -> Location:
    """`value` parsed once: a local path (`storage.local.check_local_path`), or, where `urls`,
    a URL the Multi-Storage Client can open (`bucket.check_url`; its client is resolved now).
    `msc_only` is why the option takes `msc://` URLs only, for the sentence refusing another.
    A Location is returned as it is (one in object storage refused where not `urls`).

    Raises:
        ConfigError: a URL where only local paths are read, a URL that cannot be opened, or a
            path no file system takes; in one sentence naming `what`.
    """
    if isinstance(value, Location):
        if value.remote is not None and not urls:
            check_local_path(value.text, what)  # refuses the URL
        return value
    scheme = url_scheme(value)
    if scheme is None or not urls:
        check_local_path(value, what)  # a str or os.PathLike of str, then
        return Location(as_text(value))
    folder = remote(value, what)
    if msc_only is not None and scheme != "msc":
        raise ConfigError(f"{what} {redact(as_text(value))!r}: {msc_only}; write "
                          "msc://PROFILE/path (a profile can name any bucket).")
    return Location(as_text(value), folder)
