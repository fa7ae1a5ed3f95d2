# Shortcuts for the commands of `cargo xtask` (the source of truth; `just` is optional:
# every recipe below is one cargo command you can run without it).

# The main job: the spec's example on 4 ranks over loopback.
demo *ARGS:
    cargo xtask demo {{ARGS}}

# The whole test suite.
test *ARGS:
    cargo test --workspace {{ARGS}}

# nuvec against MLX's ring (and Open MPI, JACCL's emulated fabric); `--hostfile hosts.json
# --backend jaccl` runs the comparison over JACCL on several hosts.
bench-distributed *ARGS:
    cargo xtask bench-distributed {{ARGS}}

# The core's kernels against MLX and NumPy.
bench-core *ARGS:
    cargo xtask bench-core {{ARGS}}

# nuvec-lm against mlx-lm (the Qwen2.5-0.5B-shaped model, bf16 and 4-bit).
bench-lm *ARGS:
    cargo xtask bench-lm {{ARGS}}

# The differential tester against MLX, a long run: `just fuzz-mlx --cases 100000`.
fuzz-mlx *ARGS:
    cargo xtask fuzz-mlx {{ARGS}}

# Formatting, lints and the repository's own checks.
check:
    cargo fmt --check
    cargo clippy --workspace --all-targets -- -D warnings
    cargo xtask tidy
