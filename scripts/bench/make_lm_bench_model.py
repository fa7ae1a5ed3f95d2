#!/usr/bin/env python3
"""Make the model `cargo xtask bench-lm` times: the shape of Qwen2.5-0.5B (hidden 896,
24 layers, 14 heads, 2 KV heads, intermediate 4864, vocabulary 151,936, tied embeddings) with
random weights from mlx-lm 0.32.2's own `qwen2` model class, saved in bfloat16, and its 4-bit
conversion by `mlx_lm.convert` (group size 64). No model hub is reachable here, so the
tokenizer is a fixture's small byte-level BPE (benchmarks feed random token ids).

    .venv-mlx/bin/python scripts/bench/make_lm_bench_model.py OUT_DIR

writes OUT_DIR/qwen2.5-0.5b-shape-bf16 and OUT_DIR/qwen2.5-0.5b-shape-4bit (skipped when
they exist).
"""

import shutil
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_map
from mlx_lm.models import qwen2
from mlx_lm.utils import save_config, save_model

CONFIG = {
    "model_type": "qwen2",
    "hidden_size": 896,
    "num_hidden_layers": 24,
    "intermediate_size": 4864,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-6,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}

TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "generation_config.json"]


def main():
    out = Path(sys.argv[1])
    repo = Path(__file__).resolve().parents[2]
    fixture = repo / "crates/nuvec-lm/tests/fixtures/qwen2-f32"
    bf16 = out / "qwen2.5-0.5b-shape-bf16"
    q4 = out / "qwen2.5-0.5b-shape-4bit"
    if not (bf16 / "config.json").exists():
        mx.random.seed(0)
        model = qwen2.Model(qwen2.ModelArgs.from_dict(CONFIG))
        model.update(tree_map(lambda p: p.astype(mx.bfloat16), model.parameters()))
        mx.eval(model.parameters())
        bf16.mkdir(parents=True, exist_ok=True)
        save_model(bf16, model)
        save_config(dict(CONFIG), bf16 / "config.json")
        for name in TOKENIZER_FILES:
            if (fixture / name).exists():
                shutil.copy(fixture / name, bf16 / name)
    if not (q4 / "config.json").exists():
        subprocess.run(
            [sys.executable, "-m", "mlx_lm", "convert", "--hf-path", str(bf16),
             "--mlx-path", str(q4), "-q", "--q-bits", "4", "--q-group-size", "64"],
            check=True,
        )
    print(bf16)
    print(q4)


if __name__ == "__main__":
    main()
