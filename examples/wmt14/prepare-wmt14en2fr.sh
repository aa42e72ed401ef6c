#!/usr/bin/env bash
# WMT14 English->French as in the paper (36M sentence pairs, 32000 word-piece vocabulary): the corpora of
# fairseq's examples/translation/prepare-wmt14en2fr.sh (Europarl v7, Common Crawl, UN, News Commentary v9,
# Gigaword fr-en), newstest2013 as dev set, newstest2014 (sacreBLEU "wmt14/full", 3003 sentences) as test,
# cleaned to 1..250 words with ratio <= 1.5, a joint 32k sentencepiece vocabulary, binarized into
# data-bin/wmt14_en_fr. Train it with `LANGPAIR=en-fr examples/wmt14/train-big.sh` (transformer_big_enfr).
#
#   examples/wmt14/prepare-wmt14en2fr.sh                                   # download (about 10 GB)
#   examples/wmt14/prepare-wmt14en2fr.sh --local DIR --test-local DIR2     # files already on disk
set -euo pipefail
SRC=en; TGT=fr; NAME=wmt14_en_fr; VOCAB_DEFAULT=32000; SACREBLEU_TEST=wmt14/full
URLS=(
  "http://statmt.org/wmt13/training-parallel-europarl-v7.tgz"
  "http://statmt.org/wmt13/training-parallel-commoncrawl.tgz"
  "http://statmt.org/wmt13/training-parallel-un.tgz"
  "http://statmt.org/wmt14/training-parallel-nc-v9.tgz"
  "http://statmt.org/wmt10/training-giga-fren.tar"
  "http://data.statmt.org/wmt17/translation-task/dev.tgz"
)
FILES=(training-parallel-europarl-v7.tgz training-parallel-commoncrawl.tgz training-parallel-un.tgz
       training-parallel-nc-v9.tgz training-giga-fren.tar dev.tgz)
CORPORA=(training/europarl-v7.fr-en commoncrawl.fr-en un/undoc.2000.fr-en training/news-commentary-v9.fr-en
         giga-fren.release2.fixed)
DEV=dev/newstest2013
source "$(dirname "${BASH_SOURCE[0]}")/prepare-common.sh"
