"""The kernel farm: Hydra conf -> instance table -> isolated compiles -> verified .hsaco + manifests."""
