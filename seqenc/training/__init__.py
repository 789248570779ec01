"""Training: the LightningModule, its options and schedule, callbacks, checkpoints, metrics and baselines."""
