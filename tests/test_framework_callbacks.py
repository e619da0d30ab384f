"""The framework callbacks' promises that need no sidecar: lazy imports, and
no error of trainprobe's ever reaches the training loop."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from tests.support import child_env


def test_importing_the_hooks_imports_no_framework() -> None:
    code = (
        "import sys, trainprobe.hooks\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('lightning', 'pytorch_lightning', 'transformers', 'accelerate'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=child_env(), timeout=60)


@pytest.mark.slow
def test_a_failing_lightning_callback_warns_once_and_training_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pl = pytest.importorskip("lightning.pytorch")
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from trainprobe.hooks.lightning import LivenessProbeCallback

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

        def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    # interval_ms=5 makes LivenessProbeHook raise ValueError inside setup().
    callback = LivenessProbeCallback(interval_ms=5, target="unix:///nonexistent/tp.sock")
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=3,
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    data = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4)
    with caplog.at_level(logging.DEBUG, logger="trainprobe.hooks"):
        trainer.fit(Tiny(), data)
    assert trainer.global_step == 3 and callback.hook is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "setup failed; training goes on" in warnings[0].getMessage()
