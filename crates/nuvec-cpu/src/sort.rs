//! Sorting rows of contiguous data (the array layer moves the sorted axis last).

use crate::Element;
use rayon::prelude::*;
use std::cmp::Ordering;

/// NumPy's order: NaN after every number.
fn total_order<T: Element>(a: &T, b: &T) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(b).unwrap_or(Ordering::Equal),
    }
}

/// Sorts each row of `row_len` elements of `data` in place, ascending.
pub fn sort_rows<T: Element>(data: &mut [T], row_len: usize) {
    if row_len == 0 {
        return;
    }
    data.par_chunks_mut(row_len)
        .for_each(|row| row.sort_by(total_order));
}

/// Writes, for each row of `input`, the indices that sort it (stable) into `out`.
pub fn argsort_rows<T: Element>(input: &[T], row_len: usize, out: &mut [u32]) {
    if row_len == 0 {
        return;
    }
    out.par_chunks_mut(row_len)
        .zip(input.par_chunks(row_len))
        .for_each(|(indices, row)| {
            for (i, slot) in indices.iter_mut().enumerate() {
                *slot = i as u32;
            }
            indices.sort_by(|&a, &b| total_order(&row[a as usize], &row[b as usize]));
        });
}

/// Writes the `k` largest values of each row of `input`, ascending, into `out` (`k` per row).
pub fn topk_rows<T: Element>(input: &[T], row_len: usize, k: usize, out: &mut [T]) {
    if row_len == 0 || k == 0 {
        return;
    }
    out.par_chunks_mut(k)
        .zip(input.par_chunks(row_len))
        .for_each(|(top, row)| {
            let mut sorted = row.to_vec();
            sorted.select_nth_unstable_by(row_len - k, total_order);
            let tail = &mut sorted[row_len - k..];
            tail.sort_by(total_order);
            top.copy_from_slice(tail);
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_sorts_last_and_argsort_is_stable() {
        let mut data = [3.0, f32::NAN, 1.0, 2.0];
        sort_rows(&mut data, 4);
        assert_eq!(&data[..3], &[1.0, 2.0, 3.0]);
        assert!(data[3].is_nan());
        let mut indices = [0u32; 4];
        argsort_rows(&[2, 1, 2, 1], 4, &mut indices);
        assert_eq!(indices, [1, 3, 0, 2]);
    }
}
