"""Our models written out in other formats: CTranslate2, fairseq, Hugging Face Marian, and our own model folder.
The model itself knows none of them; importers/ holds the other direction. What each format can hold is checked in one
place, :mod:`.exportable`."""

