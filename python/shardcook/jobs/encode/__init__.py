"""`shardcook encode`: the job (`job.EncodeJob`), the sample the encoders make (`sample`) and each
layout's part builder (`primus_parts`, `bridge_parts`, `mlperf_parts`)."""

#: The most memory decoded inputs (an image's pixels, a clip's frames) waiting for the encoders
#: may take: enough to keep the decoding threads busy while the encoders load (a few seconds)
#: without holding a whole shard.
PREPARED_BYTES = 512 << 20
