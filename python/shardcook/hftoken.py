"""Hugging Face token lookup for gated models and datasets: --hf-token-file, then HF_TOKEN, then
the saved login. Sources, config checks, preview and the encoders all ask here.

The token is returned to the caller only to hand to `from_pretrained`; it is never printed,
logged, or written anywhere.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from shardcook.errors import ConfigError

#: How to give a token, for error messages.
TOKEN_WAYS = ("--hf-token-file FILE (a file only you can read: chmod 600 FILE)",
              "the HF_TOKEN environment variable",
              "`huggingface-cli login` (the saved login)")


def read_token_file(path: str | os.PathLike[str]) -> str:
    """The token in `path`; refuses a missing, non-regular or group/world-accessible file."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        raise ConfigError(f"--hf-token-file {str(p)!r} does not exist; name the file holding "
                          "your Hugging Face token.") from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"--hf-token-file {str(p)!r} is not a regular file; name the file "
                          "holding your Hugging Face token.")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise ConfigError(
            f"--hf-token-file {str(p)!r} has mode {mode:o}, so other users can read it; "
            f"run `chmod 600 {p}` and try again.")
    try:
        token = p.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        raise ConfigError(f"--hf-token-file {str(p)!r} cannot be read as text; it must hold "
                          "only the token.") from None
    if not token:
        raise ConfigError(f"--hf-token-file {str(p)!r} is empty; put your token in it.")
    return token


def resolve_token(token_file: str | os.PathLike[str] | None) -> tuple[str | None, str]:
    """(token or None, where it came from: "file", "HF_TOKEN", "saved login" or "none")."""
    if token_file:
        return read_token_file(token_file), "file"
    env = os.environ.get("HF_TOKEN", "").strip()
    if env:
        return env, "HF_TOKEN"
    try:
        from huggingface_hub import get_token

        saved = get_token()
    except Exception:  # noqa: BLE001 - no hub client or unreadable login: no token
        saved = None
    if saved:
        return saved, "saved login"
    return None, "none"


def redact(text: str, token: str | None) -> str:
    """`text` with every occurrence of `token` replaced by `***`."""
    return text.replace(token, "***") if token else text
