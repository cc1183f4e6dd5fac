"""Where this process runs and how it waits: its place among the workers (`workers`), the
process group (`distributed`), the main thread's interruptible waits (`waits`) and the environment
variables shardcook reads (`envvars`)."""
