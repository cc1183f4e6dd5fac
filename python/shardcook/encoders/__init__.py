"""The model families `encode` runs: the seam and registry (`models`: the `Encoders` protocol,
one `ModelFamily` entry per family), each family's encoders (`flux.FluxEncoders`,
`wan.WanEncoders`), where they load from (`loading`; the token is `shardcook.hftoken`'s), and
tiny random-weight demo/test encoders (`tiny`)."""
