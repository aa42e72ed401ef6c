"""nmt_toolkit: the Transformer of "Attention Is All You Need" as a fairseq-style toolkit.

Importing the package registers nothing by itself; :func:`nmt_toolkit.registry.import_builtin_components`
imports the built-in models, criteria, optimizers, schedulers and tasks so that their
``@register_*`` decorators run. The CLI does this before it parses options.
"""

__version__ = "0.1.0"
