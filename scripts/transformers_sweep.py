"""Sweep tiny ``transformers`` models through ``torch.compile(backend="tessera")`` against
eager torch on the CPU reference (or CUDA with ``--device cuda``), one JSON line per model
and mode; the table of docs/TORCH.md ("More transformers architectures") comes from it.

    python scripts/transformers_sweep.py eval,train,mask_train,dyn_eval [name ...]

Modes: ``eval`` (forward, no grad), ``train`` (one training step: output and every
parameter gradient), ``mask_train`` (the same with an attention mask padding row 0 on the
left and row 1 on the right), ``dyn_eval`` (``dynamic=True``, three sequence lengths).
Each line has the relative error (``err``), the ops left to torch (``fallbacks``, with
``reasons``), partitions that fell back at run time (``runtime``) or the exception
(``crash``). Models are built from their configuration classes with random weights:
nothing is downloaded. Needs ``transformers`` (``pip install -e .[models]``).
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
from tests.torch.torch_models import compare_training_step  # noqa: E402

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


def _padded(inputs: dict[str, Any]) -> dict[str, Any]:
    mask = torch.ones_like(inputs["input_ids"])
    mask[0, :3] = 0
    mask[1, -2:] = 0
    return {**inputs, "attention_mask": mask}


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref.float()).abs().nan_to_num(1e30).max() / ref.float().abs().max()).item()


def run(name: str, mode: str, device: str) -> dict[str, Any]:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, inputs = MODELS[name](device)
    model = model.to(device)
    res: dict[str, Any] = {"model": name, "mode": mode}
    try:
        if mode in ("train", "mask_train"):
            model.train()
            fw, gr = compare_training_step(
                model, _padded(inputs) if mode == "mask_train" else inputs, tt.compile
            )
            res["err"] = [fw, gr]
        elif mode == "eval":
            model.eval()
            ref = copy.deepcopy(model)
            with torch.no_grad():
                res["err"] = _rel(tt.compile(model)(**inputs).logits, ref(**inputs).logits)
        elif mode == "dyn_eval":
            model.eval()
            ref = copy.deepcopy(model)
            compiled = tt.compile(model, dynamic=True)
            errs = []
            for seq in (7, 12, 19):
                ids = torch.randint(0, VOCAB, (BATCH, seq), device=device)
                kw = {"input_ids": ids, "labels": ids}
                with torch.no_grad():
                    errs.append(_rel(compiled(**kw).logits, ref(**kw).logits))
            res["err"] = max(errs)
        else:
            raise ValueError(f"unknown mode {mode!r}")
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
    ap.add_argument("modes", help="comma-separated: eval,train,mask_train,dyn_eval")
    ap.add_argument("names", nargs="*", help=f"models (default all): {', '.join(MODELS)}")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    for name in args.names or list(MODELS):
        for mode in args.modes.split(","):
            print(json.dumps(run(name, mode, args.device)), flush=True)


if __name__ == "__main__":
    main()
