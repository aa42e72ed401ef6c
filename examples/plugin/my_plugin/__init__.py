"""An example nmt_toolkit plugin: a model variant, a criterion and an LR scheduler.

Load it either way:

* ``nmt-train … --user-dir examples/plugin/my_plugin`` (any program takes ``--user-dir``), or
* ``pip install examples/plugin`` — its ``pyproject.toml`` declares the entry point group
  ``nmt_toolkit.plugins``, so every program imports it without being told.

Importing the package runs the ``register_*`` decorators below; that is all a plugin has to do.
Each component brings a dataclass of options built with :func:`nmt_toolkit.config.option`, so its
flags appear in ``nmt-train --user-dir … --arch glu_transformer_tiny --criterion focal_cross_entropy
--lr-scheduler linear_decay --help`` and can be written in a ``--config`` YAML file.
"""
from my_plugin.focal_loss import FocalCrossEntropyConfig, FocalCrossEntropyCriterion  # noqa: F401
from my_plugin.glu_transformer import GluTransformerConfig, GluTransformerModel  # noqa: F401
from my_plugin.linear_decay import LinearDecayConfig, LinearDecaySchedule  # noqa: F401
