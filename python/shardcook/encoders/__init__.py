"""FLUX encoders for `shardcook encode`: where they come from (`loading`; the token is
`shardcook.hftoken`'s), batched encoding (`flux.FluxEncoders`), and tiny random-weight demo/test
encoders (`tiny`)."""
