"""The `yatt` command: one module per verb (`plan`, `run`, `replay`, `calibrate`, `profile`,
`demo`), shared helpers in `common`, the entry point in `main`."""
