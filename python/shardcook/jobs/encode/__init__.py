"""`shardcook encode`: the job (`job.EncodeJob`), the sample the encoders make (`sample`) and each
layout's part builder (`primus_parts`, `bridge_parts`, `mlperf_parts`)."""
