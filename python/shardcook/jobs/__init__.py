"""The jobs the engine runs, one module or package each: `raw`, `encode`, `chatml`, `ingest`;
`images` is the image stage raw and encode share."""
