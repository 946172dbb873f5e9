"""What the test modules share, one module per topic, each importing only what its
helpers need: a test module imports from these (and uses the fixtures of
``tests/conftest.py``), never from another test module.

- :mod:`~tests.support.paths`: the repository's root and this interpreter;
  :mod:`~tests.support.units`: byte units; :mod:`~tests.support.threads`: one torch thread;
- :mod:`~tests.support.metrics`: a run directory's ``metrics.csv`` without its timings;
- :mod:`~tests.support.envs`: the small NNP-I problem most agent tests run on (exact and
  noisy) and the small TPU game;
- :mod:`~tests.support.agent_configs`: the baselines', SMAC's and the game-playing agents'
  small runs; :mod:`~tests.support.egrl_runs`: EGRL's small runs and a policy's greedy map;
- :mod:`~tests.support.command_line`: ``egrl-train`` as a user runs it, in this process,
  its refusals, the small command-line run :data:`~tests.support.command_line.TINY` and
  Hydra's composition;
- :mod:`~tests.support.screening`: screening runs and resuming them;
- :mod:`~tests.support.chips`: the external example chip, the toy chip and one small
  instance of every hardware model;
- :mod:`~tests.support.tpu`: the TPU memory-mapping game's programs;
  :mod:`~tests.support.muzero`: MuZero's small networks;
- :mod:`~tests.support.torch_models`, :mod:`~tests.support.onnx_models`: the importers'
  small models; :mod:`~tests.support.sums`: a workload's totals.
"""
