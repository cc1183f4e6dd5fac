"""Turn normalization to typed parts, image-count checks, the val hash, the pixel bound."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from shardcook.conversations import ConversationError, count_images, find_conversation, normalize
from shardcook.jobs.chatml.media import bounded_size
from shardcook.sources.chat import split_of


def test_from_value_with_placeholders():
    assert normalize([{"from": "human", "value": "<image>\nWhat is it?"},
                      {"from": "gpt", "value": "A cat."}]) == [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]}]


def test_role_content_typed_parts_and_strings():
    turns = [{"role": "system", "content": "Be brief."},
             {"role": "user", "content": [{"type": "text", "text": "left <image> right"},
                                          {"type": "image_url", "image_url": {"url": "x"}},
                                          {"type": "image", "image": "a.jpg", "text": None}]},
             {"role": "assistant", "content": [{"text": "ok"}]}]
    out = normalize(turns)
    assert out[1]["content"] == [{"type": "text", "text": "left"}, {"type": "image"},
                                 {"type": "text", "text": "right"}, {"type": "image"},
                                 {"type": "image"}]
    assert out[2] == {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}
    assert count_images(out) == 3


@pytest.mark.parametrize("turns, message", [
    ([], "not a non-empty list"),
    ("hello", "not a non-empty list"),
    ([{"role": "robot", "content": "x"}], "unknown role 'robot'"),
    ([{"role": "user"}], "has no content"),
    ([{"role": "user", "content": [{"type": "hologram"}]}], "unknown type 'hologram'"),
    ([{"role": "user", "content": 3}], "content of type int"),
])
def test_unusable_conversations_say_why(turns, message):
    with pytest.raises(ConversationError, match=message):
        normalize(turns)


def test_find_conversation_keys():
    assert find_conversation({"messages": [1]}) == [1]
    assert find_conversation({"conversations": [2], "conversation": [3]}) == [3]
    assert find_conversation({"chat": [4]}, "chat") == [4]
    with pytest.raises(ConversationError, match="no conversation / messages / conversations"):
        find_conversation({"text": "x"})


@given(st.lists(st.sampled_from(["<image>", "a", " ", "b c", "\n"]), max_size=12))
def test_placeholders_become_image_parts(pieces):
    text = "".join(pieces)
    (turn,) = normalize([{"role": "user", "content": text}])
    assert count_images([turn]) == text.count("<image>")
    texts = [p["text"] for p in turn["content"] if p["type"] == "text"]
    assert all(t and t == t.strip() for t in texts)
    assert "".join(texts).replace(" ", "").replace("\n", "") == text.replace(
        "<image>", "").replace(" ", "").replace("\n", "")


def test_split_is_a_sha256_threshold():
    ids = [f"id-{i}" for i in range(2000)]
    val = [i for i in ids if split_of(i, 0.1) == "val"]
    for i in ids[:50]:
        h = int(hashlib.sha256(i.encode()).hexdigest()[:16], 16) / 2**64
        assert split_of(i, 0.1) == ("val" if h < 0.1 else "train")
    assert 150 < len(val) < 250  # about 10%
    assert all(split_of(i, 0.0) == "train" for i in ids[:100])
    assert set(val) <= {i for i in ids if split_of(i, 0.2) == "val"}  # monotone in the fraction


@given(st.integers(1, 5000), st.integers(1, 5000), st.integers(1, 10**7))
def test_bounded_size_keeps_aspect_and_bound(h, w, limit):
    bh, bw = bounded_size(h, w, limit)
    if h * w <= limit:
        assert (bh, bw) == (h, w)
    else:
        assert bh * bw <= limit and 1 <= bh <= h and 1 <= bw <= w
        if min(bh, bw) >= 20:
            assert abs(bh / bw - h / w) <= 0.06 * (h / w)
            assert bh * bw >= 0.9 * limit  # scaled just enough
    assert bounded_size(h, w, None) == (h, w)
