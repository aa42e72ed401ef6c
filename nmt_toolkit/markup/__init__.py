"""Texts as the sentences a model reads and back: plain text split into lines and sentences with their
whitespace kept (``sentences``), HTML with its markup set aside and put back (``html``), inline tags placed by
word alignment (``placement``). Pure text: nothing here loads a model."""
