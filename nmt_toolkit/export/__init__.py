"""Our models written out in other formats: CTranslate2, fairseq, Hugging Face Marian, and our own model folder.
The model itself knows none of them; importers/ holds the other direction."""


def nonstandard_head_dim(cfg):
    """``(option, value)`` of the first of ``--key-dim``/``--value-dim`` that is not d_model/h, or None.

    Engines and toolkits we export to (CTranslate2, fairseq) have d_k = d_v = d_model/h and cannot hold
    other head sizes."""
    even = cfg.embed_dim // cfg.attention_heads
    for name in ("key_dim", "value_dim"):
        value = getattr(cfg, name)
        if value is not None and (value != even or cfg.embed_dim % cfg.attention_heads):
            return name, value
    return None
