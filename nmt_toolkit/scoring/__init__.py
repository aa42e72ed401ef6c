"""Scoring: sacreBLEU BLEU/chrF and tokenized BLEU (bleu.py), PARSEVAL F1 as EVALB computes it (parseval.py)."""
