"""SentencePiece-style tokenizers and what mlx-lm's streaming detokenizer makes of them.

Writes two tiny tokenizer folders under crates/nuvec-lm/tests/fixtures/:
  spm/           decoder Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0): mlx-lm picks
                 SPMStreamingDetokenizer (trim_space=True);
  spm-no-strip/  the same without Strip: SPMStreamingDetokenizer(trim_space=False);
each with detokenizer.json: token sequences and, per sequence, the segment mlx-lm's
detokenizer released after each token and after finalize(), and the class it picked.

Run with the MLX venv:
  .venv-mlx/bin/python scripts/golden/make_detokenizer_fixtures.py
"""

import json
import pathlib

from tokenizers import Tokenizer, decoders, models, normalizers
from mlx_lm.tokenizer_utils import load

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "crates/nuvec-lm/tests/fixtures"

PIECES = ["▁Hello", "▁wor", "ld", "▁", "é", "▁end", ",", "▁▁", "x▁y", "<0x41>literal"]


def vocabulary():
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece in PIECES:
        vocab[piece] = len(vocab)
    return vocab


def sequences(vocab):
    byte = lambda b: vocab[f"<0x{b:02X}>"]
    word = lambda p: vocab[p]
    ni = "日".encode()  # three bytes
    crab = "🦀".encode()  # four bytes
    return [
        [word("▁Hello"), word("▁wor"), word("ld"), word(",")],
        # A character made of byte tokens, split across steps, then words.
        [word("▁Hello"), byte(ni[0]), byte(ni[1]), byte(ni[2]), word("▁end")],
        [byte(crab[0]), byte(crab[1]), byte(crab[2]), byte(crab[3]), word("▁wor"), word("ld")],
        # Leading spaces: only the very first is trimmed (trim_space), later ones kept.
        [word("▁"), word("▁"), word("é"), word("▁▁"), word("x▁y")],
        # A newline byte, special tokens, a piece that only looks like a byte token.
        [word("▁end"), byte(0x0A), word("▁Hello"), 2, word("<0x41>literal"), 1],
        # A character cut off by the end of the stream: finalize() releases a replacement.
        [word("▁wor"), byte(ni[0]), byte(ni[1])],
    ]


def make(folder, strip):
    vocab = vocabulary()
    tokenizer = Tokenizer(
        models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True, fuse_unk=True)
    )
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]
    )
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if strip:
        steps.append(decoders.Strip(" ", 1, 0))
    tokenizer.decoder = decoders.Sequence(steps)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
            },
            indent=1,
        )
        + "\n"
    )
    wrapper = load(folder)
    detokenizer = wrapper.detokenizer
    cases = []
    for tokens in sequences(vocab):
        detokenizer.reset()
        segments = []
        for token in tokens:
            detokenizer.add_token(token)
            segments.append(detokenizer.last_segment)
        detokenizer.finalize()
        segments.append(detokenizer.last_segment)
        cases.append({"tokens": tokens, "segments": segments, "text": detokenizer.text})
    out = {
        "detokenizer": type(detokenizer).__name__,
        "trim_space": getattr(detokenizer, "trim_space", None),
        "cases": cases,
    }
    (folder / "detokenizer.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {folder}: {out['detokenizer']} trim_space={out['trim_space']}, {len(cases)} cases")


def main():
    make(FIXTURES / "spm", strip=True)
    make(FIXTURES / "spm-no-strip", strip=False)


if __name__ == "__main__":
    main()
