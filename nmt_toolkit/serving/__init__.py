"""nmt-serve's library: the dynamic batcher, the HTTP application and its pieces (the [serve] extra).

Nothing here is imported by the rest of the toolkit; ``cli/serve.py`` puts it together."""
