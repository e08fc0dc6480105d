"""Sweep tiny ``transformers`` models through ``torch.compile(backend="tessera")`` against
eager torch on the CPU reference (or CUDA with ``--device cuda``), one JSON line per model
and mode; the table of docs/TORCH.md ("More transformers architectures") comes from it.

    python scripts/transformers_sweep.py eval,train,mask_train,dyn_eval [name ...]

Modes: ``eval`` (forward, no grad), ``train`` (one training step: output and every
parameter gradient), ``mask_train`` (the same with an attention mask padding row 0 on the
left and row 1 on the right), ``dyn_eval`` (``dynamic=True``, three sequence lengths),
``bf16_eval`` (the model in bfloat16 against float32 eager: at most twice eager bf16's
error plus 1e-2).
Each line has the relative error (``err``), the ops left to torch (``fallbacks``, with
``reasons``), partitions that fell back at run time (``runtime``) or the exception
(``crash``). Models are built from their configuration classes with random weights:
nothing is downloaded. Needs ``transformers`` (``pip install -e .[models]``).

With ``--device cuda`` Tessera runs on the GPU and the eager reference on the CPU: CUDA's
eager kernels are not a reference. cuDNN convolutions default to TF32 in float32 (the
likely cause of SegFormer's and ConvNeXt's 5e-4 training errors in an H100 sweep that
compared with eager CUDA), and even in float64 cuDNN's weight gradients were measured
1.8e-4 (LeViT) and 3.2e-6 (GhostNet) away from the CPU's, where Tessera's CUDA
gradients are within 3e-10 and 1.4e-9 of them (H200, 2026-11-29).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tessera.torch as tt  # noqa: E402
from tests.torch.torch_models import MODELS as TEST_MODELS  # noqa: E402

VOCAB, BATCH, SEQ = 128, 2, 12
SMALL = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
             vocab_size=VOCAB, max_position_embeddings=64)
NO_DROPOUT = dict(attention_dropout=0.0, hidden_dropout=0.0)


def _ids(device: str) -> dict[str, Any]:
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), device=device)
    return {"input_ids": ids, "labels": ids}


def _config(model_cls: str, config_cls: str, **cfg: Any) -> Callable[[str], tuple[Any, dict]]:
    def build(device: str) -> tuple[Any, dict]:
        import transformers as T

        return getattr(T, model_cls)(getattr(T, config_cls)(**cfg)), _ids(device)

    return build


def _roberta(device: str) -> tuple[Any, dict]:
    import transformers as T

    cfg = T.RobertaConfig(**SMALL, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                          pad_token_id=1)
    inputs = _ids(device)
    ids = inputs["input_ids"].clamp(min=2)  # no padding tokens
    return T.RobertaForMaskedLM(cfg), {"input_ids": ids, "labels": ids}


def _test_model(name: str) -> Callable[[str], tuple[Any, dict]]:
    return lambda device: TEST_MODELS[name]("tiny", device=device)


MODELS: dict[str, Callable[[str], tuple[Any, dict]]] = {
    "mistral": _config("MistralForCausalLM", "MistralConfig", **SMALL, num_key_value_heads=2),
    "qwen2": _config("Qwen2ForCausalLM", "Qwen2Config", **SMALL, num_key_value_heads=2),
    "phi": _config("PhiForCausalLM", "PhiConfig", **SMALL, partial_rotary_factor=0.5,
                   resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0),
    "neox": _config("GPTNeoXForCausalLM", "GPTNeoXConfig", **SMALL, rotary_pct=0.25,
                    **NO_DROPOUT),
    "opt": _config("OPTForCausalLM", "OPTConfig", num_hidden_layers=2, hidden_size=64,
                   ffn_dim=128, num_attention_heads=4, vocab_size=VOCAB,
                   max_position_embeddings=64, word_embed_proj_dim=64, dropout=0.0,
                   attention_dropout=0.0),
    "gemma": _config("GemmaForCausalLM", "GemmaConfig", **SMALL, num_key_value_heads=1,
                     head_dim=16),
    "gemma2": _config("Gemma2ForCausalLM", "Gemma2Config", **SMALL, num_key_value_heads=1,
                      head_dim=16, sliding_window=8),
    "falcon": _config("FalconForCausalLM", "FalconConfig", num_hidden_layers=2, hidden_size=64,
                      num_attention_heads=4, vocab_size=VOCAB, multi_query=True,
                      new_decoder_architecture=False, **NO_DROPOUT),
    "t5": _config("T5ForConditionalGeneration", "T5Config", num_layers=2, num_decoder_layers=2,
                  d_model=64, d_kv=16, d_ff=128, num_heads=4, vocab_size=VOCAB,
                  dropout_rate=0.0, relative_attention_num_buckets=8,
                  decoder_start_token_id=0, pad_token_id=0),
    "bart": _config("BartForConditionalGeneration", "BartConfig", encoder_layers=2,
                    decoder_layers=2, d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128,
                    encoder_attention_heads=4, decoder_attention_heads=4, vocab_size=VOCAB,
                    max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
                    activation_dropout=0.0),
    "roberta": _roberta,
    "distilbert": _config("DistilBertForMaskedLM", "DistilBertConfig", n_layers=2, dim=64,
                          hidden_dim=128, n_heads=4, vocab_size=VOCAB,
                          max_position_embeddings=64, dropout=0.0, attention_dropout=0.0),
    "qwen3": _config("Qwen3ForCausalLM", "Qwen3Config", **SMALL, num_key_value_heads=2,
                     head_dim=16),
    "stablelm": _config("StableLmForCausalLM", "StableLmConfig", **SMALL,
                        num_key_value_heads=2, partial_rotary_factor=0.25, **NO_DROPOUT),
    "gptj": _config("GPTJForCausalLM", "GPTJConfig", n_layer=2, n_embd=64, n_head=4,
                    vocab_size=VOCAB, n_positions=64, rotary_dim=8, resid_pdrop=0.0,
                    embd_pdrop=0.0, attn_pdrop=0.0),
    "bloom": _config("BloomForCausalLM", "BloomConfig", n_layer=2, hidden_size=64, n_head=4,
                     vocab_size=VOCAB, **NO_DROPOUT),
    "olmo": _config("OlmoForCausalLM", "OlmoConfig", **SMALL, num_key_value_heads=2),
    **{name: _test_model(name) for name in ("gpt2", "llama", "bert", "mixtral")},
}



def _masked_lm(model_cls: str, config_cls: str, pad: int = 1, other_labels: bool = False,
               **cfg: Any) -> Callable[[str], tuple[Any, dict]]:
    """An encoder with a masked-LM head; its token ids avoid the padding id (position
    ids counted from the padding, as RoBERTa's, would shift otherwise). The labels are
    the ids, or with ``other_labels`` other random ids (Funnel's tied head predicts its
    input ids so well at random weights that the loss, ~1e-7, is float32 noise)."""
    def build(device: str) -> tuple[Any, dict]:
        import transformers as T

        config = getattr(T, config_cls)(**cfg, pad_token_id=pad)
        ids = _ids(device)["input_ids"].clamp(min=pad + 1)
        labels = torch.randint(pad + 1, VOCAB, ids.shape, device=device) if other_labels \
            else ids
        return getattr(T, model_cls)(config), {"input_ids": ids, "labels": labels}

    return build


def _images(model_cls: str, config_cls: str, side: int = 32, labels: bool = True,
            dtype: torch.dtype = torch.float32, **cfg: Any) -> Callable[[str], tuple[Any, dict]]:
    def build(device: str) -> tuple[Any, dict]:
        import transformers as T

        config = getattr(T, config_cls)(**cfg)
        x = torch.randn(BATCH, 3, side, side, device=device, dtype=dtype)
        inputs = {"pixel_values": x}
        if labels:
            inputs["labels"] = torch.randint(0, 10, (BATCH,), device=device)
        return getattr(T, model_cls)(config).to(dtype), inputs

    return build


def _seq_cls(model_cls: str, config_cls: str, **cfg: Any) -> Callable[[str], tuple[Any, dict]]:
    """A sequence-classification head (3 labels) pooling at the last token before the
    padding (``argmax`` of the padding positions): row 1 ends in 3 padding tokens."""
    def build(device: str) -> tuple[Any, dict]:
        import transformers as T

        config = getattr(T, config_cls)(**cfg, num_labels=3, pad_token_id=0)
        ids = _ids(device)["input_ids"].clamp(min=1)
        ids[1, -3:] = 0
        labels = torch.randint(0, 3, (BATCH,), device=device)
        return getattr(T, model_cls)(config), {"input_ids": ids, "labels": labels}

    return build


def _whisper(device: str) -> tuple[Any, dict]:
    import transformers as T

    cfg = T.WhisperConfig(vocab_size=VOCAB, num_mel_bins=8, encoder_layers=2, decoder_layers=2,
                          encoder_attention_heads=4, decoder_attention_heads=4,
                          encoder_ffn_dim=128, decoder_ffn_dim=128, d_model=64,
                          max_source_positions=16, max_target_positions=32, dropout=0.0,
                          attention_dropout=0.0, activation_dropout=0.0, pad_token_id=0,
                          bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
                          suppress_tokens=None, begin_suppress_tokens=None)
    feats = torch.randn(BATCH, 8, 32, device=device)
    labels = torch.randint(3, VOCAB, (BATCH, SEQ), device=device)
    return T.WhisperForConditionalGeneration(cfg), {"input_features": feats, "labels": labels}


def _clip(device: str) -> tuple[Any, dict]:
    import transformers as T

    text = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, vocab_size=VOCAB, max_position_embeddings=64,
                eos_token_id=2, bos_token_id=1, pad_token_id=0)
    vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, image_size=32, patch_size=8)
    cfg = T.CLIPConfig(text_config=text, vision_config=vision, projection_dim=32)
    ids = torch.randint(3, VOCAB, (BATCH, SEQ), device=device)
    ids[:, -1] = 2  # the pooled token: the end of text
    pixels = torch.randn(BATCH, 3, 32, 32, device=device)
    return T.CLIPModel(cfg), {"input_ids": ids, "pixel_values": pixels, "return_loss": True}


def _wav2vec2(device: str) -> tuple[Any, dict]:
    import transformers as T

    cfg = T.Wav2Vec2Config(vocab_size=16, hidden_size=64, num_hidden_layers=2,
                           num_attention_heads=4, intermediate_size=128, conv_dim=(16, 16),
                           conv_stride=(4, 2), conv_kernel=(8, 4), num_conv_pos_embeddings=8,
                           num_conv_pos_embedding_groups=4, hidden_dropout=0.0,
                           attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0,
                           final_dropout=0.0, layerdrop=0.0, mask_time_prob=0.0,
                           mask_feature_prob=0.0)
    return T.Wav2Vec2ForCTC(cfg), {"input_values": torch.randn(BATCH, 256, device=device)}


def _timm(name: str, dtype: torch.dtype = torch.float32, side: int = 32,
          **kw: Any) -> Callable[[str], tuple[Any, dict]]:
    """A timm model with random weights, dropout and drop-path off, a batch of 2 images;
    float64 for the batch-norm nets (over 2 images of a few pixels the float32 batch
    statistics of two summation orders differ widely)."""
    def build(device: str) -> tuple[Any, dict]:
        from tests.torch.torchvision_shim import import_timm

        timm = import_timm()
        model = timm.create_model(name, pretrained=False, num_classes=10, **kw)
        x = torch.randn(BATCH, 3, side, side, device=device)
        return model.to(dtype), {"x": x.to(dtype)}

    return build


_NODROP = {"drop_rate": 0.0, "drop_path_rate": 0.0}
F64 = torch.float64

MORE: dict[str, Callable[[str], tuple[Any, dict]]] = {
    "mistral_sliding": _config("MistralForCausalLM", "MistralConfig", **SMALL,
                               num_key_value_heads=2, sliding_window=4),
    "qwen2_moe": _config("Qwen2MoeForCausalLM", "Qwen2MoeConfig", **SMALL, num_key_value_heads=2,
                         num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                         shared_expert_intermediate_size=64, decoder_sparse_step=1),
    "qwen3_moe": _config("Qwen3MoeForCausalLM", "Qwen3MoeConfig", **SMALL, num_key_value_heads=2,
                         head_dim=16, num_experts=4, num_experts_per_tok=2,
                         moe_intermediate_size=32),
    "phi3": _config("Phi3ForCausalLM", "Phi3Config", **SMALL, num_key_value_heads=2,
                    pad_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0),
    "gemma3": _config("Gemma3ForCausalLM", "Gemma3TextConfig", **SMALL, num_key_value_heads=1,
                      head_dim=16, sliding_window=4,
                      layer_types=["sliding_attention", "full_attention"]),
    "gpt_bigcode": _config("GPTBigCodeForCausalLM", "GPTBigCodeConfig", n_layer=2, n_embd=64,
                           n_head=4, vocab_size=VOCAB, n_positions=64, multi_query=True,
                           resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
    "codegen": _config("CodeGenForCausalLM", "CodeGenConfig", n_layer=2, n_embd=64, n_head=4,
                       vocab_size=VOCAB, n_positions=64, n_ctx=64, rotary_dim=8,
                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
    "gpt_neo": _config("GPTNeoForCausalLM", "GPTNeoConfig", num_layers=2, hidden_size=64,
                       num_heads=4, vocab_size=VOCAB, max_position_embeddings=64,
                       attention_types=[[["global", "local"], 1]], window_size=4,
                       resid_dropout=0.0, embed_dropout=0.0, attention_dropout=0.0),
    "xglm": _config("XGLMForCausalLM", "XGLMConfig", num_layers=2, d_model=64,
                    attention_heads=4, ffn_dim=128, vocab_size=VOCAB,
                    max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
                    activation_dropout=0.0, layerdrop=0.0),
    "electra": _masked_lm("ElectraForMaskedLM", "ElectraConfig", pad=0, **SMALL,
                          embedding_size=32, hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0),
    "albert": _masked_lm("AlbertForMaskedLM", "AlbertConfig", pad=0, **SMALL, embedding_size=32,
                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
    "deberta_v2": _masked_lm("DebertaV2ForMaskedLM", "DebertaV2Config", pad=0, **SMALL,
                             relative_attention=True, position_buckets=8,
                             max_relative_positions=16, pos_att_type=["p2c", "c2p"],
                             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
    "xlm_roberta": _masked_lm("XLMRobertaForMaskedLM", "XLMRobertaConfig", pad=1, **SMALL,
                              hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
    "mpnet": _masked_lm("MPNetForMaskedLM", "MPNetConfig", pad=1, **SMALL,
                        hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0),
    "modernbert": _masked_lm("ModernBertForMaskedLM", "ModernBertConfig", pad=0,
                             **{k: v for k, v in SMALL.items() if k != "max_position_embeddings"},
                             max_position_embeddings=64, global_attn_every_n_layers=2,
                             local_attention=4, bos_token_id=1, eos_token_id=2,
                             cls_token_id=1, sep_token_id=2, embedding_dropout=0.0,
                             mlp_dropout=0.0, attention_dropout=0.0),
    "llama_seqcls": _seq_cls("LlamaForSequenceClassification", "LlamaConfig", **SMALL,
                             num_key_value_heads=2),
    "bert_seqcls": _seq_cls("BertForSequenceClassification", "BertConfig", **SMALL,
                            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
    "whisper": _whisper,
    "vit_hf": _images("ViTForImageClassification", "ViTConfig", image_size=32, patch_size=8,
                      hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=128, num_labels=10, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0),
    "deit_hf": _images("DeiTForImageClassification", "DeiTConfig", image_size=32, patch_size=8,
                       hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=128, num_labels=10, hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0),
    "swin_hf": _images("SwinForImageClassification", "SwinConfig", image_size=32, patch_size=2,
                       embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=4,
                       num_labels=10, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                       drop_path_rate=0.0),
    "convnext_hf": _images("ConvNextForImageClassification", "ConvNextConfig",
                           hidden_sizes=[16, 24, 32, 48], depths=[1, 1, 1, 1], num_labels=10),
    "resnet_hf": _images("ResNetForImageClassification", "ResNetConfig", dtype=F64,
                         embedding_size=16,
                         hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                         layer_type="bottleneck", num_labels=10),
    "clip": _clip,
    "wav2vec2": _wav2vec2,
    "segformer": _images("SegformerForSemanticSegmentation", "SegformerConfig", labels=False,
                         num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                         hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2],
                         num_attention_heads=[1, 2], mlp_ratios=[2, 2],
                         decoder_hidden_size=32, num_labels=3, hidden_dropout_prob=0.0,
                         attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0,
                         drop_path_rate=0.0),
}
"""More architectures: decoders (mixture-of-experts, sliding windows, multi-query), encoders
(relative positions, factorized embeddings, alternating local attention), an
encoder-decoder for audio, vision and multimodal models from ``transformers``."""

TIMM: dict[str, Callable[[str], tuple[Any, dict]]] = {
    "timm_resnet18": _timm("resnet18", F64),
    "timm_resnet50d": _timm("resnet50d", F64, layers=(1, 1, 1, 1)),
    "timm_efficientnet_b0": _timm("efficientnet_b0", F64, **_NODROP),
    "timm_vit_small": _timm("vit_small_patch16_224", img_size=32, patch_size=8, depth=2,
                            **_NODROP),
    "timm_deit_tiny": _timm("deit_tiny_patch16_224", img_size=32, patch_size=8, depth=2,
                            **_NODROP),
    "timm_eva02_tiny": _timm("eva02_tiny_patch14_224", img_size=28, side=28, depth=2,
                             **_NODROP),
    "timm_maxvit": _timm("maxvit_tiny_tf_224", side=64, img_size=64, depths=(1, 1, 1, 1),
                         embed_dim=(32, 32, 64, 64), **_NODROP),
    "timm_coatnet": _timm("coatnet_nano_rw_224", side=64, img_size=64, depths=(1, 1, 1, 1),
                          embed_dim=(32, 32, 64, 64), **_NODROP),
    "timm_regnety": _timm("regnety_002", F64, **_NODROP),
    "timm_ghostnet": _timm("ghostnet_050", F64, drop_rate=0.0),
    "timm_repvgg": _timm("repvgg_a0", F64, **_NODROP),
    "timm_nfnet": _timm("nf_resnet26", **_NODROP),
    "timm_cait": _timm("cait_xxs24_224", img_size=32, patch_size=8, depth=2, **_NODROP),
    "timm_xcit": _timm("xcit_nano_12_p16_224", img_size=32, depth=2, **_NODROP),
    "timm_pvt_v2": _timm("pvt_v2_b0", depths=(1, 1, 1, 1), **_NODROP),
    "timm_mobilevit": _timm("mobilevit_xxs", F64, side=64, **_NODROP),
}
"""timm families, through the tests' torchvision shim when no torchvision loads."""

_LLAMA_LIKE = ["Starcoder2", "Cohere", "Cohere2", "Granite", "Nemotron", "Olmo2", "Persimmon",
               "Glm", "Glm4", "SmolLM3", "Arcee", "Ernie4_5", "Apertus"]
_SEQ2SEQ = dict(encoder_layers=2, decoder_layers=2, d_model=64, encoder_ffn_dim=128,
                decoder_ffn_dim=128, encoder_attention_heads=4, decoder_attention_heads=4,
                vocab_size=VOCAB, max_position_embeddings=64, dropout=0.0,
                attention_dropout=0.0, activation_dropout=0.0, decoder_start_token_id=2)
_ENCODER = dict(**SMALL, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)

MORE2: dict[str, Callable[[str], tuple[Any, dict]]] = {
    **{p.lower(): _config(f"{p}ForCausalLM", f"{p}Config", **SMALL, num_key_value_heads=2,
                          pad_token_id=0, bos_token_id=1, eos_token_id=2) for p in _LLAMA_LIKE},
    "helium": _config("HeliumForCausalLM", "HeliumConfig", **SMALL, num_key_value_heads=2,
                      head_dim=16, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "olmoe": _config("OlmoeForCausalLM", "OlmoeConfig", **SMALL, num_key_value_heads=2,
                     num_experts=4, num_experts_per_tok=2, pad_token_id=0),
    "granitemoe": _config("GraniteMoeForCausalLM", "GraniteMoeConfig", **SMALL,
                          num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                          pad_token_id=0),
    "deepseek_v2": _config("DeepseekV2ForCausalLM", "DeepseekV2Config", **SMALL,
                           num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=None,
                           qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16,
                           n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                           first_k_dense_replace=1, n_shared_experts=1, pad_token_id=0),
    "deepseek_v3": _config("DeepseekV3ForCausalLM", "DeepseekV3Config", **SMALL,
                           num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=16,
                           qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16,
                           n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                           first_k_dense_replace=1, n_shared_experts=1, n_group=2,
                           topk_group=1, pad_token_id=0),
    "mpt": _config("MptForCausalLM", "MptConfig", d_model=64, n_heads=4, n_layers=2,
                   vocab_size=VOCAB, max_seq_len=64, resid_pdrop=0.0, emb_pdrop=0.0),
    "openai_gpt": _config("OpenAIGPTLMHeadModel", "OpenAIGPTConfig", n_embd=64, n_layer=2,
                          n_head=4, vocab_size=VOCAB, n_positions=64, resid_pdrop=0.0,
                          embd_pdrop=0.0, attn_pdrop=0.0),
    "mamba": _config("MambaForCausalLM", "MambaConfig", hidden_size=64, num_hidden_layers=2,
                     state_size=8, vocab_size=VOCAB, use_mambapy=False),
    "rwkv": _config("RwkvForCausalLM", "RwkvConfig", hidden_size=64, num_hidden_layers=2,
                    vocab_size=VOCAB, context_length=64, attention_hidden_size=64,
                    intermediate_size=128),
    "recurrent_gemma": _config("RecurrentGemmaForCausalLM", "RecurrentGemmaConfig",
                               num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                               num_attention_heads=4, num_key_value_heads=1, vocab_size=VOCAB,
                               lru_width=64, attention_window_size=8,
                               block_types=["recurrent", "attention"], head_dim=16),
    "roformer": _masked_lm("RoFormerForMaskedLM", "RoFormerConfig", pad=0, **_ENCODER),
    "convbert": _masked_lm("ConvBertForMaskedLM", "ConvBertConfig", pad=0, **_ENCODER,
                           embedding_size=64),
    "nystromformer": _masked_lm("NystromformerForMaskedLM", "NystromformerConfig", pad=0,
                                **_ENCODER, num_landmarks=4, segment_means_seq_len=12),
    "ernie": _masked_lm("ErnieForMaskedLM", "ErnieConfig", pad=0, **_ENCODER),
    "funnel": _masked_lm("FunnelForMaskedLM", "FunnelConfig", pad=0, other_labels=True,
                         vocab_size=VOCAB,
                         block_sizes=[1, 1], num_decoder_layers=1, d_model=64, n_head=4,
                         d_head=16, d_inner=128, hidden_dropout=0.0, attention_dropout=0.0,
                         activation_dropout=0.0),
    "squeezebert": _masked_lm("SqueezeBertForMaskedLM", "SqueezeBertConfig", pad=0,
                              **_ENCODER, embedding_size=64),
    "longformer": _masked_lm("LongformerForMaskedLM", "LongformerConfig", pad=1, **_ENCODER,
                             attention_window=4),
    "bigbird": _masked_lm("BigBirdForMaskedLM", "BigBirdConfig", pad=0, **_ENCODER,
                          attention_type="original_full"),
    "mbart": _config("MBartForConditionalGeneration", "MBartConfig", **_SEQ2SEQ),
    "pegasus": _config("PegasusForConditionalGeneration", "PegasusConfig", **_SEQ2SEQ),
    "marian": _config("MarianMTModel", "MarianConfig", **_SEQ2SEQ, pad_token_id=0),
    "m2m100": _config("M2M100ForConditionalGeneration", "M2M100Config", **_SEQ2SEQ,
                      encoder_layerdrop=0.0, decoder_layerdrop=0.0),
    "blenderbot_small": _config("BlenderbotSmallForConditionalGeneration",
                                "BlenderbotSmallConfig", **_SEQ2SEQ),
    "mvp": _config("MvpForConditionalGeneration", "MvpConfig", **_SEQ2SEQ),
    "mt5": _config("MT5ForConditionalGeneration", "MT5Config", num_layers=2,
                   num_decoder_layers=2, d_model=64, d_kv=16, d_ff=128, num_heads=4,
                   vocab_size=VOCAB, dropout_rate=0.0, relative_attention_num_buckets=8,
                   decoder_start_token_id=0, pad_token_id=0),
    "switch_transformers": _config("SwitchTransformersForConditionalGeneration",
                                   "SwitchTransformersConfig", num_layers=2,
                                   num_decoder_layers=2, d_model=64, d_kv=16, d_ff=128,
                                   num_heads=4, vocab_size=VOCAB, dropout_rate=0.0,
                                   num_experts=4, expert_capacity=16, encoder_sparse_step=1,
                                   decoder_sparse_step=1, relative_attention_num_buckets=8,
                                   router_jitter_noise=0.0,
                                   decoder_start_token_id=0, pad_token_id=0),
    "dinov2": _images("Dinov2Model", "Dinov2Config", labels=False, image_size=32, patch_size=8,
                      hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      mlp_ratio=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
    "beit": _images("BeitForImageClassification", "BeitConfig", image_size=32, patch_size=8,
                    hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=128, num_labels=10, use_relative_position_bias=True,
                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                    drop_path_rate=0.0),
    "levit": _images("LevitForImageClassification", "LevitConfig", image_size=64,
                     side=64, hidden_sizes=[32, 48, 64], num_attention_heads=[1, 2, 2],
                     depths=[1, 1, 1], key_dim=[8, 8, 8], num_labels=10, dtype=torch.float64),
    "mobilevit_hf": _images("MobileViTForImageClassification", "MobileViTConfig",
                            image_size=64, side=64, hidden_sizes=[16, 24, 32],
                            neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 32], num_labels=10,
                            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                            classifier_dropout_prob=0.0, dtype=torch.float64),
    "yolos": _images("YolosModel", "YolosConfig", labels=False, image_size=[32, 32],
                     patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, num_detection_tokens=4, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0),
}
"""A second batch: more decoders (multi-head latent attention, state-space and recurrent
models), encoders, encoder-decoders and vision transformers."""

MODELS.update(MORE)
MODELS.update(MORE2)
MODELS.update(TIMM)

TEXT = set(MODELS) - set(TIMM) - {"dinov2", "beit", "levit", "mobilevit_hf", "yolos",
                                  "llama_seqcls", "bert_seqcls", "whisper", "vit_hf", "deit_hf", "swin_hf", "convnext_hf",
                                  "resnet_hf", "clip", "wav2vec2", "segformer"}
"""The language models: the padded-batch and dynamic-length modes apply to them."""

def _padded(inputs: dict[str, Any]) -> dict[str, Any]:
    mask = torch.ones_like(inputs["input_ids"])
    mask[0, :3] = 0
    mask[1, -2:] = 0
    return {**inputs, "attention_mask": mask}


def _tensors(out: Any, prefix: str = "out") -> dict[str, torch.Tensor]:
    """Every floating-point tensor of a model's output (a ModelOutput, tuple or tensor)."""
    if isinstance(out, torch.Tensor):
        return {prefix: out} if out.is_floating_point() else {}
    items = out.items() if hasattr(out, "items") else enumerate(out or ())
    found: dict[str, torch.Tensor] = {}
    for k, v in items:
        if isinstance(v, torch.Tensor | tuple | list) or hasattr(v, "items"):
            found.update(_tensors(v, f"{prefix}.{k}"))
    return found


def _on_cpu(inputs: dict[str, Any]) -> dict[str, Any]:
    """The inputs of the eager reference, which runs on the CPU."""
    return {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _reference(model: torch.nn.Module) -> torch.nn.Module:
    """An eager copy of ``model`` on the CPU."""
    return copy.deepcopy(model).cpu()


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    """The largest difference relative to the largest eager magnitude (NaN counts as 1e30)."""
    if out.shape != ref.shape:
        return float("inf")
    diff = (out.double().cpu() - ref.double().cpu()).abs().nan_to_num(1e30).max()
    return (diff / ref.double().abs().max().clamp_min(1e-30)).item()


def _output_error(out: Any, ref: Any) -> float:
    got, want = _tensors(out), _tensors(ref)
    if set(got) != set(want):
        return float("inf")
    return max((_rel(got[k], want[k]) for k in want), default=0.0)


def _loss(out: Any) -> torch.Tensor:
    loss = getattr(out, "loss", None)
    if loss is not None:
        return loss
    return sum(t.double().pow(2).mean() for t in _tensors(out).values())


def _step(model: torch.nn.Module, inputs: dict[str, Any], compiled: Any) -> list[float]:
    """One training step compiled and eager: [output error (every output tensor),
    gradient error (every parameter, relative to the largest eager gradient), buffer
    error (batch norm's running statistics)]."""
    ref_model = _reference(model)
    out = compiled(**inputs)
    _loss(out).backward()
    ref = ref_model(**_on_cpu(inputs))
    _loss(ref).backward()
    fwd = _output_error(out, ref)
    ref_grads = {n: p.grad for n, p in ref_model.named_parameters() if p.grad is not None}
    scale = max((g.abs().max().item() for g in ref_grads.values()), default=1.0) or 1.0
    params = dict(model.named_parameters())
    grad = 0.0
    for n, g in ref_grads.items():
        got = params[n].grad
        if got is None:
            return [fwd, float("inf"), 0.0]
        grad = max(grad, (got.double().cpu() - g.double()).abs().nan_to_num(1e30).max().item() / scale)
    bufs = 0.0
    ref_bufs = dict(ref_model.named_buffers())
    for n, b in model.named_buffers():
        r = ref_bufs[n]
        if b.is_floating_point() and b.numel():
            d = (b.double().cpu() - r.double()).abs().nan_to_num(1e30).max()
            bufs = max(bufs, (d / r.double().abs().max().clamp_min(1.0)).item())
    return [fwd, grad, bufs]


def _low(inputs: dict[str, Any]) -> dict[str, Any]:
    """The floating-point inputs in bfloat16."""
    return {k: v.bfloat16() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
            for k, v in inputs.items()}


def tolerance(dtype: torch.dtype) -> float:
    return 1e-8 if dtype == torch.float64 else 1e-5


def run(name: str, mode: str, device: str) -> dict[str, Any]:
    torch._dynamo.reset()
    torch.manual_seed(0)
    res: dict[str, Any] = {"model": name, "mode": mode}
    if mode in ("mask_train", "dyn_eval") and name not in TEXT:
        res["skip"] = "not a language model"
        return res
    try:
        model, inputs = MODELS[name](device)
        model = model.to(device)
        dtype = next(model.parameters()).dtype
        res["dtype"] = str(dtype).removeprefix("torch.")
        if mode in ("train", "mask_train"):
            model.train()
            res["err"] = _step(model, _padded(inputs) if mode == "mask_train" else inputs,
                               tt.compile(model))
        elif mode == "eval":
            model.eval()
            ref = _reference(model)
            with torch.no_grad():
                res["err"] = [_output_error(tt.compile(model)(**inputs), ref(**_on_cpu(inputs)))]
        elif mode == "bf16_eval":
            # bf16 against the float32 eager reference: Tessera's error may be at most
            # twice eager bf16's (plus 1e-2 of the largest value)
            model.eval()
            ref32 = _reference(model)
            eager16 = copy.deepcopy(model).bfloat16()
            model = model.bfloat16()
            dtype = torch.bfloat16
            res["dtype"] = "bfloat16"
            with torch.no_grad():
                want = ref32(**_on_cpu(inputs))
                ours = _output_error(tt.compile(model)(**_low(inputs)), want)
                theirs = _output_error(eager16(**_low(inputs)), want)
            res["err"] = [ours, theirs]
            res["pass"] = ours <= 2 * theirs + 1e-2
        elif mode == "dyn_eval":
            model.eval()
            ref = _reference(model)
            compiled = tt.compile(model, dynamic=True)
            errs = []
            for seq in (7, 12, 19):
                ids = torch.randint(0, VOCAB, (BATCH, seq), device=device)
                kw = {"input_ids": ids, "labels": ids}
                with torch.no_grad():
                    errs.append(_output_error(compiled(**kw), ref(**_on_cpu(kw))))
            res["err"] = [max(errs)]
        else:
            raise ValueError(f"unknown mode {mode!r}")
        if mode != "bf16_eval":
            res["pass"] = max(res["err"]) < tolerance(dtype)
        rep = tt.last_report()
        res["fallbacks"] = dict(rep.fallback_ops)
        res["reasons"] = {k: r for g in rep.graphs for k, r in g.fallback_reasons.items()}
        res["runtime"] = {k: v for g in rep.graphs for k, v in g.runtime_fallbacks.items()}
        res["ops"] = f"{rep.tessera_ops}/{sum(g.aten_ops for g in rep.graphs)}"
    except Exception as e:  # noqa: BLE001 - a crash is a result of the sweep
        res["crash"] = f"{type(e).__name__}: {str(e)[:500]}"
        print(traceback.format_exc(), file=sys.stderr)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modes", help="comma-separated: eval,train,mask_train,dyn_eval,bf16_eval")
    ap.add_argument("names", nargs="*", help=f"models (default all): {', '.join(MODELS)}")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    if args.device.startswith("cuda"):  # eager bf16 and Tessera on the GPU: no TF32
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    for name in args.names or list(MODELS):
        for mode in args.modes.split(","):
            print(json.dumps(run(name, mode, args.device)), flush=True)


if __name__ == "__main__":
    main()
