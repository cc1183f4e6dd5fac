"""The engine that runs raw, encode and chatml (`driver.run_pipeline`), their output folders, and
`ingest`."""
