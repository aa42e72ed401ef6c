"""The option groups nmt-train owns (besides the components' own configs)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from nmt_toolkit.config import check_ranges, option
from nmt_toolkit.criterions import derived_metrics
from nmt_toolkit.errors import UsageError

# what validation reports (train_loop.validate: derived_metrics of the summed criterion outputs), and with
# --eval-bleu also "bleu" (training/valid_bleu.py)
VALIDATION_METRICS = tuple(derived_metrics({"sample_size": 1.0, "ntokens": 1.0}))


@dataclass
class OptimizationConfig:
    lr: Optional[float] = option(None, "learning rate: the peak for inverse_sqrt, the constant for fixed; with noam a "
                                 "scale factor of eq. 3 (default: 5e-4; 1.0 for noam)", low=0)
    max_update: int = option(0, "stop after this many optimizer updates (0 = no limit)", low=0)
    max_epoch: int = option(0, "stop after this many epochs (0 = no limit)", low=0)
    update_freq: int = option(1, "accumulate gradients over N batches per update (N× larger effective batch)", low=1)
    clip_norm: float = option(0.0, "clip the global gradient norm to this value (0 = no clipping)", low=0)
    stop_time_hours: float = option(0.0, "stop (saving a checkpoint) after this much wall-clock time (0 = no limit)",
                                    low=0)
    max_skipped_updates: int = option(10, "stop with an error after this many non-finite updates in a row", low=1)
    validate_interval: int = option(1, "validate every N epochs", low=1)
    validate_interval_updates: int = option(0, "also validate every N updates (0 = only at epoch ends)", low=0)
    validate_at_start: bool = option(True, "on a fresh start, validate once before the first update (the "
                                     "baseline the later validations are read against)")
    disable_validation: bool = option(False, "do not validate")
    valid_subset: str = option("valid", "comma-separated validation splits")
    train_subset: str = option("train", "training split")
    cpu: bool = option(False, "train on CPU even when a GPU is available")
    compile: str = option("auto", "torch.compile the model and the loss for training (auto = on CUDA only; the number of "
                          "graphs compiled is logged)", choices=["auto", "on", "off"])
    pad_to_multiple: Optional[int] = option(None, "pad source and target lengths of each training batch to a "
                                            "multiple of N with pad tokens (fewer shapes to compile; the loss "
                                            "is unchanged); default: 8 when compiling on CUDA, else 1", low=1)

    def validate(self) -> None:
        check_ranges(self)


@dataclass
class CheckpointConfig:
    save_dir: str = option("checkpoints", "folder for checkpoints and config.yaml (new, empty, or an earlier "
                                          "--save-dir)", output="folder")
    restore_file: str = option("checkpoint_last.pt", "checkpoint to resume from (relative to --save-dir)")
    save_interval: int = option(1, "save a checkpoint every N epochs", low=1)
    save_interval_updates: int = option(0, "also save checkpoint_<epoch>_<updates>.pt every N updates", low=0)
    save_interval_minutes: float = option(0.0, "also save checkpoint_<epoch>_<updates>.pt every N minutes "
                                          "(the paper: 10)", low=0)
    keep_last_epochs: int = option(-1, "keep only the last N epoch checkpoints (-1 = all)", low=-1)
    keep_interval_updates: int = option(-1, "keep only the last N update/minute checkpoints (-1 = all)", low=-1)
    keep_best_checkpoints: int = option(-1, "keep the N best checkpoints by the validation metric (-1 = off)", low=-1)
    no_epoch_checkpoints: bool = option(False, "write only checkpoint_last.pt and checkpoint_best.pt")
    no_last_checkpoints: bool = option(False, "do not write checkpoint_last.pt")
    no_save: bool = option(False, "write no checkpoints at all")
    best_checkpoint_metric: str = option("loss", "validation metric for checkpoint_best.pt and --patience")
    maximize_best_checkpoint_metric: bool = option(False, "a larger metric is better")
    patience: int = option(-1, "stop after N validations without improvement (-1 = never)", low=-1)
    reset_optimizer: bool = option(False, "resume without the optimizer state")
    reset_lr_scheduler: bool = option(False, "resume without the LR scheduler state")
    reset_dataloader: bool = option(False, "resume at the start of epoch 1 of the data")
    reset_meters: bool = option(False, "resume without the logged meters")
    finetune_from_model: Optional[str] = option(
        None, "start from this model folder's weights with a fresh optimizer, LR schedule and counters; the "
              "architecture comes from the folder, and DATA must be built with its dictionaries (nmt-preprocess "
              "--model-folder); ignored when --save-dir already holds checkpoint_last.pt (the fine-tuning resumes)",
        metavar="FOLDER")
    save_model_folder: Optional[str] = option(
        None, "at the end of the run, write a model folder (weights, config, dictionaries, subword models) from "
              "checkpoint_best.pt, or checkpoint_last.pt when there is no best (an earlier model folder there is "
              "replaced; any other non-empty folder refused)", metavar="DIR", output="folder")

    def validate(self) -> None:
        if self.best_checkpoint_metric not in VALIDATION_METRICS + ("bleu",):
            raise UsageError(f"unknown --best-checkpoint-metric {self.best_checkpoint_metric!r}: validation "
                             f"produces {', '.join(VALIDATION_METRICS)}, and bleu with --eval-bleu")
        if self.finetune_from_model and (self.reset_optimizer or self.reset_lr_scheduler or self.reset_meters
                                         or self.reset_dataloader or self.restore_file != "checkpoint_last.pt"):
            raise UsageError("--finetune-from-model starts afresh from a model folder's weights: it takes no "
                             "--restore-file or --reset-* flags")
        if self.save_model_folder and self.no_save:
            raise UsageError("--save-model-folder is written from the run's checkpoints, but --no-save writes none")
        check_ranges(self)


@dataclass
class DistributedConfig:
    distributed_world_size: int = option(1, "spawn N local training processes (torchrun sets this itself)", low=1)
    distributed_backend: str = option("auto", "auto = nccl on CUDA, gloo on CPU", choices=["auto", "nccl", "gloo"])
    distributed_timeout: float = option(600.0, "seconds before a collective waiting on a dead rank gives up",
                                        low=0, low_open=True)
    bucket_cap_mb: float = option(0.0, "DDP gradient bucket size in MB (all-reduced while the backward pass "
                                  "goes on); 0 = sized for the model: its gradients / 16, within 25-100", low=0)

    def validate(self) -> None:
        check_ranges(self)


@dataclass
class PrecisionConfig:
    fp16: bool = option(False, "CUDA mixed precision: fp16 autocast with dynamic loss scaling (GradScaler)")
    amp: bool = option(False, "alias of --fp16, as fairseq users know it")
    bf16: bool = option(False, "bfloat16 autocast (CPU and CUDA); no loss scaling needed")
    fp16_init_scale: float = option(128.0, "initial loss scale", low=0, low_open=True)
    fp16_scale_window: int = option(2000, "updates without overflow before the loss scale doubles", low=1)
    min_loss_scale: float = option(1e-4, "stop with an error when the loss scale falls below this", low=0)


@dataclass
class LoggingConfig:
    log_format: str = option("simple", "progress format on stderr", choices=["tqdm", "simple", "json", "none"])
    log_interval: int = option(100, "log training statistics every N updates", low=1)
    tensorboard_logdir: Optional[str] = option(None, "also write TensorBoard scalars here (needs tensorboard)",
                                               output="folder")
    peak_tflops: Optional[float] = option(None, "dense matrix peak (TFLOP/s per device) for the logged mfu; default: "
                                          "a table of known GPUs, else a timed 8192^3 product; no mfu on CPU",
                                          low=0, low_open=True)
    dry_run: bool = option(False, "build the model, print its summary (parameters, FLOPs) and exit")
    vocab_size: Optional[int] = option(None, "with --dry-run and no data folder: a shared vocabulary of V symbols",
                                       low=1)
    no_progress_bar: bool = option(False, "same as --log-format simple")


def check_together(opt: OptimizationConfig, ck: CheckpointConfig, eval_bleu: bool = False) -> None:
    """Options that contradict each other across groups (each group's own checks are its ``validate``)."""
    if opt.disable_validation and ck.patience > 0:
        raise UsageError(f"--patience {ck.patience} needs validation, but --disable-validation is set")
    if opt.disable_validation and eval_bleu:
        raise UsageError("--eval-bleu needs validation, but --disable-validation is set")
    if ck.best_checkpoint_metric == "bleu":
        if not eval_bleu:
            raise UsageError("--best-checkpoint-metric bleu needs --eval-bleu (validation computes BLEU only then)")
        if not ck.maximize_best_checkpoint_metric:
            raise UsageError("--best-checkpoint-metric bleu needs --maximize-best-checkpoint-metric (a higher "
                             "BLEU is better)")
