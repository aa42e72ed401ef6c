#!/usr/bin/env bash
# WMT14 English->German as in the paper (4.5M sentence pairs, shared ~37k-token vocabulary):
# the corpora of fairseq's examples/translation/prepare-wmt14en2de.sh (Europarl v7, Common Crawl,
# News Commentary v12), newstest2013 as dev set, newstest2014 (sacreBLEU "wmt14", 3003 sentences) as test,
# cleaned to 1..250 words with length ratio <= 1.5, one joint sentencepiece vocabulary of 37000 learned on
# both sides of the training text, binarized into data-bin/wmt14_en_de.
#
#   examples/wmt14/prepare-wmt14en2de.sh                                   # download (about 1.5 GB)
#   examples/wmt14/prepare-wmt14en2de.sh --local DIR --test-local DIR2     # files already on disk
set -euo pipefail
SRC=en; TGT=de; NAME=wmt14_en_de; VOCAB_DEFAULT=37000; SACREBLEU_TEST=wmt14
URLS=(
  "http://statmt.org/wmt13/training-parallel-europarl-v7.tgz"
  "http://statmt.org/wmt13/training-parallel-commoncrawl.tgz"
  "http://data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz"
  "http://data.statmt.org/wmt17/translation-task/dev.tgz"
)
FILES=(training-parallel-europarl-v7.tgz training-parallel-commoncrawl.tgz training-parallel-nc-v12.tgz dev.tgz)
CORPORA=(training/europarl-v7.de-en commoncrawl.de-en training/news-commentary-v12.de-en)
DEV=dev/newstest2013
source "$(dirname "${BASH_SOURCE[0]}")/prepare-common.sh"
