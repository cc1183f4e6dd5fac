"""FLUX encoders for `shardcook encode`: where they come from and the token (`loading`, `auth`),
batched encoding (`flux.FluxEncoders`), and tiny random-weight demo/test encoders (`tiny`)."""
