"""The engine every job runs on: `driver.run_pipeline` (one whole run of a `Job`), `plan` (units of
work), `run` (the per-unit loop and resume) and `report` (manifest.json, report.json, the
summary)."""
