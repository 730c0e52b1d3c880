"""Every training job is a run: creating each custom job's run and mirroring its state."""
