"""Callbacks and step wrappers that record a framework's training loop on an mldiag run.

One module per framework, each imported by the user on purpose (importing :mod:`mldiag`
never imports a framework):

- :mod:`mldiag.integrations.keras`: ``MldiagCallback`` for ``model.fit`` (Keras 3).
- :mod:`mldiag.integrations.flax`: ``track(train_step)`` for Flax and plain JAX + Optax loops.
- :mod:`mldiag.integrations.lightning`: ``MldiagCallback`` for PyTorch Lightning's ``Trainer``.
- :mod:`mldiag.integrations.transformers`: ``MldiagCallback`` for Hugging Face's ``Trainer``.

Each uses the run it is given, else the current run (:func:`mldiag.current_run`), else starts
one with :func:`mldiag.init` and then also finishes it. docs/integrations.md lists the metric
names each one records.
"""
