"""scripts/transformers_sweep.py's builders put every input on the device they are asked
for (the CLIP builder made its images on the CPU, which failed under ``--device cuda``).
Checked on the ``meta`` device: nothing is computed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from scripts import transformers_sweep as sweep  # noqa: E402


@pytest.mark.parametrize("name", ["clip", "whisper", "wav2vec2", "vit_hf", "bert_seqcls",
                                  "electra", "roberta", "mistral"])
def test_builders_put_inputs_on_the_device(name):
    _, inputs = sweep.MODELS[name]("meta")
    devices = {k: v.device.type for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    assert devices and set(devices.values()) == {"meta"}, devices
