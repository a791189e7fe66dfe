"""Reference models and outputs from transformers itself (run by test_hf_reference.sh).

For each of three tiny random models, in float32 with eager attention:
  gpt2          GPT2LMHeadModel, 2 layers, hidden 64, 4 heads, tied head, 64 positions
  llama_scaled  LlamaForCausalLM, 4 query heads over 2 KV heads, Llama 3 RoPE scaling, untied
  llama_tied    LlamaForCausalLM, 4 query heads over 2 KV heads, no scaling, tied head
writes OUT/<name>/ (save_pretrained: config.json, model.safetensors) and, of the last two,
  gpt2_fp16     the GPT-2 saved in float16
  llama_bf16    the tied Llama saved in bfloat16 as shards (model.safetensors.index.json)
(their references computed in float32 from the rounded weights), each with
OUT/<name>/reference.safetensors: tokens [B, T] (int32), logits [B*T, vocab], loss [1] (the mean
next-token cross-entropy over the B*(T-1) predicted positions) and grad.<hf name> for every
parameter (torch autograd of that loss). Weights are redrawn wider than the default init
(and the norms away from 1) so that the outputs depend on every tensor.
usage: make_reference.py OUT             (the three models above)
       make_reference.py --from DIR        (the reference of an existing model directory, e.g.
                                            zoe's export, loaded with from_pretrained)
"""
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import (AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM)

B, T, VOCAB = 2, 16, 300


def models():
    yield "gpt2", GPT2LMHeadModel(GPT2Config(
        vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4,
        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        attn_implementation="eager"))
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                  rms_norm_eps=1e-6, rope_theta=10000.0, attn_implementation="eager")
    yield "llama_scaled", LlamaForCausalLM(LlamaConfig(
        **common, tie_word_embeddings=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8}))
    yield "llama_tied", LlamaForCausalLM(LlamaConfig(**common, tie_word_embeddings=True))


def reference(model, d, tokens, name):
    result = model(input_ids=tokens, labels=tokens)
    result.loss.backward()
    vocab = model.config.vocab_size
    ref = {"tokens": tokens.to(torch.int32).contiguous(),
           "logits": result.logits.detach().reshape(B * T, vocab).contiguous(),
           "loss": result.loss.detach().reshape(1)}
    seen = set()
    for pname, p in model.named_parameters():
        if p.grad is not None and p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            ref["grad." + pname] = p.grad.detach().contiguous()
    save_file(ref, os.path.join(d, "reference.safetensors"))
    print(f"{name}: loss {result.loss.item():.6f}")


def main(out):
    torch.manual_seed(1234)
    for name, model in models():
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if p.dim() == 1 and "weight" in pname:
                    p.copy_(1.0 + 0.2 * torch.randn_like(p))
                else:
                    p.copy_(0.08 * torch.randn_like(p))
        model.eval()
        d = os.path.join(out, name)
        model.save_pretrained(d, safe_serialization=True)
        reference(model, d, torch.randint(0, VOCAB, (B, T)), name)
        half = {"gpt2": ("gpt2_fp16", torch.float16), "llama_tied": ("llama_bf16", torch.bfloat16)}
        if name in half:
            hname, dtype = half[name]
            model.zero_grad()
            hd = os.path.join(out, hname)
            model.to(dtype).save_pretrained(
                hd, safe_serialization=True,
                max_shard_size="50KB" if dtype == torch.bfloat16 else "5GB")
            # reloaded in float32: the rounded weights, and the RoPE table computed afresh
            # (a round trip of the model through the half dtype would round it too)
            reloaded = AutoModelForCausalLM.from_pretrained(hd, dtype=torch.float32,
                                                            attn_implementation="eager")
            reloaded.eval()
            reference(reloaded, hd, torch.randint(0, VOCAB, (B, T)), hname)


def from_dir(d):
    torch.manual_seed(99)
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    reference(model, d, torch.randint(0, model.config.vocab_size, (B, T)), d)


if __name__ == "__main__":
    if sys.argv[1] == "--from":
        from_dir(sys.argv[2])
    else:
        main(sys.argv[1])
