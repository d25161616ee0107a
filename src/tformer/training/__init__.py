"""Training building blocks: optimisers, learning-rate schedules, losses and checkpoints; the training
loop is a plain function over them."""

from tformer.training.checkpoint import (
    load_config,
    load_model,
    load_training_state,
    load_weights,
    save_checkpoint,
    tokenizer_dir,
)
from tformer.training.losses import TokenLosses, label_smoothed_nll, nll_sum, token_losses
from tformer.training.optim import OptimConfig, build_optimizer, param_groups
from tformer.training.rng import rng_states, set_rng_states
from tformer.training.schedules import (
    ScheduleConfig,
    build_scheduler,
    constant_lr,
    cosine_lr,
    fitted_lr,
    inverse_sqrt_lr,
    linear_lr,
)

__all__ = [
    "OptimConfig", "ScheduleConfig", "TokenLosses", "build_optimizer", "build_scheduler", "constant_lr",
    "cosine_lr", "fitted_lr", "inverse_sqrt_lr", "label_smoothed_nll", "linear_lr", "load_config", "load_model",
    "load_training_state", "load_weights", "nll_sum", "param_groups", "rng_states", "save_checkpoint",
    "set_rng_states", "token_losses", "tokenizer_dir",
]
