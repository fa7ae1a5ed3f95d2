//! nuvec's benchmark programs live in `src/bin/`, one per benchmark; `cargo xtask bench-core`,
//! `bench-distributed`, `bench-transforms`, `bench-nn` and `bench-lm` build them in release mode
//! and run them beside the peers they are measured against (docs/performance.md).
