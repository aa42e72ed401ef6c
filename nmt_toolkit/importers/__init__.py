"""Models from other toolkits, read in: fairseq checkpoints (through an allow-list unpickler), Hugging Face
Marian (OPUS-MT) and M2M-100/NLLB folders. Each turns a foreign model into our weights, config and
dictionaries without running the foreign code; export/ holds the other direction."""
