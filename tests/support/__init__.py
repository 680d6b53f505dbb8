"""What several tests share: fakes, data, the claim worker, the live `dagster dev`."""
