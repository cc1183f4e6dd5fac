"""The jobs the engine (`pipeline/driver.run_pipeline`) runs: `raw`, `encode`, `chatml`, each a
`driver.Job`."""
