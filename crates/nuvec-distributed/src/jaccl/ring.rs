//! JACCL's ring: every rank cabled to its two neighbours, with up to four cables each way.
//!
//! Large reductions and gathers are split into lanes, one per cable and direction, that go
//! round the ring at once (clockwise on the right cables, counter-clockwise on the left ones);
//! small ones use one lane. Each lane runs the ring schedule of `crate::ring::schedule`: a
//! reduce-scatter in which every segment is reduced once per step by the rank that receives it,
//! then an all-gather of the reduced segments, so every rank gets the same bits. `send` and
//! `recv` reach the two neighbours only, as in MLX.

use super::exchange::{carve, reduce_kind, Links, Transfer, ALL_GATHER, SUM_SCATTER};
use super::scratch::{Scratch, CHUNK_BYTES};
use crate::kernels::kernel_op;
use crate::schedule::{all_gather_steps, reduce_scatter_steps, segment};
use nuvec_core::distributed::ReduceOp;
use nuvec_core::{DType, Result};
use nuvec_cpu::bytes::reduce_bytes;
use std::ops::Range;

/// Transfers below this size go round one lane.
const SMALL_BYTES: usize = 64 * 1024;

/// Channel indices of a ring: per cable, the queue pair to the right and to the left
/// neighbour (the same one on a ring of two).
#[derive(Debug)]
pub(crate) struct Ring {
    pub(crate) rank: usize,
    pub(crate) size: usize,
    pub(crate) right: Vec<usize>,
    pub(crate) left: Vec<usize>,
}

/// One lane: the channel it sends on, the one it receives on, and this rank's position on
/// the ring it goes round.
#[derive(Clone, Copy, Debug)]
struct Lane {
    send: usize,
    recv: usize,
    position: usize,
    clockwise: bool,
}

impl Lane {
    /// The block of rank order that segment `q` of this lane's ring is.
    fn block(&self, q: usize, n: usize) -> usize {
        if self.clockwise {
            q
        } else {
            n - 1 - q
        }
    }
}

impl Ring {
    fn right_rank(&self) -> usize {
        (self.rank + 1) % self.size
    }

    fn left_rank(&self) -> usize {
        (self.rank + self.size - 1) % self.size
    }

    fn lanes(&self, bytes: usize) -> Vec<Lane> {
        let n = self.size;
        let clockwise = |k: usize| Lane {
            send: self.right[k],
            recv: self.left[k],
            position: self.rank,
            clockwise: true,
        };
        let counter = |k: usize| Lane {
            send: self.left[k],
            recv: self.right[k],
            position: n - 1 - self.rank,
            clockwise: false,
        };
        let wires = self.right.len();
        if bytes < SMALL_BYTES {
            vec![clockwise(0)]
        } else if n == 2 {
            (0..wires).map(clockwise).collect()
        } else {
            (0..wires)
                .flat_map(|k| [clockwise(k), counter(k)])
                .collect()
        }
    }

    /// The transfers of one step: lane `l` sends `sends[l]` and receives into `recvs[l]`; a
    /// channel that one lane sends on and another receives on carries both in one transfer.
    fn transfers<'a>(
        lanes: &[Lane],
        sends: Vec<&'a [u8]>,
        recvs: Vec<&'a mut [u8]>,
    ) -> Vec<Transfer<'a>> {
        let mut transfers: Vec<Transfer<'a>> = Vec::with_capacity(lanes.len() * 2);
        for (lane, send) in lanes.iter().zip(sends) {
            transfers.push(Transfer {
                channel: lane.send,
                send,
                recv: &mut [],
            });
        }
        for (lane, recv) in lanes.iter().zip(recvs) {
            match transfers
                .iter_mut()
                .find(|t| t.channel == lane.recv && t.recv.is_empty())
            {
                Some(t) => t.recv = recv,
                None => transfers.push(Transfer {
                    channel: lane.recv,
                    send: &[],
                    recv,
                }),
            }
        }
        transfers
    }

    pub(crate) fn all_reduce(
        &self,
        links: &mut Links,
        scratch: &mut Scratch,
        data: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let (n, width) = (self.size, dtype.size());
        let (name, kind) = (op.collective_name(), reduce_kind(op));
        let count = data.len() / width;
        let lanes = self.lanes(data.len());
        // Lane `l` owns a contiguous part of the elements; segment `q` of it, in bytes.
        let parts: Vec<Range<usize>> = (0..lanes.len())
            .map(|l| segment(count, lanes.len(), l))
            .collect();
        let seg = |l: usize, q: usize| {
            let part = &parts[l];
            let s = segment(part.len(), n, q);
            (part.start + s.start) * width..(part.start + s.end) * width
        };
        let step = (CHUNK_BYTES / width * width).max(1);
        let buffers = scratch.buffers(lanes.len());
        for s in 0..n - 1 {
            let plan: Vec<(Range<usize>, Range<usize>)> = lanes
                .iter()
                .enumerate()
                .map(|(l, lane)| {
                    let st = reduce_scatter_steps(n, lane.position)[s];
                    (seg(l, st.send), seg(l, st.recv))
                })
                .collect();
            let longest = plan
                .iter()
                .map(|(a, b)| a.len().max(b.len()))
                .max()
                .unwrap_or(0);
            for offset in (0..longest).step_by(step) {
                let piece = |r: &Range<usize>| {
                    (r.start + offset).min(r.end)..(r.start + offset + step).min(r.end)
                };
                {
                    let sends: Vec<&[u8]> =
                        plan.iter().map(|(send, _)| &data[piece(send)]).collect();
                    let recvs: Vec<&mut [u8]> = buffers
                        .iter_mut()
                        .zip(&plan)
                        .map(|(buffer, (_, recv))| &mut buffer[..piece(recv).len()])
                        .collect();
                    links.exchange(name, kind, &mut Self::transfers(&lanes, sends, recvs))?;
                }
                for (buffer, (_, recv)) in buffers.iter().zip(&plan) {
                    let range = piece(recv);
                    let len = range.len();
                    reduce_bytes(&mut data[range], &buffer[..len], dtype, kernel_op(op));
                }
            }
        }
        for s in 0..n - 1 {
            let mut ranges = Vec::with_capacity(lanes.len() * 2);
            for (l, lane) in lanes.iter().enumerate() {
                let st = all_gather_steps(n, lane.position)[s];
                ranges.push(seg(l, st.send));
                ranges.push(seg(l, st.recv));
            }
            self.gather_step(links, data, &lanes, &ranges, name, kind)?;
        }
        Ok(())
    }

    /// One all-gather step over `ranges` (per lane: the range sent, then the range received).
    fn gather_step(
        &self,
        links: &mut Links,
        buffer: &mut [u8],
        lanes: &[Lane],
        ranges: &[Range<usize>],
        name: &str,
        kind: u8,
    ) -> Result<()> {
        let pieces = carve(buffer, ranges).expect("the ranges of a step are disjoint");
        let mut sends = Vec::with_capacity(lanes.len());
        let mut recvs = Vec::with_capacity(lanes.len());
        for (i, piece) in pieces.into_iter().enumerate() {
            if i % 2 == 0 {
                sends.push(&*piece);
            } else {
                recvs.push(piece);
            }
        }
        links.exchange(name, kind, &mut Self::transfers(lanes, sends, recvs))
    }

    pub(crate) fn all_gather(
        &self,
        links: &mut Links,
        input: &[u8],
        output: &mut [u8],
        dtype: DType,
    ) -> Result<()> {
        let (n, width) = (self.size, dtype.size());
        let block = input.len();
        output[self.rank * block..(self.rank + 1) * block].copy_from_slice(input);
        let lanes = self.lanes(block * n);
        let count = block / width;
        let part = |l: usize, b: usize| {
            let p = segment(count, lanes.len(), l);
            b * block + p.start * width..b * block + p.end * width
        };
        for s in 0..n - 1 {
            let mut ranges = Vec::with_capacity(lanes.len() * 2);
            for (l, lane) in lanes.iter().enumerate() {
                let st = all_gather_steps(n, lane.position)[s];
                ranges.push(part(l, lane.block(st.send, n)));
                ranges.push(part(l, lane.block(st.recv, n)));
            }
            self.gather_step(links, output, &lanes, &ranges, "all_gather", ALL_GATHER)?;
        }
        Ok(())
    }

    /// Rank `r` ends with block `r` of the input reduced over every rank. The output is the
    /// running sum that travels round the ring.
    pub(crate) fn reduce_scatter(
        &self,
        links: &mut Links,
        scratch: &mut Scratch,
        input: &[u8],
        output: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let (n, width) = (self.size, dtype.size());
        let block = output.len();
        let lanes = self.lanes(input.len());
        let count = block / width;
        let parts: Vec<Range<usize>> = (0..lanes.len())
            .map(|l| {
                let p = segment(count, lanes.len(), l);
                p.start * width..p.end * width
            })
            .collect();
        let step = (CHUNK_BYTES / width * width).max(1);
        let buffers = scratch.buffers(lanes.len());
        for s in 0..n - 1 {
            let blocks: Vec<(usize, usize)> = lanes
                .iter()
                .map(|lane| {
                    let st = reduce_scatter_steps(n, lane.position)[s];
                    (lane.block(st.send, n), lane.block(st.recv, n))
                })
                .collect();
            let longest = parts.iter().map(|p| p.len()).max().unwrap_or(0);
            for offset in (0..longest).step_by(step) {
                let piece = |l: usize| {
                    let p = &parts[l];
                    (p.start + offset).min(p.end)..(p.start + offset + step).min(p.end)
                };
                {
                    let sends: Vec<&[u8]> = (0..lanes.len())
                        .map(|l| {
                            let r = piece(l);
                            if s == 0 {
                                &input[blocks[l].0 * block + r.start..blocks[l].0 * block + r.end]
                            } else {
                                &output[r]
                            }
                        })
                        .collect();
                    let recvs: Vec<&mut [u8]> = buffers
                        .iter_mut()
                        .enumerate()
                        .map(|(l, buffer)| &mut buffer[..piece(l).len()])
                        .collect();
                    links.exchange(
                        "sum_scatter",
                        SUM_SCATTER,
                        &mut Self::transfers(&lanes, sends, recvs),
                    )?;
                }
                for (l, buffer) in buffers.iter().enumerate() {
                    let r = piece(l);
                    let base = blocks[l].1 * block;
                    output[r.clone()].copy_from_slice(&input[base + r.start..base + r.end]);
                    reduce_bytes(
                        &mut output[r.clone()],
                        &buffer[..r.len()],
                        dtype,
                        kernel_op(op),
                    );
                }
            }
        }
        Ok(())
    }

    /// The channel to neighbour `peer`, or why `peer` cannot be reached.
    pub(crate) fn channel_to(&self, peer: usize) -> Result<usize, String> {
        if peer == self.right_rank() {
            Ok(self.right[0])
        } else if peer == self.left_rank() {
            Ok(self.left[0])
        } else {
            Err(format!(
                "on a JACCL ring, rank {} can send to and receive from its neighbours (ranks {} and {}) only, not rank {peer}, as in MLX; use the mesh for any pair",
                self.rank,
                self.left_rank(),
                self.right_rank()
            ))
        }
    }
}
