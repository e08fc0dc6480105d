"""Models from ``transformers`` and ``timm`` with random weights, for the backend tests.

Each builder takes a size (``"tiny"`` for the CPU reference, ``"full"`` for the
published configuration) and returns ``(model, inputs, loss_fn)``. Nothing is
downloaded: models are built from their configurations.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from tests.torch.torchvision_shim import import_timm

SLOW_ENV = "TESSERA_SLOW_MODEL_TESTS"
"""Set to 1 to run the model tests marked slow (the CPU suite's time is bounded: CI runs
the others)."""


def params(names: list[str], slow: set[str]) -> list[Any]:
    """``names`` as pytest parameters, those in ``slow`` skipped unless ``$SLOW_ENV=1``."""
    import os

    import pytest

    skip = pytest.mark.skipif(os.environ.get(SLOW_ENV) != "1",
                              reason=f"slow on the CPU reference; set {SLOW_ENV}=1 to run it")
    return [pytest.param(n, marks=skip) if n in slow else n for n in names]


def gpt2(size: str, device: str = "cpu") -> tuple[Any, dict[str, Any]]:
    import transformers as T

    if size == "tiny":
        cfg = T.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64)
        batch, seq = 2, 16
    else:
        cfg = T.GPT2Config()  # GPT-2 124M
        batch, seq = 2, 256
    cfg.resid_pdrop = cfg.embd_pdrop = cfg.attn_pdrop = 0.0
    return T.GPT2LMHeadModel(cfg), _lm_inputs(cfg.vocab_size, batch, seq, device)


def llama(size: str, device: str = "cpu") -> tuple[Any, dict[str, Any]]:
    import transformers as T

    if size == "tiny":
        cfg = T.LlamaConfig(
            num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=128, max_position_embeddings=64,
        )
        batch, seq = 2, 16
    else:  # a LLaMA-style 1B configuration
        cfg = T.LlamaConfig(
            num_hidden_layers=16, hidden_size=2048, intermediate_size=8192,
            num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
            max_position_embeddings=2048,
        )
        batch, seq = 1, 256
    return T.LlamaForCausalLM(cfg), _lm_inputs(cfg.vocab_size, batch, seq, device)


def bert(size: str, device: str = "cpu") -> tuple[Any, dict[str, Any]]:
    import transformers as T

    if size == "tiny":
        cfg = T.BertConfig(
            num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
            vocab_size=128, max_position_embeddings=64,
        )
        batch, seq = 2, 16
    else:
        cfg = T.BertConfig()  # BERT-base
        batch, seq = 2, 128
    cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = 0.0
    return T.BertForMaskedLM(cfg), _lm_inputs(cfg.vocab_size, batch, seq, device)


def mixtral(size: str, device: str = "cpu") -> tuple[Any, dict[str, Any]]:
    import transformers as T

    if size == "tiny":
        cfg = T.MixtralConfig(
            num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=128, num_local_experts=4, num_experts_per_tok=2,
            max_position_embeddings=64,
        )
        batch, seq = 2, 16
    else:  # Mixtral's layout (8 experts, top 2, grouped heads) at a size one GPU trains
        cfg = T.MixtralConfig(
            num_hidden_layers=4, hidden_size=1024, intermediate_size=3584,
            num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
            num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=1024,
        )
        batch, seq = 2, 128
    return T.MixtralForCausalLM(cfg), _lm_inputs(cfg.vocab_size, batch, seq, device)


def resnet50(size: str, device: str = "cpu") -> tuple[Any, dict[str, Any]]:
    """ResNet-50; at ``"tiny"`` its bottleneck stages at depths (2, 1, 1, 1) instead of
    (3, 4, 6, 3): each stage's first block (strided, projection shortcut) and one identity
    block, the kinds of block the full net repeats."""
    timm = import_timm()

    if size == "tiny":
        model = timm.create_model("resnet50", pretrained=False, num_classes=10, layers=(2, 1, 1, 1))
    else:
        model = timm.create_model("resnet50", pretrained=False)
    batch, hw = (2, 32) if size == "tiny" else (8, 224)
    return model, {"x": torch.randn(batch, 3, hw, hw, device=device)}


def vit_b16(size: str, device: str = "cpu") -> tuple[Any, dict[str, Any]]:
    timm = import_timm()

    if size == "tiny":
        model = timm.create_model(
            "vit_base_patch16_224", pretrained=False, num_classes=10, img_size=32, depth=2,
            embed_dim=64, num_heads=4,
        )
        batch, hw = 2, 32
    else:
        model = timm.create_model("vit_base_patch16_224", pretrained=False)
        batch, hw = 8, 224
    return model, {"x": torch.randn(batch, 3, hw, hw, device=device)}


def _timm(name: str, size: str, device: str, tiny: dict[str, Any], hw: int = 32,
          **common: Any) -> tuple[Any, dict[str, Any]]:
    """A timm model by name: at ``"tiny"`` with the ``tiny`` constructor arguments, a
    batch of 2 images of ``hw`` x ``hw``; at ``"full"`` its published configuration and
    8 images of 224 x 224. Dropout and drop-path are off (``common``), so a training
    step is deterministic and comparable with eager torch."""
    timm = import_timm()

    kw = {**common, **(tiny if size == "tiny" else {})}
    model = timm.create_model(name, pretrained=False, num_classes=10 if size == "tiny" else 1000,
                              **kw)
    batch, side = (2, hw) if size == "tiny" else (8, 224)
    return model, {"x": torch.randn(batch, 3, side, side, device=device)}


_NO_DROP = {"drop_rate": 0.0, "drop_path_rate": 0.0}


def convnext(size: str, device: str = "cpu") -> tuple[Any, dict[str, Any]]:
    """ConvNeXt-atto: depthwise 7x7 convolutions, layer norm over channels (NHWC)."""
    return _timm("convnext_atto", size, device,
                 {"depths": (1, 1, 1, 1), "dims": (16, 24, 32, 48)}, **_NO_DROP)


def mobilenetv3(size: str, device: str = "cpu") -> tuple[Any, dict[str, Any]]:
    """MobileNetV3-small: depthwise convolutions, squeeze-excite, hardswish and
    hardsigmoid, batch norm."""
    return _timm("mobilenetv3_small_050", size, device, {}, **_NO_DROP)


def densenet(size: str, device: str = "cpu") -> tuple[Any, dict[str, Any]]:
    """DenseNet: concatenations, 2x2 average pooling in the transitions, a max pool."""
    return _timm("densenet121", size, device, {"growth_rate": 8, "block_config": (1, 1, 1, 1)},
                 drop_rate=0.0)


def swin(size: str, device: str = "cpu") -> tuple[Any, dict[str, Any]]:
    """Swin-T: window attention, shifted windows (``torch.roll`` and an attention mask
    in the second block of the first stage), a relative position bias table read by
    index."""
    return _timm("swin_tiny_patch4_window7_224", size, device,
                 {"img_size": 32, "window_size": 4, "embed_dim": 16, "depths": (2, 2),
                  "num_heads": (2, 4)}, **_NO_DROP)


def _lm_inputs(vocab: int, batch: int, seq: int, device: str) -> dict[str, Any]:
    ids = torch.randint(0, vocab, (batch, seq), device=device)
    return {"input_ids": ids, "labels": ids}


def _loss(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out.float().pow(2).mean()
    return out.loss


def _output(out: Any) -> torch.Tensor:
    return out if isinstance(out, torch.Tensor) else out.logits


def compare_training_step(
    model: torch.nn.Module,
    inputs: dict[str, Any],
    compile_fn: Callable[[torch.nn.Module], Any],
) -> tuple[float, float]:
    """(forward error, gradient error) of one training step, each relative to the largest
    magnitude of the eager value (output, or gradient over all parameters)."""
    fwd, grad, _ = training_step_errors(model, inputs, compile_fn)
    return fwd, grad


def training_step_errors(
    model: torch.nn.Module,
    inputs: dict[str, Any],
    compile_fn: Callable[[torch.nn.Module], Any],
) -> tuple[float, float, float]:
    """:func:`compare_training_step`'s two errors and the largest difference of the
    floating-point buffers after the step (batch norm's running statistics), relative to
    each buffer's largest magnitude (or to 1, for buffers below it)."""
    ref_model = copy.deepcopy(model)
    out = compile_fn(model)(**inputs)
    _loss(out).backward()
    ref = ref_model(**inputs)
    _loss(ref).backward()
    o, r = _output(out).float(), _output(ref).float()
    fwd = ((o - r).abs().max() / r.abs().max()).item()
    ref_grads = {n: p.grad for n, p in ref_model.named_parameters() if p.grad is not None}
    scale = max(g.abs().max().item() for g in ref_grads.values())
    grads = dict(model.named_parameters())
    worst = 0.0
    for n, g in ref_grads.items():
        got = grads[n].grad
        assert got is not None, f"no gradient for {n}"
        worst = max(worst, (got.float() - g.float()).abs().max().item() / scale)
    bufs = 0.0
    ref_bufs = dict(ref_model.named_buffers())
    for n, b in model.named_buffers():
        r = ref_bufs[n]
        if b.is_floating_point() and b.numel():
            # relative to the statistic's size, absolute for ones near 0 (a mean of 0)
            bufs = max(bufs, ((b - r).abs().max() / r.abs().max().clamp_min(1.0)).item())
    return fwd, worst, bufs


def errors_against_float64(
    model: torch.nn.Module,
    inputs: dict[str, Any],
    compile_fn: Callable[[torch.nn.Module], Any],
) -> dict[str, tuple[float, float]]:
    """One training step of ``compile_fn(model)`` and of eager ``model`` against a float64
    copy of the model (floating inputs widened): ``{"tessera": (output error, gradient
    error), "eager": (...)}``, each relative to the largest float64 value (of the output,
    or of any parameter's gradient). The float64 step is the reference where eager's own
    kernels differ from it (cuDNN's convolution algorithms, TF32)."""
    ref_model = copy.deepcopy(model).double()
    eager_model = copy.deepcopy(model)
    wide = {k: v.double() if torch.is_tensor(v) and v.is_floating_point() else v
            for k, v in inputs.items()}
    ref = ref_model(**wide)
    _loss(ref).double().backward()
    ref_grads = {n: p.grad for n, p in ref_model.named_parameters() if p.grad is not None}
    scale = max(g.abs().max().item() for g in ref_grads.values())
    r = _output(ref)
    errors = {}
    for name, m, fn in (("tessera", model, compile_fn(model)), ("eager", eager_model, eager_model)):
        out = fn(**inputs)
        _loss(out).backward()
        fwd = ((_output(out).double() - r).abs().max() / r.abs().max()).item()
        params = dict(m.named_parameters())
        worst = 0.0
        for n, g in ref_grads.items():
            got = params[n].grad
            assert got is not None, f"{name}: no gradient for {n}"
            worst = max(worst, (got.double() - g).abs().max().item() / scale)
        errors[name] = (fwd, worst)
    return errors


_SMALL = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
              vocab_size=64, max_position_embeddings=32)
"""The shape of the tiny decoders below: 2 layers, hidden 32, 4 heads of 8, vocabulary 64."""


def _tiny(model_cls: str, config_cls: str, **cfg: Any) -> Callable[..., tuple[Any, dict[str, Any]]]:
    def build(size: str, device: str = "cpu") -> tuple[Any, dict[str, Any]]:
        import transformers as T

        if size != "tiny":
            raise ValueError(f"{model_cls}: only the tiny configuration is built here")
        config = getattr(T, config_cls)(**cfg)
        return getattr(T, model_cls)(config), _lm_inputs(config.vocab_size, 2, 8, device)

    return build


_NO_DROPOUT = dict(attention_dropout=0.0, hidden_dropout=0.0)


def _whisper(size: str, device: str = "cpu") -> tuple[Any, dict[str, Any]]:
    """Whisper: 1-D convolutions over mel features, an encoder-decoder (one layer each)."""
    import transformers as T

    if size != "tiny":
        raise ValueError("whisper: only the tiny configuration is built here")
    cfg = T.WhisperConfig(vocab_size=64, num_mel_bins=8, encoder_layers=1, decoder_layers=1,
                          encoder_attention_heads=4, decoder_attention_heads=4,
                          encoder_ffn_dim=64, decoder_ffn_dim=64, d_model=32,
                          max_source_positions=8, max_target_positions=16, dropout=0.0,
                          attention_dropout=0.0, activation_dropout=0.0, pad_token_id=0,
                          bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
                          suppress_tokens=None, begin_suppress_tokens=None)
    feats = torch.randn(2, 8, 16, device=device)
    labels = torch.randint(3, 64, (2, 8), device=device)
    return T.WhisperForConditionalGeneration(cfg), {"input_features": feats, "labels": labels}

MORE_MODELS: dict[str, Callable[..., tuple[Any, dict[str, Any]]]] = {
    "phi": _tiny("PhiForCausalLM", "PhiConfig", **_SMALL, partial_rotary_factor=0.5,
                    resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0),
    "gpt_neox": _tiny("GPTNeoXForCausalLM", "GPTNeoXConfig", **_SMALL, rotary_pct=0.25,
                         **_NO_DROPOUT),
    "gemma2": _tiny("Gemma2ForCausalLM", "Gemma2Config", **_SMALL, num_key_value_heads=1,
                       head_dim=8, sliding_window=4),
    "falcon": _tiny("FalconForCausalLM", "FalconConfig", num_hidden_layers=2, hidden_size=32,
                       num_attention_heads=4, vocab_size=64, multi_query=True,
                       new_decoder_architecture=False, **_NO_DROPOUT),
    "gptj": _tiny("GPTJForCausalLM", "GPTJConfig", n_layer=2, n_embd=32, n_head=4,
                     vocab_size=64, n_positions=32, rotary_dim=4, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0),
    "opt": _tiny("OPTForCausalLM", "OPTConfig", num_hidden_layers=2, hidden_size=32,
                    ffn_dim=64, num_attention_heads=4, vocab_size=64, max_position_embeddings=32,
                    word_embed_proj_dim=32, dropout=0.0, attention_dropout=0.0),
    "bloom": _tiny("BloomForCausalLM", "BloomConfig", n_layer=2, hidden_size=32, n_head=4,
                      vocab_size=64, **_NO_DROPOUT),
    "t5": _tiny("T5ForConditionalGeneration", "T5Config", num_layers=1, num_decoder_layers=1,
                   d_model=32, d_kv=8, d_ff=64, num_heads=4, vocab_size=64, dropout_rate=0.0,
                   relative_attention_num_buckets=8, decoder_start_token_id=0, pad_token_id=0),
    "bart": _tiny("BartForConditionalGeneration", "BartConfig", encoder_layers=1,
                     decoder_layers=1, d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64,
                     encoder_attention_heads=4, decoder_attention_heads=4, vocab_size=64,
                     max_position_embeddings=32, dropout=0.0, attention_dropout=0.0,
                     activation_dropout=0.0),
    "deberta_v2": _tiny("DebertaV2ForMaskedLM", "DebertaV2Config", **_SMALL, pad_token_id=0,
                        relative_attention=True, position_buckets=4, max_relative_positions=16,
                        pos_att_type=["p2c", "c2p"], hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0),
    "whisper": _whisper,
    "distilbert": _tiny("DistilBertForMaskedLM", "DistilBertConfig", n_layers=2, dim=32,
                           hidden_dim=64, n_heads=4, vocab_size=64, max_position_embeddings=32,
                           dropout=0.0, attention_dropout=0.0),
}
"""More ``transformers`` architectures, tiny configurations only (the CPU tests): rotary
variants (partial, interleaved), learned and ALiBi positions, multi-query attention,
soft-capping with sliding windows, encoder-decoders (one layer each side, Whisper's over
1-D convolutions of audio features), an encoder, and DeBERTa-v2's relative attention
(log buckets: ``sign``, ``ceil``; ``gather`` and its ``scatter_add`` backward). (Mistral and Qwen2 are LLaMA's graph with other options: the sweep in
docs/TORCH.md covers them.)"""

MODELS: dict[str, Callable[..., tuple[Any, dict[str, Any]]]] = {
    "gpt2": gpt2, "llama": llama, "bert": bert, "mixtral": mixtral,
    "resnet50": resnet50, "vit_b16": vit_b16,
}

VISION_MODELS: dict[str, Callable[..., tuple[Any, dict[str, Any]]]] = {
    "convnext": convnext, "mobilenetv3": mobilenetv3, "densenet": densenet, "swin": swin,
}
"""More timm families for the CPU reference (tests/torch/test_torch_vision.py)."""
