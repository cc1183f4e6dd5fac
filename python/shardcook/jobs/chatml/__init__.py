"""`shardcook chatml`: the job (`job.ChatmlJob`) and its media processor (`media`)."""
