"""The sentences shardcook says about a store: what the client's error says (one line, any
password redacted), and why the store refused a request (the credentials, their permissions, or
none found), naming whose credentials went out and what they need."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from shardcook.storage.urls import config_file, profile_of, redact


def describe_error(error: BaseException) -> str:
    """What the client's `error` says, on one line of at most 200 characters, for a sentence;
    a password in an endpoint it quotes is redacted."""
    text = redact(" ".join(str(error).split())) or type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."


#: S3 error codes that refuse the credentials themselves, not what they may do.
_BAD_CREDENTIALS = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken",
                              "ExpiredToken", "InvalidClientTokenId", "TokenRefreshRequired"})
#: What the credentials need, by what the command does there.
_NEEDED = {"read": "list and read objects there (on S3: s3:ListBucket, s3:GetObject)",
           "write": "list, write and delete objects there (on S3: s3:ListBucket, s3:PutObject, "
                    "s3:DeleteObject)"}


def _chain(error: BaseException) -> Iterator[BaseException]:
    """`error` and what it was raised from, in turn (the client wraps the store's errors)."""
    seen: BaseException | None = error
    while seen is not None:
        yield seen
        seen = seen.__cause__ or seen.__context__


def _error_code(error: BaseException) -> str | None:
    """The store's error code (`AccessDenied` ...) in `error` or what it was raised from."""
    for seen in _chain(error):
        response = getattr(seen, "response", None)
        if isinstance(response, dict):
            code = response.get("Error", {}).get("Code")
            if code:
                return str(code)
    return None


def credentials_of(url: str) -> str:
    """Whose credentials a request to `url` goes out with, for a sentence: an `msc://` URL's
    profile's, an `s3://` URL's from the AWS variables or files."""
    profile = profile_of(url)
    if profile is not None:
        return f"the credentials of profile {profile!r}"
    return "the AWS credentials" if url.startswith("s3://") else "the store's credentials"


def _no_credentials(what: str, url: str) -> str:
    """The sentence for a request that found no credentials at all to go out with."""
    profile = profile_of(url)
    if profile is not None:
        return (f"{what} {url!r}: profile {profile!r} names no credentials and none were found "
                "in the AWS variables or files; give the profile a credentials_provider in "
                f"{config_file()}.")
    if url.startswith("s3://"):
        return (f"{what} {url!r}: no AWS credentials were found for this s3:// URL; set "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE and the AWS "
                "credentials file), or reach the bucket through an MSC profile that holds its "
                "credentials (msc://PROFILE/path).")
    return (f"{what} {url!r}: no credentials were found for this store; set them up for its "
            "client, or reach it through an MSC profile that holds them (msc://PROFILE/path).")


def access_problem(what: str, url: str, doing: Literal["read", "write"],
                   error: BaseException) -> str | None:
    """One sentence when the store refused `error`'s request for its credentials (unknown key,
    bad secret, expired token) or their permissions, or no credentials were found to send;
    None for any other failure. `doing` is what the command needs there. Never holds a
    credential.
    """
    if any(type(seen).__name__ == "NoCredentialsError" for seen in _chain(error)):
        return _no_credentials(what, url)
    code = _error_code(error)
    profile = profile_of(url)
    whose = credentials_of(url)
    where = (f"in {config_file()}" if profile else
             "(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or the AWS credentials file)")
    if code in _BAD_CREDENTIALS:
        return (f"{what} {url!r}: the store refused {whose} ({code}); check the access key and "
                f"secret key {where}.")
    if code in ("AccessDenied", "AllAccessDisabled"):
        return (f"{what} {url!r}: {whose} may not {doing} there ({code}); use credentials "
                f"allowed to {_NEEDED[doing]}.")
    if isinstance(error, PermissionError):
        # a reply without a body (a HEAD's) cannot say whether the key or its rights were wrong
        return (f"{what} {url!r}: the store refused access with {whose}; check the access key "
                f"and secret key {where}, and that they are allowed to {_NEEDED[doing]}.")
    return None


def unreachable(what: str, url: str, doing: str, error: BaseException) -> str:
    """One sentence for a read of the store at `url` that failed every time it was tried: the
    store's refusal of the credentials or their permissions (`access_problem`), else that it
    cannot be reached, with the client's error; `doing` names the read (`listing the folder`).
    Nothing is concluded from a read that failed, so a rerun is always the advice."""
    return access_problem(what, url, "read", error) or (
        f"{what} {url!r} cannot be reached: {doing} failed every time it was tried "
        f"({describe_error(error)}); nothing was counted as missing or done: once the store "
        "answers, rerun the same command.")




def profile_problem(url: str, what: str, error: Exception) -> str:
    profile = profile_of(url)
    if profile is not None:
        return (f"{what} {url!r}: the Multi-Storage Client cannot open profile {profile!r} "
                f"({describe_error(error)}); define it in {config_file()} (MSC_CONFIG names "
                "the file).")
    return (f"{what} {redact(url)!r}: the Multi-Storage Client cannot open it "
            f"({describe_error(error)}).")
