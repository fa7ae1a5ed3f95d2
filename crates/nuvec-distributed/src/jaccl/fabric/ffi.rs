//! Placeholder for the hand-declared ibverbs functions.
