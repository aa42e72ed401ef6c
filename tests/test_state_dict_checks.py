"""One comparison of a state dict with a model's: loading (check_shapes, first problem, named for a person who
decodes) and resuming (describe_mismatch, every kind of difference in one line) read the same differences."""
import pytest
import torch

from nmt_toolkit.errors import DataError
from nmt_toolkit.models.state_dict_checks import check_shapes, shape_differences
from nmt_toolkit.training.trainer import describe_mismatch

MODEL = {"a": torch.zeros(2, 3), "b": torch.zeros(4), "c": torch.zeros(1), "e": torch.zeros(5, 6)}
FILE = {"a": torch.zeros(2, 7), "c": torch.zeros(1), "d": torch.zeros(5), "e": torch.zeros(5, 9)}
CONFIG = {"components": {"model": "transformer"}}


class Vocab:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def test_the_differences_in_the_models_order():
    differences = shape_differences(MODEL, FILE)
    assert differences.differing == [("a", (2, 7), (2, 3)), ("b", None, (4,)), ("e", (5, 9), (5, 6))]
    assert differences.unexpected == ["d"]
    assert not shape_differences(MODEL, dict(MODEL))


def test_resuming_names_each_kind_once():
    assert describe_mismatch(MODEL, FILE) == (
        "a is [2, 7] in the checkpoint but [2, 3] with these options (and 1 more shapes); the checkpoint lacks b; "
        "the checkpoint has d, which these options do not build")
    assert describe_mismatch(MODEL, dict(MODEL)) == ""


def test_loading_names_the_first_problem_and_a_vocabulary_sized_one_as_the_dictionary():
    with pytest.raises(DataError, match=r"^ck\.pt: tensor 'a' has shape \(2, 7\) but the configuration stored with "
                                        r"it builds \(2, 3\): "):
        check_shapes("ck.pt", MODEL, FILE, CONFIG, Vocab(10), Vocab(10), ())
    with pytest.raises(DataError, match=r"^ck\.pt: wrong dictionary: tensor 'a' has shape \(2, 7\) but the model "
                                        r"built from d\.en and d\.de \(3 source / 8 target symbols\) needs \(2, 3\)"):
        check_shapes("ck.pt", MODEL, FILE, CONFIG, Vocab(3), Vocab(8), ("d.en", "d.de"))
    with pytest.raises(DataError, match=r"^ck\.pt: tensor 'b' is missing from the checkpoint$"):
        check_shapes("ck.pt", MODEL, {**FILE, "a": torch.zeros(2, 3)}, CONFIG, Vocab(10), Vocab(10), ())
    with pytest.raises(DataError, match=r"^ck\.pt: unexpected tensor 'd' for a transformer model$"):
        check_shapes("ck.pt", MODEL, {**MODEL, "d": torch.zeros(1)}, CONFIG, Vocab(10), Vocab(10), ())
