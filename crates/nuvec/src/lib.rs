//! nuvec
