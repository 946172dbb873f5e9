"""The project's Hydra sweeper on Optuna (>= 4): ``hydra/sweeper=optuna-sqlite``."""
