"""``--save-model-folder``: at the end of the run, the model of ``checkpoint_best.pt`` (``checkpoint_last.pt``
when no validation chose a best) as a model folder, with the data-bin's dictionaries and subword models.

The weights come from memory: the run keeps a copy of what it wrote under those two names
(:class:`WrittenWeights`), so the folder needs no read of the file and no second model. Only a file this
process did not write (an earlier run's ``checkpoint_best.pt`` that a resumed run never improved on) is read
back, through the checkpoint loading path and its checks.
"""
from __future__ import annotations

import logging
import os

from nmt_toolkit.errors import DataError

logger = logging.getLogger("nmt_toolkit.train")

#: the checkpoints the folder is written from, in order of preference
SOURCES = ("checkpoint_best.pt", "checkpoint_last.pt")


def model_folder_output(ck):
    """``--save-model-folder`` as an output: it replaces a model folder (an earlier run's) but never another
    folder's files (None without the option)."""
    from nmt_toolkit.model_folder import MODEL_FOLDER
    from nmt_toolkit.outputs import FolderOutput

    out = ck.save_model_folder
    return FolderOutput(out, MODEL_FOLDER, True, f"--save-model-folder {out}") if out else None


class WrittenWeights:
    """The weights the run last saved under each of :data:`SOURCES` in ``save_dir``: a copy in host memory,
    taken after the save (training goes on changing the model's own tensors). Kept only when ``wanted``, and
    only for a name the folder may still come from (no ``checkpoint_last.pt`` once a best exists)."""

    def __init__(self, wanted: bool, save_dir: str):
        self.wanted, self.save_dir, self.by_name = wanted, save_dir, {}

    def saved(self, names: list[str], weights: dict) -> None:
        kept = [name for name in names if name in SOURCES and not self._preferred_exists(name)]
        if self.wanted and kept:
            copy = {key: tensor.detach().to("cpu", copy=True) for key, tensor in weights.items()}
            self.by_name.update(dict.fromkeys(kept, copy))

    def _preferred_exists(self, name: str) -> bool:
        """A source the folder prefers to ``name`` is in --save-dir (files there are never removed in a run)."""
        return any(os.path.isfile(os.path.join(self.save_dir, better)) for better in SOURCES[:SOURCES.index(name)])


def save_model_folder(ck, task, config: dict, written: WrittenWeights) -> None:
    """Write ``--save-model-folder`` from the best checkpoint in ``--save-dir`` (else the last); ``config`` is
    the run's plain config, as its checkpoints store it."""
    from nmt_toolkit.export.folder import export, write_folder

    names = [name for name in SOURCES if os.path.isfile(os.path.join(ck.save_dir, name))]
    if not names:
        raise DataError(f"--save-model-folder {ck.save_model_folder}: --save-dir {ck.save_dir} holds neither "
                        f"checkpoint_best.pt nor checkpoint_last.pt to write it from")
    checkpoint = os.path.join(ck.save_dir, names[0])
    made_by = f"nmt-train --save-model-folder ({names[0]})"
    if names[0] in written.by_name:
        write_folder(model_folder_output(ck), task, config, written.by_name[names[0]], made_by)
    else:
        export(checkpoint, task, model_folder_output(ck), made_by=made_by)
    logger.info("wrote the model folder %s from %s", ck.save_model_folder, checkpoint)
