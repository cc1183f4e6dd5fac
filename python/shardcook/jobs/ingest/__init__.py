"""`shardcook ingest`: MLPerf Flux.1's Arrow files to one dataset (`run`), its options (`config`),
one Arrow file to one shard (`arrow`) and the downloads (`download`)."""
