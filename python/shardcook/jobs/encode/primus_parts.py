"""The parts of one `primus` (`preencoded`) sample written by `encode`: one `torch.save`d tensor
per part, the caption, `meta.json` and, with `--latent-mode resample`, the posterior with the VAE
factors in `meta.json` (a resampling task encoder needs them)."""

from __future__ import annotations

import json

from shardcook.jobs.encode.sample import EncodedSample
from shardcook.jobs.images import result_meta_json
from shardcook.layouts.preencoded import POSTERIOR_PARTS


def _with_factors(meta: bytes, facts: dict[str, object]) -> bytes:
    """meta.json plus the VAE factors a resampling task encoder needs."""
    fields = json.loads(meta)
    fields.update(scaling_factor=facts["scaling_factor"], shift_factor=facts["shift_factor"])
    return json.dumps(fields, ensure_ascii=False).encode("utf-8")


def primus_parts(s: EncodedSample) -> list[tuple[str, bytes]]:
    """(part, bytes) of one sample, in the layout's order."""
    from shardcook.encoders.flux import POOLED_PROMPT_EMBEDS, PROMPT_EMBEDS, tensor_bytes

    meta = result_meta_json(s.item.source, s.result)
    parts = [
        ("latents.pth", tensor_bytes(s.latent)),
        ("prompt_embeds.pth", tensor_bytes(s.text[PROMPT_EMBEDS])),
        ("pooled_prompt_embeds.pth", tensor_bytes(s.text[POOLED_PROMPT_EMBEDS])),
        ("caption.txt", (s.item.caption or "").encode("utf-8")),
        ("meta.json", _with_factors(meta, s.facts) if s.posterior else meta),
    ]
    if s.posterior:
        mean, logvar = s.posterior
        parts += [(POSTERIOR_PARTS[0], tensor_bytes(mean)),
                  (POSTERIOR_PARTS[1], tensor_bytes(logvar))]
    return parts
