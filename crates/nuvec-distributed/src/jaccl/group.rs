//! Forming a JACCL group and running its collectives: [`init_with`] and the communicator.

use super::channel::Channel;
use super::exchange::{reduce_kind, Links, Transfer, SEND_RECV};
use super::fabric::{self, Fabric};
use super::form::{join, open, plan, publish, Formed, Planned, SLOT_BYTES};
use super::jaccl_error;
use super::mesh::Mesh;
use super::ring::Ring;
use super::scratch::Scratch;
use super::side::SideChannel;
use super::watch::Losses;
use super::{Config, Options, Topology, RING_MAX_WIRES};
use crate::sync::lock;
use crate::whereabouts::with_report;
use nuvec_core::distributed::{Communicator, Group, LinkTraffic, ReduceOp};
use nuvec_core::{DType, Error, Result};
use std::sync::{Arc, Mutex};

/// The algorithms of the chosen topology.
#[derive(Debug)]
enum Shape {
    Mesh(Mesh),
    Ring(Ring),
}

#[derive(Debug)]
struct State {
    links: Option<Links>,
    scratch: Scratch,
    failure: Option<Error>,
}

/// A connected JACCL group.
#[derive(Debug)]
pub struct JacclCommunicator {
    rank: usize,
    size: usize,
    shape: Shape,
    formed: Formed,
    /// Per channel, the peer and the device of its cable.
    cables: Vec<(usize, String)>,
    state: Mutex<State>,
    side: Mutex<SideChannel>,
}

/// Forms the JACCL group `config` describes over the fabric `NUVEC_JACCL_FABRIC` selects (the
/// system's ibverbs by default). The group is not made the default.
pub fn init_with(config: &Config, options: &Options) -> Result<Group> {
    let communicator = JacclCommunicator::connect(config, options)?;
    Ok(Group::register(Arc::new(communicator)))
}

impl JacclCommunicator {
    /// Connects this rank of the group `config` describes.
    pub fn connect(config: &Config, options: &Options) -> Result<JacclCommunicator> {
        let rank = config.rank;
        let size = config.size();
        options
            .base
            .validate()
            .map_err(|e| jaccl_error("init", rank, e))?;
        let topology = config.choose(options.side_channel.is_some())?;
        let fabric: Arc<dyn Fabric> = Arc::from(fabric::select(rank, options.fabric)?);
        // Queue pairs first, so a missing or unusable device is reported before waiting on
        // the other ranks.
        let plan = plan(config, Some(topology));
        let queue_pairs = open(&*fabric, &plan)?;
        let mut side = match &options.side_channel {
            Some(all_gather) => SideChannel::Custom {
                rank,
                size,
                all_gather: all_gather.clone(),
            },
            None => {
                let coordinator = config.coordinator.as_ref().expect("checked by choose");
                SideChannel::star(coordinator, rank, size, &options.base)?
            }
        };
        let records = side.all_gather(&publish(&plan, &queue_pairs))?;
        let channels = join(queue_pairs, &plan, rank, &records)?;
        // Every receive is posted before anyone sends.
        side.all_gather(&[])?;
        side.start_watching()?;
        Ok(JacclCommunicator::assemble(
            Formed {
                config: config.clone(),
                options: options.clone(),
                topology: Some(topology),
                fabric,
            },
            &plan,
            channels,
            side,
        ))
    }

    /// The communicator over `channels`, the connected queue pairs of `plan`.
    fn assemble(
        formed: Formed,
        plan: &[Planned],
        channels: Vec<Channel>,
        side: SideChannel,
    ) -> JacclCommunicator {
        let (rank, size) = (formed.config.rank, formed.config.size());
        let index_of =
            |peer: usize, wire: usize| plan.iter().position(|p| p.peer == peer && p.wire == wire);
        let shape = match formed.topology {
            // A group of one has no channel; its collectives never reach the communicator.
            Some(Topology::Mesh) | None => Shape::Mesh(Mesh {
                rank,
                channel_of: (0..size)
                    .map(|p| (0..RING_MAX_WIRES).map_while(|w| index_of(p, w)).collect())
                    .collect(),
            }),
            Some(Topology::Ring { wires }) => {
                let (right, left) = ((rank + 1) % size, (rank + size - 1) % size);
                let find = |peer: usize| -> Vec<usize> {
                    (0..wires)
                        .map(|k| index_of(peer, k).expect("a channel per wire"))
                        .collect()
                };
                Shape::Ring(Ring {
                    rank,
                    size,
                    right: find(right),
                    left: find(left),
                })
            }
        };
        let links = Links::new(rank, channels, SLOT_BYTES, formed.options.base.timeout);
        JacclCommunicator {
            rank,
            size,
            shape,
            cables: plan.iter().map(|p| (p.peer, p.device.clone())).collect(),
            formed,
            state: Mutex::new(State {
                links: Some(links),
                scratch: Scratch::default(),
                failure: None,
            }),
            side: Mutex::new(side),
        }
    }

    /// The fabric this group runs on (`"verbs"` or `"emulated"`).
    pub fn fabric(&self) -> &'static str {
        self.formed.fabric.name()
    }

    /// The loss the group's side channel recorded, shared with groups split from it.
    fn side_losses(&self) -> Option<Losses> {
        lock(&self.side).losses()
    }

    /// Runs `body` on the group's links unless the group failed or was closed; a failure
    /// becomes the group's, and later operations refuse to run with it.
    fn run(
        &self,
        op: &str,
        body: impl FnOnce(&mut Links, &mut Scratch) -> Result<()>,
    ) -> Result<()> {
        let mut state = lock(&self.state);
        if let Some(failure) = &state.failure {
            return Err(jaccl_error(
                op,
                self.rank,
                format!("the group failed earlier and refuses further work: {failure}"),
            ));
        }
        let State {
            links,
            scratch,
            failure,
        } = &mut *state;
        let Some(links) = links.as_mut() else {
            return Err(jaccl_error(op, self.rank, "the group was closed".into()));
        };
        let outcome = body(links, scratch).map_err(|error| {
            let side = lock(&self.side);
            match side.whereabouts(self.size) {
                Some((heard, listened)) => with_report(error, &heard, listened),
                None => error,
            }
        });
        if let Err(error) = &outcome {
            *failure = Some(error.clone());
        }
        outcome
    }

    fn point_to_point(&self, op: &str, peer: usize) -> Result<usize> {
        if peer >= self.size || peer == self.rank {
            return Err(jaccl_error(
                op,
                self.rank,
                format!(
                    "rank {peer} is not another rank of this group of {}",
                    self.size
                ),
            ));
        }
        match &self.shape {
            Shape::Mesh(mesh) => mesh.channel_to(peer),
            Shape::Ring(ring) => ring.channel_to(peer),
        }
        .map_err(|reason| jaccl_error(op, self.rank, reason))
    }
}

/// Bytes of the header message before every `send`: dtype, dimension count, byte count and
/// up to [`MAX_NDIM`] dimensions.
const MESSAGE_HEADER: usize = 16 + 4 * MAX_NDIM;
/// The most dimensions a message may have.
const MAX_NDIM: usize = 64;

fn describe_message(
    dtype: DType,
    shape: &[i32],
    bytes: usize,
) -> std::result::Result<[u8; MESSAGE_HEADER], String> {
    if shape.len() > MAX_NDIM {
        return Err(format!(
            "an array of {} dimensions cannot be sent (at most {MAX_NDIM})",
            shape.len()
        ));
    }
    let mut header = [0u8; MESSAGE_HEADER];
    header[0] = DType::ALL.iter().position(|d| *d == dtype).unwrap_or(0) as u8;
    header[4..8].copy_from_slice(&(shape.len() as u32).to_le_bytes());
    header[8..16].copy_from_slice(&(bytes as u64).to_le_bytes());
    for (i, dim) in shape.iter().enumerate() {
        header[16 + 4 * i..20 + 4 * i].copy_from_slice(&dim.to_le_bytes());
    }
    Ok(header)
}

fn read_message_header(
    header: &[u8; MESSAGE_HEADER],
) -> std::result::Result<(DType, Vec<i32>, usize), String> {
    let dtype = *DType::ALL
        .get(header[0] as usize)
        .ok_or_else(|| format!("unknown dtype code {}", header[0]))?;
    let ndim = u32::from_le_bytes(header[4..8].try_into().unwrap_or_default()) as usize;
    if ndim > MAX_NDIM {
        return Err(format!("{ndim} dimensions (at most {MAX_NDIM})"));
    }
    let bytes = u64::from_le_bytes(header[8..16].try_into().unwrap_or_default()) as usize;
    let shape = (0..ndim)
        .map(|i| {
            i32::from_le_bytes(
                header[16 + 4 * i..20 + 4 * i]
                    .try_into()
                    .unwrap_or_default(),
            )
        })
        .collect();
    Ok((dtype, shape, bytes))
}

impl Communicator for JacclCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn backend(&self) -> &'static str {
        "jaccl"
    }

    fn all_reduce(&self, data: &mut [u8], dtype: DType, op: ReduceOp) -> Result<()> {
        self.run(op.collective_name(), |links, scratch| match &self.shape {
            Shape::Mesh(mesh) => mesh.all_reduce(links, scratch, data, dtype, op, reduce_kind(op)),
            Shape::Ring(ring) => ring.all_reduce(links, scratch, data, dtype, op),
        })
    }

    fn all_gather(&self, input: &[u8], output: &mut [u8], dtype: DType) -> Result<()> {
        self.run("all_gather", |links, _| match &self.shape {
            Shape::Mesh(mesh) => mesh.all_gather(links, input, output),
            Shape::Ring(ring) => ring.all_gather(links, input, output, dtype),
        })
    }

    fn reduce_scatter(
        &self,
        input: &[u8],
        output: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        self.run("sum_scatter", |links, scratch| match &self.shape {
            Shape::Mesh(mesh) => mesh.reduce_scatter(links, scratch, input, output, dtype, op),
            Shape::Ring(ring) => ring.reduce_scatter(links, scratch, input, output, dtype, op),
        })
    }

    fn send(&self, data: &[u8], dtype: DType, shape: &[i32], dst: usize) -> Result<()> {
        let channel = self.point_to_point("send", dst)?;
        let header = describe_message(dtype, shape, data.len())
            .map_err(|reason| jaccl_error("send", self.rank, reason))?;
        self.run("send", |links, _| {
            links.exchange(
                "send",
                SEND_RECV,
                &mut [Transfer {
                    channel,
                    send: &header,
                    recv: &mut [],
                }],
            )?;
            links.exchange(
                "send",
                SEND_RECV,
                &mut [Transfer {
                    channel,
                    send: data,
                    recv: &mut [],
                }],
            )
        })
    }

    fn recv(&self, data: &mut [u8], dtype: DType, shape: &[i32], src: usize) -> Result<()> {
        let channel = self.point_to_point("recv", src)?;
        let rank = self.rank;
        let mut mismatch = None;
        self.run("recv", |links, _| {
            let mut header = [0u8; MESSAGE_HEADER];
            links.exchange("recv", SEND_RECV, &mut [Transfer { channel, send: &[], recv: &mut header }])?;
            let (their_dtype, their_shape, bytes) = read_message_header(&header)
                .map_err(|reason| jaccl_error("recv", rank, format!("rank {src} sent a malformed message header: {reason}")))?;
            if their_dtype == dtype && their_shape == shape && bytes == data.len() {
                return links.exchange("recv", SEND_RECV, &mut [Transfer { channel, send: &[], recv: data }]);
            }
            // Take the whole message in bounded pieces so the channel stays usable.
            if bytes > 0 {
                links.discard("recv", SEND_RECV, channel, bytes)?;
            }
            mismatch = Some(jaccl_error(
                "recv",
                rank,
                format!("rank {src} sent {their_dtype} {their_shape:?}, this rank (rank {rank}) expected {dtype} {shape:?}"),
            ));
            Ok(())
        })?;
        mismatch.map_or(Ok(()), Err)
    }

    fn health(&self) -> Result<()> {
        {
            let mut state = lock(&self.state);
            if let Some(failure) = &state.failure {
                return Err(failure.clone());
            }
            let Some(links) = state.links.as_mut() else {
                return Err(jaccl_error(
                    "health",
                    self.rank,
                    "the group was closed".into(),
                ));
            };
            // A queue pair that knows its peer is gone (the emulated fabric does; verbs'
            // unreliable connections cannot tell) names it, whatever the side channel.
            let gone = links
                .channels
                .iter_mut()
                .find_map(|c| (!c.qp.peer_alive()).then_some(c.peer));
            if let Some(peer) = gone {
                return Err(jaccl_error(
                    "health",
                    self.rank,
                    format!(
                        "rank {peer} is gone: its queue pair closed (its process ended or it closed the group)"
                    ),
                ));
            }
        }
        lock(&self.side)
            .health()
            .map_err(|reason| jaccl_error("health", self.rank, reason))
    }

    fn traffic(&self) -> Vec<LinkTraffic> {
        let state = lock(&self.state);
        let Some(links) = &state.links else {
            return Vec::new();
        };
        self.cables
            .iter()
            .enumerate()
            .map(|(channel, (peer, device))| LinkTraffic {
                peer: *peer,
                link: device.clone(),
                sent: links.sent_bytes[channel],
                received: links.received_bytes[channel],
            })
            .collect()
    }

    fn attach_trace(&self, trace: Arc<nuvec_core::distributed::Trace>) {
        lock(&self.side).attach_trace(trace);
    }

    fn split(&self, color: i32, key: i32) -> Result<Arc<dyn Communicator>> {
        let losses = self.side_losses();
        let (formed, plan, channels) = super::split::split(self, &self.formed, color, key)?;
        let side = SideChannel::Inherited {
            rank: formed.config.rank,
            losses,
        };
        Ok(Arc::new(JacclCommunicator::assemble(
            formed, &plan, channels, side,
        )))
    }

    fn close(&self) {
        lock(&self.state).links = None;
        lock(&self.side).close();
    }
}
