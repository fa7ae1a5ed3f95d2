//! The collective and point-to-point calls of the loaded library: each wraps one MPI
//! function over nuvec's buffers, its `unsafe` call justified where it is made.

use super::{check, Handle, Mpi, Status, IN_PLACE};
use std::ffi::{c_int, c_void};

/// The buffer of an `MPI_Bcast`: written on every rank but the root, only read on the root.
pub(crate) enum BcastBuffer<'a> {
    Into(&'a mut [u8]),
    FromRoot(&'a [u8]),
}

/// The send and receive buffers of a collective of `count` elements each way. Open MPI
/// refuses a send buffer equal to the receive buffer, which two empty slices can be: with
/// nothing to move, two distinct bytes of `spare`.
fn distinct_buffers(
    (input, output): (&[u8], &mut [u8]),
    count: usize,
    spare: &mut [u8; 2],
) -> (*const u8, *mut u8) {
    match count {
        0 => {
            let (first, second) = spare.split_at_mut(1);
            (first.as_ptr(), second.as_mut_ptr())
        }
        _ => (input.as_ptr(), output.as_mut_ptr()),
    }
}

impl Mpi {
    /// `MPI_Allreduce` of `count` elements; in place when `input` is `None`.
    pub(crate) fn allreduce(
        &self,
        input: Option<&[u8]>,
        output: &mut [u8],
        count: usize,
        datatype: Handle,
        op: Handle,
        comm: Handle,
    ) -> Result<(), c_int> {
        let source = input.map_or(IN_PLACE as *const c_void, |i| i.as_ptr().cast());
        // SAFETY: the buffers hold `count` elements of `datatype` (the caller sizes them) and
        // `count` fits an int (the caller chunks).
        check(unsafe {
            (self.allreduce)(
                source,
                output.as_mut_ptr().cast(),
                count as c_int,
                datatype,
                op,
                comm,
            )
        })
    }

    /// `MPI_Allgather` of `count` elements from every rank.
    pub(crate) fn allgather(
        &self,
        input: &[u8],
        output: &mut [u8],
        count: usize,
        datatype: Handle,
        comm: Handle,
    ) -> Result<(), c_int> {
        let mut spare = [0u8; 2];
        let (from, into) = distinct_buffers((input, output), count, &mut spare);
        // SAFETY: `input` holds `count` elements and `output` `count` per rank (or, for no
        // elements, two live spare bytes that nothing reads or writes); `count` fits an int
        // (the caller chunks).
        check(unsafe {
            (self.allgather)(
                from.cast(),
                count as c_int,
                datatype,
                into.cast(),
                count as c_int,
                datatype,
                comm,
            )
        })
    }

    /// `MPI_Bcast` of `count` elements from rank `root`: into `data` on the other ranks,
    /// from it on the root.
    pub(crate) fn bcast(
        &self,
        data: BcastBuffer<'_>,
        count: usize,
        datatype: Handle,
        root: usize,
        comm: Handle,
    ) -> Result<(), c_int> {
        // MPI never writes the root's buffer (it is an input there), so a root's shared
        // slice is made mutable only for the C signature.
        let at = match data {
            BcastBuffer::Into(data) => data.as_mut_ptr(),
            BcastBuffer::FromRoot(data) => data.as_ptr().cast_mut(),
        };
        // SAFETY: the buffer holds `count` elements (`count` fits an int: the caller chunks);
        // MPI reads it on the root and writes it elsewhere, where it is a `&mut` slice.
        check(unsafe { (self.bcast)(at.cast(), count as c_int, datatype, root as c_int, comm) })
    }

    /// `MPI_Alltoall` of `count` elements to and from every rank.
    pub(crate) fn alltoall(
        &self,
        input: &[u8],
        output: &mut [u8],
        count: usize,
        datatype: Handle,
        comm: Handle,
    ) -> Result<(), c_int> {
        let mut spare = [0u8; 2];
        let (from, into) = distinct_buffers((input, output), count, &mut spare);
        // SAFETY: `input` and `output` hold `count` elements per rank (or, for none, two live
        // spare bytes nothing touches); `count` fits an int (the caller chunks).
        check(unsafe {
            (self.alltoall)(
                from.cast(),
                count as c_int,
                datatype,
                into.cast(),
                count as c_int,
                datatype,
                comm,
            )
        })
    }

    /// `MPI_Alltoallv`: `counts.0[j]` elements from `displacements.0[j]` of `input` to rank
    /// `j`, `counts.1[j]` elements from rank `j` at `displacements.1[j]` of `output`.
    pub(crate) fn alltoallv(
        &self,
        (input, output): (&[u8], &mut [u8]),
        counts: (&[c_int], &[c_int]),
        displacements: (&[c_int], &[c_int]),
        datatype: Handle,
        comm: Handle,
    ) -> Result<(), c_int> {
        let mut spare = [0u8; 2];
        let any = input.len().max(output.len());
        let (from, into) = distinct_buffers((input, output), any, &mut spare);
        // SAFETY: the caller gives one count and displacement per rank, the regions tiling
        // each buffer (checked in `MpiCommunicator::all_to_all_v`), every count an int; for
        // empty buffers, two live spare bytes nothing touches (every count is then 0).
        check(unsafe {
            (self.alltoallv)(
                from.cast(),
                counts.0.as_ptr(),
                displacements.0.as_ptr(),
                datatype,
                into.cast(),
                counts.1.as_ptr(),
                displacements.1.as_ptr(),
                datatype,
                comm,
            )
        })
    }

    /// `MPI_Barrier`.
    pub(crate) fn barrier(&self, comm: Handle) -> Result<(), c_int> {
        // SAFETY: a communicator handle MPI gave us; the call touches no memory of ours.
        check(unsafe { (self.barrier)(comm) })
    }

    /// `MPI_Reduce_scatter_block`: `count` elements of the reduction land on each rank.
    pub(crate) fn reduce_scatter_block(
        &self,
        input: &[u8],
        output: &mut [u8],
        count: usize,
        datatype: Handle,
        op: Handle,
        comm: Handle,
    ) -> Result<(), c_int> {
        // SAFETY: `input` holds `count` elements per rank and `output` `count`; `count` fits
        // an int (the caller chunks).
        check(unsafe {
            (self.reduce_scatter_block)(
                input.as_ptr().cast(),
                output.as_mut_ptr().cast(),
                count as c_int,
                datatype,
                op,
                comm,
            )
        })
    }

    /// `MPI_Send` of `data` as bytes.
    pub(crate) fn send(
        &self,
        data: &[u8],
        dst: usize,
        tag: c_int,
        comm: Handle,
    ) -> Result<(), c_int> {
        // SAFETY: `data` is a valid buffer of `len` bytes (the caller chunks to fit an int).
        check(unsafe {
            (self.send)(
                data.as_ptr().cast(),
                data.len() as c_int,
                self.byte,
                dst as c_int,
                tag,
                comm,
            )
        })
    }

    /// `MPI_Recv` into `data` (as bytes); returns how many bytes arrived.
    pub(crate) fn recv(
        &self,
        data: &mut [u8],
        src: usize,
        tag: c_int,
        comm: Handle,
    ) -> Result<usize, c_int> {
        let mut status = Status::default();
        // SAFETY: `data` is a valid buffer of `len` bytes (chunked to fit an int); `status`
        // has Open MPI's layout.
        check(unsafe {
            (self.recv)(
                data.as_mut_ptr().cast(),
                data.len() as c_int,
                self.byte,
                src as c_int,
                tag,
                comm,
                &mut status,
            )
        })?;
        let mut count: c_int = 0;
        // SAFETY: `status` was filled by MPI_Recv.
        check(unsafe { (self.get_count)(&status, self.byte, &mut count) })?;
        Ok(count.max(0) as usize)
    }
}
