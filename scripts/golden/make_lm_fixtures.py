#!/usr/bin/env python3
r"""Generate nuvec-lm's golden fixtures from mlx-lm 0.32.2 on Apple MLX 0.32.4.

How to run (from the repository root; no network is needed or used):

    python3 -m venv .venv-mlx
    .venv-mlx/bin/pip install "mlx[cpu]==0.32.4" "mlx-lm==0.32.2"
    .venv-mlx/bin/python scripts/golden/make_lm_fixtures.py

(mlx-lm brings transformers 5 and tokenizers; on Linux "mlx[cpu]" pulls the
mlx-cpu backend.) Everything runs on MLX's CPU backend. The script deletes
and rewrites the model folders below in ``crates/nuvec-lm/tests/fixtures/``
(about 4 MB in all) plus ``fast.json``; a run takes several minutes on two
cores (it trains five tiny models and shells out to ``mlx_lm.convert`` and
``mlx_lm.generate``). Re-running gives the same files except for the timing
numbers inside expected.json's cli stdout strings (weights come from fixed
seeds; tokenizer training and CPU training are deterministic).

Layout
------

    fixtures/
      fast.json                       mx.fast op cases (below)
      <model>/                        one folder per model, each loads with
        config.json                   mlx_lm.load(<model>)
        generation_config.json
        model.safetensors
        model.safetensors.index.json
        tokenizer.json
        tokenizer_config.json
        chat_template.jinja           (some folders, see below)
        README.md                     (the q4 folders: convert's model card)
        expected.json                 mlx-lm's outputs for this folder

Models (all: hidden 64, 2 layers, 4 attention heads, 2 KV heads, head_dim
16, intermediate 128, vocab_size 512, max_position_embeddings 512; the
tokenizer has 400 ids, so ids 400..511 are rows no text maps to):

  llama-f32      model_type llama, untied (lm_head.weight present),
                 rope_theta 500000 with Llama 3 rope scaling {"rope_type":
                 "llama3", factor 8, low_freq_factor 1, high_freq_factor 4,
                 original_max_position_embeddings 64} (head_dim 16:
                 rotation pair 0 unchanged, pair 1 smoothed, pairs 2..7
                 turn 8x slower),
                 rms_norm_eps 1e-5. Llama 3 tokenizer, template in
                 tokenizer_config.json.
  llama-bf16     llama-f32 with every tensor cast to bfloat16
                 (torch_dtype "bfloat16"); same tokenizer files.
  mistral-f32    model_type mistral (mlx-lm runs it as llama), no rope
                 scaling, rope_theta 10000, tied embeddings. Llama 3
                 tokenizer; template in chat_template.jinja.
  qwen2-f32      model_type qwen2: q/k/v biases, tied, rope_theta 1e6,
                 rms_norm_eps 1e-6. Qwen tokenizer, template in
                 tokenizer_config.json.
  qwen3-f32      model_type qwen3: per-head q/k RMS norms, explicit head_dim,
                 tied. Qwen tokenizer, template in chat_template.jinja.
  qwen3_moe-f32  model_type qwen3_moe: 4 experts, 2 per token,
                 moe_intermediate_size 32, decoder_sparse_step 1,
                 mlp_only_layers [], norm_topk_prob true, tied. Saved in the
                 Hugging Face layout: experts one by one,
                 model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight
                 ([32,64], [32,64], [64,32]) plus the router
                 model.layers.L.mlp.gate.weight [4, 64]; safetensors
                 metadata {"format": "pt"}; an index written by this script
                 ({"metadata": {"total_size"}, "weight_map"}). mlx-lm's
                 sanitize stacks the experts into mlp.switch_mlp.*.weight
                 [E, out, in] when loading. Template in tokenizer_config.json.
  llama-q4, qwen2-q4, qwen3-q4, qwen3_moe-q4
                 exactly what `mlx_lm.convert --hf-path <X-f32> --mlx-path
                 <X-q4> -q --q-bits 4 --q-group-size 32 --dtype float32`
                 writes: packed uint32 weights, float32 scales/biases
                 (affine), float32 everything else; config.json gains
                 "quantization" and "quantization_config" ({"group_size": 32,
                 "bits": 4, "mode": "affine"}; for qwen3_moe also per-layer
                 entries "model.layers.L.mlp.gate": {"group_size": 64,
                 "bits": 8} from the model's quant_predicate) and its
                 eos_token_id becomes generation_config's list;
                 tokenizer_config.json is rewritten by transformers 5
                 (backend "tokenizers", no added_tokens_decoder, the template
                 moved to chat_template.jinja); embeddings, lm_head and the
                 experts (switch_mlp, stacked) are quantized too; README.md is
                 the model card. convert loads the f32 folder (so qwen3_moe-q4
                 holds the stacked switch_mlp layout).
  llama-q4-bf16  the same from llama-f32 with `--q-group-size 64 --dtype
                 bfloat16`: packed weights with bfloat16 scales, biases and
                 everything else (the layout of mlx-community's 4-bit models,
                 and the bfloat16 route of nuvec's packed product).
                 `make_lm_fixtures.py --only llama-q4-bf16` remakes just this
                 folder from the committed llama-f32 (`--only fast.json` the
                 mx.fast and gather cases).

Weights: each model is built with mlx-lm's own class
(mlx_lm.models.<type>.Model) after mx.random.seed(seed) (seeds 101..105 in
the order above), every RMSNorm weight is set to 1 + 0.2 * N(0, 1)
(numpy RandomState(seed)), and then it is trained (full-batch Adam, lr 3e-3,
120 steps, next-token cross-entropy) on CORPUS (below) so that greedy
decoding is confident (top-two logit gaps mostly 4..12 on memorised text)
and reads as text; f32 folders are written with mlx_lm.utils.save_model and
save_config (sorted keys), which also write the index.

Tokenizer (tokenizer.json, built with the `tokenizers` library): byte-level
BPE trained on CORPUS (10 short English paragraphs with café, naïve, 日本,
東京, 寿司, 🙂, Über, crème brûlée, —, digits and a code snippet):
vocab 393 (ids 0..255 the byte alphabet in GPT-2 order, then 137 merges)
plus special tokens <|endoftext|> 393, <|im_start|> 394, <|im_end|> 395,
<|begin_of_text|> 396, <|eot_id|> 397, <|start_header_id|> 398,
<|end_header_id|> 399 (added tokens, special, not normalized). Two
variants share vocab and merges:
  Qwen    (qwen2/qwen3/qwen3_moe): NFC normalizer; pre-tokenizer
          Sequence[Split(Qwen2 regex, Isolated), ByteLevel(use_regex
          false)]; ByteLevel post-processor (adds nothing); ByteLevel
          decoder. tokenizer_config: tokenizer_class Qwen2Tokenizer,
          bos_token null, eos_token <|im_end|>, pad <|endoftext|>.
  Llama 3 (llama/mistral): no normalizer; Split(Llama 3 regex: digits in
          runs of 1..3) + ByteLevel; post-processor Sequence[ByteLevel,
          TemplateProcessing "<|begin_of_text|> $A"] (this is what adds the
          BOS on encode(add_special_tokens=True)); tokenizer_config:
          PreTrainedTokenizerFast, bos <|begin_of_text|>, eos <|eot_id|>.
Chat templates: Qwen: ChatML as Qwen2.5 (without tools), with the default
system message "You are a helpful assistant." when the first message is not
a system one. Llama: Llama 3 Instruct's template; it writes bos_token
itself. generation_config.json: eos_token_id [<|im_end|>, <|endoftext|>]
(Qwen) or [<|eot_id|>, <|endoftext|>] (Llama); config.json's eos_token_id is
<|endoftext|> (Qwen) / <|eot_id|> (Llama). mlx-lm's stop set is
generation_config's list plus the tokenizer's eos. Training documents end
with <|endoftext|>, so on memorised text the models stop on a token that
only generation_config.json names as EOS (for llama/mistral).

Training corpus extras: one chat exchange per tokenizer style, the CLI's
chat prompt for CLI_PROMPT followed by CHAT_REPLY and the chat EOS
(<|im_end|> / <|eot_id|>), so `mlx_lm.generate` with the chat template
answers CHAT_REPLY.

Streaming-detokenizer facts the fixtures exercise (mlx-lm's
BPEStreamingDetokenizer, picked because the decoder is ByteLevel): the first
segment loses one leading space; a segment is held ("" emitted) while the
text so far ends in an incomplete UTF-8 sequence or the token is a lone
space (Ġ); special tokens are printed literally (e.g. <|im_end|> when it is
not a stop token); an id >= len(tokenizer) (400..511 here; the sampled runs
do produce some) streams as "!" while tokenizer.decode drops it; the byte
0x00 token (id 188, "Ā") would stream as "Ā" (decode gives "\x00").

Array encoding (as make_nn_fixtures.py): an <array> is {"dtype", "shape",
"data": [flat row-major]}, dtype float32, uint32, int32 or bool. A float32
value is written as the shortest decimal that reads back to it: parse as
float64 and round to float32 to get MLX's value bit for bit. Scalar floats
outside arrays (gaps, logprobs) use the same encoding.

expected.json (one per model folder)
------------------------------------
  mlx_version, mlx_lm_version, model (folder name), model_type,
  weights        "float32" | "bfloat16" | "q4"
  tokenizer      {"len": len(tokenizer) (400), "bos_token", "bos_token_id"
                 (null for Qwen), "eos_token", "eos_token_id",
                 "eos_token_ids": sorted stop set mlx-lm uses,
                 "has_chat_template", "detokenizer": the streaming
                 detokenizer class mlx-lm picked (BPEStreamingDetokenizer)}
  prompt         RAW_PROMPT, the start of a training document
  prompt_add_special_tokens
                 what stream_generate passes for a str prompt
                 (bos_token is None or the prompt does not start with it)
  prompt_tokens  tokenizer.encode(prompt, add_special_tokens=that): for
                 Llama-style the BOS 396 comes first
  logits         <array> float32 [T, 512]: model(prompt_tokens[None],
                 cache=make_prompt_cache(model))[0] (bf16 logits cast to
                 float32 exactly)
  greedy         stream_generate(model, tok, prompt_tokens, max_tokens=32)
                 with the default (argmax) sampler: {"max_tokens": 32,
                 "tokens": every GenerationResponse.token (when it stops on
                 EOS the last one is the EOS id, which the text omits),
                 "segments": every response.text (the streaming
                 detokenizer's output, "" while a multi-byte character or a
                 lone space waits), "text": their concatenation,
                 "finish_reason": "stop" | "length", "stopped_on_eos",
                 "top_gaps": per token, largest minus second-largest of the
                 step's logprobs (= of its logits), "token_logprobs": the
                 chosen token's logprob, "decoded": tokenizer.decode(tokens)
                 (keeps the leading space and the special token)}
  sampled        list of {"seed", "temp", "top_p", "top_k", "min_p",
                 "min_tokens_to_keep": 1, "tokens", "text", "finish_reason",
                 "token_logprobs"}: sampler = make_sampler(temp, top_p,
                 min_p, 1, top_k=top_k); mx.random.seed(seed) right before
                 stream_generate(..., max_tokens=32, sampler=sampler)
                 (loading happened earlier). Cases: temp only; temp+top_p;
                 temp+top_k; temp+min_p; all together (SAMPLED_CASES).
                 token_logprobs are the model's logprobs (before filters and
                 temperature).
  processed      greedy runs with logits processors, each {"name",
                 "tokens", "text", "finish_reason", "top_gaps" (of the
                 processed logprobs)}:
                   "repetition_penalty": make_logits_processors(
                     repetition_penalty=1.3) (context 20; the prompt tokens
                     count as context) + "repetition_penalty",
                     "repetition_context_size";
                   "logit_bias": make_logits_processors(logit_bias={id: b})
                     + "logit_bias" {"<id>": b}, "designed_index" k: b was
                     chosen so that the biased token becomes the argmax
                     first at step k (>= 0.5 logit to spare either side);
                     an EOS id when possible (the run stops there), else
                     another token.
  chat_messages  [{"role": "system", CHAT_SYSTEM}, {"role": "user",
                 CHAT_USER}]
  chat_text      tokenizer.apply_chat_template(chat_messages,
                 tokenize=False, add_generation_prompt=True)
  chat_tokens    tokenizer.encode(chat_text, add_special_tokens=False):
                 what mlx_lm.generate's CLI feeds for --system-prompt
                 CHAT_SYSTEM --prompt CHAT_USER (one BOS, from the template)
  cli            3 runs of the console script `mlx_lm.generate`, each
                 {"args": argv after the program name with the folder path
                 written "MODEL_DIR", "stdout": its exact stdout,
                 "completion": the text between the two "==========" lines,
                 plus the same generation redone in-process:
                 "chat_template_used", "prompt_text", "prompt_tokens",
                 "tokens", "finish_reason", "top_gaps" (temp 0 runs)}.
                 Runs: --prompt CLI_PROMPT --max-tokens 24 (chat template
                 applied, no system message); the same with
                 --ignore-chat-template (then encoded with
                 add_special_tokens=True); and with --temp 0.7 --seed 3,
                 which also records "random_draws_before_generation": the
                 CLI seeds before loading, and building the model draws one
                 key from the global key sequence per randomly initialised
                 parameter (and again for each layer swapped to its
                 quantized form), so the first sampling key is that many
                 draws after mx.random.seed(3).
                 stdout format: "==========\n" + streamed text + "\n" +
                 "==========\n" + "Prompt: N tokens, X tokens-per-sec\n" +
                 "Generation: M tokens, Y tokens-per-sec\n" +
                 "Peak memory: Z GB\n" (X, Y, Z with 3 decimals, timings vary;
                 M counts the EOS token when it stopped on one); when no text
                 came out, "No text generated for this prompt\n" replaces the
                 three stats lines.

fast.json
---------
{"mlx_version": "0.32.4", "cases": [{"name", "kind", ...}]}, all float32.
Inputs are numpy RandomState(500) normals rounded to 3 decimals. Where a
case has "cotangent" and "grads", grads are d/d input of sum(y * cotangent)
(mx.vjp).
  "rms_norm"    "eps", "x" [2,3,16], "weight" [16], "y" =
                mx.fast.rms_norm(x, weight, eps), "cotangent",
                "grads" {"x", "weight"}.
  "layer_norm"  "eps", "x", optional "weight" / "bias" (absent = None),
                "y" = mx.fast.layer_norm(x, weight, bias, eps), "cotangent",
                "grads" {"x", "weight"?, "bias"?}.
  "rope"        "dims" (16 = full head, 8 = partial: the rest passes
                through), "traditional", "base" (null when "freqs" is
                given), "scale", "offset" (int), optional "freqs" [dims/2],
                "x" [1,2,5,16] (B, heads, L, D), "y" = mx.fast.rope(x, dims,
                traditional=, base=, scale=, offset=, freqs=), "cotangent",
                "grads" {"x"}.
  "sdpa"        "q" [1,Hq,qL,16], "k"/"v" [1,Hkv,kL,16], "scale" (16^-0.5),
                "mask": null | "causal" (aligned to the end: query i sees
                keys <= kL - qL + i) | <array> float32 [1,1,qL,kL] (added
                to the scores) | <array> bool [1,Hq,qL,kL] (false = masked),
                "y" = mx.fast.scaled_dot_product_attention(q, k, v,
                scale=, mask=), "cotangent", "grads" {"q", "k", "v"}.
                GQA cases have Hq 4, Hkv 2; query length 1 vs 7 keys, 3 vs
                7, and 5 vs 5.
  "gather_qmm"  "w" float [E=4, N=8, K=64] and its mx.quantize(w, 32, 4)
                "wq" (uint32 [4,8,8]), "scales", "biases" ([4,8,2]),
                "group_size" 32, "bits" 4, "mode" "affine", "transpose"
                true, "x", "lhs_indices" (null or int32), "rhs_indices"
                (int32), "y" = mx.gather_qmm(x, wq, scales, biases,
                lhs_indices=, rhs_indices=, transpose=True, group_size=32,
                bits=4). gather_qmm_moe is the MoE shape: x [T=5,1,1,K],
                rhs_indices [T, 2] -> y [5, 2, 1, 8]; gather_qmm_lhs_rhs
                has x [3,2,K], lhs_indices [5], rhs_indices [5] -> y [5,2,8].
  "gather_mm"   the float MoE path of SwitchLinear: "w" [E, N, K], "y" =
                mx.gather_mm(x, w.swapaxes(-1, -2), rhs_indices=idx)
                ("b_is_w_transposed": true), x [5,1,1,K], rhs [5,2].
                gather_qmm_lhs_rhs and gather_mm_moe also hold "cotangent"
                and "grads" (of sum(y · cotangent)): {"x"} for gather_qmm,
                {"x", "w"} for gather_mm.
"""

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402
import mlx_lm  # noqa: E402
import numpy as np  # noqa: E402
from mlx.utils import tree_flatten, tree_unflatten  # noqa: E402
from mlx_lm.generate import stream_generate  # noqa: E402
from mlx_lm.models.cache import make_prompt_cache  # noqa: E402
from mlx_lm.sample_utils import make_logits_processors, make_sampler  # noqa: E402
from mlx_lm.utils import load, save_config, save_model  # noqa: E402
from tokenizers import (Regex, Tokenizer, decoders, models,  # noqa: E402
                        normalizers, pre_tokenizers, processors, trainers)

mx.set_default_device(mx.cpu)

MLX_VERSION = "0.32.4"
MLX_LM_VERSION = "0.32.2"
ROOT = Path(__file__).resolve().parents[2]
OUT_DIR = ROOT / "crates" / "nuvec-lm" / "tests" / "fixtures"
BIN = Path(sys.executable).parent

from encoding import DTYPE_NAMES, enc, enc_float, f32, normal  # noqa: E402,F401


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, separators=(",", ":"), allow_nan=False,
                  ensure_ascii=False)
        f.write("\n")
    print(f"wrote {path.relative_to(ROOT)} ({os.path.getsize(path)} bytes)")


def write_pretty(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


# ----------------------------------------------------------------------------
# Tokenizer

CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps in the sun, "
    "and the fox runs back into the woods before the farmer wakes up.",
    "In the small town there is a café on the corner. Every morning the owner "
    "opens the café at seven, and the regulars order coffee, tea and bread. "
    "The café is quiet in the afternoon and busy in the evening.",
    "A naïve reader may think that the story is simple, but the writer hides "
    "a second story inside the first one. Readers who read slowly find it.",
    "We travelled from Paris to 日本 last year. In 日本 we ate noodles, "
    "visited old temples and took the fast train. 東京 was bright at night. "
    "The trip was wonderful 🙂 and we want to go back 🙂.",
    "Numbers matter too: 3.14159 is close to pi, 2.71828 is close to e, and "
    "1024 is two to the power of ten. Count: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10.",
    "Hello, world! Hello again, world. How are you today? I am fine, thank "
    "you. What would you like to drink? Coffee, please, with milk.",
    "The weather was cold and the wind was strong, so the children stayed "
    "inside and read books about the sea, the mountains and the stars.",
    "def greet(name):\n    return \"Hello, \" + name + \"!\"\n\n"
    "print(greet(\"world\"))\n",
    "Über den Wolken, señor, the crème brûlée was naïve and the café was "
    "closed — so we went home.\n\nThe end.",
    "Our café opens at nine. The cat dreams of 寿司 and fish 🙂. The end.",
]

# Qwen2's pre-tokenizer regex (digits one at a time) and Llama 3's
# (digits in runs of up to three).
QWEN_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
                r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

BPE_VOCAB = 393  # 256 byte symbols + 137 merges
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>",
                  "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>",
                  "<|end_header_id|>"]
MODEL_VOCAB = 512


def byte_level(**kw):
    return {"type": "ByteLevel", "add_prefix_space": False,
            "trim_offsets": False, "use_regex": False, **kw}


def build_tokenizer_json(variant):
    """tokenizer.json text; variant "qwen" or "llama3" (same vocab/merges)."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_REGEX), behavior="isolated",
                             invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB, min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[])
    tok.train_from_iterator(CORPUS, trainer=trainer)
    assert tok.get_vocab_size() == BPE_VOCAB, tok.get_vocab_size()
    tok.add_special_tokens(SPECIAL_TOKENS)
    j = json.loads(tok.to_str())
    j["decoder"] = byte_level()
    j["model"]["dropout"] = None
    if variant == "qwen":
        # As Qwen2/2.5: NFC, Split(regex) + ByteLevel, ByteLevel post-processor.
        j["post_processor"] = byte_level()
    else:
        # As Llama 3: no normalizer, BOS added by a TemplateProcessing
        # post-processor.
        j["normalizer"] = None
        j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {
            "Regex": LLAMA3_REGEX}
        bos = "<|begin_of_text|>"
        bos_id = BPE_VOCAB + SPECIAL_TOKENS.index(bos)
        j["post_processor"] = {"type": "Sequence", "processors": [
            byte_level(),
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": bos, "type_id": 1}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {bos: {"id": bos, "ids": [bos_id],
                                      "tokens": [bos]}}}]}
    text = json.dumps(j, indent=2, ensure_ascii=False) + "\n"
    Tokenizer.from_str(text)  # must parse back
    return text


# Qwen2.5-style ChatML template (default system prompt when none is given).
CHATML_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "{%- else %}\n"
    "    {{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if not (message.role == 'system' and loop.first) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n")

# Llama 3 Instruct's template (the template writes the BOS).
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")


def added_tokens_decoder():
    return {str(BPE_VOCAB + i): {"content": t, "lstrip": False,
                                 "normalized": False, "rstrip": False,
                                 "single_word": False, "special": True}
            for i, t in enumerate(SPECIAL_TOKENS)}


def tok_id(t):
    return BPE_VOCAB + SPECIAL_TOKENS.index(t)


def tokenizer_config(style, template_in_config):
    if style == "qwen":
        cfg = {"add_prefix_space": False,
               "added_tokens_decoder": added_tokens_decoder(),
               "bos_token": None,
               "clean_up_tokenization_spaces": False,
               "eos_token": "<|im_end|>",
               "errors": "replace",
               "model_max_length": 512,
               "pad_token": "<|endoftext|>",
               "split_special_tokens": False,
               "tokenizer_class": "Qwen2Tokenizer",
               "unk_token": None}
        template = CHATML_TEMPLATE
    else:
        cfg = {"added_tokens_decoder": added_tokens_decoder(),
               "bos_token": "<|begin_of_text|>",
               "clean_up_tokenization_spaces": False,
               "eos_token": "<|eot_id|>",
               "model_input_names": ["input_ids", "attention_mask"],
               "model_max_length": 512,
               "tokenizer_class": "PreTrainedTokenizerFast"}
        template = LLAMA3_TEMPLATE
    if template_in_config:
        cfg["chat_template"] = template
    return cfg, template


# ----------------------------------------------------------------------------
# Models

COMMON = {"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
          "vocab_size": MODEL_VOCAB, "max_position_embeddings": 512,
          "hidden_act": "silu", "torch_dtype": "float32"}

LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 64}

# name -> (config, tokenizer style, template in tokenizer_config.json?, seed)
BASE_MODELS = {
    "llama-f32": ({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                   **COMMON, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
                   "rope_scaling": LLAMA3_SCALING, "tie_word_embeddings": False,
                   "attention_bias": False, "mlp_bias": False,
                   "bos_token_id": tok_id("<|begin_of_text|>"),
                   "eos_token_id": tok_id("<|eot_id|>")},
                  "llama3", True, 101),
    "mistral-f32": ({"architectures": ["MistralForCausalLM"],
                     "model_type": "mistral", **COMMON, "rms_norm_eps": 1e-5,
                     "rope_theta": 10000.0, "tie_word_embeddings": True,
                     "sliding_window": None,
                     "bos_token_id": tok_id("<|begin_of_text|>"),
                     "eos_token_id": tok_id("<|eot_id|>")},
                    "llama3", False, 102),
    "qwen2-f32": ({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
                   **COMMON, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                   "tie_word_embeddings": True, "use_sliding_window": False,
                   "bos_token_id": tok_id("<|endoftext|>"),
                   "eos_token_id": tok_id("<|endoftext|>")},
                  "qwen", True, 103),
    "qwen3-f32": ({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                   **COMMON, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                   "tie_word_embeddings": True, "attention_bias": False,
                   "bos_token_id": tok_id("<|endoftext|>"),
                   "eos_token_id": tok_id("<|endoftext|>")},
                  "qwen", False, 104),
    "qwen3_moe-f32": ({"architectures": ["Qwen3MoeForCausalLM"],
                       "model_type": "qwen3_moe", **COMMON,
                       "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                       "tie_word_embeddings": True, "attention_bias": False,
                       "num_experts": 4, "num_experts_per_tok": 2,
                       "moe_intermediate_size": 32, "decoder_sparse_step": 1,
                       "mlp_only_layers": [], "norm_topk_prob": True,
                       "bos_token_id": tok_id("<|endoftext|>"),
                       "eos_token_id": tok_id("<|endoftext|>")},
                      "qwen", True, 105),
}
# Derived folders: name -> (source folder, how)
DERIVED = {
    "llama-bf16": ("llama-f32", "bf16"),
    "llama-q4": ("llama-f32", "q4"),
    "qwen2-q4": ("qwen2-f32", "q4"),
    "qwen3-q4": ("qwen3-f32", "q4"),
    "qwen3_moe-q4": ("qwen3_moe-f32", "q4"),
    "llama-q4-bf16": ("llama-f32", "q4-bf16"),
}
ALL_MODELS = ["llama-f32", "llama-bf16", "mistral-f32", "qwen2-f32",
              "qwen3-f32", "qwen3_moe-f32", "llama-q4", "qwen2-q4", "qwen3-q4",
              "qwen3_moe-q4", "llama-q4-bf16"]

# Weight preparation (see the docstring).
NORM_JITTER = 0.2
TRAIN_STEPS = 120
TRAIN_LR = 3e-3

RAW_PROMPT = "Our café opens at nine."
CHAT_SYSTEM = "You are a terse assistant."
CHAT_USER = "Tell me about the fox."
CLI_PROMPT = "The weather was cold and the wind"
CHAT_REPLY = "The quick brown fox jumps over the lazy dog."


def model_class(model_type):
    from mlx_lm.utils import _get_classes
    return _get_classes({"model_type": model_type})


def chat_training_text(style):
    """The CLI's chat prompt for CLI_PROMPT followed by CHAT_REPLY."""
    if style == "qwen":
        return ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                f"<|im_start|>user\n{CLI_PROMPT}<|im_end|>\n"
                f"<|im_start|>assistant\n{CHAT_REPLY}<|im_end|>")
    return ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
            f"{CLI_PROMPT}<|eot_id|><|start_header_id|>assistant"
            f"<|end_header_id|>\n\n{CHAT_REPLY}<|eot_id|>")


def training_docs(style, tok_json):
    """Token ids of the training documents for one tokenizer style."""
    tok = Tokenizer.from_str(tok_json)
    doc_end = tok_id("<|endoftext|>")
    chat = chat_training_text(style)
    # Documents: the tokenizer's own encoding (BOS from the llama3
    # post-processor) followed by <|endoftext|>; plus one chat exchange.
    docs = [tok.encode(p).ids + [doc_end] for p in CORPUS]
    docs.append(tok.encode(chat, add_special_tokens=False).ids)
    return docs


def train(model, docs):
    """Full-batch Adam on next-token cross-entropy over the documents."""
    import mlx.optimizers as optim
    L = max(map(len, docs))
    X = np.zeros((len(docs), L - 1), np.int32)
    Y = np.zeros_like(X)
    W = np.zeros(X.shape, np.float32)
    for i, d in enumerate(docs):
        X[i, :len(d) - 1] = d[:-1]
        Y[i, :len(d) - 1] = d[1:]
        W[i, :len(d) - 1] = 1.0
    X, Y, W = mx.array(X), mx.array(Y), mx.array(W)

    def loss_fn(model):
        ce = nn.losses.cross_entropy(model(X), Y) * W
        return ce.sum() / W.sum()

    opt = optim.Adam(learning_rate=TRAIN_LR)
    step = nn.value_and_grad(model, loss_fn)
    for _ in range(TRAIN_STEPS):
        loss, grads = step(model)
        opt.update(model, grads)
        mx.eval(model.parameters(), opt.state)
    return loss.item()


def make_model(config, seed, docs):
    model_cls, args_cls = model_class(config["model_type"])
    mx.random.seed(seed)
    model = model_cls(args_cls.from_dict(config))
    mx.eval(model.parameters())
    rs = np.random.RandomState(seed)
    new = {}
    for k, v in tree_flatten(model.parameters()):
        if k.endswith("norm.weight"):
            v = mx.array((1.0 + NORM_JITTER * rs.normal(size=v.shape))
                         .astype(np.float32))
        new[k] = v
    model.update(tree_unflatten(list(new.items())))
    mx.eval(model.parameters())
    loss = train(model, docs)
    print(f"  trained {config['model_type']}: final loss {loss:.4f}")
    return model


def write_tokenizer_files(d, style, template_in_config, tok_jsons):
    (d / "tokenizer.json").write_text(tok_jsons[style], encoding="utf-8")
    cfg, template = tokenizer_config(style, template_in_config)
    write_pretty(d / "tokenizer_config.json", cfg)
    if not template_in_config:
        (d / "chat_template.jinja").write_text(template, encoding="utf-8")
    if style == "qwen":
        eos = [tok_id("<|im_end|>"), tok_id("<|endoftext|>")]
        gen = {"bos_token_id": tok_id("<|endoftext|>"), "eos_token_id": eos,
               "do_sample": False}
    else:
        eos = [tok_id("<|eot_id|>"), tok_id("<|endoftext|>")]
        gen = {"bos_token_id": tok_id("<|begin_of_text|>"),
               "eos_token_id": eos, "do_sample": False}
    write_pretty(d / "generation_config.json", gen)


def save_hf_moe(d, model):
    """Save a qwen3_moe model with experts one by one, as HF checkpoints do."""
    weights = {}
    for k, v in tree_flatten(model.parameters()):
        if ".mlp.switch_mlp." in k:
            prefix, rest = k.split(".mlp.switch_mlp.")
            proj = rest.split(".")[0]
            for e in range(v.shape[0]):
                weights[f"{prefix}.mlp.experts.{e}.{proj}.weight"] = v[e]
        else:
            weights[k] = v
    weights = dict(sorted(weights.items()))
    mx.eval(list(weights.values()))
    mx.save_safetensors(str(d / "model.safetensors"), weights,
                        metadata={"format": "pt"})
    index = {"metadata": {"total_size": sum(v.nbytes for v in weights.values())},
             "weight_map": {k: "model.safetensors" for k in weights}}
    write_pretty(d / "model.safetensors.index.json", index)


def make_base_models(tok_jsons):
    for name, (config, style, tmpl_in_cfg, seed) in BASE_MODELS.items():
        d = OUT_DIR / name
        d.mkdir(parents=True)
        docs = training_docs(style, tok_jsons[style])
        model = make_model(config, seed, docs)
        if name == "qwen3_moe-f32":
            save_hf_moe(d, model)
        else:
            save_model(d, model)
        save_config(dict(config), d / "config.json")
        write_tokenizer_files(d, style, tmpl_in_cfg, tok_jsons)
        # Check: the folder loads and reproduces the in-memory model.
        loaded, _ = load(str(d))
        x = mx.array([[1, 50, 200, 7]])
        assert np.array_equal(np.array(model(x)), np.array(loaded(x))), name
        if name == "llama-f32":
            bf = OUT_DIR / "llama-bf16"
            bf.mkdir()
            model.set_dtype(mx.bfloat16)
            save_model(bf, model)
            save_config(dict(config, torch_dtype="bfloat16"), bf / "config.json")
            write_tokenizer_files(bf, style, tmpl_in_cfg, tok_jsons)


def convert_derived(src, dst, how):
    if how == "q4":
        convert_q4(src, dst)
    elif how == "q4-bf16":
        convert_q4(src, dst, group_size=64, dtype="bfloat16")
    else:
        return
    print(f"converted {src} -> {dst}")


def convert_q4(src, dst, group_size=32, dtype="float32"):
    cmd = [str(BIN / "mlx_lm.convert"), "--hf-path", str(OUT_DIR / src),
           "--mlx-path", str(OUT_DIR / dst), "-q", "--q-bits", "4",
           "--q-group-size", str(group_size), "--dtype", dtype]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=OUT_DIR)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        raise SystemExit(f"convert failed for {dst}")
    return r.stdout


# ----------------------------------------------------------------------------
# expected.json

MAX_TOKENS = 32
SAMPLED_CASES = [
    # (seed, temp, top_p, top_k, min_p)
    (0, 1.5, 0.0, 0, 0.0),
    (1, 3.0, 0.9999, 0, 0.0),
    (2, 3.0, 0.0, 5, 0.0),
    (3, 3.0, 0.0, 0, 0.0005),
    (4, 2.5, 0.9999, 20, 0.0001),
]


def top_gap(logprobs):
    s = np.sort(np.array(logprobs.astype(mx.float32)).reshape(-1))
    return float(s[-1] - s[-2])


def run_stream(model, tok, prompt_tokens, **kw):
    """stream_generate over token ids; every response recorded."""
    tokens, segments, gaps, token_logprobs = [], [], [], []
    finish = None
    for r in stream_generate(model, tok, prompt_tokens, max_tokens=MAX_TOKENS,
                             **kw):
        tokens.append(int(r.token))
        segments.append(r.text)
        lp = r.logprobs.astype(mx.float32)
        gaps.append(top_gap(lp))
        token_logprobs.append(enc_float(lp[r.token].item()))
        finish = r.finish_reason
    return {"tokens": tokens, "segments": segments, "text": "".join(segments),
            "finish_reason": finish,
            "stopped_on_eos": finish == "stop",
            "top_gaps": [enc_float(g) for g in gaps],
            "token_logprobs": token_logprobs}


def design_logit_bias(tok, model, prompt_tokens):
    """A logit bias on one token that makes it the greedy choice first at
    step k >= 1 (0-based), with >= 0.5 to spare on both sides. An EOS id
    when one can be found (the run then stops there), else the lowest other
    token id that works."""
    eos_ids = [tok.eos_token_id] + sorted(
        set(tok.eos_token_ids) - {tok.eos_token_id})
    need = []
    for r in stream_generate(model, tok, prompt_tokens, max_tokens=MAX_TOKENS):
        lp = np.array(r.logprobs.astype(mx.float32))
        need.append(lp.max() - lp)
    need = np.stack(need)
    n_tok = len(tok)
    others = [t for t in range(n_tok) if t not in eos_ids]
    for cands in (eos_ids, others):
        for t in cands:
            col = need[:, t]
            for k in range(1, len(col) - 1):
                lo = float(col[:k].min())
                if col[k] < lo - 1.0:
                    return t, k, round((float(col[k]) + lo) / 2.0, 2)
    raise SystemExit("no token for the logit bias")


def draws_consumed(state, seed, limit=1000):
    """How many keys mlx's global key sequence gave out since seed(seed)."""
    key = mx.random.key(seed)
    target = np.array(state[0])
    for n in range(limit):
        if np.array_equal(np.array(key), target):
            return n
        key = mx.random.split(key)[0]
    raise SystemExit("random state not reached")


def cli_runs(d, name):
    """mlx_lm.generate's stdout, and the same generation redone in-process."""
    runs = []
    for extra in ([], ["--ignore-chat-template"],
                  ["--temp", "0.7", "--seed", "3"]):
        args = ["--model", "MODEL_DIR", "--prompt", CLI_PROMPT,
                "--max-tokens", "24"] + extra
        real = [str(BIN / "mlx_lm.generate")] + [
            str(d) if a == "MODEL_DIR" else a for a in args]
        r = subprocess.run(real, capture_output=True, text=True, cwd=OUT_DIR)
        if r.returncode != 0:
            print(r.stdout, r.stderr)
            raise SystemExit(f"mlx_lm.generate failed for {name}")
        out = r.stdout
        sep = "=" * 10 + "\n"
        assert out.startswith(sep), out
        body = out[len(sep):].split("\n" + sep, 1)[0]
        run = {"args": args, "stdout": out, "completion": body}

        # Redo it as main() does: seed (before loading), load, encode.
        seed = 3 if "--seed" in extra else None
        if seed is not None:
            mx.random.seed(seed)
        model, tok = load(str(d))
        if seed is not None:
            run["random_draws_before_generation"] = draws_consumed(
                mx.random.state, seed)
        use_chat = "--ignore-chat-template" not in extra and tok.has_chat_template
        prompt = CLI_PROMPT
        if use_chat:
            prompt = tok.apply_chat_template(
                [{"role": "user", "content": CLI_PROMPT}], tokenize=False,
                add_generation_prompt=True)
            style = "llama3" if name.startswith(("llama", "mistral")) else "qwen"
            assert chat_training_text(style).startswith(prompt), prompt
        ptoks = tok.encode(prompt, add_special_tokens=not use_chat)
        temp = 0.7 if seed is not None else 0.0
        sampler = make_sampler(temp, 1.0, 0.0, 1, top_k=0,
                               xtc_probability=0.0, xtc_threshold=0.1,
                               xtc_special_tokens=tok.encode("\n") +
                               list(tok.eos_token_ids))
        toks, texts, gaps = [], [], []
        for resp in stream_generate(model, tok, ptoks, max_tokens=24,
                                    sampler=sampler):
            toks.append(int(resp.token))
            texts.append(resp.text)
            gaps.append(enc_float(top_gap(resp.logprobs)))
            finish = resp.finish_reason
        assert "".join(texts) == body, (name, extra, texts, body)
        run.update({"chat_template_used": use_chat, "prompt_text": prompt,
                    "prompt_tokens": ptoks, "tokens": toks,
                    "finish_reason": finish})
        if seed is None:
            run["top_gaps"] = gaps
        runs.append(run)
    return runs


def expected_for(name):
    d = OUT_DIR / name
    model, tok, config = load(str(d), return_config=True)
    bos = tok.bos_token
    add_special = bos is None or not RAW_PROMPT.startswith(bos)
    prompt_tokens = tok.encode(RAW_PROMPT, add_special_tokens=add_special)

    cache = make_prompt_cache(model)
    logits = model(mx.array(prompt_tokens)[None], cache=cache)[0]
    logits = logits.astype(mx.float32)
    mx.eval(logits)

    greedy = run_stream(model, tok, prompt_tokens)
    greedy["decoded"] = tok.decode(greedy["tokens"])
    # The str path of stream_generate encodes the same way.
    via_str = [int(r.token) for r in stream_generate(
        model, tok, RAW_PROMPT, max_tokens=MAX_TOKENS)]
    assert via_str == greedy["tokens"], (via_str, greedy["tokens"])

    sampled = []
    for seed, temp, top_p, top_k, min_p in SAMPLED_CASES:
        sampler = make_sampler(temp, top_p, min_p, 1, top_k=top_k)
        mx.random.seed(seed)
        run = run_stream(model, tok, prompt_tokens, sampler=sampler)
        sampled.append({"seed": seed, "temp": temp, "top_p": top_p,
                        "top_k": top_k, "min_p": min_p,
                        "min_tokens_to_keep": 1, **{
                            k: run[k] for k in ("tokens", "text",
                                                "finish_reason",
                                                "token_logprobs")}})

    processed = []
    procs = make_logits_processors(repetition_penalty=1.3)
    run = run_stream(model, tok, prompt_tokens, logits_processors=procs)
    processed.append({"name": "repetition_penalty", "repetition_penalty": 1.3,
                      "repetition_context_size": 20, **{
                          k: run[k] for k in ("tokens", "text",
                                              "finish_reason", "top_gaps")}})
    bias_id, k, bias = design_logit_bias(tok, model, prompt_tokens)
    procs = make_logits_processors(logit_bias={bias_id: bias})
    run = run_stream(model, tok, prompt_tokens, logits_processors=procs)
    assert run["tokens"][k] == bias_id, (k, bias_id, run)
    assert run["tokens"][:k] == greedy["tokens"][:k], (k, run)
    processed.append({"name": "logit_bias",
                      "logit_bias": {str(bias_id): bias},
                      "designed_index": k, **{
                          k2: run[k2] for k2 in ("tokens", "text",
                                                 "finish_reason", "top_gaps")}})

    messages = [{"role": "system", "content": CHAT_SYSTEM},
                {"role": "user", "content": CHAT_USER}]
    chat_text = tok.apply_chat_template(messages, tokenize=False,
                                        add_generation_prompt=True)
    chat_tokens = tok.encode(chat_text, add_special_tokens=False)

    weights = ("q4" if "quantization" in config else
               "bfloat16" if name.endswith("bf16") else "float32")
    return {
        "mlx_version": MLX_VERSION, "mlx_lm_version": MLX_LM_VERSION,
        "model": name, "model_type": config["model_type"],
        "weights": weights,
        "tokenizer": {
            "len": len(tok), "bos_token": bos, "bos_token_id": tok.bos_token_id,
            "eos_token": tok.eos_token, "eos_token_id": tok.eos_token_id,
            "eos_token_ids": sorted(int(i) for i in tok.eos_token_ids),
            "has_chat_template": bool(tok.has_chat_template),
            "detokenizer": type(tok._detokenizer).__name__},
        "prompt": RAW_PROMPT, "prompt_add_special_tokens": add_special,
        "prompt_tokens": prompt_tokens, "logits": enc(logits),
        "greedy": {"max_tokens": MAX_TOKENS, **greedy},
        "sampled": sampled, "processed": processed,
        "chat_messages": messages, "chat_text": chat_text,
        "chat_tokens": chat_tokens,
        "cli": cli_runs(d, name),
    }


# ----------------------------------------------------------------------------
# fast.json


def fast_cases():
    cases = []
    rs = np.random.RandomState(500)

    def vjp(fn, primals, cot):
        out, grads = mx.vjp(fn, primals, [cot])
        mx.eval(out, grads)
        return out[0], grads

    # --- rms_norm ----------------------------------------------------------
    x = f32(normal(rs, (2, 3, 16), 2.0) + 0.3)
    w = f32(1.0 + normal(rs, (16,), 0.3))
    for eps in [1e-5, 1e-2]:
        cot = f32(normal(rs, (2, 3, 16)))
        y, (gx, gw) = vjp(lambda a, b: [mx.fast.rms_norm(a, b, eps)], [x, w],
                          cot)
        cases.append({"name": f"rms_norm_eps{eps}", "kind": "rms_norm",
                      "eps": eps, "x": enc(x), "weight": enc(w), "y": enc(y),
                      "cotangent": enc(cot),
                      "grads": {"x": enc(gx), "weight": enc(gw)}})

    # --- layer_norm --------------------------------------------------------
    x = f32(normal(rs, (2, 3, 16), 2.0) + 0.7)
    w = f32(1.0 + normal(rs, (16,), 0.3))
    b = f32(normal(rs, (16,), 0.5))
    for tag, use_w, use_b in [("wb", True, True), ("w", True, False),
                              ("b", False, True), ("none", False, False)]:
        cot = f32(normal(rs, (2, 3, 16)))
        prim = [x] + ([w] if use_w else []) + ([b] if use_b else [])

        def ln(*args, use_w=use_w, use_b=use_b):
            a = args[0]
            ww = args[1] if use_w else None
            bb = args[1 + use_w] if use_b else None
            return [mx.fast.layer_norm(a, ww, bb, 1e-5)]
        y, grads = vjp(ln, prim, cot)
        case = {"name": f"layer_norm_{tag}", "kind": "layer_norm", "eps": 1e-5,
                "x": enc(x), "y": enc(y), "cotangent": enc(cot),
                "grads": {"x": enc(grads[0])}}
        if use_w:
            case["weight"] = enc(w)
            case["grads"]["weight"] = enc(grads[1])
        if use_b:
            case["bias"] = enc(b)
            case["grads"]["bias"] = enc(grads[1 + use_w])
        cases.append(case)

    # --- rope --------------------------------------------------------------
    x = f32(normal(rs, (1, 2, 5, 16)))
    freqs_full = f32(np.round(np.exp(rs.uniform(0, 6, size=(8,))), 3))
    freqs_part = f32(np.round(np.exp(rs.uniform(0, 6, size=(4,))), 3))
    rope_params = [
        # dims, traditional, base, scale, offset, freqs
        (16, False, 10000.0, 1.0, 0, None),
        (16, True, 10000.0, 1.0, 3, None),
        (16, False, 500000.0, 0.25, 7, None),
        (8, False, 10000.0, 1.0, 2, None),
        (8, True, 1000.0, 2.0, 0, None),
        (16, False, None, 1.0, 4, freqs_full),
        (16, True, None, 1.0, 1, freqs_full),
        (8, False, None, 0.5, 6, freqs_part),
    ]
    for i, (dims, trad, base, scale, offset, freqs) in enumerate(rope_params):
        cot = f32(normal(rs, x.shape))

        def rope(a, dims=dims, trad=trad, base=base, scale=scale,
                 offset=offset, freqs=freqs):
            return [mx.fast.rope(a, dims, traditional=trad, base=base,
                                 scale=scale, offset=offset, freqs=freqs)]
        y, (gx,) = vjp(rope, [x], cot)
        case = {"name": f"rope_{i}_d{dims}_trad{int(trad)}", "kind": "rope",
                "dims": dims, "traditional": trad, "base": base,
                "scale": scale, "offset": offset, "x": enc(x), "y": enc(y),
                "cotangent": enc(cot), "grads": {"x": enc(gx)}}
        if freqs is not None:
            case["freqs"] = enc(freqs)
        cases.append(case)

    # --- scaled_dot_product_attention -------------------------------------
    def sdpa_case(name, qL, kL, n_q, n_kv, mask_kind, D=16):
        q = f32(normal(rs, (1, n_q, qL, D)))
        k = f32(normal(rs, (1, n_kv, kL, D)))
        v = f32(normal(rs, (1, n_kv, kL, D)))
        scale = D ** -0.5
        mask_enc = None
        if mask_kind == "causal":
            mask = "causal"
            mask_enc = "causal"
        elif mask_kind == "additive":
            mask = f32(normal(rs, (1, 1, qL, kL)))
            mask_enc = enc(mask)
        elif mask_kind == "bool":
            m = rs.uniform(size=(1, n_q, qL, kL)) > 0.3
            m[..., 0] = True  # every row keeps at least one key
            mask = mx.array(m)
            mask_enc = enc(mask)
        else:
            mask = None
        cot = f32(normal(rs, (1, n_q, qL, D)))

        def f(q_, k_, v_):
            return [mx.fast.scaled_dot_product_attention(q_, k_, v_,
                                                         scale=scale,
                                                         mask=mask)]
        y, (gq, gk, gv) = vjp(f, [q, k, v], cot)
        # Sanity: a plain reference (GQA by repeating KV heads; "causal"
        # aligned to the last query, as MLX does when qL < kL).
        rep = n_q // n_kv
        kk = np.repeat(np.array(k), rep, axis=1)
        vv = np.repeat(np.array(v), rep, axis=1)
        s = np.array(q) @ kk.swapaxes(-1, -2) * scale
        if mask_kind == "causal":
            keep = (np.arange(kL - qL, kL)[:, None] >= np.arange(kL)[None])
            s = np.where(keep, s, -np.inf)
        elif mask_kind == "additive":
            s = s + np.array(mask)
        elif mask_kind == "bool":
            s = np.where(np.array(mask), s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        ref = (p / p.sum(-1, keepdims=True)) @ vv
        assert np.allclose(ref, np.array(y), atol=1e-5), name
        cases.append({"name": name, "kind": "sdpa", "scale": scale,
                      "mask": mask_enc, "q": enc(q), "k": enc(k), "v": enc(v),
                      "y": enc(y), "cotangent": enc(cot),
                      "grads": {"q": enc(gq), "k": enc(gk), "v": enc(gv)}})

    sdpa_case("sdpa_5x5_causal_gqa", 5, 5, 4, 2, "causal")
    sdpa_case("sdpa_5x5_none", 5, 5, 4, 4, None)
    sdpa_case("sdpa_1x7_none_gqa", 1, 7, 4, 2, None)
    sdpa_case("sdpa_3x7_causal_gqa", 3, 7, 4, 2, "causal")
    sdpa_case("sdpa_5x5_additive_gqa", 5, 5, 4, 2, "additive")
    sdpa_case("sdpa_1x7_additive", 1, 7, 4, 2, "additive")
    sdpa_case("sdpa_5x5_bool_gqa", 5, 5, 4, 2, "bool")
    sdpa_case("sdpa_1x7_bool_gqa", 1, 7, 4, 2, "bool")

    # --- gather_qmm / gather_mm (MoE expert products) ---------------------
    E, N, K, T, topk = 4, 8, 64, 5, 2
    w = f32(normal(rs, (E, N, K), 0.2))
    wq, scales, biases = mx.quantize(w, group_size=32, bits=4)
    x = f32(normal(rs, (T, 1, 1, K)))
    idx = mx.array(np.stack([rs.permutation(E)[:topk] for _ in range(T)])
                   .astype(np.int32))
    y = mx.gather_qmm(x, wq, scales, biases, rhs_indices=idx, transpose=True,
                      group_size=32, bits=4)
    mx.eval(wq, scales, biases, y)
    deq = np.array(mx.dequantize(wq, scales, biases, group_size=32, bits=4))
    ref = np.stack([np.stack([np.array(x)[t, 0, 0] @ deq[e].T
                              for e in np.array(idx)[t]]) for t in range(T)])
    assert np.allclose(ref[:, :, None, :], np.array(y), atol=1e-4)
    cases.append({"name": "gather_qmm_moe", "kind": "gather_qmm",
                  "group_size": 32, "bits": 4, "mode": "affine",
                  "transpose": True, "w": enc(w), "wq": enc(wq),
                  "scales": enc(scales), "biases": enc(biases), "x": enc(x),
                  "lhs_indices": None, "rhs_indices": enc(idx), "y": enc(y)})
    # lhs_indices too: x [3, 2, K] gathered by lhs_indices [T] over its batch.
    x2 = f32(normal(rs, (3, 2, K)))
    lhs = mx.array(np.array([0, 2, 1, 2, 0], np.int32))
    rhs = mx.array(np.array([3, 0, 1, 1, 2], np.int32))
    y2 = mx.gather_qmm(x2, wq, scales, biases, lhs_indices=lhs,
                       rhs_indices=rhs, transpose=True, group_size=32, bits=4)
    mx.eval(y2)
    cases.append({"name": "gather_qmm_lhs_rhs", "kind": "gather_qmm",
                  "group_size": 32, "bits": 4, "mode": "affine",
                  "transpose": True, "w": enc(w), "wq": enc(wq),
                  "scales": enc(scales), "biases": enc(biases), "x": enc(x2),
                  "lhs_indices": enc(lhs), "rhs_indices": enc(rhs),
                  "y": enc(y2)})
    # Unquantized: the float32 MoE path (SwitchLinear: w.swapaxes(-1, -2)).
    y3 = mx.gather_mm(x, w.swapaxes(-1, -2), rhs_indices=idx)
    mx.eval(y3)
    cases.append({"name": "gather_mm_moe", "kind": "gather_mm",
                  "w": enc(w), "b_is_w_transposed": True, "x": enc(x),
                  "lhs_indices": None, "rhs_indices": enc(idx), "y": enc(y3)})
    # Gradients of sum(y * cotangent): gather_qmm's in x, gather_mm's in x and w.
    ct = f32(normal(rs, tuple(y2.shape)))
    gx = mx.grad(lambda x_: (mx.gather_qmm(
        x_, wq, scales, biases, lhs_indices=lhs, rhs_indices=rhs,
        transpose=True, group_size=32, bits=4) * ct).sum())(x2)
    ct3 = f32(normal(rs, tuple(y3.shape)))
    gx3, gw3 = mx.grad(lambda x_, w_: (mx.gather_mm(
        x_, w_.swapaxes(-1, -2), rhs_indices=idx) * ct3).sum(),
        argnums=(0, 1))(x, w)
    mx.eval(gx, gx3, gw3)
    cases[-2].update({"cotangent": enc(ct), "grads": {"x": enc(gx)}})
    cases[-1].update({"cotangent": enc(ct3),
                      "grads": {"x": enc(gx3), "w": enc(gw3)}})
    return cases


# ----------------------------------------------------------------------------


def main():
    assert mx.__version__ == MLX_VERSION, mx.__version__
    assert mlx_lm.__version__ == MLX_LM_VERSION, mlx_lm.__version__
    if sys.argv[1:3] == ["--only", "fast.json"]:
        write_json(OUT_DIR / "fast.json",
                   {"mlx_version": MLX_VERSION, "cases": fast_cases()})
        return
    if sys.argv[1:2] == ["--only"]:
        # One derived folder, from its committed source folder.
        name = sys.argv[2]
        src, how = DERIVED[name]
        shutil.rmtree(OUT_DIR / name, ignore_errors=True)
        convert_derived(src, name, how)
        write_json(OUT_DIR / name / "expected.json", expected_for(name))
        return
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name in ALL_MODELS:
        shutil.rmtree(OUT_DIR / name, ignore_errors=True)

    tok_jsons = {s: build_tokenizer_json(s) for s in ("qwen", "llama3")}
    assert tok_jsons["qwen"] == build_tokenizer_json("qwen")  # deterministic
    make_base_models(tok_jsons)
    for dst, (src, how) in DERIVED.items():
        convert_derived(src, dst, how)

    for name in ALL_MODELS:
        print(f"expected.json for {name}")
        write_json(OUT_DIR / name / "expected.json", expected_for(name))

    write_json(OUT_DIR / "fast.json",
               {"mlx_version": MLX_VERSION, "cases": fast_cases()})
    total = sum(p.stat().st_size for p in OUT_DIR.rglob("*") if p.is_file())
    print(f"fixtures total: {total} bytes")


if __name__ == "__main__":
    main()
