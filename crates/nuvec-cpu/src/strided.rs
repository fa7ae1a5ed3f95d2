//! Walking N-d arrays given by shape and element strides (possibly zero or negative), which is
//! how broadcasting, transposes and slices are read without materialising index tables.

use crate::parallel;

/// Row-major strides (in elements) of a contiguous array of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<isize> {
    let mut strides = vec![0isize; shape.len()];
    let mut acc = 1isize;
    for (stride, &dim) in strides.iter_mut().zip(shape).rev() {
        *stride = acc;
        acc *= dim as isize;
    }
    strides
}

/// Yields the starting offset of each innermost row, in row-major order.
#[derive(Debug, Clone)]
pub struct RowOffsets<'a> {
    outer_shape: &'a [usize],
    outer_strides: &'a [isize],
    index: Vec<usize>,
    offset: isize,
    remaining: usize,
}

impl<'a> RowOffsets<'a> {
    /// Rows of an array of `shape[..n-1]` with `strides[..n-1]`, starting at row `first_row`
    /// with the array's first element at `base`.
    pub fn new(
        outer_shape: &'a [usize],
        outer_strides: &'a [isize],
        base: isize,
        first_row: usize,
    ) -> Self {
        let total: usize = outer_shape.iter().product();
        let mut index = vec![0usize; outer_shape.len()];
        let mut rest = first_row;
        let mut offset = base;
        for axis in (0..outer_shape.len()).rev() {
            let dim = outer_shape[axis].max(1);
            index[axis] = rest % dim;
            rest /= dim;
            offset += index[axis] as isize * outer_strides[axis];
        }
        RowOffsets {
            outer_shape,
            outer_strides,
            index,
            offset,
            remaining: total.saturating_sub(first_row),
        }
    }
}

impl Iterator for RowOffsets<'_> {
    type Item = isize;
    fn next(&mut self) -> Option<isize> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let current = self.offset;
        for axis in (0..self.outer_shape.len()).rev() {
            self.index[axis] += 1;
            self.offset += self.outer_strides[axis];
            if self.index[axis] < self.outer_shape[axis] {
                break;
            }
            self.offset -= self.outer_strides[axis] * self.outer_shape[axis] as isize;
            self.index[axis] = 0;
        }
        Some(current)
    }
}

/// Drops axes of length 1 and merges axes that are contiguous in every operand, so that the
/// innermost loop is as long as possible. Returns the new shape and one stride list per operand.
pub fn collapse(shape: &[usize], strides: &[&[isize]]) -> (Vec<usize>, Vec<Vec<isize>>) {
    let mut out_shape: Vec<usize> = Vec::new();
    let mut out_strides: Vec<Vec<isize>> = vec![Vec::new(); strides.len()];
    for axis in 0..shape.len() {
        if shape[axis] == 1 {
            continue;
        }
        let mergeable = !out_shape.is_empty()
            && strides.iter().enumerate().all(|(k, s)| {
                let prev = *out_strides[k].last().unwrap_or(&0);
                prev == s[axis] * shape[axis] as isize
            });
        if mergeable {
            let last = out_shape.len() - 1;
            out_shape[last] *= shape[axis];
            for (k, s) in strides.iter().enumerate() {
                out_strides[k][last] = s[axis];
            }
        } else {
            out_shape.push(shape[axis]);
            for (k, s) in strides.iter().enumerate() {
                out_strides[k].push(s[axis]);
            }
        }
    }
    if out_shape.is_empty() {
        out_shape.push(1);
        for s in &mut out_strides {
            s.push(0);
        }
    }
    (out_shape, out_strides)
}

/// Copies the elements of `src` seen through (`shape`, `strides`, `offset`) into the
/// contiguous `out` (`out.len()` = product of `shape`).
pub fn gather<T: Copy + Send + Sync>(
    src: &[T],
    offset: isize,
    shape: &[usize],
    strides: &[isize],
    out: &mut [T],
) {
    if out.is_empty() {
        return;
    }
    let (shape, strides) = collapse(shape, &[strides]);
    let strides = &strides[0];
    let n = shape.len();
    let inner = shape[n - 1];
    let inner_stride = strides[n - 1];
    let (outer_shape, outer_strides) = (&shape[..n - 1], &strides[..n - 1]);
    let rows_per_chunk = (parallel::MIN_PARALLEL_ELEMENTS / 4 / inner.max(1)).max(1) * inner;
    let chunked = out.len() >= parallel::MIN_PARALLEL_ELEMENTS;
    let body = |start: usize, part: &mut [T]| {
        let rows = RowOffsets::new(outer_shape, outer_strides, offset, start / inner);
        for (row, base) in part.chunks_mut(inner).zip(rows) {
            if inner_stride == 1 {
                let base = base as usize;
                row.copy_from_slice(&src[base..base + inner]);
            } else {
                for (i, o) in row.iter_mut().enumerate() {
                    *o = src[(base + i as isize * inner_stride) as usize];
                }
            }
        }
    };
    if chunked {
        use rayon::prelude::*;
        out.par_chunks_mut(rows_per_chunk)
            .enumerate()
            .for_each(|(k, part)| body(k * rows_per_chunk, part));
    } else {
        body(0, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_reads_a_transpose() {
        let src: Vec<i32> = (0..6).collect(); // [[0,1,2],[3,4,5]]
        let mut out = vec![0; 6];
        gather(&src, 0, &[3, 2], &[1, 3], &mut out);
        assert_eq!(out, [0, 3, 1, 4, 2, 5]);
    }

    #[test]
    fn gather_reads_a_reversed_slice_and_a_broadcast() {
        let src: Vec<i32> = (0..4).collect();
        let mut out = vec![0; 4];
        gather(&src, 3, &[4], &[-1], &mut out);
        assert_eq!(out, [3, 2, 1, 0]);
        let mut out = vec![0; 6];
        gather(&src, 1, &[2, 3], &[0, 1], &mut out);
        assert_eq!(out, [1, 2, 3, 1, 2, 3]);
    }

    #[test]
    fn collapse_merges_contiguous_axes() {
        let strides = contiguous_strides(&[2, 3, 4]);
        let (shape, merged) = collapse(&[2, 3, 4], &[&strides]);
        assert_eq!(shape, [24]);
        assert_eq!(merged[0], [1]);
    }
}
