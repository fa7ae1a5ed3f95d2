//! Splitting large element-wise loops across cores.

use rayon::prelude::*;

/// Below this many elements a loop runs on the calling thread: handing work to the pool
/// costs a few microseconds, which only pays off for large arrays.
pub const MIN_PARALLEL_ELEMENTS: usize = 1 << 16;

/// Calls `body(start, chunk)` over disjoint chunks of `out` that together cover it, in
/// parallel when `out` is large.
pub fn for_each_chunk<T: Send>(out: &mut [T], body: impl Fn(usize, &mut [T]) + Sync) {
    let threads = rayon::current_num_threads().max(1);
    if out.len() < MIN_PARALLEL_ELEMENTS || threads == 1 {
        body(0, out);
        return;
    }
    let chunk = out
        .len()
        .div_ceil(threads * 4)
        .max(MIN_PARALLEL_ELEMENTS / 4);
    out.par_chunks_mut(chunk)
        .enumerate()
        .for_each(|(index, part)| body(index * chunk, part));
}

/// Calls `body(row, slice)` for each row of `out` (rows of `row_len` elements), in
/// parallel when `out` is large.
pub fn for_each_row<T: Send>(out: &mut [T], row_len: usize, body: impl Fn(usize, &mut [T]) + Sync) {
    if row_len == 0 {
        return;
    }
    if out.len() < MIN_PARALLEL_ELEMENTS || rayon::current_num_threads() == 1 {
        out.chunks_mut(row_len)
            .enumerate()
            .for_each(|(row, slice)| body(row, slice));
        return;
    }
    out.par_chunks_mut(row_len)
        .enumerate()
        .for_each(|(row, slice)| body(row, slice));
}

/// Runs `body` on a thread of the pool that runs the kernels, and waits for it: a thread
/// outside the pool hands each parallel kernel over and sleeps until it ends, which for a
/// loop of many small kernels (decoding a token) costs a tenth of its time in thread
/// switches; a pool thread takes part in the kernels instead. Runs `body` here when this is
/// already a pool thread, or when the pool has a single thread (which a `body` that waits on
/// other threads could otherwise block).
pub fn on_pool<R: Send>(body: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() || rayon::current_num_threads() < 2 {
        return body();
    }
    rayon::join(body, || ()).0
}

/// Calls `body(start, part)` over consecutive parts of `out` of `part_len` elements (the
/// last may be shorter): in parallel when `work` (the kernel's cost, in multiply-adds or
/// similar steps) reaches [`MIN_PARALLEL_ELEMENTS`], otherwise one after the other.
pub fn for_each_part<T: Send>(
    out: &mut [T],
    part_len: usize,
    work: usize,
    body: impl Fn(usize, &mut [T]) + Sync,
) {
    if part_len == 0 {
        return;
    }
    if work < MIN_PARALLEL_ELEMENTS || rayon::current_num_threads() == 1 {
        for (index, part) in out.chunks_mut(part_len).enumerate() {
            body(index * part_len, part);
        }
        return;
    }
    out.par_chunks_mut(part_len)
        .enumerate()
        .for_each(|(index, part)| body(index * part_len, part));
}

/// Maps `input` into `out` element by element (`out.len() == input.len()`).
pub fn map<T: Sync, U: Send>(input: &[T], out: &mut [U], f: impl Fn(&T) -> U + Sync) {
    for_each_chunk(out, |start, part| {
        let len = part.len();
        for (o, i) in part.iter_mut().zip(&input[start..start + len]) {
            *o = f(i);
        }
    });
}

/// Maps `out` in place.
pub fn map_in_place<T: Send + Copy>(out: &mut [T], f: impl Fn(T) -> T + Sync) {
    for_each_chunk(out, |_, part| {
        for o in part.iter_mut() {
            *o = f(*o);
        }
    });
}

/// Fills `out[i] = row(i)`, in parallel when there are many rows.
pub fn map_rows<T: Send>(out: &mut [T], row: impl Fn(usize) -> T + Sync + Send) {
    if out.len() > 1 && rayon::current_num_threads() > 1 {
        out.par_iter_mut()
            .enumerate()
            .for_each(|(i, o)| *o = row(i));
    } else {
        for (i, o) in out.iter_mut().enumerate() {
            *o = row(i);
        }
    }
}
