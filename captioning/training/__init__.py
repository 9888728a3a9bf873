"""Training: the Hydra entry point, the LightningModule, model building, schedules, start-up checks, resume."""
