"""Foreign model formats: fairseq checkpoints in and out, CTranslate2 out. The model itself knows none of them."""
